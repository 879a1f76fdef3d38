// Parallel work whose results are consumed in order: R lanes (e.g. one per model replica), each a chain of S
// stage threads (e.g. one per pipeline stage). Lane r makes the items r, r + R, r + 2R, ... below `count`:
// stage 0 starts item i, stage s hands it to stage s + 1 through a queue of one, so a lane has up to S items in
// flight, one per stage, and every stage works at once. next() returns the items in index order (item i comes
// from lane i % R), so the result does not depend on R or S as long as `stage` computes item i the same way on
// every lane. A stage's exception reaches the consumer (next() rethrows it) and ends the lane.
// Busy time: each thread counts the seconds it spends inside `stage` (not waiting on a queue), so a consumer can
// tell which side of a hand-off is the bottleneck.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bounded_queue.h"

namespace dflash::util {

// Seconds a thread spent working; readable from other threads while it works (the running interval counts).
class BusyClock {
 public:
  void start() { since_ns_.store(now_ns(), std::memory_order_relaxed); }
  void stop() {
    const int64_t t = now_ns(), since = since_ns_.exchange(-1, std::memory_order_relaxed);
    if (since >= 0) busy_ns_.fetch_add(t - since, std::memory_order_relaxed);
  }
  double seconds() const {
    const int64_t since = since_ns_.load(std::memory_order_relaxed);
    const int64_t running = since >= 0 ? now_ns() - since : 0;
    return double(busy_ns_.load(std::memory_order_relaxed) + std::max<int64_t>(0, running)) * 1e-9;
  }

 private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::atomic<int64_t> busy_ns_{0}, since_ns_{-1};
};

template <class T>
class OrderedLanes {
 public:
  // Runs stage `stage` of item `index` on lane `lane` (stage 0 gets a default-constructed T).
  using Stage = std::function<void(int lane, int stage, int64_t index, T& item)>;
  // Called first on each thread (thread-local settings such as intra-op threads or grad mode).
  using ThreadStart = std::function<void(int lane, int stage)>;

  // `depth`: finished items each lane may hold ahead of the consumer (>= 1).
  OrderedLanes(int lanes, int stages, int64_t count, size_t depth, Stage stage, ThreadStart start = {})
      : lanes_(lanes), stages_(stages), count_(count), stage_(std::move(stage)), start_(std::move(start)),
        clocks_(new BusyClock[size_t(lanes) * size_t(stages)]) {
    if (lanes < 1 || stages < 1 || count < 0 || depth < 1)
      throw std::invalid_argument("OrderedLanes: need lanes, stages and depth >= 1 and count >= 0");
    for (int r = 0; r < lanes; ++r)
      for (int s = 0; s < stages; ++s)  // queue (r, s) is stage s's output: a hand-off, or the lane's results
        queues_.push_back(std::make_unique<Queue>(s + 1 < stages ? 1 : depth));
    for (int r = 0; r < lanes; ++r)
      for (int s = 0; s < stages; ++s) threads_.emplace_back([this, r, s] { run(r, s); });
  }
  ~OrderedLanes() { stop(); }
  OrderedLanes(const OrderedLanes&) = delete;
  OrderedLanes& operator=(const OrderedLanes&) = delete;

  // The next item in index order; nullopt after the last one or after stop(). Rethrows a stage's exception.
  std::optional<T> next() {
    if (next_ >= count_ || stopping_) return std::nullopt;
    auto got = queue(int(next_ % lanes_), stages_ - 1).pop();
    if (!got) return std::nullopt;
    if (got->first != next_) throw std::logic_error("OrderedLanes: items out of order");
    ++next_;
    return std::move(got->second);
  }

  // Ends every thread (items in progress finish first) and joins them; next() then returns nullopt.
  void stop() {
    stopping_ = true;
    for (auto& q : queues_) q->close();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  int lanes() const { return lanes_; }
  int stages() const { return stages_; }
  // Seconds thread (lane, stage) has spent inside `stage` so far.
  double busy_seconds(int lane, int stage) const { return clocks_[size_t(lane * stages_ + stage)].seconds(); }

 private:
  using Queue = BoundedQueue<std::pair<int64_t, T>>;
  Queue& queue(int lane, int stage) { return *queues_[size_t(lane * stages_ + stage)]; }

  void run(int lane, int stage) {
    Queue& out = queue(lane, stage);
    try {
      if (start_) start_(lane, stage);
      BusyClock& clock = clocks_[size_t(lane * stages_ + stage)];
      for (int64_t index = lane; index < count_ && !stopping_; index += lanes_) {
        T item;
        if (stage > 0) {
          auto in = queue(lane, stage - 1).pop();  // rethrows the previous stage's failure
          if (!in) break;
          item = std::move(in->second);
        }
        clock.start();
        try {
          stage_(lane, stage, index, item);
        } catch (...) {
          clock.stop();
          throw;
        }
        clock.stop();
        if (!out.push({index, std::move(item)})) break;
      }
      out.close();
    } catch (...) {
      out.fail(std::current_exception());
      if (stage > 0) queue(lane, stage - 1).close();  // the previous stage must not wait for room forever
    }
  }

  const int lanes_, stages_;
  const int64_t count_;
  Stage stage_;
  ThreadStart start_;
  std::unique_ptr<BusyClock[]> clocks_;
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  int64_t next_ = 0;  // consumer side only
};

}  // namespace dflash::util
