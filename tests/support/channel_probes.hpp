// SPDX-License-Identifier: Apache-2.0
// tests/support/channel_probes.hpp: what the channel tests share to drive a channel: the
// payloads' ids (int, std::unique_ptr<int>, counted), the two halves of a channel, receives that
// must succeed, the probes of coroutines that receive or send on the test scheduler, and the
// checks of how they ended.
#pragma once

#include <gtest/gtest.h>

#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "counted.hpp"
#include "probe.hpp"

namespace asyncband_test {

inline constexpr bool stoppable = true;
inline constexpr bool plain = false;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool under_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
inline constexpr bool under_sanitizer = true;
#else
inline constexpr bool under_sanitizer = false;
#endif
#else
inline constexpr bool under_sanitizer = false;
#endif

/// The payload types of the generic helpers: int, std::unique_ptr<int> and counted, made from
/// an int and identified by it (a counted payload with its fuse).
template <class T>
T make(int v, int fuse = 0) {
  if constexpr (std::is_same_v<T, std::unique_ptr<int>>) {
    return std::make_unique<int>(v);
  } else if constexpr (std::is_same_v<T, counted>) {
    return counted(v, fuse);
  } else {
    return T(v);
  }
}
inline int id_of(int v) {
  return v;
}
[[maybe_unused]] inline int id_of(const std::unique_ptr<int>& v) {
  return v ? *v : -1;
}
inline int id_of(const counted& v) {
  return v.id();
}

// ---------------------------------------------------------------------------------------------
// Channels and handles

/// The two halves of a channel, named (clang 14 cannot capture structured bindings in lambdas).
template <class Sender, class Receiver>
struct channel_halves {
  Sender tx;
  Receiver rx;
};

/// The named halves of the pair a channel's factory returns.
template <class Sender, class Receiver>
channel_halves<Sender, Receiver> halves_of(std::pair<Sender, Receiver>&& halves) {
  return {std::move(halves.first), std::move(halves.second)};
}

/// Destroys what handle `h` holds now (h is left moved from).
template <class Handle>
void drop(Handle& h) {
  const Handle gone(std::move(h));
}

/// try_recv that must yield a value: its id (-1 otherwise).
template <class Receiver>
int take(Receiver& rx) {
  auto r = rx.try_recv();
  EXPECT_TRUE(r.ok()) << "try_recv: status " << static_cast<int>(r.status());
  return r.ok() ? id_of(*r) : -1;
}

/// try_recv until empty or disconnected: the ids received, in order.
template <class Receiver>
std::vector<int> take_all(Receiver& rx) {
  std::vector<int> out;
  for (;;) {
    auto r = rx.try_recv();
    if (!r.ok()) break;
    out.push_back(id_of(*r));
  }
  return out;
}

inline std::vector<int> range(int first, int last) {  // [first, last)
  std::vector<int> v;
  for (int i = first; i < last; ++i) v.push_back(i);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Coroutines on the test scheduler

/// A receiving coroutine's record (see probe), with the value it received.
template <class T>
struct recv_probe : probe {
  std::optional<T> value;
  [[nodiscard]] int got() const { return value ? id_of(*value) : -1; }
};

template <class T>
void record(recv_probe<T>& p, asyncband::result<T>& r) {
  p.finish(r.status());
  if (r.ok()) p.value.emplace(std::move(*r));
}

/// `co_await rx.recv()`, or `co_await rx.recv(stop)` when `can_stop`, recorded in `p`.
template <class Receiver, class T>
task<void> receive(Receiver& rx, recv_probe<T>& p, bool can_stop = false, asyncband::stop_token stop = {}) {
  ++p.started;
  if (can_stop) {
    auto r = co_await rx.recv(std::move(stop));
    record(p, r);
  } else {
    auto r = co_await rx.recv();
    record(p, r);
  }
}

/// A sending coroutine's record: how the send ended and the value it handed back.
template <class T>
struct send_probe : probe {
  std::optional<asyncband::send_status> outcome;
  std::optional<T> back;

  void record(asyncband::send_result<T>& r) {
    outcome = r.status();
    if (!r.ok()) back.emplace(std::move(r.value()));
    finish(r.ok()          ? wait_status::ok
           : r.cancelled() ? wait_status::cancelled
           : r.timed_out() ? wait_status::timeout
                           : wait_status::closed);
  }
  [[nodiscard]] int back_id() const { return back ? id_of(*back) : -1; }
};

/// `co_await tx.send(make<T>(v))` (a send that may wait: the bounded channel's), or with `stop`
/// when `can_stop`, recorded in `p`. The value is made inside the coroutine: a coroutine
/// parameter of type T would add a move.
template <class Sender, class T>
task<void> send_value(Sender& tx, int v, send_probe<T>& p, bool can_stop = false,
                      asyncband::stop_token stop = {}) {
  ++p.started;
  if (can_stop) {
    auto r = co_await tx.send(make<T>(v), std::move(stop));
    p.record(r);
  } else {
    auto r = co_await tx.send(make<T>(v));
    p.record(r);
  }
}

inline void expect_waiting(const probe& p) {
  EXPECT_EQ(p.started, 1) << "coroutine " << p.id;
  EXPECT_EQ(p.resumed, 0) << "coroutine " << p.id;
}

/// Resumed once with the value `v`.
template <class T>
void expect_got(const recv_probe<T>& p, int v) {
  EXPECT_EQ(p.resumed, 1) << "receive " << p.id;
  EXPECT_EQ(p.status, wait_status::ok) << "receive " << p.id;
  EXPECT_EQ(p.got(), v) << "receive " << p.id;
}

/// Resumed once without a value, with status `st`.
template <class T>
void expect_ended(const recv_probe<T>& p, wait_status st) {
  EXPECT_EQ(p.resumed, 1) << "receive " << p.id;
  EXPECT_EQ(p.status, st) << "receive " << p.id;
  EXPECT_FALSE(p.value.has_value()) << "receive " << p.id;
}

/// Resumed once and delivered.
template <class T>
void expect_sent(const send_probe<T>& p) {
  EXPECT_EQ(p.resumed, 1) << "send " << p.id;
  EXPECT_EQ(p.outcome, asyncband::send_status::ok) << "send " << p.id;
  EXPECT_FALSE(p.back.has_value()) << "send " << p.id;
}

/// Resumed once, not delivered, with its own value handed back.
template <class T>
void expect_handed_back(const send_probe<T>& p, asyncband::send_status why) {
  EXPECT_EQ(p.resumed, 1) << "send " << p.id;
  EXPECT_EQ(p.outcome, why) << "send " << p.id;
  EXPECT_EQ(p.back_id(), p.id) << "send " << p.id;
}

/// The points where a receive has found nothing and is on its way to suspending.
inline constexpr test_point registering[] = {test_point::queueing, test_point::published,
                                             test_point::before_arm};

}  // namespace asyncband_test
