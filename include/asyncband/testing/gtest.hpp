// SPDX-License-Identifier: Apache-2.0
// asyncband/testing/gtest.hpp: GoogleTest assertions on an exploration's result. The explorer
// itself does not depend on GoogleTest; only this header does.
/// \file
/// asyncband::testing::passed and asyncband::testing::failed_with, for EXPECT_TRUE/ASSERT_TRUE.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <gtest/gtest.h>

#include "asyncband/testing/result.hpp"

namespace asyncband::testing {

/// Success when no schedule failed; otherwise a failure whose message has the failing
/// schedule's message, replay string and trace:
/// `EXPECT_TRUE(asyncband::testing::passed(asyncband::testing::explore(opts, body)));`
[[nodiscard]] inline ::testing::AssertionResult passed(const result& r) {
  if (r.passed()) return ::testing::AssertionSuccess() << r;
  return ::testing::AssertionFailure() << r;
}

/// Success when a schedule failed with `kind` (a test that the explorer finds a known bug).
[[nodiscard]] inline ::testing::AssertionResult failed_with(const result& r, failure_kind kind) {
  if (r.failure && r.failure->kind == kind) return ::testing::AssertionSuccess() << r;
  return ::testing::AssertionFailure() << "expected a " << to_string(kind) << " failure, got " << r;
}

}  // namespace asyncband::testing
