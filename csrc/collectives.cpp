// collectives.cpp: GoncclBackend's collectives. Each validates what torch
// hands it (checks.hpp), describes the buffers and calls issue() with the
// gonccl requests to start. Tensors are used in place where c10d allows it;
// otherwise the op runs on staging tensors (staging.hpp) and copies out on
// completion. The sparse all_reduce is in sparse.cpp.
#include <ATen/ATen.h>

#include "backend.hpp"
#include "checks.hpp"
#include "library.hpp"
#include "staging.hpp"

namespace gonccl {
namespace {

// An op's description with what staging collected for it.
GoncclBackend::Op staged(
    c10d::OpType type,
    OpName name,
    std::vector<at::Tensor> inputs,
    std::vector<at::Tensor> outputs,
    Staging& staging) {
  return {
      type,
      name,
      std::move(inputs),
      std::move(outputs),
      staging.keepAlive(),
      staging.postComplete()};
}

// The tensors of an op from one tensor into another of the same dtype (the
// *_base ops): each dense, both checked. The dtype is the input's.
struct InOut {
  at::Tensor input;
  at::Tensor output;
  goncclDataType_t type;
};
InOut denseInOut(
    Staging& staging,
    const at::Tensor& inputBuffer,
    const at::Tensor& outputBuffer,
    const char* op) {
  at::Tensor input = staging.dense(inputBuffer, /*written=*/false);
  at::Tensor output = staging.dense(outputBuffer, /*written=*/true);
  goncclDataType_t type = checkTensor(input, op);
  checkTensor(output, op);
  checkSameDtype(outputBuffer, inputBuffer, op, "the output tensor");
  return {input, output, type};
}

}  // namespace

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  Checking checking(*this, goncclOpAllReduce);
  constexpr OpName op = GONCCL_OP("all_reduce");
  checkCount(tensors, 1, op);
  if (tensors[0].layout() == c10::kSparse) {
    // torch routes sparse CPU tensors here too (as with Gloo).
    return allreduce_sparse(tensors, opts);
  }
  CallTimeout callTimeout(opts.timeout);
  Staging staging;
  at::Tensor t = staging.dense(tensors[0], /*written=*/true);
  goncclDataType_t type = checkTensor(t, op);
  Reduction r = checkReduceOp(opts.reduceOp, t.scalar_type(), op);
  r.scaled(t, /*inPlace=*/true);
  void* buf = t.data_ptr();
  return issueCall(
      staged(c10d::OpType::ALLREDUCE, op, tensors, tensors, staging),
      lib().allReduceAsync,
      buf,
      buf,
      t.numel(),
      type,
      r.op);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  Checking checking(*this, goncclOpAllReduce);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("all_reduce_coalesced");
  if (tensors.empty()) {
    fail<c10::ValueError>(op, "expected at least 1 tensor");
  }
  goncclDataType_t type = goncclFloat32;
  int64_t total = 0;
  for (const at::Tensor& t : tensors) {
    type = checkTensor(t, op, /*contiguous=*/false);
    checkSameDtype(t, tensors[0], op, "every tensor");
    total += t.numel();
  }
  Reduction r = checkReduceOp(opts.reduceOp, tensors[0].scalar_type(), op);
  // One reduction over a flat copy of all the tensors, copied back after.
  Staging staging;
  at::Tensor flat = staging.flat(tensors, total);
  staging.copyOut(flat, tensors);
  r.scaled(flat, /*inPlace=*/true);
  void* buf = flat.data_ptr();
  return issueCall(
      staged(c10d::OpType::ALLREDUCE_COALESCED, op, tensors, tensors, staging),
      lib().allReduceAsync,
      buf,
      buf,
      total,
      type,
      r.op);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  Checking checking(*this, goncclOpReduce);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("reduce");
  checkCount(tensors, 1, op);
  Staging staging;
  at::Tensor t = staging.dense(tensors[0], /*written=*/opts.rootRank == rank_);
  goncclDataType_t type = checkTensor(t, op);
  checkRootTensor(opts.rootTensor, op);
  checkRoot(opts.rootRank, size_, op);
  Reduction r = checkReduceOp(opts.reduceOp, t.scalar_type(), op);
  // Only the root's tensor receives the result; PREMUL_SUM scales a copy so
  // that the other ranks' tensors stay as they were.
  at::Tensor send = staging.scaled(r, t);
  return issueCall(
      staged(c10d::OpType::REDUCE, op, tensors, tensors, staging),
      lib().reduceAsync,
      send.data_ptr(),
      t.data_ptr(),
      t.numel(),
      type,
      r.op,
      static_cast<int>(opts.rootRank));
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  Checking checking(*this, goncclOpBroadcast);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("broadcast");
  checkCount(tensors, 1, op);
  Staging staging;
  at::Tensor t = staging.dense(tensors[0], /*written=*/opts.rootRank != rank_);
  goncclDataType_t type = checkTensor(t, op);
  checkRootTensor(opts.rootTensor, op);
  checkRoot(opts.rootRank, size_, op);
  void* buf = t.data_ptr();
  return issueCall(
      staged(c10d::OpType::BROADCAST, op, tensors, tensors, staging),
      lib().broadcastAsync,
      buf,
      buf,
      t.numel(),
      type,
      static_cast<int>(opts.rootRank));
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  Checking checking(*this, goncclOpAllGather);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("all_gather");
  checkCount(inputTensors, 1, op, "input tensor");
  const std::vector<at::Tensor>& outputs = oneList(outputTensors, op, "output");
  Staging staging;
  at::Tensor input = staging.dense(inputTensors[0], /*written=*/false);
  goncclDataType_t type = checkTensor(input, op);
  checkCount(outputs, size_, op, "output tensor");
  const int64_t n = input.numel();
  // Every output must have the input's size, as with Gloo. (NCCL also takes
  // tensors of different sizes per rank; gonccl could broadcast each rank's
  // into place, but a rank cannot tell a deliberate size from a mistake, and
  // a mistake would then desynchronise the group instead of failing here.)
  checkList(outputs, input, n, op, "output tensor");
  // The outputs may already be consecutive pieces of one buffer: then Go
  // gathers straight into them.
  void* recv =
      staging.writeList(outputs, n, worldTotal(n, size_, op), input.options());
  return issueCall(
      staged(c10d::OpType::ALLGATHER, op, inputTensors, outputs, staging),
      lib().allGatherAsync,
      input.data_ptr(),
      recv,
      n,
      type);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& opts) {
  Checking checking(*this, goncclOpAllGather);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("all_gather_into_tensor");
  Staging staging;
  const auto [input, output, type] =
      denseInOut(staging, inputBuffer, outputBuffer, op);
  const int64_t n = inputBuffer.numel();
  const int64_t total = worldTotal(n, size_, op);
  if (outputBuffer.numel() != total) {
    fail<c10::ValueError>(
        op,
        "output tensor must have world_size * input elements (got ",
        outputBuffer.numel(),
        ", expected ",
        size_,
        " * ",
        n,
        " = ",
        total,
        ")");
  }
  return issueCall(
      staged(
          c10d::OpType::_ALLGATHER_BASE,
          op,
          {inputBuffer},
          {outputBuffer},
          staging),
      lib().allGatherAsync,
      input.data_ptr(),
      output.data_ptr(),
      n,
      type);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  Checking checking(*this, goncclOpAllGather);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("all_gather_coalesced");
  if (inputTensors.empty()) {
    fail<c10::ValueError>(op, "expected at least 1 input tensor");
  }
  if (static_cast<int>(outputTensorLists.size()) != size_) {
    fail<c10::ValueError>(
        op,
        "expected ",
        size_,
        " output lists (one per rank), got ",
        outputTensorLists.size());
  }
  goncclDataType_t type = goncclFloat32;
  int64_t total = 0;
  for (const at::Tensor& t : inputTensors) {
    type = checkTensor(t, op, /*contiguous=*/false);
    checkSameDtype(t, inputTensors[0], op, "every input tensor");
    total += t.numel();
  }
  // outputTensorLists[r][i] receives rank r's inputTensors[i].
  std::vector<at::Tensor> outputs;
  for (const auto& list : outputTensorLists) {
    checkCount(list, inputTensors.size(), op, "output tensor per list");
    for (size_t i = 0; i < list.size(); ++i) {
      checkTensor(list[i], op, /*contiguous=*/false);
      checkSameDtype(list[i], inputTensors[0], op, "an output tensor");
      checkNumel(list[i], inputTensors[i].numel(), op, "output tensor ", i);
      outputs.push_back(list[i]);
    }
  }
  Staging staging;
  at::Tensor send = staging.flat(inputTensors, total);
  at::Tensor recv =
      staging.flatOut(outputs, worldTotal(total, size_, op), send.options());
  return issueCall(
      staged(
          c10d::OpType::ALLGATHER_COALESCED,
          op,
          inputTensors,
          outputs,
          staging),
      lib().allGatherAsync,
      send.data_ptr(),
      recv.data_ptr(),
      total,
      type);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Checking checking(*this, goncclOpAllGather);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("all_gather_into_tensor_coalesced");
  checkCount(outputs, inputs.size(), op, "output tensor");
  std::vector<goncclDataType_t> types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    types.push_back(checkTensor(inputs[i], op));
    checkTensor(outputs[i], op);
    checkSameDtype(outputs[i], inputs[i], op, "an output tensor");
    checkNumel(
        outputs[i],
        worldTotal(inputs[i].numel(), size_, op),
        op,
        "output tensor ",
        i,
        " (world_size * its input's)");
  }
  return issue({c10d::OpType::COALESCED, op, inputs, outputs}, [&](Parts& p) {
    return p.each(inputs.size(), [&](int64_t i) {
      return p.start(
          lib().allGatherAsync,
          inputs[i].data_ptr(),
          outputs[i].data_ptr(),
          inputs[i].numel(),
          types[i]);
    });
  });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  Checking checking(*this, goncclOpGather);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("gather");
  checkCount(inputTensors, 1, op, "input tensor");
  checkRoot(opts.rootRank, size_, op);
  Staging staging;
  at::Tensor input = staging.dense(inputTensors[0], /*written=*/false);
  goncclDataType_t type = checkTensor(input, op);
  const int root = static_cast<int>(opts.rootRank);
  const int64_t n = input.numel();
  std::vector<at::Tensor> outputs;
  void* recv = nullptr;
  if (const auto* list = rootList(outputTensors, root, rank_, op, "output")) {
    outputs = *list;
    checkCount(outputs, size_, op, "output tensor");
    checkList(outputs, input, n, op, "output tensor");
    recv = staging.writeList(
        outputs, n, worldTotal(n, size_, op), input.options());
  }
  return issueCall(
      staged(c10d::OpType::GATHER, op, inputTensors, outputs, staging),
      lib().gatherAsync,
      input.data_ptr(),
      recv,
      n,
      type,
      root);
}

