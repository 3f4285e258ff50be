// sparse.cpp: GoncclBackend's all_reduce of a sparse COO tensor (SUM), as
// Gloo's: every rank shares its coalesced indices and values (first the sizes
// and nnz, then both padded to the largest nnz), then sums the ranks' tensors
// in rank order and coalesces; the result replaces the input. The small size
// exchange is waited for here; the rest completes with the Work.
#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "backend.hpp"
#include "checks.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

constexpr int64_t kMaxDims = 16;
// Per rank: ndim, sparse_dim, nnz, then the sizes.
constexpr int64_t kMeta = 3 + kMaxDims;

// A sparse tensor gonccl can all_reduce with reduceOp.
void checkSparse(
    const at::Tensor& input, const c10d::ReduceOp& reduceOp, OpName op) {
  if (input.layout() != c10::kSparse) {
    fail<c10::ValueError>(
        op, "expected a sparse COO tensor, got layout ", input.layout());
  }
  if (!input.device().is_cpu()) {
    fail<c10::ValueError>(
        op, "sparse tensors must be on the CPU, got ", input.device());
  }
  if (reduceOp != c10d::ReduceOp::SUM) {
    fail<c10::ValueError>(
        op,
        "only ReduceOp.SUM is supported for sparse tensors (as with "
        "Gloo)");
  }
  if (input.dim() > kMaxDims) {
    fail<c10::ValueError>(
        op,
        "at most ",
        kMaxDims,
        " dimensions are supported, got ",
        input.dim());
  }
}

// This rank's row of the size exchange.
at::Tensor sizesRow(const at::Tensor& input, int64_t nnz) {
  at::Tensor mine = at::zeros({kMeta}, at::kLong);
  auto* m = mine.data_ptr<int64_t>();
  m[0] = input.dim();
  m[1] = input.sparse_dim();
  m[2] = nnz;
  for (int64_t d = 0; d < input.dim(); ++d) {
    m[3 + d] = input.size(d);
  }
  return mine;
}

// The largest nnz of every rank's row in meta, after checking that each rank
// passed a tensor of this rank's sizes (row mine).
int64_t largestNnz(
    const at::Tensor& meta,
    const at::Tensor& mine,
    const at::Tensor& input,
    int rank,
    OpName op) {
  const auto* all = meta.data_ptr<int64_t>();
  const auto* m = mine.data_ptr<int64_t>();
  int64_t most = 0;
  for (int r = 0; r < meta.size(0); ++r) {
    const int64_t* theirs = all + r * kMeta;
    for (int64_t i = 0; i < kMeta; ++i) {
      if (i != 2 && theirs[i] != m[i]) {
        fail<c10::ValueError>(
            op,
            "rank ",
            r,
            " passed a sparse tensor of sizes ",
            c10::IntArrayRef(theirs + 3, theirs[0]),
            " (sparse_dim ",
            theirs[1],
            ") but rank ",
            rank,
            " one of sizes ",
            input.sizes(),
            " (sparse_dim ",
            input.sparse_dim(),
            ")");
      }
    }
    most = std::max(most, theirs[2]);
  }
  return most;
}

// Copies the sum of every rank's tensor (rank r's nnz in meta, its indices
// and values in idxRecv[r] and valRecv[r]) into input.
void sumInto(
    const at::Tensor& input,
    const at::Tensor& meta,
    const at::Tensor& idxRecv,
    const at::Tensor& valRecv) {
  const auto* all = meta.data_ptr<int64_t>();
  at::Tensor out;
  for (int r = 0; r < meta.size(0); ++r) {
    const int64_t n = all[r * kMeta + 2];
    at::Tensor t = at::sparse_coo_tensor(
        idxRecv[r].narrow(1, 0, n),
        valRecv[r].narrow(0, 0, n),
        input.sizes(),
        input.options());
    if (r == 0) {
      out = t;
    } else {
      out.add_(t);
    }
  }
  input.copy_(out.coalesce());
}

}  // namespace

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  Checking checking(*this, goncclOpAllGather);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op{"all_reduce (sparse)", "gonccl:all_reduce_sparse"};
  checkCount(tensors, 1, op);
  at::Tensor input = tensors[0];
  checkSparse(input, opts.reduceOp, op);
  at::Tensor indices;
  at::Tensor values;
  {
    at::NoGradGuard noGrad;
    at::Tensor coalesced = input.coalesce();
    indices = coalesced._indices().contiguous();
    values = coalesced._values().contiguous();
  }
  goncclDataType_t type = checkTensor(values, op);
  const int64_t sparseDim = input.sparse_dim();
  const int64_t nnz = indices.size(1);

  at::Tensor mine = sizesRow(input, nnz);
  at::Tensor meta = at::empty({size_, kMeta}, at::kLong);
  issueCall(
      {c10d::OpType::_ALLGATHER_BASE,
       {"all_reduce (sparse): exchanging sizes",
        "gonccl:all_reduce_sparse_sizes"},
       {mine},
       {meta}},
      lib().allGatherAsync,
      mine.data_ptr(),
      meta.data_ptr(),
      kMeta,
      goncclInt64)
      ->wait();
  const int64_t maxNnz = largestNnz(meta, mine, input, rank_, op);

  std::vector<int64_t> valueShape{maxNnz};
  for (int64_t d = sparseDim; d < input.dim(); ++d) {
    valueShape.push_back(input.size(d));
  }
  at::Tensor idxSend = at::zeros({sparseDim, maxNnz}, at::kLong);
  at::Tensor valSend = at::zeros(valueShape, values.options());
  idxSend.narrow(1, 0, nnz).copy_(indices);
  valSend.narrow(0, 0, nnz).copy_(values);
  at::Tensor idxRecv = at::empty({size_, sparseDim, maxNnz}, at::kLong);
  std::vector<int64_t> recvShape{size_};
  recvShape.insert(recvShape.end(), valueShape.begin(), valueShape.end());
  at::Tensor valRecv = at::empty(recvShape, values.options());
  return issue(
      {c10d::OpType::_ALLREDUCE_SPARSE,
       op,
       {input},
       {input},
       {idxSend, valSend, idxRecv, valRecv, meta},
       [=]() { sumInto(input, meta, idxRecv, valRecv); }},
      [&](Parts& p) {
        if (maxNnz == 0) {
          return goncclSuccess;  // nothing to move: the sum runs at once
        }
        goncclResult_t rc = p.start(
            lib().allGatherAsync,
            idxSend.data_ptr(),
            idxRecv.data_ptr(),
            idxSend.numel(),
            goncclInt64);
        if (rc != goncclSuccess || valSend.numel() == 0) {
          return rc;
        }
        return p.start(
            lib().allGatherAsync,
            valSend.data_ptr(),
            valRecv.data_ptr(),
            valSend.numel(),
            type);
      });
}

}  // namespace gonccl
