// A bounded FIFO between one producer and one consumer thread: push blocks while full (back-pressure),
// pop blocks while empty. close() wakes both sides: push then returns false, pop returns nothing once
// drained. A producer failure travels as an exception_ptr and is rethrown by pop(), so no side hangs.
#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>

namespace dflash::util {

template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}

  bool push(T item) {
    std::unique_lock<std::mutex> l(m_);
    ++blocked_pushers_;
    not_full_.wait(l, [&] { return closed_ || q_.size() < capacity_; });
    --blocked_pushers_;
    if (closed_) return false;
    q_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  // Blocks until an item, an error (rethrown) or close (nullopt).
  std::optional<T> pop() {
    std::unique_lock<std::mutex> l(m_);
    not_empty_.wait(l, [&] { return closed_ || error_ || !q_.empty(); });
    if (!q_.empty()) {
      T item = std::move(q_.front());
      q_.pop_front();
      not_full_.notify_one();
      return item;
    }
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> l(m_);
    error_ = e;
    not_empty_.notify_all();
    not_full_.notify_all();
  }
  // Threads inside push() (waiting for room, or about to find it), so tests can wait for a blocked producer.
  int pushers() {
    std::lock_guard<std::mutex> l(m_);
    return blocked_pushers_;
  }
  void close() {
    std::lock_guard<std::mutex> l(m_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex m_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> q_;
  bool closed_ = false;
  int blocked_pushers_ = 0;
  std::exception_ptr error_;
};

}  // namespace dflash::util
