// SPDX-License-Identifier: Apache-2.0
// tests/support/counted.hpp: a move-only payload for the channel tests that counts its
// constructions, destructions and the values alive, detects a use after its destruction, can run
// a hook inside its move constructor (a window of a send or a receive) and throws from it on the
// fuse-th move; and the per-id count of its destructions that the soaks check.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "count_scope.hpp"

namespace asyncband_test {

/// Thrown by a counted payload's move constructor when its fuse burns out.
struct payload_error : std::runtime_error {
  payload_error() : std::runtime_error("payload move constructor failed") {}
};

/// A move-only payload that counts its constructions and destructions and the "values" alive
/// (objects with a non-zero id: a move transfers the id and leaves 0 behind). It detects being
/// destroyed or read after its destruction. Its move constructor can run a hook first (the window
/// of a send between claiming its place and publishing it, or of a receive between claiming a
/// value and moving it out), and throws on the `fuse`-th move of the value (fuse 1: the next move
/// throws; the fuse then goes out, so a retry succeeds).
class counted {
 public:
  static inline std::atomic<long> constructed{0};
  static inline std::atomic<long> destroyed{0};
  static inline std::atomic<long> values{0};
  static inline std::atomic<long> misuse{0};  // destroyed or read after its destruction
  /// When set, ~counted of a value with id `i` counts into finals[i] (the soaks' "exactly once").
  static inline std::atomic<int>* finals = nullptr;
  static inline std::size_t finals_size = 0;
  /// Runs `hook` (once) at the start of the `n`-th next move constructor on this thread (n = 1:
  /// the next one).
  static void at_move(int n, std::function<void()> hook) {
    moves_until_hook = n;
    on_move = std::move(hook);
  }

  explicit counted(int id, int fuse = 0) : id_(id), fuse_(fuse) {
    constructed.fetch_add(1);
    if (id_ != 0) values.fetch_add(1);
  }
  counted(counted&& other) {  // NOLINT(performance-noexcept-move-constructor): it may throw on purpose
    if (on_move && --moves_until_hook == 0) std::exchange(on_move, nullptr)();
    if (other.fuse_ == 1) {
      other.fuse_ = 0;
      throw payload_error();
    }
    id_ = other.id();
    fuse_ = other.fuse_ > 1 ? other.fuse_ - 1 : 0;
    other.id_ = 0;
    constructed.fetch_add(1);
  }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
  /// Ends the value held (as its destruction would count it) and takes `other`'s: for the
  /// outcomes that are assigned (a loop's result, a when_any's outcomes).
  counted& operator=(counted&& other) noexcept {
    if (this != &other) {
      if (magic_ != alive || other.magic_ != alive) misuse.fetch_add(1);
      end_value();
      id_ = std::exchange(other.id_, 0);
      fuse_ = std::exchange(other.fuse_, 0);
    }
    return *this;
  }
  ~counted() {
    if (magic_ != alive) {
      misuse.fetch_add(1);
      return;
    }
    end_value();
    *const_cast<volatile std::uint32_t*>(&magic_) = dead;  // volatile: not removed as a dead store
    destroyed.fetch_add(1);
  }

  [[nodiscard]] int id() const {
    if (magic_ != alive) misuse.fetch_add(1);
    return id_;
  }

 private:
  static constexpr std::uint32_t alive = 0x5AFEC0DE;
  static constexpr std::uint32_t dead = 0xDEADBEEF;
  static inline thread_local std::function<void()> on_move;
  static inline thread_local int moves_until_hook = 0;

  void end_value() noexcept {
    if (id_ != 0) {
      values.fetch_sub(1);
      if (finals != nullptr && static_cast<std::size_t>(id_) < finals_size) finals[id_].fetch_add(1);
    }
    id_ = 0;
  }

  int id_ = 0;
  int fuse_ = 0;
  std::uint32_t magic_ = alive;
};

using count_scope = count_scope_of<counted>;

/// Points counted::finals at `finals` for its scope (the soaks count each id's destruction).
class finals_scope {
 public:
  explicit finals_scope(std::vector<std::atomic<int>>& finals) {
    counted::finals = finals.data();
    counted::finals_size = finals.size();
  }
  finals_scope(const finals_scope&) = delete;
  finals_scope& operator=(const finals_scope&) = delete;
  ~finals_scope() {
    counted::finals = nullptr;
    counted::finals_size = 0;
  }
};

}  // namespace asyncband_test
