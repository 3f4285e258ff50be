#include "checks.hpp"

#include <string>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>

#include "cuda.hpp"
#include "library.hpp"
#include "torch_compat.hpp"

namespace gonccl {
namespace {

const char* redOpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
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

constexpr const char* kSupported =
    "torch.float32, torch.float64, torch.float16, torch.bfloat16, "
    "torch.complex64, torch.complex128, torch.int8, torch.int16, torch.int32, "
    "torch.int64, torch.uint8, torch.uint16, torch.uint32, torch.uint64, "
    "torch.bool, torch.float8_e4m3fn, torch.float8_e5m2";

bool isFloat8(at::ScalarType type) {
  return type == at::kFloat8_e4m3fn || type == at::kFloat8_e5m2;
}

[[noreturn]] void badCombination(
    const char* op,
    c10d::ReduceOp::RedOpType redOp,
    at::ScalarType dtype,
    const char* why) {
  C10_THROW_ERROR(
      TypeError,
      c10::str(
          "gonccl: ",
          op,
          ": reduce op ",
          redOpName(redOp),
          " is not defined for ",
          dtypeName(dtype),
          " (",
          why,
          ")"));
}

}  // namespace

std::string dtypeName(at::ScalarType type) {
  return "torch." + std::string(c10::getDtypeNames(type).first);
}

goncclDataType_t checkTensor(
    const at::Tensor& t, const char* op, bool contiguous) {
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
  if (t.is_cuda() && !cuda::support()) {
    C10_THROW_ERROR(ValueError, cuda::noCudaMessage(op));
  }
  if (!t.is_cpu() && !t.is_cuda()) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": tensors must be on the CPU or a CUDA device (got device ",
            t.device(),
            ")"));
  }
  goncclDataType_t type;
  bool needsFullSurface = true;
  switch (t.scalar_type()) {
    case at::kFloat:
      type = goncclFloat32;
      needsFullSurface = false;
      break;
    case at::kDouble:
      type = goncclFloat64;
      needsFullSurface = false;
      break;
    case at::kHalf:
      type = goncclFloat16;
      needsFullSurface = false;
      break;
    case at::kBFloat16:
      type = goncclBfloat16;
      needsFullSurface = false;
      break;
    case at::kChar:
      type = goncclInt8;
      needsFullSurface = false;
      break;
    case at::kByte:
      type = goncclUint8;
      needsFullSurface = false;
      break;
    case at::kInt:
      type = goncclInt32;
      needsFullSurface = false;
      break;
    case at::kLong:
      type = goncclInt64;
      needsFullSurface = false;
      break;
    case at::kShort:
      type = goncclInt16;
      break;
    case at::kUInt16:
      type = goncclUint16;
      break;
    case at::kUInt32:
      type = goncclUint32;
      break;
    case at::kUInt64:
      type = goncclUint64;
      break;
    case at::kBool:
      type = goncclBool;
      break;
    case at::kFloat8_e4m3fn:
      type = goncclFloat8e4m3;
      break;
    case at::kFloat8_e5m2:
      type = goncclFloat8e5m2;
      break;
    case at::kComplexFloat:
      type = goncclComplex64;
      break;
    case at::kComplexDouble:
      type = goncclComplex128;
      break;
    default:
      C10_THROW_ERROR(
          TypeError,
          c10::str(
              "gonccl: ",
              op,
              ": dtype ",
              dtypeName(t.scalar_type()),
              " is not supported (supported: ",
              kSupported,
              ")"));
  }
  if (needsFullSurface && !lib().fullSurface) {
    C10_THROW_ERROR(
        TypeError,
        c10::str(
            "gonccl: ",
            op,
            ": dtype ",
            dtypeName(t.scalar_type()),
            " is not supported by this libgonccl.so (it predates it; "
            "rebuild the package)"));
  }
  if (contiguous && !t.is_contiguous()) {
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

void checkNumel(
    const at::Tensor& t, int64_t expected, const char* op, const char* what) {
  if (t.numel() != expected) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": ",
            what,
            " has ",
            t.numel(),
            " elements, expected ",
            expected));
  }
}

void checkRoot(int64_t root, int size, const char* op) {
  if (root < 0 || root >= size) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": root rank ",
            root,
            " is out of range for a group of size ",
            size));
  }
}

int64_t worldTotal(int64_t n, int size, const char* op) {
  int64_t total = 0;
  if (n < 0 || __builtin_mul_overflow(n, static_cast<int64_t>(size), &total)) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": ",
            n,
            " elements x world_size ",
            size,
            " overflows int64"));
  }
  return total;
}

at::Tensor Reduction::scaled(const at::Tensor& t, bool inPlace) const {
  if (!premul) {
    return t;
  }
  at::NoGradGuard noGrad;
  at::Tensor out = inPlace ? t : t.clone();
  if (tensorFactor.defined()) {
    out.mul_(tensorFactor.to(out.device()).reshape({}));
  } else {
    out.mul_(factor);
  }
  return out;
}

Reduction checkReduceOp(
    const c10d::ReduceOp& reduceOp, at::ScalarType dtype, const char* op) {
  const auto kind = reduceOp.op_;
  if (isFloat8(dtype)) {
    badCombination(
        op,
        kind,
        dtype,
        "float8 tensors can only be moved (broadcast, all_gather, gather, "
        "scatter, all_to_all, send/recv), not reduced");
  }
  const bool complex = at::isComplexType(dtype);
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/true);
  Reduction r;
  switch (kind) {
    case c10d::ReduceOp::SUM:
      r.op = goncclSum;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.op = goncclProd;
      break;
    case c10d::ReduceOp::AVG:
      if (dtype == at::kBool) {
        badCombination(op, kind, dtype, "a mean of booleans is not a boolean");
      }
      r.op = goncclAvg;
      break;
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      if (complex) {
        badCombination(op, kind, dtype, "complex numbers are not ordered");
      }
      r.op = kind == c10d::ReduceOp::MIN ? goncclMin : goncclMax;
      break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (!lib().fullSurface) {
        C10_THROW_ERROR(
            ValueError,
            c10::str(
                "gonccl: ",
                op,
                ": reduce op ",
                redOpName(kind),
                " is not supported by this libgonccl.so (it predates it; "
                "rebuild the package)"));
      }
      if (!integral) {
        badCombination(
            op, kind, dtype, "bitwise ops need an integer or bool dtype");
      }
      r.op = kind == c10d::ReduceOp::BAND
                 ? goncclBand
                 : (kind == c10d::ReduceOp::BOR ? goncclBor : goncclBxor);
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (!at::isFloatingType(dtype) && !complex) {
        badCombination(
            op, kind, dtype, "the factor needs a floating or complex dtype");
      }
      const auto* supplement =
          dynamic_cast<const PreMulSumSupplement*>(reduceOp.supplement_.get());
      if (supplement == nullptr) {
        C10_THROW_ERROR(
            ValueError,
            c10::str(
                "gonccl: ",
                op,
                ": PREMUL_SUM without a factor (make it with "
                "torch.distributed._make_nccl_premul_sum)"));
      }
      r.op = goncclSum;
      r.premul = true;
      r.factor = supplement->double_factor;
      r.tensorFactor = supplement->tensor_factor;
      break;
    }
    default:
      C10_THROW_ERROR(
          ValueError,
          c10::str(
              "gonccl: ",
              op,
              ": reduce op ",
              redOpName(kind),
              " is not supported"));
  }
  return r;
}

}  // namespace gonccl
