// tests/support/fuse_payload.hpp: a payload whose move constructor throws on the N-th move, and
// one receive of it by each receive form a channel's receiver has (oneshot, mpsc::unbounded,
// mpsc::bounded: the same names), for the tests that a throwing move loses no message.
#pragma once

#include <gtest/gtest.h>

#include <asyncband/block_on.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <utility>

namespace asyncband_test {

/// Thrown by the move of a fuse_payload that burns the fuse.
struct fuse_blown : std::runtime_error {
  fuse_blown() : std::runtime_error("fuse_payload: the armed move throws") {}
};

/// A move-only payload whose value lives on the heap (ASan then reports a value destroyed twice,
/// or leaked), and whose moves count down one shared fuse: armed with n, the n-th move
/// construction from then on throws before taking anything (the source keeps its value), and
/// the fuse is spent. Counts objects alive and moves attempted.
class fuse_payload {
 public:
  static inline std::atomic<int> fuse{0};  // moves left up to the throwing one; 0: disarmed
  static inline std::atomic<long> moves{0};
  static inline std::atomic<long> alive{0};

  static void arm(int n) { fuse.store(n); }
  static void disarm() { fuse.store(0); }

  explicit fuse_payload(int v) : value_(std::make_unique<int>(v)) { ++alive; }
  fuse_payload(fuse_payload&& other) {  // NOLINT(performance-noexcept-move-constructor): throws on purpose
    ++moves;
    const int left = fuse.load();
    if (left > 0) {
      fuse.store(left - 1);
      if (left == 1) throw fuse_blown();
    }
    value_ = std::move(other.value_);
    ++alive;
  }
  fuse_payload(const fuse_payload&) = delete;
  fuse_payload& operator=(const fuse_payload&) = delete;
  fuse_payload& operator=(fuse_payload&&) = delete;
  ~fuse_payload() { --alive; }

  /// The value; -1 if moved from.
  [[nodiscard]] int value() const { return value_ ? *value_ : -1; }

 private:
  std::unique_ptr<int> value_;
};

/// Every form of a single receive.
enum class receive_form {
  try_recv,            ///< try_recv()
  await,               ///< block_on(rx.recv()): co_await recv() in block_on's scheduler-less coroutine
  await_stoppable,     ///< block_on(rx.recv(token))
  task_on_scheduler,   ///< co_await rx.recv() in a task on a test scheduler
  blocking,            ///< recv_blocking()
  blocking_stoppable,  ///< recv_blocking(token)
  timeout,             ///< recv_timeout(1h)
};
inline constexpr receive_form every_receive_form[] = {
    receive_form::try_recv,        receive_form::await,
    receive_form::await_stoppable, receive_form::task_on_scheduler,
    receive_form::blocking,        receive_form::blocking_stoppable,
    receive_form::timeout};

/// What one receive of a fuse_payload gave, and how many moves it made.
struct received {
  enum kind_t { value, nothing, threw } kind = nothing;
  int payload = -1;  // kind == value
  long moves = 0;
};

namespace detail {
template <class Outcome>
received::kind_t record(Outcome& r, received& out) {
  if (!r.ok()) return received::nothing;
  out.payload = r->value();
  return received::value;
}
}  // namespace detail

/// Receives once with co_await rx.recv() (e.g. on a test scheduler); catches a blown fuse.
template <class Receiver>
asyncband::runtime::task<void> receive_in_task(Receiver& rx, received& out) {
  try {
    auto r = co_await rx.recv();
    out.kind = detail::record(r, out);
  } catch (const fuse_blown&) {
    out.kind = received::threw;
  }
}

/// Receives once with `form`; a value must be there, or nothing ever (the task form runs the
/// test scheduler until the receive is over).
template <class Receiver>
received receive_by(receive_form form, Receiver& rx) {
  received out;
  const long moves_before = fuse_payload::moves.load();
  std::stop_source never;
  try {
    switch (form) {
      case receive_form::try_recv: {
        auto r = rx.try_recv();
        out.kind = detail::record(r, out);
        break;
      }
      case receive_form::await: {
        auto r = asyncband::block_on(rx.recv());
        out.kind = detail::record(r, out);
        break;
      }
      case receive_form::await_stoppable: {
        auto r = asyncband::block_on(rx.recv(never.get_token()));
        out.kind = detail::record(r, out);
        break;
      }
      case receive_form::task_on_scheduler: {
        asyncband::runtime::test_scheduler s;
        s.spawn(receive_in_task(rx, out));
        s.run();
        break;
      }
      case receive_form::blocking: {
        auto r = rx.recv_blocking();
        out.kind = detail::record(r, out);
        break;
      }
      case receive_form::blocking_stoppable: {
        auto r = rx.recv_blocking(never.get_token());
        out.kind = detail::record(r, out);
        break;
      }
      case receive_form::timeout: {
        auto r = rx.recv_timeout(std::chrono::hours(1));
        out.kind = detail::record(r, out);
        break;
      }
    }
  } catch (const fuse_blown&) {
    out.kind = received::threw;
  }
  out.moves = fuse_payload::moves.load() - moves_before;
  return out;
}

/// Checks, at the end of its scope, that every fuse_payload created meanwhile is gone (ASan
/// reports one destroyed twice). Declare it first.
class fuse_payload_scope {
 public:
  fuse_payload_scope() { fuse_payload::disarm(); }
  fuse_payload_scope(const fuse_payload_scope&) = delete;
  fuse_payload_scope& operator=(const fuse_payload_scope&) = delete;
  ~fuse_payload_scope() {
    fuse_payload::disarm();
    EXPECT_EQ(fuse_payload::alive.load(), alive_) << "payloads leaked or destroyed twice";
  }

 private:
  long alive_ = fuse_payload::alive.load();
};

}  // namespace asyncband_test