#if GONCCL_HAS_GATHER_INTO_TENSOR
c10::intrusive_ptr<c10d::Work> GoncclBackend::gather_into_tensor(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::GatherOptions& opts) {
  Checking checking(*this, goncclOpGather);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("gather_into_tensor");
  checkRoot(opts.rootRank, size_, op);
  goncclDataType_t type = checkTensor(inputBuffer, op);
  const int root = static_cast<int>(opts.rootRank);
  const int64_t n = inputBuffer.numel();
  void* recv = nullptr;
  if (rank_ == root) {
    checkTensor(outputBuffer, op);
    checkSameDtype(outputBuffer, inputBuffer, op, "the output tensor");
    checkNumel(
        outputBuffer,
        worldTotal(n, size_, op),
        op,
        "the output tensor (world_size * input)");
    recv = outputBuffer.data_ptr();
  }
  return issueCall(
      {c10d::OpType::GATHER, op, {inputBuffer}, {outputBuffer}},
      lib().gatherAsync,
      inputBuffer.data_ptr(),
      recv,
      n,
      type,
      root);
}
#endif

c10::intrusive_ptr<c10d::Work> GoncclBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  Checking checking(*this, goncclOpScatter);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("scatter");
  checkCount(outputTensors, 1, op, "output tensor");
  checkRoot(opts.rootRank, size_, op);
  Staging staging;
  at::Tensor output = staging.dense(outputTensors[0], /*written=*/true);
  goncclDataType_t type = checkTensor(output, op);
  const int root = static_cast<int>(opts.rootRank);
  const int64_t n = output.numel();
  std::vector<at::Tensor> inputs;
  const void* send = nullptr;
  if (const auto* list = rootList(inputTensors, root, rank_, op, "input")) {
    inputs = *list;
    checkCount(inputs, size_, op, "input tensor");
    checkList(inputs, output, n, op, "input tensor");
    send = staging.readList(inputs, n, worldTotal(n, size_, op));
  }
  return issueCall(
      staged(c10d::OpType::SCATTER, op, inputs, outputTensors, staging),
      lib().scatterAsync,
      send,
      output.data_ptr(),
      n,
      type,
      root);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  Checking checking(*this, goncclOpReduceScatter);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("reduce_scatter");
  checkCount(outputTensors, 1, op, "output tensor");
  const std::vector<at::Tensor>& inputs = oneList(inputTensors, op, "input");
  Staging staging;
  at::Tensor output = staging.dense(outputTensors[0], /*written=*/true);
  goncclDataType_t type = checkTensor(output, op);
  checkCount(inputs, size_, op, "input tensor");
  Reduction r = checkReduceOp(opts.reduceOp, output.scalar_type(), op);
  const int64_t n = output.numel();
  bool uniform = true;
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkTensor(inputs[i], op, /*contiguous=*/false);
    checkSameDtype(inputs[i], output, op, "an input tensor");
    uniform = uniform && inputs[i].numel() == n;
    total += inputs[i].numel();
  }
  checkNumel(
      inputs[rank_],
      n,
      op,
      "input tensor ",
      rank_,
      " (this rank's, like the output)");
  const void* send = nullptr;
  std::vector<at::Tensor> sends;
  at::Tensor scratch;
  if (uniform) {
    send = staging.readList(inputs, n, worldTotal(n, size_, op), r);
  } else {
    for (const at::Tensor& t : inputs) {
      sends.push_back(staging.scaled(r, staging.dense(t, /*written=*/false)));
    }
    scratch = at::empty({total}, output.options());
    staging.keep(scratch);
  }
  return issue(
      staged(c10d::OpType::REDUCE_SCATTER, op, inputs, outputTensors, staging),
      [&](Parts& p) {
        if (uniform) {
          return p.start(
              lib().reduceScatterAsync, send, output.data_ptr(), n, type, r.op);
        }
        // Blocks of different sizes: one reduce per rank, each to its owner.
        return p.each(size_, [&](int64_t i) {
          return p.start(
              lib().reduceAsync,
              sends[i].data_ptr(),
              i == rank_ ? output.data_ptr() : scratch.data_ptr(),
              sends[i].numel(),
              type,
              r.op,
              static_cast<int>(i));
        });
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::_reduce_scatter_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::ReduceScatterOptions& opts) {
  Checking checking(*this, goncclOpReduceScatter);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("reduce_scatter_tensor");
  Staging staging;
  const auto [input, output, type] =
      denseInOut(staging, inputBuffer, outputBuffer, op);
  const int64_t n = outputBuffer.numel();
  checkNumel(
      inputBuffer,
      worldTotal(n, size_, op),
      op,
      "the input tensor (world_size * output)");
  Reduction r = checkReduceOp(opts.reduceOp, inputBuffer.scalar_type(), op);
  at::Tensor send = staging.scaled(r, input);
  return issueCall(
      staged(
          c10d::OpType::_REDUCE_SCATTER_BASE,
          op,
          {inputBuffer},
          {outputBuffer},
          staging),
      lib().reduceScatterAsync,
      send.data_ptr(),
      output.data_ptr(),
      n,
      type,
      r.op);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Checking checking(*this, goncclOpReduceScatter);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("reduce_scatter_tensor_coalesced");
  checkCount(outputs, inputs.size(), op, "output tensor");
  std::vector<goncclDataType_t> types;
  std::vector<at::Tensor> sends;
  Reduction r;
  Staging staging;
  for (size_t i = 0; i < inputs.size(); ++i) {
    types.push_back(checkTensor(inputs[i], op));
    checkTensor(outputs[i], op);
    checkSameDtype(outputs[i], inputs[i], op, "an output tensor");
    checkNumel(
        inputs[i],
        worldTotal(outputs[i].numel(), size_, op),
        op,
        "input tensor ",
        i,
        " (world_size * its output's)");
    r = checkReduceOp(opts.reduceOp, inputs[i].scalar_type(), op);
    sends.push_back(staging.scaled(r, inputs[i]));
  }
  return issue(
      staged(c10d::OpType::COALESCED, op, inputs, outputs, staging),
      [&](Parts& p) {
        return p.each(inputs.size(), [&](int64_t i) {
          return p.start(
              lib().reduceScatterAsync,
              sends[i].data_ptr(),
              outputs[i].data_ptr(),
              outputs[i].numel(),
              types[i],
              r.op);
        });
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::alltoall_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& opts) {
  Checking checking(*this, goncclOpAlltoAll);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("all_to_all_single");
  goncclDataType_t type = checkTensor(inputBuffer, op);
  Staging staging;
  at::Tensor output = staging.dense(outputBuffer, /*written=*/true);
  checkTensor(output, op);
  checkSameDtype(outputBuffer, inputBuffer, op, "the output tensor");
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  splitCounts(
      inputBuffer, inputSplitSizes, size_, op, "input", sendCounts, sendDispls);
  splitCounts(
      outputBuffer,
      outputSplitSizes,
      size_,
      op,
      "output",
      recvCounts,
      recvDispls);
  const void* send = inputBuffer.data_ptr();
  void* recv = output.data_ptr();
  Op desc = staged(
      c10d::OpType::ALLTOALL_BASE, op, {inputBuffer}, {outputBuffer}, staging);
  // Every rank must pick the same C call: the split sizes are a per-rank
  // view, so even splits on this rank say nothing about the others. Only
  // "no split sizes" (equal blocks by definition) is the same everywhere.
  if (inputSplitSizes.empty() && outputSplitSizes.empty()) {
    if (inputBuffer.numel() != outputBuffer.numel()) {
      fail<c10::ValueError>(
          op,
          "without split sizes the input and output must have as many "
          "elements (got ",
          inputBuffer.numel(),
          " and ",
          outputBuffer.numel(),
          ")");
    }
    return issueCall(
        std::move(desc), lib().alltoAllAsync, send, recv, sendCounts[0], type);
  }
  return issueCall(
      std::move(desc),
      lib().alltoAllvAsync,
      send,
      sendCounts.data(),
      sendDispls.data(),
      recv,
      recvCounts.data(),
      recvDispls.data(),
      type);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& opts) {
  Checking checking(*this, goncclOpAlltoAll);
  CallTimeout callTimeout(opts.timeout);
  constexpr OpName op = GONCCL_OP("all_to_all");
  checkCount(inputTensors, size_, op, "input tensor");
  checkCount(outputTensors, size_, op, "output tensor");
  goncclDataType_t type =
      checkTensor(inputTensors[0], op, /*contiguous=*/false);
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  size_t sendTotal = 0;
  size_t recvTotal = 0;
  for (int i = 0; i < size_; ++i) {
    checkTensor(inputTensors[i], op, /*contiguous=*/false);
    checkSameDtype(inputTensors[i], inputTensors[0], op, "an input tensor");
    checkTensor(outputTensors[i], op, /*contiguous=*/false);
    checkSameDtype(outputTensors[i], inputTensors[0], op, "an output tensor");
    sendDispls.push_back(sendTotal);
    sendCounts.push_back(inputTensors[i].numel());
    sendTotal += inputTensors[i].numel();
    recvDispls.push_back(recvTotal);
    recvCounts.push_back(outputTensors[i].numel());
    recvTotal += outputTensors[i].numel();
  }
  Staging staging;
  at::Tensor send = staging.flat(inputTensors, sendTotal);
  at::Tensor recv = staging.flatOut(outputTensors, recvTotal, send.options());
  return issueCall(
      staged(c10d::OpType::ALLTOALL, op, inputTensors, outputTensors, staging),
      lib().alltoAllvAsync,
      send.data_ptr(),
      sendCounts.data(),
      sendDispls.data(),
      recv.data_ptr(),
      recvCounts.data(),
      recvDispls.data(),
      type);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::barrier(
    const c10d::BarrierOptions& opts) {
  Checking checking(*this, goncclOpBarrier);
  CallTimeout callTimeout(opts.timeout);
  return issueCall(
      {c10d::OpType::BARRIER, GONCCL_OP("barrier"), {}, {}},
      lib().barrierAsync);
}

}  // namespace gonccl
