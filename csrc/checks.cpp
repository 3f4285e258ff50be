#include "checks.hpp"

#include <string>

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

namespace gonccl {
namespace {

std::string dtypeName(at::ScalarType type) {
  return "torch." + std::string(c10::getDtypeNames(type).first);
}

const char* redOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

}  // namespace

goncclDataType_t checkTensor(const at::Tensor& t, const char* op) {
  if (t.layout() != at::kStrided) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": sparse tensors are not supported (got layout ",
            t.layout(),
            ")"));
  }
  if (t.is_cuda()) {
    C10_THROW_ERROR(
        ValueError,
        c10::str("gonccl: ", op, ": CUDA tensors are not supported yet"));
  }
  if (!t.is_cpu()) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": tensors must be on the CPU (got device ",
            t.device(),
            ")"));
  }
  goncclDataType_t type;
  switch (t.scalar_type()) {
    case at::kFloat:
      type = goncclFloat32;
      break;
    case at::kDouble:
      type = goncclFloat64;
      break;
    case at::kHalf:
      type = goncclFloat16;
      break;
    case at::kBFloat16:
      type = goncclBfloat16;
      break;
    case at::kChar:
      type = goncclInt8;
      break;
    case at::kByte:
      type = goncclUint8;
      break;
    case at::kInt:
      type = goncclInt32;
      break;
    case at::kLong:
      type = goncclInt64;
      break;
    default:
      C10_THROW_ERROR(
          TypeError,
          c10::str(
              "gonccl: ",
              op,
              ": dtype ",
              dtypeName(t.scalar_type()),
              " is not supported yet (supported: torch.float32, "
              "torch.float64, torch.float16, torch.bfloat16, torch.int8, "
              "torch.uint8, torch.int32, torch.int64)"));
  }
  if (!t.is_contiguous()) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": tensor must be contiguous (got sizes ",
            t.sizes(),
            ", strides ",
            t.strides(),
            ")"));
  }
  return type;
}

void checkCount(
    const std::vector<at::Tensor>& tensors,
    size_t expected,
    const char* op,
    const char* what) {
  if (tensors.size() != expected) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": expected ",
            expected,
            " ",
            what,
            expected == 1 ? "" : "s",
            ", got ",
            tensors.size()));
  }
}

void checkSameDtype(
    const at::Tensor& t,
    const at::Tensor& ref,
    const char* op,
    const char* what) {
  if (t.scalar_type() != ref.scalar_type()) {
    C10_THROW_ERROR(
        TypeError,
        c10::str(
            "gonccl: ",
            op,
            ": ",
            what,
            " has dtype ",
            dtypeName(t.scalar_type()),
            ", expected ",
            dtypeName(ref.scalar_type())));
  }
}

goncclRedOp_t toRedOp(const c10d::ReduceOp& reduceOp, const char* op) {
  switch (reduceOp.op_) {
    case c10d::ReduceOp::SUM:
      return goncclSum;
    case c10d::ReduceOp::AVG:
      return goncclAvg;
    case c10d::ReduceOp::MIN:
      return goncclMin;
    case c10d::ReduceOp::MAX:
      return goncclMax;
    case c10d::ReduceOp::PRODUCT:
      return goncclProd;
    default:
      C10_THROW_ERROR(
          ValueError,
          c10::str(
              "gonccl: ",
              op,
              ": reduce op ",
              redOpName(reduceOp.op_),
              " is not supported yet"));
  }
}

}  // namespace gonccl
