// completion.hpp: hands finished gonccl requests from Go's threads to C++
// threads of the backend (one, more while it is busy), which complete the
// Works.
//
//   issuing thread              Go thread                 completion thread
//   --------------              ---------                 -----------------
//   goncclXAsync -> request
//   track(work):
//     goncclRequestOnComplete --> onComplete(token, rc):
//                                   push token, notify --> pop token
//                                                          error string, free
//                                                          request
//                                                          work->partDone():
//                                                          (last part)
//                                                          copy-out, future,
//                                                          finish()
//
// Nothing torch- or Python-related ever runs on a Go thread: the callback only
// appends to a queue. A token owns a reference to its Work (so the tensors stay
// alive while Go uses them) and to the queue (so a callback can never touch a
// freed queue).
//
// A waiter may take the completion thread's place (the latency path of a
// blocking op, see GoncclWork::wait): for an op of one request on host memory,
// wait() waits for the request in Go itself (polling briefly there before it
// sleeps) and completes the Work on its own thread, saving the hand-over to the
// completion thread and that thread's wake-up of the waiter. The token is
// shared by the callback, the queue and the waiter; whoever claims it first
// (Token::claimed) processes it, and the request is freed with the token, so
// the waiter never asks Go about a freed request.
//
// Completing a Work runs the callbacks attached to its future, and some block
// on another op of the same backend (PowerSGD's DDP hook waits on an
// all_reduce inside a then() callback). So a token that arrives while every
// completion thread is busy starts another one (up to kMaxThreads): a blocked
// callback never holds up the completion it waits for.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "work.hpp"

namespace gonccl {

class CompletionQueue : public std::enable_shared_from_this<CompletionQueue> {
 public:
  // Creates the queue and starts its first thread.
  static std::shared_ptr<CompletionQueue> create();
  ~CompletionQueue();

  // Takes over request, one part of work: the part is reported done
  // (GoncclWork::partDone) on the queue's thread when Go reports the request
  // finished. With waiterMayComplete (an op of one request on host memory), a
  // waiter may do that itself first (GoncclWork::completeInline). Never throws
  // once the token is registered.
  void track(
      c10::intrusive_ptr<GoncclWork> work,
      goncclRequest_t request,
      bool waiterMayComplete = false);

  // Number of tracked Works not completed yet (tokens a waiter completed and
  // left for a later batch to free do not count).
  size_t pending();

  // Waits until no tracked Work is pending or timeout passes; true if drained.
  bool drain(std::chrono::milliseconds timeout);

  // Completes what is queued, then stops and joins the threads. Idempotent.
  // Must not be called in a forked child (the threads do not exist there).
  void stop();

 private:
  struct Token {
    std::shared_ptr<CompletionQueue> queue;
    c10::intrusive_ptr<GoncclWork> work;
    goncclRequest_t request;
    goncclResult_t result = goncclSuccess;
    std::atomic<bool> claimed{false};  // processed (or being) by someone
    bool adopted = false;    // the Work owns the request now (CUDA ops)
    int64_t callbackAt = 0;  // hop timing: Go's callback ran
    ~Token();
  };
  using TokenPtr = std::shared_ptr<Token>;

  CompletionQueue() = default;

  // The goncclCallback_t. Runs on a Go thread, or on the issuing thread if the
  // request had already finished. arg is a heap TokenPtr it takes over.
  static void onComplete(void* arg, goncclResult_t result);
  // urgent: wake a thread now (else when kLazyBatch tokens wait).
  void push(TokenPtr token, bool urgent = true);
  void run();
  // Processes token if nobody has claimed it yet; true if it did.
  static bool processOnce(Token& token);
  // A waiter completed one of the pending Works (completeInline).
  void settled();
  static void process(Token& token, goncclResult_t result);
  // The waiter's side (see above): true if it completed the Work.
  static bool completeInline(
      const TokenPtr& token, std::chrono::milliseconds timeout);

  std::mutex mu_;
  std::condition_variable ready_cv_;
  std::condition_variable drained_cv_;
  std::deque<TokenPtr> ready_;
  size_t pending_ = 0;
  bool stopping_ = false;
  static constexpr size_t kMaxThreads = 8;
  static constexpr size_t kLazyBatch = 64;
  // Starts a thread; mu_ must be held.
  void spawnLocked();
  size_t idle_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace gonccl
