// collectives.cpp: GoncclBackend's collectives. Each validates what torch
// hands it (checks.hpp), describes the buffers and calls issue() with the
// gonccl requests to start. Tensors are used in place where c10d allows it;
// otherwise the op runs on a staging tensor and copies out on completion.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

// True if the tensors are consecutive n-element pieces of one buffer, in
// order, so that a collective can read or write all of them at once.
bool consecutive(const std::vector<at::Tensor>& ts, int64_t n) {
  if (ts.empty()) {
    return false;
  }
  const auto* base = static_cast<const char*>(ts[0].data_ptr());
  const size_t pieceBytes = n * ts[0].element_size();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].numel() != n || !ts[i].is_contiguous() ||
        !ts[i].storage().is_alias_of(ts[0].storage()) ||
        static_cast<const char*>(ts[i].data_ptr()) != base + i * pieceBytes) {
      return false;
    }
  }
  return true;
}

// The tensors' elements, one after the other, in a new 1-D tensor.
at::Tensor flatten(const std::vector<at::Tensor>& ts, int64_t total) {
  at::NoGradGuard noGrad;
  at::Tensor flat = at::empty({total}, ts[0].options());
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
    offset += t.numel();
  }
  return flat;
}

// Copies consecutive pieces of flat into the tensors (the inverse of
// flatten).
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// Non-contiguous tensors, which Gloo takes for every collective but
// all_to_all_single's input: the op works on contiguous copies, and the copy
// of a tensor that receives data is copied back when the op has finished.
class Dense {
 public:
  // t itself if it is contiguous (or not strided: checkTensor rejects that),
  // else a contiguous copy; if written, t gets the copy back afterwards.
  at::Tensor operator()(const at::Tensor& t, bool written) {
    if (t.layout() != at::kStrided || t.is_contiguous()) {
      return t;
    }
    at::NoGradGuard noGrad;
    at::Tensor copy = t.contiguous();
    if (written) {
      pairs_.emplace_back(t, copy);
    }
    return copy;
  }

  std::vector<at::Tensor> operator()(
      const std::vector<at::Tensor>& ts, bool written) {
    std::vector<at::Tensor> out;
    for (const at::Tensor& t : ts) {
      out.push_back((*this)(t, written));
    }
    return out;
  }

  // The op's post-completion step: first (if set), then the copy-backs.
  std::function<void()> copyBack(std::function<void()> first = nullptr) {
    if (pairs_.empty()) {
      return first;
    }
    return [first = std::move(first), pairs = pairs_]() {
      if (first) {
        first();
      }
      for (const auto& [t, copy] : pairs) {
        t.copy_(copy);
      }
    };
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs_;
};

// Checks every tensor of a list against the reference: supported, same dtype,
// n elements (contiguous or not: the caller stages them).
void checkList(
    const std::vector<at::Tensor>& ts,
    const at::Tensor& ref,
    int64_t n,
    const char* op,
    const char* what) {
  for (size_t i = 0; i < ts.size(); ++i) {
    checkTensor(ts[i], op, /*contiguous=*/false);
    checkSameDtype(ts[i], ref, op, what);
    checkNumel(ts[i], n, op, c10::str(what, " ", i).c_str());
  }
}

void checkRootTensor(int64_t rootTensor, const char* op) {
  if (rootTensor != 0) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": root tensor must be 0 (one tensor per rank), got ",
            rootTensor));
  }
}

