// SPDX-License-Identifier: Apache-2.0
// asyncband/testing/explore.hpp: the schedule explorer. explore(options, body) runs a test body
// many times, each under another schedule of its model threads, and reports the first failing
// schedule with a string that replays it.
/// \file
/// asyncband::testing::explore and its options; includes the model primitives (thread,
/// atomic, mutex, yield, check). docs/testing.md shows how to write an explored test.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "asyncband/testing/atomic.hpp"
#include "asyncband/testing/detail/execution.hpp"
#include "asyncband/testing/detail/strategies.hpp"
#include "asyncband/testing/mutex.hpp"
#include "asyncband/testing/result.hpp"
#include "asyncband/testing/thread.hpp"

namespace asyncband::testing {

/// How explore() chooses the schedules.
enum class strategy : std::uint8_t {
  random,      ///< a uniformly random runnable thread at every scheduling point
  pct,         ///< probabilistic concurrency testing of depth options::depth (the default)
  exhaustive,  ///< every schedule with at most options::preemptions preemptions, depth first
};

/// What explore() does. An aggregate: `explore({.strategy = strategy::exhaustive}, body)`.
struct options {
  /// How the schedules are chosen.
  testing::strategy strategy = testing::strategy::pct;
  /// How many schedules to run at most (exhaustive: a cap; result::exhausted tells whether the
  /// search ended before it).
  std::size_t schedules = 1000;
  /// The seed of the random and PCT strategies (each schedule has its own seed, derived from it).
  std::uint64_t seed = 1;
  /// PCT: the depth d of the bugs to look for (d - 1 priority change points per schedule).
  std::size_t depth = 3;
  /// Exhaustive: the most preemptions (switches away from a thread that could go on) per schedule.
  std::size_t preemptions = 2;
  /// A run that does not end within this many scheduling points fails (failure_kind::livelock).
  std::size_t max_steps = 20000;
  /// Weak memory (random and PCT): a relaxed or release store may stay invisible to the other
  /// threads for a few of its thread's own operations, as in x86-TSO's store buffer, so that a
  /// load may pass an earlier store to another object (the reordering a missing seq_cst fence
  /// lets through). Read-modify-writes, seq_cst stores and fences, blocking, yielding and thread
  /// ends make the stores visible. The exhaustive strategy ignores it.
  bool weak_memory = false;
  /// When not empty, a failure::schedule string: runs exactly that schedule, once.
  std::string replay{};
};

/// Runs `body` under many schedules: model thread 0 runs it, and it creates the other model
/// threads with testing::thread; at every scheduling point (every operation of testing::atomic,
/// testing::mutex, testing::thread, testing::yield) the strategy picks the thread that runs
/// next, one at a time. Stops at the first failing schedule: a failed testing::check(), an
/// exception escaping a model thread, a deadlock (no model thread can run), or a run longer than
/// options::max_steps.
///
/// The body must be deterministic given the schedule (create the shared state inside it; no
/// clocks, no real threads or locks, nothing carried from one run to the next), or replays do
/// not reproduce. After a failure, each model thread stops at its next scheduling point: it
/// unwinds from one that may throw (the explorer throws a private exception there: a model
/// thread must not swallow it with `catch (...)`), and otherwise (an atomic operation is
/// noexcept) its real thread stays parked for good, with its stack (a leak, in failing runs
/// only). Not reentrant: a body does not call explore().
template <class Body>
  requires std::invocable<Body&>
result explore(const options& opts, Body&& body) {
  if (detail::current() != nullptr)
    throw std::logic_error("asyncband::testing::explore: called in an explored run");
  if (opts.strategy == strategy::pct && opts.depth == 0) {
    throw std::invalid_argument("asyncband::testing::explore: options.depth must be at least 1");
  }
  result r;
  // One run under `chooser`; true (and r.failure set) if it failed.
  const auto run = [&](detail::chooser& chooser, const auto& schedule_string, std::size_t* steps = nullptr) {
    detail::run_outcome out =
        detail::execution::run(chooser, opts.max_steps, detail::make_body([&body] { body(); }));
    ++r.schedules;
    if (steps != nullptr) *steps = out.steps;
    if (!out.failed) return false;
    r.failure = std::move(*out.failed);
    r.failure->schedule = schedule_string(out);
    r.failure->schedule_number = r.schedules;
    return true;
  };

  if (!opts.replay.empty()) {
    const auto chooser = detail::replay_chooser(opts.replay);
    run(*chooser, [&](const detail::run_outcome& /*unused*/) { return opts.replay; });
    return r;
  }
  switch (opts.strategy) {
    case strategy::random:
      for (std::size_t i = 0; i != opts.schedules; ++i) {
        const std::uint64_t seed = detail::schedule_seed(opts.seed, i);
        detail::random_chooser chooser(seed, opts.weak_memory);
        if (run(chooser,
                [&](const auto& /*unused*/) { return detail::random_schedule(seed, opts.weak_memory); }))
          return r;
      }
      break;
    case strategy::pct: {
      std::size_t k = 0;  // the steps of a run: the most seen so far (none before the first)
      for (std::size_t i = 0; i != opts.schedules; ++i) {
        const std::uint64_t seed = detail::schedule_seed(opts.seed, i);
        detail::pct_chooser chooser(seed, opts.depth, k, opts.weak_memory);
        std::size_t steps = 0;
        if (run(
                chooser,
                [&](const auto& /*unused*/) {
                  return detail::pct_schedule(seed, opts.depth, k, opts.weak_memory);
                },
                &steps)) {
          return r;
        }
        k = std::max(k, steps);
      }
      break;
    }
    case strategy::exhaustive: {
      detail::exhaustive_chooser chooser(opts.preemptions);
      while (r.schedules != opts.schedules) {
        chooser.begin_run();
        const bool failed =
            run(chooser, [](const detail::run_outcome& out) { return detail::list_schedule(out.choices); });
        chooser.end_run();
        if (failed) return r;
        if (!chooser.advance()) {
          r.exhausted = true;
          break;
        }
      }
      break;
    }
  }
  return r;
}

/// explore() with the default options (1000 PCT schedules of depth 3).
template <class Body>
  requires std::invocable<Body&>
result explore(Body&& body) {
  return explore(options{}, std::forward<Body>(body));
}

}  // namespace asyncband::testing
