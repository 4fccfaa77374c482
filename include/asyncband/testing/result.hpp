// SPDX-License-Identifier: Apache-2.0
// asyncband/testing/result.hpp: what an exploration found (asyncband::testing::explore).
/// \file
/// The outcome of asyncband::testing::explore(): how many schedules ran, and the failure found
/// with the string that replays it.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

/// The schedule explorer: runs a test body under many schedules of its model threads
/// (asyncband/testing/explore.hpp). Header only, on the standard library alone; no part of the
/// core includes it.
namespace asyncband::testing {

/// What went wrong in a failing schedule.
enum class failure_kind : std::uint8_t {
  check,           ///< testing::check() failed in a model thread
  exception,       ///< an exception escaped a model thread (or the body)
  deadlock,        ///< no model thread could run while some were blocked
  livelock,        ///< the run did not end within options::max_steps scheduling points
  nondeterminism,  ///< a replayed schedule did not fit the run: the body is not deterministic
  misuse,          ///< a model primitive used against its contract (unlocking a mutex not held...)
};

/// The name of a failure kind ("check", "deadlock"...).
[[nodiscard]] constexpr std::string_view to_string(failure_kind kind) noexcept {
  switch (kind) {
    case failure_kind::check:
      return "check";
    case failure_kind::exception:
      return "exception";
    case failure_kind::deadlock:
      return "deadlock";
    case failure_kind::livelock:
      return "livelock";
    case failure_kind::nondeterminism:
      return "nondeterminism";
    case failure_kind::misuse:
      return "misuse";
  }
  return "unknown";
}

/// A failing schedule: what failed, and the string that runs exactly this schedule again when
/// passed as options::replay.
struct failure {
  failure_kind kind = failure_kind::check;  ///< what went wrong
  std::string message;                      ///< the failure in words, naming threads and objects
  std::string schedule;                     ///< the replay string ("pct:seed=...", "s:0.1.1")
  std::size_t schedule_number = 0;          ///< which schedule of the exploration failed (from 1)
  std::size_t steps = 0;                    ///< scheduling points the failing run went through
  std::string trace;                        ///< its last operations, one per line, oldest first
};

/// What asyncband::testing::explore() did: the schedules it ran and the first failure, if any
/// (the exploration stops at the first failure).
struct result {
  std::size_t schedules = 0;                ///< schedules run (the failing one included)
  bool exhausted = false;                   ///< exhaustive strategy: every schedule within the bound ran
  std::optional<testing::failure> failure;  ///< the first failing schedule; empty if none failed

  /// True when no schedule failed.
  [[nodiscard]] bool passed() const noexcept { return !failure.has_value(); }
};

/// Writes a failure: kind, message, replay string and trace.
inline std::ostream& operator<<(std::ostream& out, const failure& f) {
  out << to_string(f.kind) << " in schedule " << f.schedule_number << " (" << f.steps
      << " steps): " << f.message << "\n  replay with options.replay = \"" << f.schedule << "\"";
  if (!f.trace.empty()) out << "\n  last operations:\n" << f.trace;
  return out;
}

/// Writes a result: the schedules run, and the failure if there is one.
inline std::ostream& operator<<(std::ostream& out, const result& r) {
  out << r.schedules << (r.schedules == 1 ? " schedule" : " schedules")
      << (r.exhausted ? " (all within the bound)" : "");
  if (r.failure) out << ", failed: " << *r.failure;
  return out;
}

}  // namespace asyncband::testing
