#include "completion.hpp"

#include <string>
#include <utility>

#include <c10/util/Exception.h>

#include "library.hpp"

namespace gonccl {

std::shared_ptr<CompletionQueue> CompletionQueue::create() {
  std::shared_ptr<CompletionQueue> q(new CompletionQueue());
  std::lock_guard<std::mutex> lock(q->mu_);
  q->spawnLocked();
  return q;
}

CompletionQueue::~CompletionQueue() {
  // The owner calls stop(); a queue still running here can only be one a
  // forked child leaked on purpose, which never reaches this destructor.
  TORCH_INTERNAL_ASSERT(
      threads_.empty(), "gonccl: CompletionQueue not stopped");
}

void CompletionQueue::spawnLocked() {
  ++idle_;
  threads_.emplace_back([this] { run(); });
}

void CompletionQueue::track(
    c10::intrusive_ptr<GoncclWork> work, goncclRequest_t req) {
  const Library& L = lib();
  auto* token =
      new Token{shared_from_this(), std::move(work), req, goncclSuccess};
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++pending_;
  }
  // The callback may run right here, on this thread, if the op already ended.
  goncclResult_t rc =
      L.requestOnComplete(req, &CompletionQueue::onComplete, token);
  if (rc != goncclSuccess) {
    // No callback will come: wait here (the op's own deadline bounds this),
    // then hand the result to the thread as the callback would have.
    token->result = L.requestWait(req, -1);
    push(token);
  }
}

void CompletionQueue::onComplete(void* arg, goncclResult_t result) {
  auto* token = static_cast<Token*>(arg);
  token->result = result;
  token->queue->push(token);
}

void CompletionQueue::push(Token* token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // After stop() nothing pops this token; it (and the Work) is leaked rather
    // than completed on a Go thread. Only a callback arriving after the owner
    // gave up waiting for it gets here.
    ready_.push_back(token);
    if (idle_ == 0 && !stopping_ && threads_.size() < kMaxThreads) {
      spawnLocked();
    }
  }
  ready_cv_.notify_one();
}

size_t CompletionQueue::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

bool CompletionQueue::drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return drained_cv_.wait_for(lock, timeout, [this] { return pending_ == 0; });
}

void CompletionQueue::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    threads = std::move(threads_);
    threads_.clear();
  }
  ready_cv_.notify_all();
  for (std::thread& t : threads) {
    t.join();
  }
}

void CompletionQueue::run() {
  // spawnLocked counted this thread idle already.
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ready_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    --idle_;
    if (ready_.empty()) {
      return;
    }
    Token* token = ready_.front();
    ready_.pop_front();
    lock.unlock();
    process(token);
    lock.lock();
    --pending_;
    ++idle_;
    drained_cv_.notify_all();
  }
}

void CompletionQueue::process(Token* token) {
  GoncclWork& work = *token->work;
  std::string error;
  try {
    const Library& L = lib();
    if (token->result != goncclSuccess) {
      work.noteResult(token->result);
      error = opFailure(
                  work.opName(),
                  token->result,
                  L.requestErrorString(token->request),
                  work.timeout()) +
              work.errorNote();
    } else if (work.recordsSource() && L.requestSource != nullptr) {
      int peer = -1;
      if (L.requestSource(token->request, &peer) == goncclSuccess) {
        work.setSourceRank(peer);
      }
    }
    if (work.stream()) {
      // wait() still needs it: goncclRequestWaitStream.
      work.adoptRequest(token->request);
    } else {
      L.requestFree(token->request);
    }
  } catch (const std::exception& e) {
    if (error.empty()) {
      error = std::string("gonccl: ") + work.opName() + " failed: " + e.what();
    }
  }
  work.partDone(error);
  delete token;
}

}  // namespace gonccl
