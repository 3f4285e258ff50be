// completion.hpp: hands finished gonccl requests from Go's threads to one C++
// thread per backend, which completes the Works.
//
//   issuing thread              Go thread                 completion thread
//   --------------              ---------                 -----------------
//   goncclXAsync -> request
//   track(work):
//     goncclRequestOnComplete --> onComplete(token, rc):
//                                   push token, notify --> pop token
//                                                          error string, free
//                                                          request
//                                                          work->complete():
//                                                          copy-out, future,
//                                                          finish()
//
// Nothing torch- or Python-related ever runs on a Go thread: the callback only
// appends to a queue. A token owns a reference to its Work (so the tensors stay
// alive while Go uses them) and to the queue (so a callback can never touch a
// freed queue).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "work.hpp"

namespace gonccl {

class CompletionQueue : public std::enable_shared_from_this<CompletionQueue> {
 public:
  // Creates the queue and starts its thread.
  static std::shared_ptr<CompletionQueue> create();
  ~CompletionQueue();

  // Takes over work->request: work is completed on the queue's thread when Go
  // reports the request finished. Never throws once the token is registered.
  void track(c10::intrusive_ptr<GoncclWork> work);

  // Number of tracked Works not completed yet.
  size_t pending();

  // Waits until no tracked Work is pending or timeout passes; true if drained.
  bool drain(std::chrono::milliseconds timeout);

  // Completes what is queued, then stops and joins the thread. Idempotent.
  // Must not be called in a forked child (the thread does not exist there).
  void stop();

 private:
  struct Token {
    std::shared_ptr<CompletionQueue> queue;
    c10::intrusive_ptr<GoncclWork> work;
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
  std::thread thread_;
};

}  // namespace gonccl
