// asyncband/runtime/thread_pool.hpp: a plain multi-threaded scheduler for coroutines.
#pragma once

#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "../scheduler.hpp"
#include "task.hpp"

namespace asyncband::runtime {

/// A fixed set of worker threads sharing one FIFO of ready coroutines.
///
/// schedule(h) queues h and returns at once; some worker resumes it later. Destruction runs
/// what is queued, then joins the workers: destroy the pool only when no coroutine will be
/// scheduled on it any more.
class thread_pool {
 public:
  explicit thread_pool(std::size_t threads = std::thread::hardware_concurrency()) {
    if (threads == 0) threads = 1;
    workers_.reserve(threads);
    for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  ~thread_pool() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  /// The scheduler concept: queue h to be resumed on a worker.
  void schedule(std::coroutine_handle<> h) noexcept {
    // Notified under the lock: once h is queued, a worker may run it and its owner destroy the
    // pool, which cannot finish before this call releases the lock.
    const std::lock_guard lock(mutex_);
    ready_.push_back(h);
    ready_cv_.notify_one();
  }

  /// `co_await pool.schedule();` moves the awaiting coroutine onto the pool (and makes the pool
  /// the scheduler of an asyncband task).
  [[nodiscard]] schedule_on schedule() noexcept { return schedule_on(ref()); }

  [[nodiscard]] scheduler_ref ref() noexcept { return scheduler_ref::of(*this); }
  [[nodiscard]] std::size_t thread_count() const noexcept { return workers_.size(); }

  /// True on one of this pool's worker threads.
  [[nodiscard]] bool on_worker_thread() const noexcept { return current_pool() == this; }

 private:
  static const thread_pool*& current_pool() noexcept {
    thread_local const thread_pool* pool = nullptr;
    return pool;
  }

  void work() {
    current_pool() = this;
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
      if (ready_.empty()) return;  // stopping, and nothing left to run
      const auto h = ready_.front();
      ready_.pop_front();
      lock.unlock();
      h.resume();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::deque<std::coroutine_handle<>> ready_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace asyncband::runtime
