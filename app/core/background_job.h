// BackgroundJob<Result>: one piece of work on a worker thread that the UI polls: busy(), the
// finished result handed over once by take(), and cancel(), which the work sees through
// cancelled() (the jobs check it from their progress callbacks and stop by throwing). Derived
// jobs call cancel() in their own destructor, before the members their work uses are destroyed.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace kvscope::ui {

template <class Result>
class BackgroundJob {
 public:
  BackgroundJob() = default;
  ~BackgroundJob() { cancel(); }
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  bool busy() const { return busy_.load(); }
  // The finished result (once), or null.
  std::shared_ptr<Result> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::move(done_);
  }
  // Stops the work (its result is dropped) and joins the worker.
  void cancel() {
    cancel_ = true;
    if (worker_.joinable()) worker_.join();
    cancel_ = false;
    busy_ = false;
  }
  // Asks the work to stop without waiting for it (the UI thread never blocks on a long step);
  // its result is dropped, busy() turns false once it has stopped, and launch() may then start
  // the next.
  void request_cancel() { cancel_ = true; }
  void wait() {  // tests
    if (worker_.joinable()) worker_.join();
  }

 protected:
  // Runs `work` on a new worker (after the previous one ended); its result, null when it was
  // cancelled, is what take() hands over. False (and nothing started) while busy.
  bool launch(std::function<std::shared_ptr<Result>()> work) {
    if (busy_.load()) return false;
    if (worker_.joinable()) worker_.join();
    cancel_ = false;  // a request_cancel() meant the work before
    busy_ = true;
    worker_ = std::thread([this, work = std::move(work)] {
      std::shared_ptr<Result> result = work();
      if (result) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_ = std::move(result);
      }
      busy_ = false;
    });
    return true;
  }
  bool cancelled() const { return cancel_.load(); }

 private:
  std::thread worker_;
  std::atomic<bool> busy_{false};
  std::atomic<bool> cancel_{false};
  std::mutex mutex_;
  std::shared_ptr<Result> done_;
};

}  // namespace kvscope::ui
