// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/any_engine.hpp: the protocol behind asyncband::when_any: publishing the
// branches, deciding the one winner, cancelling the others, and resuming the awaiting coroutine
// once every branch is settled.
//
// - The winner is decided by one commit_point (detail/waiter.hpp). A waker about to grant a
//   branch's node anything (a permit, a lock, a capacity unit) commits it first, under its own
//   lock; a resolution that grants nothing commits when its callback runs. The first commit
//   wins; every other branch is a loser: wakers skip it, and it is cancelled.
// - Units: the setup (await_suspend) holds one, and every published branch holds one until it is
//   resolved. The awaiting coroutine resumes when the last unit goes, so every node is settled
//   (resolved, nothing of it left in a primitive) before the frame can go on.
// - Sweep: the losers still pending are cancelled by whoever comes second of "a winner is
//   decided" (won_bit) and "the setup has published all it will" (setup_done_bit); so no branch
//   is published after the sweep passed it. The sweeper holds a unit throughout.
// - A stop token of the when_any itself is one more contender for the commit point: if it wins,
//   every branch loses and the when_any ends cancelled.
#pragma once

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <new>
#include <thread>

#include "../stop_token.hpp"
#include "atomic.hpp"
#include "waiter.hpp"

namespace asyncband::detail {

inline constexpr std::size_t no_branch = static_cast<std::size_t>(-1);

class any_engine_base;

/// One branch's callback context: the resume target of its node is (on_resolved, &branch).
struct any_branch {
  any_engine_base* engine = nullptr;
  std::size_t index = 0;
  /// Its wait is over and nothing of it is left in its primitive (resolved, or completed during
  /// its publication): the sweep and abandon() leave it alone, since its primitive may already
  /// be gone (a waiter its completion resumed may have destroyed it: last one out).
  asyncband::detail::atomic<bool> settled{false};
};

/// What the protocol needs of the awaiter that owns the branches, type-erased so that the engine
/// is written once for the variadic and the dynamic forms.
struct any_branch_table {
  bool (*publish)(void* owner, std::size_t i, resume_target target, commit_point& commit) noexcept;
  waiter& (*node)(void* owner, std::size_t i) noexcept;
  void (*cancel)(void* owner, std::size_t i) noexcept;
};

class any_engine_base {
 public:
  any_engine_base(const any_branch_table& table, void* owner, any_branch* branches,
                  std::size_t count) noexcept
      : table_(&table), owner_(owner), branches_(branches), count_(count) {}
  any_engine_base(const any_engine_base&) = delete;
  any_engine_base& operator=(const any_engine_base&) = delete;
  ~any_engine_base() = default;

  /// The branch that won; no_branch if the when_any's own stop token won. Read after resumption.
  [[nodiscard]] std::size_t winner() const noexcept { return winner_; }
  /// Branches published (their waits started), a prefix of the list. Read after resumption.
  [[nodiscard]] std::size_t published() const noexcept { return published_; }

  /// await_suspend: publishes the branches in order until one wins. Returns true if the coroutine
  /// stays suspended (the last unit's release resumes it through `parent`), false if every
  /// branch is already settled. Out of line, and nothing touches the frame after the release.
  [[gnu::noinline]] bool start(resume_target parent, const asyncband::stop_token& stop) noexcept {
    parent_ = parent;
    if (stop.stop_possible()) {
      ::new (static_cast<void*>(stop_storage_)) stop_callback_type(stop, on_stop{this});
      stop_armed_ = true;
    }
    for (std::size_t i = 0; i < count_; ++i) {
      if (commit_.winner() != nullptr) break;  // decided: publish nothing more
      any_branch& b = branches_[i];
      b.engine = this;
      b.index = i;
      b.settled.store(false, std::memory_order_relaxed);
      state_.fetch_add(unit, std::memory_order_relaxed);  // the branch's, before it can resolve
      published_ = i + 1;
      if (table_->publish(owner_, i, target_for(b), commit_)) continue;
      // Completed during its publication: settled here, with no callback.
      b.settled.store(true, std::memory_order_relaxed);
      state_.fetch_sub(unit, std::memory_order_relaxed);  // never the last: the setup holds one
      if (commit_.try_commit(&table_->node(owner_, i))) {
        winner_ = i;
        state_.fetch_or(won_bit, std::memory_order_acq_rel);
      }
    }
    wake_collector wakeups;  // what the sweep's cancellations wake runs after our release
    if ((state_.fetch_or(setup_done_bit, std::memory_order_acq_rel) & won_bit) != 0) sweep();
    wakeups.stop_collecting();
    const bool last = release_unit_from_setup();
    wakeups.resolve();
    return !last;
  }

