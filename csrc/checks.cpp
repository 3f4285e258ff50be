#include "checks.hpp"

#include <string>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/ScalarType.h>

#include "cuda.hpp"
#include "errors.hpp"
#include "torch_compat.hpp"

namespace gonccl {
namespace {

// The dtypes gonccl moves and reduces, in the order messages list them.
struct Dtype {
  at::ScalarType torch;
  goncclDataType_t gonccl;
};
constexpr Dtype kDtypes[] = {
    {at::kFloat, goncclFloat32},
    {at::kDouble, goncclFloat64},
    {at::kHalf, goncclFloat16},
    {at::kBFloat16, goncclBfloat16},
    {at::kComplexFloat, goncclComplex64},
    {at::kComplexDouble, goncclComplex128},
    {at::kChar, goncclInt8},
    {at::kShort, goncclInt16},
    {at::kInt, goncclInt32},
    {at::kLong, goncclInt64},
    {at::kByte, goncclUint8},
    {at::kUInt16, goncclUint16},
    {at::kUInt32, goncclUint32},
    {at::kUInt64, goncclUint64},
    {at::kBool, goncclBool},
    {at::kFloat8_e4m3fn, goncclFloat8e4m3},
    {at::kFloat8_e5m2, goncclFloat8e5m2},
};

// "torch.float32, torch.float64, ...": for the unsupported-dtype message.
std::string supportedDtypes() {
  std::string out;
  for (const Dtype& d : kDtypes) {
    out += (out.empty() ? "" : ", ") + dtypeName(d.torch);
  }
  return out;
}

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

bool isFloat8(at::ScalarType type) {
  return type == at::kFloat8_e4m3fn || type == at::kFloat8_e5m2;
}

[[noreturn]] void badCombination(
    const char* op,
    c10d::ReduceOp::RedOpType redOp,
    at::ScalarType dtype,
    const char* why) {
  fail<c10::TypeError>(
      op,
      "reduce op ",
      redOpName(redOp),
      " is not defined for ",
      dtypeName(dtype),
      " (",
      why,
      ")");
}

}  // namespace

at::ScalarType scalarTypeOf(goncclDataType_t type) {
  for (const Dtype& d : kDtypes) {
    if (d.gonccl == type) {
      return d.torch;
    }
  }
  TORCH_CHECK(false, "gonccl: no torch dtype for gonccl data type ", type);
}

std::string dtypeName(at::ScalarType type) {
  return "torch." + std::string(c10::getDtypeNames(type).first);
}

goncclDataType_t checkTensor(
    const at::Tensor& t, const char* op, bool contiguous) {
  if (t.layout() != at::kStrided) {
    fail<c10::ValueError>(
        op, "sparse tensors are not supported (got layout ", t.layout(), ")");
  }
  if (t.is_cuda() && !cuda::support()) {
    lastFailure() = cuda::noCudaMessage(op);
    C10_THROW_ERROR(ValueError, lastFailure());
  }
  if (!t.is_cpu() && !t.is_cuda()) {
    fail<c10::ValueError>(
        op,
        "tensors must be on the CPU or a CUDA device (got device ",
        t.device(),
        ")");
  }
  const Dtype* found = nullptr;
  for (const Dtype& d : kDtypes) {
    if (d.torch == t.scalar_type()) {
      found = &d;
      break;
    }
  }
  if (found == nullptr) {
    fail<c10::TypeError>(
        op,
        "dtype ",
        dtypeName(t.scalar_type()),
        " is not supported (supported: ",
        supportedDtypes(),
        ")");
  }
  if (contiguous && !t.is_contiguous()) {
    fail<c10::ValueError>(
        op,
        "tensor must be contiguous (got sizes ",
        t.sizes(),
        ", strides ",
        t.strides(),
        ")");
  }
  return found->gonccl;
}

void checkCount(
    const std::vector<at::Tensor>& tensors,
    size_t expected,
    const char* op,
    const char* what) {
  if (tensors.size() != expected) {
    fail<c10::ValueError>(
        op,
        "expected ",
        expected,
        " ",
        what,
        expected == 1 ? "" : "s",
        ", got ",
        tensors.size());
  }
}

void checkSameDtype(
    const at::Tensor& t,
    const at::Tensor& ref,
    const char* op,
    const char* what) {
  if (t.scalar_type() != ref.scalar_type()) {
    fail<c10::TypeError>(
        op,
        what,
        " has dtype ",
        dtypeName(t.scalar_type()),
        ", expected ",
        dtypeName(ref.scalar_type()));
  }
}

void checkRoot(int64_t root, int size, const char* op) {
  if (root < 0 || root >= size) {
    fail<c10::ValueError>(
        op, "root rank ", root, " is out of range for a group of size ", size);
  }
}

void checkRootTensor(int64_t rootTensor, const char* op) {
  if (rootTensor != 0) {
    fail<c10::ValueError>(
        op, "root tensor must be 0 (one tensor per rank), got ", rootTensor);
  }
}

void checkList(
    const std::vector<at::Tensor>& ts,
    const at::Tensor& ref,
    int64_t n,
    const char* op,
    const char* what) {
  for (size_t i = 0; i < ts.size(); ++i) {
    checkTensor(ts[i], op, /*contiguous=*/false);
    checkSameDtype(ts[i], ref, op, what);
    checkNumel(ts[i], n, op, what, " ", i);
  }
}

const std::vector<at::Tensor>& oneList(
    const std::vector<std::vector<at::Tensor>>& lists,
    const char* op,
    const char* what) {
  if (lists.size() != 1) {
    fail<c10::ValueError>(
        op, "expected 1 list of ", what, " tensors, got ", lists.size());
  }
  return lists[0];
}

const std::vector<at::Tensor>* rootList(
    const std::vector<std::vector<at::Tensor>>& lists,
    int root,
    int rank,
    const char* op,
    const char* what) {
  if (rank == root) {
    if (lists.size() != 1) {
      fail<c10::ValueError>(
          op,
          "the root expects 1 list of ",
          what,
          " tensors, got ",
          lists.size());
    }
    return &lists[0];
  }
  if (!lists.empty()) {
    fail<c10::ValueError>(
        op,
        "only the root (rank ",
        root,
        ") takes ",
        what,
        " tensors; rank ",
        rank,
        " got ",
        lists.size(),
        " list(s)");
  }
  return nullptr;
}

void splitCounts(
    const at::Tensor& t,
    const std::vector<int64_t>& splits,
    int size,
    const char* op,
    const char* what,
    std::vector<size_t>& counts,
    std::vector<size_t>& displs) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t rowElems = rows == 0 ? 0 : t.numel() / rows;
  std::vector<int64_t> s = splits;
  if (s.empty()) {
    if (rows % size != 0) {
      fail<c10::ValueError>(
          op,
          "the ",
          what,
          " tensor's dim 0 (",
          rows,
          ") does not divide equally across the group size (",
          size,
          "); pass split sizes");
    }
    s.assign(size, rows / size);
  }
  if (static_cast<int>(s.size()) != size) {
    fail<c10::ValueError>(
        op, "expected ", size, " ", what, " split sizes, got ", s.size());
  }
  int64_t sum = 0;
  counts.assign(size, 0);
  displs.assign(size, 0);
  for (int i = 0; i < size; ++i) {
    if (s[i] < 0) {
      fail<c10::ValueError>(op, "negative ", what, " split size ", s[i]);
    }
    // Checked before adding, so that the sum cannot overflow (and wrap back
    // to the right total) and every count and offset below stays within the
    // tensor's numel.
    if (s[i] > rows - sum) {
      fail<c10::ValueError>(
          op,
          "the ",
          what,
          " split sizes add up to more than the ",
          what,
          " tensor's dim 0 (",
          rows,
          "): split size ",
          i,
          " is ",
          s[i],
          " with ",
          sum,
          " rows already taken");
    }
    displs[i] = sum * rowElems;
    counts[i] = s[i] * rowElems;
    sum += s[i];
  }
  if (sum != rows) {
    fail<c10::ValueError>(
        op,
        "the ",
        what,
        " split sizes add up to ",
        sum,
        " but the ",
        what,
        " tensor's dim 0 is ",
        rows);
  }
}

int64_t worldTotal(int64_t n, int size, const char* op) {
  int64_t total = 0;
  if (n < 0 || __builtin_mul_overflow(n, static_cast<int64_t>(size), &total)) {
    fail<c10::ValueError>(
        op, n, " elements x world_size ", size, " overflows int64");
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
        fail<c10::ValueError>(
            op,
            "PREMUL_SUM without a factor (make it with "
            "torch.distributed._make_nccl_premul_sum)");
      }
      r.op = goncclSum;
      r.premul = true;
      r.factor = supplement->double_factor;
      r.tensorFactor = supplement->tensor_factor;
      break;
    }
    default:
      fail<c10::ValueError>(
          op, "reduce op ", redOpName(kind), " is not supported");
  }
  return r;
}

}  // namespace gonccl