// Element counts and offsets of an all_to_all_single side: split sizes count
// rows of dim 0 (equal splits if empty).
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
      C10_THROW_ERROR(
          ValueError,
          c10::str(
              "gonccl: ",
              op,
              ": the ",
              what,
              " tensor's dim 0 (",
              rows,
              ") does not divide equally across the group size (",
              size,
              "); pass split sizes"));
    }
    s.assign(size, rows / size);
  }
  if (static_cast<int>(s.size()) != size) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": expected ",
            size,
            " ",
            what,
            " split sizes, got ",
            s.size()));
  }
  int64_t sum = 0;
  counts.assign(size, 0);
  displs.assign(size, 0);
  for (int i = 0; i < size; ++i) {
    if (s[i] < 0) {
      C10_THROW_ERROR(
          ValueError,
          c10::str("gonccl: ", op, ": negative ", what, " split size ", s[i]));
    }
    // Checked before adding, so that the sum cannot overflow (and wrap back
    // to the right total) and every count and offset below stays within the
    // tensor's numel.
    if (s[i] > rows - sum) {
      C10_THROW_ERROR(
          ValueError,
          c10::str(
              "gonccl: ",
              op,
              ": the ",
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
              " rows already taken"));
    }
    displs[i] = sum * rowElems;
    counts[i] = s[i] * rowElems;
    sum += s[i];
  }
  if (sum != rows) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": the ",
            what,
            " split sizes add up to ",
            sum,
            " but the ",
            what,
            " tensor's dim 0 is ",
            rows));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  constexpr const char* op = "all_reduce";
  checkCount(tensors, 1, op);
  Dense dense;
  at::Tensor t = dense(tensors[0], /*written=*/true);
  goncclDataType_t type = checkTensor(t, op);
  Reduction r = checkReduceOp(opts.reduceOp, t.scalar_type(), op);
  r.scaled(t, /*inPlace=*/true);
  void* buf = t.data_ptr();
  size_t count = t.numel();
  return issue(
      {c10d::OpType::ALLREDUCE,
       "gonccl:all_reduce",
       op,
       {tensors[0]},
       {tensors[0]},
       {t},
       dense.copyBack()},
      [&](Parts& p) {
        return p.add(lib().allReduceAsync(
            buf, buf, count, type, r.op, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  constexpr const char* op = "all_reduce_coalesced";
  if (tensors.empty()) {
    C10_THROW_ERROR(
        ValueError, c10::str("gonccl: ", op, ": expected at least 1 tensor"));
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
  at::Tensor flat = flatten(tensors, total);
  r.scaled(flat, /*inPlace=*/true);
  std::vector<at::Tensor> outputs = tensors;
  void* buf = flat.data_ptr();
  size_t count = total;
  return issue(
      {c10d::OpType::ALLREDUCE_COALESCED,
       "gonccl:all_reduce_coalesced",
       op,
       tensors,
       outputs,
       {flat},
       [flat, outputs]() { unflatten(flat, outputs); }},
      [&](Parts& p) {
        return p.add(lib().allReduceAsync(
            buf, buf, count, type, r.op, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce_sparse(
    std::vector<at::Tensor>& /*tensors*/,
    const c10d::AllreduceOptions& /*opts*/) {
  C10_THROW_ERROR(
      ValueError,
      "gonccl: all_reduce: sparse tensors are not supported (densify them "
      "with .to_dense() first)");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  constexpr const char* op = "reduce";
  checkCount(tensors, 1, op);
  Dense dense;
  at::Tensor t = dense(tensors[0], /*written=*/opts.rootRank == rank_);
  goncclDataType_t type = checkTensor(t, op);
  checkRootTensor(opts.rootTensor, op);
  checkRoot(opts.rootRank, size_, op);
  Reduction r = checkReduceOp(opts.reduceOp, t.scalar_type(), op);
  auto fn = need(lib().reduceAsync, "goncclReduceAsync", op);
  // Only the root's tensor receives the result; PREMUL_SUM scales a copy so
  // that the other ranks' tensors stay as they were.
  at::Tensor send = r.scaled(t, /*inPlace=*/false);
  const void* sendbuf = send.data_ptr();
  void* recvbuf = t.data_ptr();
  size_t count = t.numel();
  int root = static_cast<int>(opts.rootRank);
  return issue(
      {c10d::OpType::REDUCE,
       "gonccl:reduce",
       op,
       {tensors[0]},
       {tensors[0]},
       {send, t},
       dense.copyBack()},
      [&](Parts& p) {
        return p.add(
            fn(sendbuf,
               recvbuf,
               count,
               type,
               r.op,
               root,
               p.comm,
               p.stream,
               p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  constexpr const char* op = "broadcast";
  checkCount(tensors, 1, op);
  Dense dense;
  at::Tensor t = dense(tensors[0], /*written=*/opts.rootRank != rank_);
  goncclDataType_t type = checkTensor(t, op);
  checkRootTensor(opts.rootTensor, op);
  checkRoot(opts.rootRank, size_, op);
  void* buf = t.data_ptr();
  size_t count = t.numel();
  int root = static_cast<int>(opts.rootRank);
  return issue(
      {c10d::OpType::BROADCAST,
       "gonccl:broadcast",
       op,
       {tensors[0]},
       {tensors[0]},
       {t},
       dense.copyBack()},
      [&](Parts& p) {
        return p.add(lib().broadcastAsync(
            buf, buf, count, type, root, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& /*opts*/) {
  constexpr const char* op = "all_gather";
  checkCount(inputTensors, 1, op, "input tensor");
  if (outputTensors.size() != 1) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": expected 1 list of output tensors, got ",
            outputTensors.size()));
  }
  Dense dense;
  at::Tensor input = dense(inputTensors[0], /*written=*/false);
  std::vector<at::Tensor> outputs = outputTensors[0];
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
  at::Tensor flat;
  std::function<void()> copyOut;
  void* recv = nullptr;
  std::vector<at::Tensor> keepAlive;
  if (consecutive(outputs, n)) {
    recv = outputs[0].data_ptr();
  } else {
    flat = at::empty({worldTotal(n, size_, op)}, input.options());
    recv = flat.data_ptr();
    keepAlive.push_back(flat);
    copyOut = [flat, outputs]() { unflatten(flat, outputs); };
  }
  void* send = input.data_ptr();
  keepAlive.push_back(input);
  return issue(
      {c10d::OpType::ALLGATHER,
       "gonccl:all_gather",
       op,
       {inputTensors[0]},
       outputs,
       std::move(keepAlive),
       std::move(copyOut)},
      [&](Parts& p) {
        return p.add(lib().allGatherAsync(
            send, recv, n, type, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& /*opts*/) {
  constexpr const char* op = "all_gather_into_tensor";
  Dense dense;
  at::Tensor input = dense(inputBuffer, /*written=*/false);
  at::Tensor output = dense(outputBuffer, /*written=*/true);
  goncclDataType_t type = checkTensor(input, op);
  checkTensor(output, op);
  checkSameDtype(outputBuffer, inputBuffer, op, "the output tensor");
  const int64_t n = inputBuffer.numel();
  if (outputBuffer.numel() != worldTotal(n, size_, op)) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": output tensor must have world_size * input elements (got ",
            outputBuffer.numel(),
            ", expected ",
            size_,
            " * ",
            n,
            " = ",
            worldTotal(n, size_, op),
            ")"));
  }
  void* send = input.data_ptr();
  void* recv = output.data_ptr();
  return issue(
      {c10d::OpType::_ALLGATHER_BASE,
       "gonccl:all_gather_into_tensor",
       op,
       {inputBuffer},
       {outputBuffer},
       {input, output},
       dense.copyBack()},
      [&](Parts& p) {
        return p.add(lib().allGatherAsync(
            send, recv, n, type, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& /*opts*/) {
  constexpr const char* op = "all_gather_coalesced";
  if (inputTensors.empty()) {
    C10_THROW_ERROR(
        ValueError,
        c10::str("gonccl: ", op, ": expected at least 1 input tensor"));
  }
  if (static_cast<int>(outputTensorLists.size()) != size_) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": expected ",
            size_,
            " output lists (one per rank), got ",
            outputTensorLists.size()));
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
      checkNumel(
          list[i],
          inputTensors[i].numel(),
          op,
          c10::str("output tensor ", i).c_str());
      outputs.push_back(list[i]);
    }
  }
  at::Tensor send = flatten(inputTensors, total);
  at::Tensor recv = at::empty({worldTotal(total, size_, op)}, send.options());
  void* sendbuf = send.data_ptr();
  void* recvbuf = recv.data_ptr();
  return issue(
      {c10d::OpType::ALLGATHER_COALESCED,
       "gonccl:all_gather_coalesced",
       op,
       inputTensors,
       outputs,
       {send, recv},
       [recv, outputs]() { unflatten(recv, outputs); }},
      [&](Parts& p) {
        return p.add(lib().allGatherAsync(
            sendbuf, recvbuf, total, type, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  constexpr const char* op = "all_gather_into_tensor_coalesced";
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
        c10::str("output tensor ", i, " (world_size * its input's)").c_str());
  }
  return issue(
      {c10d::OpType::COALESCED,
       "gonccl:all_gather_into_tensor_coalesced",
       op,
       inputs,
       outputs},
      [&](Parts& p) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          goncclResult_t rc = p.add(lib().allGatherAsync(
              inputs[i].data_ptr(),
              outputs[i].data_ptr(),
              inputs[i].numel(),
              types[i],
              p.comm,
              p.stream,
              p.next()));
          if (rc != goncclSuccess) {
            return rc;
          }
        }
        return goncclSuccess;
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  constexpr const char* op = "gather";
  checkCount(inputTensors, 1, op, "input tensor");
  checkRoot(opts.rootRank, size_, op);
  at::Tensor input = Dense()(inputTensors[0], /*written=*/false);
  goncclDataType_t type = checkTensor(input, op);
  auto fn = need(lib().gatherAsync, "goncclGatherAsync", op);
  const int root = static_cast<int>(opts.rootRank);
  const int64_t n = input.numel();
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> keepAlive;
  std::function<void()> copyOut;
  void* recv = nullptr;
  if (rank_ == root) {
    if (outputTensors.size() != 1) {
      C10_THROW_ERROR(
          ValueError,
          c10::str(
              "gonccl: ",
              op,
              ": the root expects 1 list of output tensors, got ",
              outputTensors.size()));
    }
    outputs = outputTensors[0];
    checkCount(outputs, size_, op, "output tensor");
    checkList(outputs, input, n, op, "output tensor");
    if (consecutive(outputs, n)) {
      recv = outputs[0].data_ptr();
    } else {
      at::Tensor flat = at::empty({worldTotal(n, size_, op)}, input.options());
      recv = flat.data_ptr();
      keepAlive.push_back(flat);
      copyOut = [flat, outputs]() { unflatten(flat, outputs); };
    }
  } else if (!outputTensors.empty()) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": only the root (rank ",
            root,
            ") takes output tensors; rank ",
            rank_,
            " got ",
            outputTensors.size(),
            " list(s)"));
  }
  void* send = input.data_ptr();
  keepAlive.push_back(input);
  return issue(
      {c10d::OpType::GATHER,
       "gonccl:gather",
       op,
       {inputTensors[0]},
       outputs,
       std::move(keepAlive),
       std::move(copyOut)},
      [&](Parts& p) {
        return p.add(fn(send, recv, n, type, root, p.comm, p.stream, p.next()));
      });
}

#if GONCCL_HAS_GATHER_INTO_TENSOR
c10::intrusive_ptr<c10d::Work> GoncclBackend::gather_into_tensor(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::GatherOptions& opts) {
  constexpr const char* op = "gather_into_tensor";
  checkRoot(opts.rootRank, size_, op);
  goncclDataType_t type = checkTensor(inputBuffer, op);
  auto fn = need(lib().gatherAsync, "goncclGatherAsync", op);
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
  void* send = inputBuffer.data_ptr();
  return issue(
      {c10d::OpType::GATHER,
       "gonccl:gather_into_tensor",
       op,
       {inputBuffer},
       {outputBuffer}},
      [&](Parts& p) {
        return p.add(fn(send, recv, n, type, root, p.comm, p.stream, p.next()));
      });
}
#endif

c10::intrusive_ptr<c10d::Work> GoncclBackend::scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  constexpr const char* op = "scatter";
  checkCount(outputTensors, 1, op, "output tensor");
  checkRoot(opts.rootRank, size_, op);
  Dense dense;
  at::Tensor output = dense(outputTensors[0], /*written=*/true);
  goncclDataType_t type = checkTensor(output, op);
  auto fn = need(lib().scatterAsync, "goncclScatterAsync", op);
  const int root = static_cast<int>(opts.rootRank);
  const int64_t n = output.numel();
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> keepAlive;
  const void* send = nullptr;
  if (rank_ == root) {
    if (inputTensors.size() != 1) {
      C10_THROW_ERROR(
          ValueError,
          c10::str(
              "gonccl: ",
              op,
              ": the root expects 1 list of input tensors, got ",
              inputTensors.size()));
    }
    inputs = inputTensors[0];
    checkCount(inputs, size_, op, "input tensor");
    checkList(inputs, output, n, op, "input tensor");
    if (consecutive(inputs, n)) {
      send = inputs[0].data_ptr();
    } else {
      at::Tensor flat = flatten(inputs, worldTotal(n, size_, op));
      send = flat.data_ptr();
      keepAlive.push_back(flat);
    }
  } else if (!inputTensors.empty()) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": only the root (rank ",
            root,
            ") takes input tensors; rank ",
            rank_,
            " got ",
            inputTensors.size(),
            " list(s)"));
  }
  void* recv = output.data_ptr();
  keepAlive.push_back(output);
  return issue(
      {c10d::OpType::SCATTER,
       "gonccl:scatter",
       op,
       inputs,
       {outputTensors[0]},
       std::move(keepAlive),
       dense.copyBack()},
      [&](Parts& p) {
        return p.add(fn(send, recv, n, type, root, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce_scatter(
    std::vector<at::Tensor>& outputTensors,
    std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  constexpr const char* op = "reduce_scatter";
  checkCount(outputTensors, 1, op, "output tensor");
  if (inputTensors.size() != 1) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": expected 1 list of input tensors, got ",
            inputTensors.size()));
  }
  Dense dense;
  at::Tensor output = dense(outputTensors[0], /*written=*/true);
  std::vector<at::Tensor> inputs = inputTensors[0];
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
      c10::str("input tensor ", rank_, " (this rank's, like the output)")
          .c_str());
  if (!uniform) {
    // Blocks of different sizes: one reduce per rank, each to its owner.
    auto fn = need(lib().reduceAsync, "goncclReduceAsync", op);
    std::vector<at::Tensor> sends;
    for (const at::Tensor& t : inputs) {
      sends.push_back(r.scaled(dense(t, /*written=*/false), /*inPlace=*/false));
    }
    at::Tensor scratch = at::empty({total}, output.options());
    std::vector<at::Tensor> keepAlive = sends;
    keepAlive.push_back(scratch);
    keepAlive.push_back(output);
    return issue(
        {c10d::OpType::REDUCE_SCATTER,
         "gonccl:reduce_scatter",
         op,
         inputs,
         {outputTensors[0]},
         std::move(keepAlive),
         dense.copyBack()},
        [&](Parts& p) {
          for (int i = 0; i < size_; ++i) {
            void* recv = i == rank_ ? output.data_ptr() : scratch.data_ptr();
            goncclResult_t rc = p.add(
                fn(sends[i].data_ptr(),
                   recv,
                   sends[i].numel(),
                   type,
                   r.op,
                   i,
                   p.comm,
                   p.stream,
                   p.next()));
            if (rc != goncclSuccess) {
              return rc;
            }
          }
          return goncclSuccess;
        });
  }
  auto fn = need(lib().reduceScatterAsync, "goncclReduceScatterAsync", op);
  std::vector<at::Tensor> keepAlive;
  const void* send = nullptr;
  if (!r.premul && consecutive(inputs, n)) {
    send = inputs[0].data_ptr();
  } else {
    at::Tensor flat = flatten(inputs, worldTotal(n, size_, op));
    r.scaled(flat, /*inPlace=*/true);
    send = flat.data_ptr();
    keepAlive.push_back(flat);
  }
  void* recv = output.data_ptr();
  keepAlive.push_back(output);
  return issue(
      {c10d::OpType::REDUCE_SCATTER,
       "gonccl:reduce_scatter",
       op,
       inputs,
       {outputTensors[0]},
       std::move(keepAlive),
       dense.copyBack()},
      [&](Parts& p) {
        return p.add(fn(send, recv, n, type, r.op, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::_reduce_scatter_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::ReduceScatterOptions& opts) {
  constexpr const char* op = "reduce_scatter_tensor";
  Dense dense;
  at::Tensor input = dense(inputBuffer, /*written=*/false);
  at::Tensor output = dense(outputBuffer, /*written=*/true);
  goncclDataType_t type = checkTensor(input, op);
  checkTensor(output, op);
  checkSameDtype(outputBuffer, inputBuffer, op, "the output tensor");
  const int64_t n = outputBuffer.numel();
  checkNumel(
      inputBuffer,
      worldTotal(n, size_, op),
      op,
      "the input tensor (world_size * output)");
  Reduction r = checkReduceOp(opts.reduceOp, inputBuffer.scalar_type(), op);
  auto fn = need(lib().reduceScatterAsync, "goncclReduceScatterAsync", op);
  at::Tensor send = r.scaled(input, /*inPlace=*/false);
  const void* sendbuf = send.data_ptr();
  void* recvbuf = output.data_ptr();
  return issue(
      {c10d::OpType::_REDUCE_SCATTER_BASE,
       "gonccl:reduce_scatter_tensor",
       op,
       {inputBuffer},
       {outputBuffer},
       {send, output},
       dense.copyBack()},
      [&](Parts& p) {
        return p.add(
            fn(sendbuf, recvbuf, n, type, r.op, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  constexpr const char* op = "reduce_scatter_tensor_coalesced";
  checkCount(outputs, inputs.size(), op, "output tensor");
  auto fn = need(lib().reduceScatterAsync, "goncclReduceScatterAsync", op);
  std::vector<goncclDataType_t> types;
  std::vector<at::Tensor> sends;
  Reduction r;
  for (size_t i = 0; i < inputs.size(); ++i) {
    types.push_back(checkTensor(inputs[i], op));
    checkTensor(outputs[i], op);
    checkSameDtype(outputs[i], inputs[i], op, "an output tensor");
    checkNumel(
        inputs[i],
        worldTotal(outputs[i].numel(), size_, op),
        op,
        c10::str("input tensor ", i, " (world_size * its output's)").c_str());
    r = checkReduceOp(opts.reduceOp, inputs[i].scalar_type(), op);
    sends.push_back(r.scaled(inputs[i], /*inPlace=*/false));
  }
  return issue(
      {c10d::OpType::COALESCED,
       "gonccl:reduce_scatter_tensor_coalesced",
       op,
       inputs,
       outputs,
       sends},
      [&](Parts& p) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          goncclResult_t rc = p.add(
              fn(sends[i].data_ptr(),
                 outputs[i].data_ptr(),
                 outputs[i].numel(),
                 types[i],
                 r.op,
                 p.comm,
                 p.stream,
                 p.next()));
          if (rc != goncclSuccess) {
            return rc;
          }
        }
        return goncclSuccess;
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::alltoall_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes,
    const c10d::AllToAllOptions& /*opts*/) {
  constexpr const char* op = "all_to_all_single";
  goncclDataType_t type = checkTensor(inputBuffer, op);
  Dense dense;
  at::Tensor output = dense(outputBuffer, /*written=*/true);
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
  Op desc{
      c10d::OpType::ALLTOALL_BASE,
      "gonccl:all_to_all_single",
      op,
      {inputBuffer},
      {outputBuffer},
      {output},
      dense.copyBack()};
  // Every rank must pick the same C call: the split sizes are a per-rank
  // view, so even splits on this rank say nothing about the others. Only
  // "no split sizes" (equal blocks by definition) is the same everywhere.
  const bool even = inputSplitSizes.empty() && outputSplitSizes.empty();
  if (even) {
    if (inputBuffer.numel() != outputBuffer.numel()) {
      C10_THROW_ERROR(
          ValueError,
          c10::str(
              "gonccl: ",
              op,
              ": without split sizes the input and output must have as many "
              "elements (got ",
              inputBuffer.numel(),
              " and ",
              outputBuffer.numel(),
              ")"));
    }
    auto fn = need(lib().alltoAllAsync, "goncclAlltoAllAsync", op);
    size_t count = sendCounts[0];
    return issue(std::move(desc), [&](Parts& p) {
      return p.add(fn(send, recv, count, type, p.comm, p.stream, p.next()));
    });
  }
  auto fn = need(lib().alltoAllvAsync, "goncclAlltoAllvAsync", op);
  return issue(std::move(desc), [&](Parts& p) {
    return p.add(
        fn(send,
           sendCounts.data(),
           sendDispls.data(),
           recv,
           recvCounts.data(),
           recvDispls.data(),
           type,
           p.comm,
           p.stream,
           p.next()));
  });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::alltoall(
    std::vector<at::Tensor>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllToAllOptions& /*opts*/) {
  constexpr const char* op = "all_to_all";
  checkCount(inputTensors, size_, op, "input tensor");
  checkCount(outputTensors, size_, op, "output tensor");
  goncclDataType_t type =
      checkTensor(inputTensors[0], op, /*contiguous=*/false);
  auto fn = need(lib().alltoAllvAsync, "goncclAlltoAllvAsync", op);
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
  at::Tensor send = flatten(inputTensors, sendTotal);
  at::Tensor recv =
      at::empty({static_cast<int64_t>(recvTotal)}, send.options());
  std::vector<at::Tensor> outputs = outputTensors;
  const void* sendbuf = send.data_ptr();
  void* recvbuf = recv.data_ptr();
  return issue(
      {c10d::OpType::ALLTOALL,
       "gonccl:all_to_all",
       op,
       inputTensors,
       outputs,
       {send, recv},
       [recv, outputs]() { unflatten(recv, outputs); }},
      [&](Parts& p) {
        return p.add(
            fn(sendbuf,
               sendCounts.data(),
               sendDispls.data(),
               recvbuf,
               recvCounts.data(),
               recvDispls.data(),
               type,
               p.comm,
               p.stream,
               p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::barrier(
    const c10d::BarrierOptions& /*opts*/) {
  return issue(
      {c10d::OpType::BARRIER, "gonccl:barrier", "barrier", {}, {}},
      [&](Parts& p) {
        return p.add(lib().barrierAsync(p.comm, p.stream, p.next()));
      });
}

}  // namespace gonccl
