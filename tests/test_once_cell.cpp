// Tests for asyncband::once_cell.
#include "asyncband/once_cell.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "support/count_scope.hpp"

namespace {

using namespace asyncband_test;
using asyncband::once_cell;

/// Thrown by counted's constructor from a negative payload: a value constructor that throws.
struct bad_value {};

/// Thrown by an initialiser that fails; carries the id of the caller whose initialiser it was.
struct init_failure {
  int id;
};

/// The cell's value type: counts its constructions by kind and records where each object was
/// made (count_scope_of checks that every one is destroyed exactly once).
class counted {
 public:
  static inline std::atomic<long> constructed{0};
  static inline std::atomic<long> destroyed{0};
  static inline std::atomic<long> values{0};  // alive
  static inline std::atomic<long> misuse{0};  // destroyed or read after its destruction
  static inline std::atomic<long> copies{0};
  static inline std::atomic<long> moves{0};

  explicit counted(int v) : v_(v) {
    if (v < 0) throw bad_value{};
    born();
  }
  counted(const counted& other) : v_(other.value()) {
    copies.fetch_add(1);
    born();
  }
  counted(counted&& other) noexcept : v_(other.value()) {
    moves.fetch_add(1);
    born();
  }
  counted& operator=(const counted&) = delete;
  counted& operator=(counted&&) = delete;
  ~counted() {
    if (v_ == gone) misuse.fetch_add(1);
    v_ = gone;
    destroyed.fetch_add(1);
    values.fetch_sub(1);
  }

  [[nodiscard]] int value() const {
    if (v_ == gone) misuse.fetch_add(1);
    return v_;
  }

  /// How many objects were constructed at `where` since the last forget_addresses().
  static long made_at(const counted* where) {
    const std::lock_guard lock(mutex());
    return std::count(addresses().begin(), addresses().end(), where);
  }
  static void forget_addresses() {
    const std::lock_guard lock(mutex());
    addresses().clear();
  }

 private:
  static constexpr int gone = -1'000'000;
  void born() {
    constructed.fetch_add(1);
    values.fetch_add(1);
    const std::lock_guard lock(mutex());
    addresses().push_back(this);
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<const counted*>& addresses() {
    static std::vector<const counted*> a;
    return a;
  }

  int v_;
};

using count_scope = count_scope_of<counted>;
using cell = once_cell<counted>;

/// Counts of counted's constructions, to compare before and after a step.
struct constructions {
  long all = counted::constructed.load();
  long copies = counted::copies.load();
  long moves = counted::moves.load();
};

// Regression: the inherited wait_blocking() returned `auto`, so it yielded a copy of the cell's
// value instead of the T& its other forms yield (and did not compile for a move-only T).
TEST(OnceCell, WaitBlockingYieldsTheValueItselfNotACopy) {
  const count_scope scope;
  cell c;
  EXPECT_FALSE(c.set(counted(3)).has_value());
  const constructions before;
  const counted& v = c.wait_blocking();
  EXPECT_EQ(&v, c.get());
  EXPECT_EQ(counted::copies.load(), before.copies);
}

}  // namespace
