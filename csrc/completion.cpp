#include "completion.hpp"

#include <string>
#include <utility>

#include <c10/util/Exception.h>

#include "hops.hpp"
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

CompletionQueue::Token::~Token() {
  // Last reference dropped on a C++ thread (the completion thread or a
  // waiter; the Go callback hands its reference on to the queue).
  if (adopted || isForkedChild()) {
    return;
  }
  try {
    lib().requestFree(request);
  } catch (const std::exception& e) {
    TORCH_WARN("gonccl: freeing a request failed: ", e.what());
  }
}

void CompletionQueue::track(
    c10::intrusive_ptr<GoncclWork> work,
    goncclRequest_t req,
    bool waiterMayComplete) {
  const Library& L = lib();
  auto token = std::make_shared<Token>();
  token->queue = shared_from_this();
  token->work = std::move(work);
  token->request = req;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++pending_;
  }
  if (waiterMayComplete) {
    // Cleared by GoncclWork::complete, which breaks the Work -> token cycle.
    token->work->setInlineCompletion(
        [token](std::chrono::milliseconds timeout) {
          return completeInline(token, timeout);
        });
  }
  // The callback may run right here, on this thread, if the op already ended.
  auto* arg = new TokenPtr(token);
  goncclResult_t rc =
      L.requestOnComplete(req, &CompletionQueue::onComplete, arg);
  if (rc != goncclSuccess) {
    delete arg;
    // No callback will come: wait here (the op's own deadline bounds this),
    // then hand the result to the thread as the callback would have.
    token->result = L.requestWait(req, -1);
    push(std::move(token));
  }
}

void CompletionQueue::onComplete(void* arg, goncclResult_t result) {
  auto* held = static_cast<TokenPtr*>(arg);
  TokenPtr token = std::move(*held);
  delete held;
  token->result = result;
  token->callbackAt = hops::now();
  // A token its waiter has completed already holds no Work any more, only the
  // request to free: no need to wake a thread for it at once (see push).
  const bool urgent = !token->claimed.load();
  Token& t = *token;
  t.queue->push(std::move(token), urgent);
}

void CompletionQueue::push(TokenPtr token, bool urgent) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // After stop() nothing pops this token; it (and the Work) is leaked rather
    // than completed on a Go thread. Only a callback arriving after the owner
    // gave up waiting for it gets here.
    ready_.push_back(std::move(token));
    // Tokens that are not urgent are freed in batches, by the next wake-up.
    urgent = urgent || ready_.size() >= kLazyBatch;
    if (urgent && idle_ == 0 && !stopping_ && threads_.size() < kMaxThreads) {
      spawnLocked();
    }
  }
  if (urgent) {
    ready_cv_.notify_one();
  }
}

bool CompletionQueue::completeInline(
    const TokenPtr& token, std::chrono::milliseconds timeout) {
  if (token->claimed.load()) {
    return false;
  }
  const Library& L = lib();
  // Without a deadline of its own, off Python's signal thread, the wait is
  // unbounded: Go may then run the op on this thread (core/inline.go), the op's
  // own deadline bounding it. Otherwise one slice: a long op goes back to
  // wait()'s own loop, which looks for Python signals (Ctrl-C) between slices.
  constexpr int64_t kSliceMs = 100;
  int64_t ms = kSliceMs;
  if (timeout.count() == 0 && !onSignalThread()) {
    ms = -1;
  } else if (timeout.count() > 0 && timeout.count() < kSliceMs) {
    ms = static_cast<int64_t>(timeout.count());
  }
  goncclResult_t rc = L.requestWait(token->request, ms);
  if (rc == goncclTimeout) {
    // Either the wait's slice passed or the op itself failed with a timeout.
    int done = 0;
    goncclResult_t trc = L.requestTest(token->request, &done);
    if (!done) {
      return false;
    }
    rc = trc;
  }
  const int64_t finished = hops::now();
  if (token->claimed.exchange(true)) {
    return false;  // the completion thread got there first
  }
  process(*token, rc);
  // The Work (and its tensors) must not wait for the token's batch (see push).
  token->work.reset();
  token->queue->settled();
  hops::since(hops::kInline, finished);
  return true;
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
    TokenPtr token = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    const bool mine = processOnce(*token);
    token.reset();
    lock.lock();
    if (mine) {
      --pending_;
      drained_cv_.notify_all();
    }
    ++idle_;
  }
}

bool CompletionQueue::processOnce(Token& token) {
  const int64_t picked =
      hops::record(hops::kToThread, token.callbackAt, hops::now());
  if (token.claimed.exchange(true)) {
    return false;  // its waiter completed it
  }
  process(token, token.result);
  hops::since(hops::kComplete, picked);
  return true;
}

void CompletionQueue::settled() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --pending_;
  }
  drained_cv_.notify_all();
}

void CompletionQueue::process(Token& token, goncclResult_t result) {
  GoncclWork& work = *token.work;
  std::string error;
  try {
    const Library& L = lib();
    if (result != goncclSuccess) {
      work.noteResult(result);
      error = opFailure(
                  work.opName(),
                  result,
                  L.requestErrorString(token.request),
                  work.timeout()) +
              work.errorNote();
    } else if (work.recordsSource()) {
      int peer = -1;
      if (L.requestSource(token.request, &peer) == goncclSuccess) {
        work.setSourceRank(peer);
      }
    }
    if (work.stream()) {
      // wait() still needs it: goncclRequestWaitStream. The Work frees it.
      work.adoptRequest(token.request);
      token.adopted = true;
    }
  } catch (const std::exception& e) {
    if (error.empty()) {
      const std::string what = e.what();
      // opFailure's messages carry their own prefix; others get one.
      error =
          what.rfind("gonccl", 0) == 0 || what.rfind("Timed out", 0) == 0
              ? what
              : std::string("gonccl: ") + work.opName() + " failed: " + what;
    }
  }
  work.partDone(error);
}

}  // namespace gonccl
