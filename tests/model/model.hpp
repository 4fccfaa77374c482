// SPDX-License-Identifier: Apache-2.0
// tests/model/model.hpp: what every model test shares. The model tests are built with
// ASYNCBAND_MODEL defined, so the library's own atomics, locks and spin loops are scheduling
// points of the explorer (asyncband/detail/atomic.hpp), and each test explores a primitive's
// core races with model threads (testing::thread) using its blocking forms, or coroutines that
// those threads start and whoever wakes them resumes inline.
//
// ASYNCBAND_EXPLORE_SCHEDULES (default 1000) sets the schedules per test; ASYNCBAND_EXPLORE_SEED
// (default 1) the seed; ASYNCBAND_EXPLORE_STRATEGY (pct, random, exhaustive);
// ASYNCBAND_EXPLORE_WEAK=0 turns weak memory (x86-TSO store buffers, on by default) off.
// `./x explore` runs them with 10^5 schedules each.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <asyncband/testing/explore.hpp>
#include <asyncband/testing/gtest.hpp>

#ifndef ASYNCBAND_MODEL
#error "tests/model: build with ASYNCBAND_MODEL defined"
#endif

namespace model {

namespace ex = asyncband::testing;

/// A number from the environment, or `fallback`.
inline std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  return text == nullptr || *text == '\0' ? fallback : std::strtoull(text, nullptr, 10);
}

/// The options of every model test: PCT of depth 3 unless the environment says otherwise.
/// `salt` gives each test its own seeds.
inline ex::options options(std::uint64_t salt) {
  ex::options o;
  o.schedules = env_number("ASYNCBAND_EXPLORE_SCHEDULES", 1000);
  o.seed = env_number("ASYNCBAND_EXPLORE_SEED", 1) * 1000003U + salt;
  o.weak_memory = env_number("ASYNCBAND_EXPLORE_WEAK", 1) != 0;
  if (const char* s = std::getenv("ASYNCBAND_EXPLORE_STRATEGY")) {
    const std::string_view name(s);
    if (name == "random") o.strategy = ex::strategy::random;
    if (name == "exhaustive") o.strategy = ex::strategy::exhaustive;
  }
  return o;
}

/// Explores `body` with options(salt); the test fails with the replay string and trace.
template <class Body>
::testing::AssertionResult explored(std::uint64_t salt, Body&& body) {
  return ex::passed(ex::explore(options(salt), std::forward<Body>(body)));
}

}  // namespace model
