#include "completion.hpp"

#include <string>
#include <utility>

#include <c10/util/Exception.h>

#include "library.hpp"

namespace gonccl {

std::shared_ptr<CompletionQueue> CompletionQueue::create() {
  std::shared_ptr<CompletionQueue> q(new CompletionQueue());
  q->thread_ = std::thread([raw = q.get()] { raw->run(); });
  return q;
}

CompletionQueue::~CompletionQueue() {
  // The owner calls stop(); a queue still running here can only be one a
  // forked child leaked on purpose, which never reaches this destructor.
  TORCH_INTERNAL_ASSERT(
      !thread_.joinable(), "gonccl: CompletionQueue not stopped");
}

void CompletionQueue::track(c10::intrusive_ptr<GoncclWork> work) {
  const Library& L = lib();
  goncclRequest_t req = work->request;
  auto* token = new Token{shared_from_this(), std::move(work), goncclSuccess};
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  ready_cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void CompletionQueue::run() {
  for (;;) {
    Token* token = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) {
        return;
      }
      token = ready_.front();
      ready_.pop_front();
    }
    process(token);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    drained_cv_.notify_all();
  }
}

void CompletionQueue::process(Token* token) {
  GoncclWork& work = *token->work;
  std::string error;
  try {
    const Library& L = lib();
    if (token->result != goncclSuccess) {
      error = std::string("gonccl: ") + work.opName() + " failed: " +
              errorString(token->result, L.requestErrorString(work.request));
    }
    L.requestFree(work.request);
    work.request = nullptr;
  } catch (const std::exception& e) {
    if (error.empty()) {
      error = std::string("gonccl: ") + work.opName() + " failed: " + e.what();
    }
  }
  work.complete(error);
  delete token;
}

}  // namespace gonccl
