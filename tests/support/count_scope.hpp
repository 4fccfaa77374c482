// SPDX-License-Identifier: Apache-2.0
// tests/support/count_scope.hpp: the end-of-scope check of a counting payload type.
#pragma once

#include <gtest/gtest.h>

namespace asyncband_test {

/// Checks, at the end of its scope, that every `Counted` payload created meanwhile was destroyed
/// exactly once. Declare it first, so that it is destroyed after everything holding payloads.
/// `Counted` keeps static atomic counters: constructed, destroyed, values (objects carrying an
/// id) and misuse (destroyed or read after destruction).
template <class Counted>
class count_scope_of {
 public:
  count_scope_of() = default;
  count_scope_of(const count_scope_of&) = delete;
  count_scope_of& operator=(const count_scope_of&) = delete;
  ~count_scope_of() {
    EXPECT_EQ(Counted::constructed.load() - constructed_, Counted::destroyed.load() - destroyed_)
        << "payloads leaked or destroyed twice";
    EXPECT_EQ(values(), 0) << "values not destroyed";
    EXPECT_EQ(Counted::misuse.load() - misuse_, 0) << "payloads used after their destruction";
  }
  /// Values (objects with an id) alive now that were created in this scope.
  [[nodiscard]] long values() const { return Counted::values.load() - values_; }

 private:
  long constructed_ = Counted::constructed.load();
  long destroyed_ = Counted::destroyed.load();
  long values_ = Counted::values.load();
  long misuse_ = Counted::misuse.load();
};

}  // namespace asyncband_test
