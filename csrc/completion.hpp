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
// Completing a Work runs the callbacks attached to its future, and some block
// on another op of the same backend (PowerSGD's DDP hook waits on an
// all_reduce inside a then() callback). So a token that arrives while every
// completion thread is busy starts another one (up to kMaxThreads): a blocked
// callback never holds up the completion it waits for.
#pragma once

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
  // finished. Never throws once the token is registered.
  void track(c10::intrusive_ptr<GoncclWork> work, goncclRequest_t request);

  // Number of tracked Works not completed yet.
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
    goncclResult_t result;
  };

  CompletionQueue() = default;

  // The goncclCallback_t. Runs on a Go thread, or on the issuing thread if the
  // request had already finished.
  static void onComplete(void* arg, goncclResult_t result);
  void push(Token* token);
  void run();
  static void process(Token* token);

  std::mutex mu_;
  std::condition_variable ready_cv_;
  std::condition_variable drained_cv_;
  std::deque<Token*> ready_;
  size_t pending_ = 0;
  bool stopping_ = false;
  static constexpr size_t kMaxThreads = 8;
  // Starts a thread; mu_ must be held.
  void spawnLocked();
  size_t idle_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace gonccl
