// One long-lived thread that runs submitted jobs in order (a drafter worker: one device, one replica).
// Jobs' exceptions reach the caller through the returned future; the destructor finishes queued jobs
// and joins.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace dflash::train {

class WorkerThread {
 public:
  explicit WorkerThread(std::function<void()> on_start = {}) {
    thread_ = std::thread([this, on_start] {
      if (on_start) on_start();
      for (;;) {
        std::function<void()> job;
        {
          std::unique_lock<std::mutex> l(m_);
          cv_.wait(l, [&] { return done_ || !jobs_.empty(); });
          if (jobs_.empty()) return;
          job = std::move(jobs_.front());
          jobs_.pop_front();
        }
        job();
      }
    });
  }
  ~WorkerThread() {
    {
      std::lock_guard<std::mutex> l(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  WorkerThread(const WorkerThread&) = delete;
  WorkerThread& operator=(const WorkerThread&) = delete;

  template <typename F>
  auto submit(F f) -> std::future<decltype(f())> {
    auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::move(f));
    auto fut = task->get_future();
    {
      std::lock_guard<std::mutex> l(m_);
      jobs_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace dflash::train
