// SPDX-License-Identifier: Apache-2.0
// A model thread's scheduler for coroutines whose locks wait through a retry (bounded barging):
// the retry is posted there, and the thread runs it.
#pragma once

#include <asyncband/runtime/task.hpp>
#include <asyncband/scheduler.hpp>

#include <coroutine>

#include "model.hpp"

namespace model {

/// The scheduler of one model thread, for coroutines that lock with bounded barging (their
/// lock waits through a retry posted here): schedule() leaves the handle in a mailbox, which
/// the owning thread empties (run_on). Each coroutine here has at most one resumption pending.
struct mailbox {
  ex::atomic<void*> posted{nullptr};
  void schedule(std::coroutine_handle<> h) noexcept {
    void* const before = posted.exchange(h.address());
    ex::check(before == nullptr, "two resumptions posted at once");
  }
};

/// Runs `t` on this model thread with `box` as its scheduler, until it ends.
inline void run_on(mailbox& box, asyncband::runtime::task<void> t) {
  t.handle().promise().set_scheduler(asyncband::scheduler_ref::of(box));
  t.handle().resume();
  while (!t.handle().done()) {
    void* const posted = box.posted.exchange(nullptr);
    if (posted == nullptr) {
      ex::yield();
    } else {
      std::coroutine_handle<>::from_address(posted).resume();
    }
  }
}

}  // namespace model
