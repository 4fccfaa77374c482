// SPDX-License-Identifier: Apache-2.0
// asyncband/runtime/thread_pool.hpp: a plain multi-threaded scheduler for coroutines.
#pragma once

#include "../version.hpp"  // first: a build below C++20 stops there, with one message

#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../scheduler.hpp"
#include "task.hpp"

namespace asyncband::runtime {

#ifdef ASYNCBAND_TESTING
namespace detail {
/// Test seam (tests define ASYNCBAND_TESTING): while non-zero, counts down at every worker start
/// a thread_pool constructor makes on this thread, and the start that brings it to zero throws
/// std::system_error instead, as std::thread's constructor does when the system has no thread
/// left. Set it to k to fail the k-th start from now.
inline thread_local std::size_t fail_worker_start_countdown = 0;
}  // namespace detail
#endif

/// A fixed set of worker threads sharing one FIFO of ready coroutines, plus a one-entry "next"
/// slot per worker.
///
/// schedule(h) queues h and returns at once; some worker resumes it later. Called on one of the
/// pool's workers, it puts h in that worker's next slot instead (the slot's previous occupant
/// moves to the shared FIFO), so h runs on this worker as soon as the current coroutine
/// suspends or ends: a hand-off (a mutex unlock, a notify) then costs no cross-thread wake-up,
/// and the woken coroutine finds its data in this core's cache (tokio's LIFO slot). At most
/// `slot_budget` slot runs in a row; then, if the FIFO holds anything, the slot goes to its back
/// and the worker takes its front, so that queued work is not starved.
///
/// The slot is not stolen (stealing would put an atomic exchange on every slot run). Instead a
/// worker flushes it before it blocks: each worker installs asyncband's blocking hook
/// (set_blocking_hook), which the core calls right before it blocks a thread (block_on, every
/// *_blocking and *_timeout wait, a phaser's wait_blocking), and which moves the slot's coroutine
/// to the shared FIFO and wakes an idle worker. So a pool coroutine that wakes another and then
/// blocks its thread until that one has run does not deadlock while another worker is free; the
/// hand-off's fast path is unchanged, and a wait that does not block costs nothing more. (A
/// 1-worker pool still cannot run anything while its worker blocks.)
///
/// Destruction runs what is queued, then joins the workers: destroy the pool only when no
/// coroutine will be scheduled on it any more.
class thread_pool {
 public:
  /// Starts `threads` workers (one if 0). If starting one throws (std::system_error: the system
  /// has no thread left), the workers already started are stopped and joined, and the exception
  /// propagates.
  explicit thread_pool(std::size_t threads = std::thread::hardware_concurrency()) {
    // Every member a worker touches is constructed before this body starts the first one;
    // workers_, which the body fills, is read by no worker.
    if (threads == 0) threads = 1;
    workers_.reserve(threads);
    try {
      for (std::size_t i = 0; i < threads; ++i) workers_.push_back(start_worker());
    } catch (...) {
      stop_and_join();  // a joinable std::thread destroyed with workers_ would terminate
      throw;
    }
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  ~thread_pool() { stop_and_join(); }

  /// The scheduler concept: queue h to be resumed on a worker.
  void schedule(std::coroutine_handle<> h) noexcept {
    if (worker_state& me = this_worker(); me.pool == this) {
      h = std::exchange(me.next, h);
      if (!h) return;
    }
    push_shared(h);
  }

  /// `co_await pool.schedule();` moves the awaiting coroutine onto the pool (and makes the pool
  /// the scheduler of an asyncband task).
  /// It goes through the shared FIFO, not the current worker's next slot, so that an idle worker
  /// can start it at once rather than after the current coroutine suspends.
  [[nodiscard]] schedule_on schedule() noexcept {
    return schedule_on(ref(), scheduler_ref::of(shared_fifo_));
  }

  /// This pool as a scheduler_ref (a wake-up from a worker goes to that worker's next slot).
  [[nodiscard]] scheduler_ref ref() noexcept { return scheduler_ref::of(*this); }
  /// The number of worker threads.
  [[nodiscard]] std::size_t thread_count() const noexcept { return workers_.size(); }

  /// True on one of this pool's worker threads.
  [[nodiscard]] bool on_worker_thread() const noexcept { return current_pool() == this; }

 private:
  static constexpr unsigned slot_budget = 64;

  /// Lets the workers finish what is queued, then joins them.
  void stop_and_join() noexcept {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  std::thread start_worker() {
#ifdef ASYNCBAND_TESTING
    if (detail::fail_worker_start_countdown != 0 && --detail::fail_worker_start_countdown == 0) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "thread_pool: worker start failed (test seam)");
    }
#endif
    return std::thread([this] { work(); });
  }

  /// The pool's shared FIFO as a scheduler of its own.
  struct shared_fifo {
    thread_pool* pool;
    void schedule(std::coroutine_handle<> h) noexcept { pool->push_shared(h); }
  };

  struct worker_state {
    thread_pool* pool = nullptr;
    std::coroutine_handle<> next{};
    unsigned slot_runs = 0;  // consecutive runs from the slot
  };
  static worker_state& this_worker() noexcept {
    thread_local worker_state state;
    return state;
  }
  static const thread_pool* current_pool() noexcept { return this_worker().pool; }

  void push_shared(std::coroutine_handle<> h) noexcept {
    // Notified under the lock: once h is queued, a worker may run it and its owner destroy the
    // pool, which cannot finish before this call releases the lock.
    const std::lock_guard lock(mutex_);
    ready_.push_back(h);
    if (sleeping_ != 0) ready_cv_.notify_one();
  }

  /// The next coroutine to run: the slot's (within budget), else the shared FIFO's; a null
  /// handle once stopping with nothing left.
  std::coroutine_handle<> next_ready(worker_state& me) {
    if (me.next) {
      if (++me.slot_runs <= slot_budget) return std::exchange(me.next, {});
      me.slot_runs = 0;
      const std::lock_guard lock(mutex_);
      // Out of budget: the slot yields to the FIFO's oldest, if anything is queued there.
      if (ready_.empty()) return std::exchange(me.next, {});
      ready_.push_back(std::exchange(me.next, {}));
      const auto h = ready_.front();
      ready_.pop_front();
      return h;
    }
    me.slot_runs = 0;
    std::unique_lock lock(mutex_);
    ++sleeping_;
    ready_cv_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
    --sleeping_;
    if (ready_.empty()) return {};  // stopping, and nothing left to run
    const auto h = ready_.front();
    ready_.pop_front();
    return h;
  }

  void work() {
    worker_state& me = this_worker();
    me.pool = this;
    const blocking_hook previous = set_blocking_hook({&flush_slot, &me});
    while (const auto h = next_ready(me)) h.resume();
    set_blocking_hook(previous);
    me.pool = nullptr;
  }

  /// The workers' blocking hook: a worker about to block hands its next slot to the shared
  /// FIFO (waking an idle worker), since it will not run it before it unblocks.
  static void flush_slot(void* worker) noexcept {
    worker_state& me = *static_cast<worker_state*>(worker);
    if (const auto h = std::exchange(me.next, {})) me.pool->push_shared(h);
  }

  std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::deque<std::coroutine_handle<>> ready_;
  shared_fifo shared_fifo_{this};
  bool stopping_ = false;
  unsigned sleeping_ = 0;  // workers inside ready_cv_.wait (guarded by mutex_)
  std::vector<std::thread> workers_;
};

}  // namespace asyncband::runtime