  /// The awaiter's destructor, for a coroutine destroyed while suspended in the when_any: makes
  /// every branch a loser, cancels the pending ones and waits until all are settled. The caller
  /// then passes on what each was granted. Undefined if the resumption is already in flight.
  void abandon() noexcept {
    disarm_stop();  // waits for a stop callback running elsewhere
    [[maybe_unused]] const std::uint32_t before = state_.fetch_add(unit, std::memory_order_acq_rel);
    assert(before >= unit && "asyncband::when_any destroyed while its resumption was in flight");
    commit_.try_commit(this);  // every branch loses from here: wakers skip them
    cancel_unsettled(no_branch);
    // A branch claimed by a waker further down this very stack (a coroutine it resumed inline
    // is destroying this one) would be resolved only after we return: resolve it now instead.
    for (std::size_t i = 0; i < published_; ++i) {
      waiter& node = table_->node(owner_, i);
      if (wake_batch::withdraw(node)) node.resolve();
    }
    while ((state_.load(std::memory_order_acquire) & ~flag_bits) != unit) yield_thread();
    winner_ = no_branch;
  }

  /// await_resume: drops the stop callback (waiting for one running elsewhere).
  void disarm_stop() noexcept {
    if (!stop_armed_) return;
    stop_armed_ = false;
    std::launder(reinterpret_cast<stop_callback_type*>(stop_storage_))->~stop_callback_type();
  }

 private:
  struct on_stop {
    any_engine_base* engine;
    void operator()() const noexcept { engine->stop_requested(); }
  };
  using stop_callback_type = asyncband::stop_callback<on_stop>;

  static constexpr std::uint32_t won_bit = 1;
  static constexpr std::uint32_t setup_done_bit = 2;
  static constexpr std::uint32_t flag_bits = won_bit | setup_done_bit;
  static constexpr std::uint32_t unit = 4;

  resume_target target_for(any_branch& b) const noexcept {
    // A branch whose settling may resume the coroutine inline runs waiter code on the resolving
    // thread: the core must know, to keep chains of inline resumptions flat.
    return parent_.runs_inline() ? resume_target::continuation(&on_resolved, &b)
                                 : resume_target(&on_resolved, &b);
  }

  static void on_resolved(void* context) noexcept {
    const any_branch& b = *static_cast<any_branch*>(context);
    b.engine->resolved(b.index);
  }

  /// A branch's node was resolved. The winner sweeps the losers while it holds its unit; what
  /// their cancellations wake (a permit passed on serves the next waiter) runs only after its
  /// release: code resumed there may destroy this coroutine, which must not wait for itself.
  void resolved(std::size_t i) noexcept {
    branches_[i].settled.store(true, std::memory_order_release);
    wake_collector wakeups;
    if (commit_.try_commit(&table_->node(owner_, i))) {
      winner_ = i;
      announce_won();
    }
    wakeups.stop_collecting();
    release_unit();
    wakeups.resolve();
  }

  /// The when_any's own stop request: contends for the commit point like a branch, holding a
  /// unit of its own meanwhile (taken first: if none is left, the when_any is over already).
  void stop_requested() noexcept {
    if ((state_.fetch_add(unit, std::memory_order_acq_rel) & ~flag_bits) == 0) {
      state_.fetch_sub(unit, std::memory_order_relaxed);  // over already (await_resume waits for us)
      return;
    }
    wake_collector wakeups;
    if (commit_.try_commit(this)) {
      winner_ = no_branch;
      announce_won();
    }
    wakeups.stop_collecting();
    release_unit();
    wakeups.resolve();
  }

  /// After a commit: the second of (won, setup done) sweeps.
  void announce_won() noexcept {
    if ((state_.fetch_or(won_bit, std::memory_order_acq_rel) & setup_done_bit) != 0) sweep();
  }

  /// Cancels every published branch but the winner.
  void sweep() noexcept { cancel_unsettled(commit_.winner() == this ? no_branch : winner_); }

  /// Cancels the published branches still waiting, except `keep`. A settled branch is not
  /// touched: its primitive may be gone.
  void cancel_unsettled(std::size_t keep) noexcept {
    for (std::size_t i = 0; i < published_; ++i) {
      if (i == keep || branches_[i].settled.load(std::memory_order_acquire)) continue;
      table_->cancel(owner_, i);
      // Out of its primitive now (unlinked here, or claimed by a waker that resolves it).
      branches_[i].settled.store(true, std::memory_order_release);
    }
  }

  /// Drops a unit; the last one resumes the coroutine. Nothing is touched after that.
  void release_unit() noexcept {
    const resume_target parent = parent_;  // the frame may be gone once the count is down
    if ((state_.fetch_sub(unit, std::memory_order_acq_rel) & ~flag_bits) == unit) parent.run();
  }
  /// The setup's unit: true if it was the last (continue without suspending).
  bool release_unit_from_setup() noexcept {
    return (state_.fetch_sub(unit, std::memory_order_acq_rel) & ~flag_bits) == unit;
  }

  const any_branch_table* table_;
  void* owner_;
  any_branch* branches_;
  std::size_t count_;
  commit_point commit_;
  asyncband::detail::atomic<std::uint32_t> state_{unit};  // the setup's unit
  resume_target parent_;
  std::size_t winner_ = no_branch;  // written by the committer before it announces
  std::size_t published_ = 0;       // written by the setup before setup_done_bit
  bool stop_armed_ = false;
  alignas(stop_callback_type) unsigned char stop_storage_[sizeof(stop_callback_type)];
};

}  // namespace asyncband::detail
