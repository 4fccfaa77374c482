// SPDX-License-Identifier: Apache-2.0
// tests/support/fuse_payload.hpp: a payload whose move constructor throws on the N-th move, and
// one receive of it by each receive form a channel's receiver has (oneshot, mpsc::unbounded,
// mpsc::bounded: the same names), for the tests that a throwing move loses no message.
#pragma once

#include <gtest/gtest.h>

#include <asyncband/block_on.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

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
  asyncband::stop_source never;
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

// ---------------------------------------------------------------------------------------------
// The scenarios every channel runs. `Channel` says how to use one channel kind and what a
// receive whose move threw must have left behind there:
//   static auto make(std::size_t capacity);               // {sender, receiver}
//   static bool send(Sender&, int value);                 // true if accepted
//   static void expect_value_held(Sender&, Receiver&);    // right after a receive threw
//   static void expect_drained(Sender&, Receiver&);       // every value received, channel open

/// A receive that waited for the value: the move on its resumption throws; the value stays, and
/// the next receive takes it with one move.
template <class Channel>
void awaiting_receive_whose_move_throws_leaves_the_value() {
  const fuse_payload_scope scope;
  auto [tx, rx] = Channel::make(1);
  asyncband::runtime::test_scheduler s;
  received first;
  s.spawn(receive_in_task(rx, first));
  s.run();
  ASSERT_TRUE(Channel::send(tx, 7));
  fuse_payload::arm(1);
  s.run();
  EXPECT_EQ(first.kind, received::threw);
  Channel::expect_value_held(tx, rx);
  const received again = receive_by(receive_form::await, rx);
  EXPECT_EQ(again.kind, received::value);
  EXPECT_EQ(again.payload, 7);
  EXPECT_EQ(again.moves, 1);
  Channel::expect_drained(tx, rx);
}

/// Five values (the channel closed first, or not); the n-th move throws. Every receive moves
/// once, the one that threw leaves its value where it was, and all five arrive in order.
template <class Channel>
void receive_five_with_the_nth_move_throwing(receive_form form, int n, bool closed_first) {
  const fuse_payload_scope scope;
  auto [tx, rx] = Channel::make(5);
  for (int v = 1; v <= 5; ++v) ASSERT_TRUE(Channel::send(tx, v));
  if (closed_first) rx.close();
  fuse_payload::arm(n);
  std::vector<int> got;
  int throws = 0;
  for (int attempt = 0; attempt < 10 && got.size() < 5; ++attempt) {
    const std::size_t len_before = rx.len();
    if (len_before == 0) {  // rather than wait for good
      ADD_FAILURE() << "a value was lost, attempt " << attempt;
      break;
    }
    const received r = receive_by(form, rx);
    EXPECT_EQ(r.moves, 1) << "one move, from the channel into the outcome";
    if (r.kind == received::threw) {
      ++throws;
      EXPECT_EQ(static_cast<int>(got.size()) + 1, n) << "the n-th move is the n-th receive's";
      EXPECT_EQ(rx.len(), len_before) << "the value stays in the channel";
      if (!closed_first) Channel::expect_value_held(tx, rx);
    } else if (r.kind == received::value) {
      got.push_back(r.payload);
      EXPECT_EQ(rx.len(), len_before - 1);
    } else {
      ADD_FAILURE() << "no value, attempt " << attempt;
      break;
    }
  }
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3, 4, 5}));
  EXPECT_EQ(throws, 1);
  EXPECT_EQ(rx.len(), 0U);
  if (closed_first) {
    EXPECT_TRUE(rx.try_recv().closed()) << "drained and closed: nothing can come";
  } else {
    EXPECT_TRUE(rx.try_recv().empty());
    Channel::expect_drained(tx, rx);
    ASSERT_TRUE(Channel::send(tx, 6));  // the channel goes on
    EXPECT_EQ(receive_by(form, rx).payload, 6);
    { const auto gone = std::move(tx); }
  }
  EXPECT_TRUE(rx.recv_blocking().closed());
}

/// Every receive form, every n from 1 to 4, open and closed first.
template <class Channel>
void every_receive_form_with_the_nth_move_throwing() {
  for (const bool closed_first : {false, true}) {
    for (const receive_form form : every_receive_form) {
      for (int n = 1; n <= 4; ++n) {
        SCOPED_TRACE(testing::Message() << "form " << static_cast<int>(form) << ", move " << n
                                        << (closed_first ? ", closed first" : ""));
        receive_five_with_the_nth_move_throwing<Channel>(form, n, closed_first);
      }
    }
  }
}

}  // namespace asyncband_test
