// Tests for asyncband::mpmc::bounded: sending and receiving in every form; exact capacity (also
// for capacities that are not powers of two); the counts of senders and receivers through copies
// and moves; moved-from handles; counter wrap-around; several receivers (each value received
// exactly once, FIFO among waiting receives, no overtaking by try_recv); deterministic races at
// the waiter core's test points and inside a send (two receives woken for one value, a receive
// woken then cancelled or destroyed, close against in-flight sends and waiting receives, the last
// receiver or sender going, permits held at close, a receive waiting for a write in progress);
// when_any; payloads whose move constructor throws on either side; the blocking twins; "last one
// out"; and seeded soaks on the test scheduler and on threads.
#include "asyncband/mpmc/bounded.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <latch>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/auto_reset_event.hpp"
#include "asyncband/block_on.hpp"
#include "asyncband/manual_reset_event.hpp"
#include "asyncband/result.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/semaphore.hpp"
#include "asyncband/when_any.hpp"
#include "support/awaited_twice.hpp"
#include "support/count_scope.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/fuse_payload.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"

namespace {

using namespace asyncband_test;
using asyncband::block_on;
using asyncband::recv_status;
using asyncband::result;
using asyncband::send_result;
using asyncband::send_status;
using asyncband::try_recv_result;
using asyncband::when_any;
using asyncband::runtime::thread_pool;
namespace mpmc = asyncband::mpmc;

constexpr bool stoppable = true;
constexpr bool plain = false;

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool under_sanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
constexpr bool under_sanitizer = true;
#else
constexpr bool under_sanitizer = false;
#endif
#else
constexpr bool under_sanitizer = false;
#endif

// ---------------------------------------------------------------------------------------------
// Payloads

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

/// The payload types of the generic helpers: int, std::unique_ptr<int> and counted, made from
/// an int and identified by it.
template <class T>
T make(int v) {
  if constexpr (std::is_same_v<T, std::unique_ptr<int>>) {
    return std::make_unique<int>(v);
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
template <class T>
struct chan {
  mpmc::sender<T> tx;
  mpmc::receiver<T> rx;
};

template <class T>
chan<T> make_channel(std::size_t capacity) {
  auto halves = mpmc::bounded<T>(capacity);
  return chan<T>{std::move(halves.first), std::move(halves.second)};
}

/// A channel whose ring indexes start at `first_index` (for wrap-around).
template <class T>
chan<T> make_channel_at(std::size_t capacity, std::uint32_t first_index) {
  auto halves = mpmc::detail::bounded_starting_at<T>(capacity, first_index);
  return chan<T>{std::move(halves.first), std::move(halves.second)};
}

/// Destroys what handle `h` holds now (h is left moved from).
template <class Handle>
void drop(Handle& h) {
  const Handle gone(std::move(h));
}

/// try_send that must succeed.
template <class T>
void put(mpmc::sender<T>& tx, int v) {
  auto r = tx.try_send(make<T>(v));
  EXPECT_TRUE(r.ok()) << "try_send(" << v << "): " << asyncband::to_string(r.status());
}

/// try_recv that must yield a value: its id (-1 otherwise).
template <class T>
int take(mpmc::receiver<T>& rx) {
  auto r = rx.try_recv();
  EXPECT_TRUE(r.ok()) << "try_recv: status " << static_cast<int>(r.status());
  return r.ok() ? id_of(*r) : -1;
}

/// try_recv until empty or disconnected: the ids received, in order.
template <class T>
std::vector<int> take_all(mpmc::receiver<T>& rx) {
  std::vector<int> out;
  for (;;) {
    auto r = rx.try_recv();
    if (!r.ok()) break;
    out.push_back(id_of(*r));
  }
  return out;
}

std::vector<int> range(int first, int last) {  // [first, last)
  std::vector<int> v;
  for (int i = first; i < last; ++i) v.push_back(i);
  return v;
}

/// The units of capacity free now, found by reserving them (and giving them back): `expected`
/// can be reserved at once, and not one more.
template <class T>
void expect_free_capacity(mpmc::sender<T>& tx, std::size_t expected) {
  if (expected > 0) {
    auto all = tx.try_reserve(expected);
    EXPECT_TRUE(all.ok()) << expected << " units should be free: " << asyncband::to_string(all.status());
  }
  if (expected < tx.capacity()) {
    EXPECT_TRUE(tx.try_reserve(expected + 1).full()) << "only " << expected << " units should be free";
  }
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
void record(recv_probe<T>& p, result<T>& r) {
  p.finish(r.status());
  if (r.ok()) p.value.emplace(std::move(*r));
}

/// `co_await rx.recv()`, or `co_await rx.recv(stop)` when `can_stop`, recorded in `p`.
template <class T>
task<void> receive(mpmc::receiver<T>& rx, recv_probe<T>& p, bool can_stop = false,
                   std::stop_token stop = {}) {
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
  std::optional<send_status> outcome;
  std::optional<T> back;

  void record(send_result<T>& r) {
    outcome = r.status();
    if (!r.ok()) back.emplace(std::move(r.value()));
    finish(r.ok()          ? wait_status::ok
           : r.cancelled() ? wait_status::cancelled
           : r.timed_out() ? wait_status::timeout
                           : wait_status::closed);
  }
  [[nodiscard]] int back_id() const { return back ? id_of(*back) : -1; }
};

/// `co_await tx.send(make<T>(v))`, or with `stop` when `can_stop`, recorded in `p`. The value is
/// made inside the coroutine: a coroutine parameter of type T would add a move.
template <class T>
task<void> send_value(mpmc::sender<T>& tx, int v, send_probe<T>& p, bool can_stop = false,
                      std::stop_token stop = {}) {
  ++p.started;
  if (can_stop) {
    auto r = co_await tx.send(make<T>(v), std::move(stop));
    p.record(r);
  } else {
    auto r = co_await tx.send(make<T>(v));
    p.record(r);
  }
}

/// A reserving coroutine's record, with the permit it received.
template <class T>
struct reserve_probe : probe {
  std::optional<mpmc::permit<T>> permit;
};

/// `co_await tx.reserve()` recorded in `p`.
template <class T>
task<void> reserve_into(mpmc::sender<T>& tx, reserve_probe<T>& p) {
  ++p.started;
  auto r = co_await tx.reserve();
  if (r.ok()) p.permit.emplace(std::move(*r));
  p.finish(r.status());
}

/// A channel on a test scheduler with coroutines that receive from copies of its receiver or
/// send to it, queued in the order they were added, each with its own stop source. Owns the
/// coroutines (a test may destroy them); members are destroyed in reverse: the coroutines
/// first (a suspended one leaves its queue), then the receiver copies and the channel.
template <class T = int>
struct fixture {
  test_scheduler s;
  chan<T> c;
  std::deque<mpmc::receiver<T>> copies;  // a receiver copy per receive, so several receivers wait
  std::vector<int> order;                // ids of the coroutines, in the order they resumed
  std::deque<recv_probe<T>> recvs;
  std::deque<send_probe<T>> sends;
  std::deque<std::stop_source> stops;
  std::vector<task<void>> tasks;

  /// A channel of `capacity` holding `filled` values 100, 101, ...
  explicit fixture(std::size_t capacity, int filled = 0) : c(make_channel<T>(capacity)) {
    for (int i = 0; i < filled; ++i) put(c.tx, 100 + i);
  }
  fixture(const fixture&) = delete;
  fixture& operator=(const fixture&) = delete;
  /// Runs what is ready first: a coroutine whose resumption is queued must not be destroyed.
  ~fixture() { s.run(); }

  /// Queues a receive (id `id`) on a new copy of the receiver, to start at a later step.
  recv_probe<T>& start_recv(int id, bool can_stop = stoppable) {
    recv_probe<T>& p = recvs.emplace_back();
    p.id = id;
    p.order = &order;
    std::stop_source& stop = stops.emplace_back();
    tasks.push_back(receive(copies.emplace_back(c.rx), p, can_stop, stop.get_token()));
    start_on(s, tasks.back());
    return p;
  }
  /// Starts a receive and runs until nothing is ready (it waits or is done).
  recv_probe<T>& recv(int id, bool can_stop = stoppable) {
    recv_probe<T>& p = start_recv(id, can_stop);
    s.run();
    return p;
  }
  /// Queues a send of `v` to start at a later step.
  send_probe<T>& start_send(int v, bool can_stop = stoppable) {
    send_probe<T>& p = sends.emplace_back();
    p.id = v;
    p.order = &order;
    std::stop_source& stop = stops.emplace_back();
    tasks.push_back(send_value(c.tx, v, p, can_stop, stop.get_token()));
    start_on(s, tasks.back());
    return p;
  }
  /// Starts a send of `v` and runs until nothing is ready.
  send_probe<T>& send(int v, bool can_stop = stoppable) {
    send_probe<T>& p = start_send(v, can_stop);
    s.run();
    return p;
  }
  /// The stop source of the `i`-th coroutine started (receives and sends together).
  std::stop_source& stop(std::size_t i) { return stops[i]; }
  task<void>& task_of(std::size_t i) { return tasks[i]; }
};

void expect_waiting(const probe& p) {
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
  EXPECT_EQ(p.outcome, send_status::ok) << "send " << p.id;
  EXPECT_FALSE(p.back.has_value()) << "send " << p.id;
}

/// Resumed once, not delivered, with its own value handed back.
template <class T>
void expect_handed_back(const send_probe<T>& p, send_status why) {
  EXPECT_EQ(p.resumed, 1) << "send " << p.id;
  EXPECT_EQ(p.outcome, why) << "send " << p.id;
  EXPECT_EQ(p.back_id(), p.id) << "send " << p.id;
}

/// Until `done()` holds, or fails after a generous limit (a lost wake-up would otherwise hang).
template <class Done>
void spin_until(Done done, const char* what) {
  const auto limit = std::chrono::steady_clock::now() + 20s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > limit) {
      ADD_FAILURE() << "timed out waiting until " << what;
      return;
    }
    std::this_thread::yield();
  }
}

// ---------------------------------------------------------------------------------------------
// Sending and receiving, the queries, the handles

TEST(MpmcBounded, TrySendAndTryRecvKeepTheOrderAndTheQueries) {
  auto c = make_channel<int>(3);
  EXPECT_EQ(c.tx.capacity(), 3U);
  EXPECT_EQ(c.rx.capacity(), 3U);
  EXPECT_EQ(c.tx.sender_count(), 1U);
  EXPECT_EQ(c.tx.receiver_count(), 1U);
  EXPECT_EQ(c.rx.sender_count(), 1U);
  EXPECT_EQ(c.rx.receiver_count(), 1U);
  EXPECT_TRUE(c.rx.empty());
  EXPECT_FALSE(c.tx.is_closed());
  EXPECT_FALSE(c.rx.is_closed());
  EXPECT_TRUE(c.rx.try_recv().empty());
  put(c.tx, 1);
  put(c.tx, 2);
  EXPECT_EQ(c.rx.len(), 2U);
  EXPECT_FALSE(c.rx.empty());
  EXPECT_EQ(take(c.rx), 1);
  put(c.tx, 3);
  put(c.tx, 4);
  EXPECT_EQ(c.rx.len(), 3U);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{2, 3, 4}));
  EXPECT_TRUE(c.rx.empty());
  EXPECT_TRUE(c.rx.try_recv().empty());
}

TEST(MpmcBounded, ExactCapacityAlsoForCapacitiesThatAreNotPowersOfTwo) {
  for (const std::size_t capacity : {1U, 2U, 3U, 5U, 7U, 64U, 100U}) {
    SCOPED_TRACE(testing::Message() << "capacity " << capacity);
    count_scope counts;
    auto c = make_channel<counted>(capacity);
    mpmc::receiver<counted> other = c.rx;
    const int cap = static_cast<int>(capacity);
    for (int lap = 0; lap < 3; ++lap) {  // the same holds on every lap of the ring
      const int base = 1 + lap * 1000;
      for (int i = 0; i < cap; ++i) put(c.tx, base + i);
      EXPECT_EQ(c.rx.len(), capacity);
      EXPECT_EQ(other.len(), capacity);
      auto full = c.tx.try_send(counted(base + cap));
      EXPECT_TRUE(full.full());
      EXPECT_EQ(full.value().id(), base + cap);  // the value comes back intact
      EXPECT_TRUE(c.tx.try_reserve().full());
      EXPECT_EQ(take(lap % 2 == 0 ? c.rx : other), base);  // one place frees exactly one unit
      put(c.tx, base + cap);
      EXPECT_TRUE(c.tx.try_send(counted(-1)).full());
      EXPECT_EQ(take_all(other), range(base + 1, base + cap + 1));
    }
    expect_free_capacity(c.tx, capacity);
  }
}

TEST(MpmcBounded, CapacityThreeTakesThreeTrySendsAndRefusesTheFourth) {
  auto c = make_channel<int>(3);
  EXPECT_TRUE(c.tx.try_send(1).ok());
  EXPECT_TRUE(c.tx.try_send(2).ok());
  EXPECT_TRUE(c.tx.try_send(3).ok());
  auto fourth = c.tx.try_send(4);
  EXPECT_TRUE(fourth.full());
  EXPECT_EQ(fourth.value(), 4);
  EXPECT_EQ(c.rx.len(), 3U);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{1, 2, 3}));
}

TEST(MpmcBounded, CreationAndReservationArgumentsAreChecked) {
  EXPECT_THROW((void)mpmc::bounded<int>(0), std::invalid_argument);
  EXPECT_THROW((void)mpmc::bounded<int>(asyncband::semaphore::max() + 1), std::invalid_argument);
  EXPECT_THROW((void)mpmc::detail::bounded_starting_at<int>(0, 5), std::invalid_argument);
  auto c = make_channel<int>(3);
  EXPECT_THROW((void)c.tx.reserve_many(0), std::invalid_argument);
  EXPECT_THROW((void)c.tx.reserve_many(4), std::invalid_argument);
  EXPECT_THROW((void)c.tx.try_reserve(4), std::invalid_argument);
  EXPECT_THROW((void)c.tx.reserve_blocking(0), std::invalid_argument);
  expect_free_capacity(c.tx, 3);  // nothing was taken by the failed calls
}

TEST(MpmcBounded, EveryReceiveFormYieldsAValueThatIsThere) {
  auto c = make_channel<int>(8);
  mpmc::receiver<int> other = c.rx;
  for (int i = 1; i <= 7; ++i) put(c.tx, i);
  std::stop_source never;
  EXPECT_EQ(*block_on(c.rx.recv()), 1);
  EXPECT_EQ(*block_on(other.recv(never.get_token())), 2);
  EXPECT_EQ(*c.rx.recv_blocking(), 3);
  EXPECT_EQ(*other.recv_blocking(never.get_token()), 4);
  EXPECT_EQ(*c.rx.recv_timeout(1h), 5);
  EXPECT_EQ(*other.recv_timeout(0ms), 6);
  test_scheduler s;
  recv_probe<int> p;
  s.spawn(receive(c.rx, p));
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_EQ(p.got(), 7);
  EXPECT_TRUE(c.rx.recv_timeout(0ms).timed_out());
  EXPECT_TRUE(other.recv_timeout(1ms).timed_out());
}

TEST(MpmcBounded, EverySendFormDeliversInOrder) {
  auto c = make_channel<int>(16);
  mpmc::sender<int> other = c.tx;
  std::stop_source never;
  EXPECT_TRUE(c.tx.try_send(1).ok());
  EXPECT_TRUE(block_on(other.send(2)).ok());
  EXPECT_TRUE(block_on(c.tx.send(3, never.get_token())).ok());
  EXPECT_TRUE(other.send_blocking(4).ok());
  EXPECT_TRUE(c.tx.send_blocking(5, never.get_token()).ok());
  EXPECT_TRUE(other.send_timeout(6, 1h).ok());
  EXPECT_TRUE(c.tx.send_timeout(7, 0ms).ok());  // capacity is there: the deadline never matters
  {
    auto p = c.tx.try_reserve();
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(8).ok());
  }
  {
    auto p = block_on(other.reserve());
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(9).ok());
  }
  {
    auto p = c.tx.reserve_blocking();
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(10).ok());
  }
  {
    auto p = other.try_reserve_owned();
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(11).ok());
  }
  {
    auto p = block_on(c.tx.reserve_owned());
    ASSERT_TRUE(p.ok());
    EXPECT_TRUE(p->send(12).ok());
  }
  EXPECT_EQ(take_all(c.rx), range(1, 13));
}

TEST(MpmcBounded, SenderAndReceiverCountsFollowCopiesMovesAndDestruction) {
  auto c = make_channel<int>(2);
  const auto expect_counts = [&c](std::size_t senders, std::size_t receivers) {
    EXPECT_EQ(c.tx.sender_count(), senders);
    EXPECT_EQ(c.rx.sender_count(), senders);
    EXPECT_EQ(c.tx.receiver_count(), receivers);
    EXPECT_EQ(c.rx.receiver_count(), receivers);
  };
  expect_counts(1, 1);
  {
    const mpmc::sender<int> copy = c.tx;
    expect_counts(2, 1);
    EXPECT_EQ(copy.sender_count(), 2U);
  }
  expect_counts(1, 1);
  mpmc::receiver<int> r2 = c.rx;
  expect_counts(1, 2);
  mpmc::receiver<int> r3(std::move(r2));
  expect_counts(1, 2);
  EXPECT_EQ(r2.receiver_count(), 0U);  // NOLINT(bugprone-use-after-move): moved from
  EXPECT_EQ(r2.sender_count(), 0U);    // NOLINT(bugprone-use-after-move)
  auto elsewhere = make_channel<int>(1);
  mpmc::receiver<int> r4 = elsewhere.rx;
  EXPECT_EQ(elsewhere.rx.receiver_count(), 2U);
  r4 = r3;  // leaves the other channel, joins this one
  EXPECT_EQ(elsewhere.rx.receiver_count(), 1U);
  expect_counts(1, 3);
  mpmc::receiver<int>& self = r4;
  r4 = self;  // self-assignment changes nothing
  expect_counts(1, 3);
  mpmc::sender<int> s2 = elsewhere.tx;
  s2 = c.tx;
  EXPECT_EQ(elsewhere.tx.sender_count(), 1U);
  expect_counts(2, 3);
  {
    auto owned = c.tx.try_reserve_owned();  // an owned permit is a producer
    ASSERT_TRUE(owned.ok());
    expect_counts(3, 3);
  }
  expect_counts(2, 3);
  drop(r3);
  drop(r4);
  expect_counts(2, 1);
  drop(s2);
  expect_counts(1, 1);
  drop(c.tx);
  EXPECT_EQ(c.rx.sender_count(), 0U);
  EXPECT_EQ(c.rx.receiver_count(), 1U);
}

TEST(MpmcBounded, ReceiverCopiesShareTheChannelWhichDisconnectsOnlyWithTheLastOne) {
  count_scope counts;
  auto c = make_channel<counted>(3);
  mpmc::receiver<counted> copy = c.rx;
  put(c.tx, 1);
  put(c.tx, 2);
  EXPECT_EQ(copy.len(), 2U);
  EXPECT_EQ(take(copy), 1);
  EXPECT_EQ(take(c.rx), 2);
  put(c.tx, 3);
  drop(c.rx);  // not the last receiver
  EXPECT_FALSE(c.tx.is_closed());
  EXPECT_EQ(c.tx.receiver_count(), 1U);
  put(c.tx, 4);
  EXPECT_EQ(take(copy), 3);
  EXPECT_EQ(counts.values(), 1);  // 4, in the channel
  drop(copy);                     // the last one: the channel disconnects, 4 is destroyed now
  EXPECT_EQ(counts.values(), 0);
  EXPECT_TRUE(c.tx.is_closed());
  EXPECT_EQ(c.tx.receiver_count(), 0U);
  auto back = c.tx.try_send(counted(5));
  EXPECT_TRUE(back.disconnected());
  EXPECT_EQ(back.value().id(), 5);
  EXPECT_TRUE(c.tx.try_reserve().disconnected());
}

TEST(MpmcBounded, MovedFromHandlesThrowLogicErrorAndReportNothing) {
  auto c = make_channel<int>(2);
  mpmc::sender<int> tx = std::move(c.tx);
  mpmc::receiver<int> rx = std::move(c.rx);
  // NOLINTBEGIN(bugprone-use-after-move): the moved-from handles are what is tested
  EXPECT_TRUE(c.tx.is_closed());
  EXPECT_EQ(c.tx.capacity(), 0U);
  EXPECT_EQ(c.tx.sender_count(), 0U);
  EXPECT_EQ(c.tx.receiver_count(), 0U);
  EXPECT_THROW((void)c.tx.try_send(1), std::logic_error);
  EXPECT_THROW((void)c.tx.send(1), std::logic_error);
  EXPECT_THROW((void)c.tx.send_blocking(1), std::logic_error);
  EXPECT_THROW((void)c.tx.reserve(), std::logic_error);
  EXPECT_THROW((void)c.tx.try_reserve(), std::logic_error);
  EXPECT_THROW((void)c.tx.try_reserve_owned(), std::logic_error);
  c.tx.close();  // nothing to close
  EXPECT_TRUE(c.rx.is_closed());
  EXPECT_EQ(c.rx.len(), 0U);
  EXPECT_TRUE(c.rx.empty());
  EXPECT_EQ(c.rx.capacity(), 0U);
  EXPECT_EQ(c.rx.sender_count(), 0U);
  EXPECT_EQ(c.rx.receiver_count(), 0U);
  EXPECT_THROW((void)c.rx.try_recv(), std::logic_error);
  EXPECT_THROW((void)c.rx.recv(), std::logic_error);
  std::stop_source never;
  EXPECT_THROW((void)c.rx.recv(never.get_token()), std::logic_error);
  EXPECT_THROW((void)c.rx.recv_blocking(), std::logic_error);
  EXPECT_THROW((void)c.rx.recv_timeout(1ms), std::logic_error);
  c.rx.close();                                   // nothing to close
  const mpmc::receiver<int> copy_of_moved(c.rx);  // a copy of a moved-from receiver is moved-from
  const mpmc::sender<int> sender_copy_of_moved(c.tx);
  // NOLINTEND(bugprone-use-after-move)
  EXPECT_EQ(copy_of_moved.receiver_count(), 0U);
  EXPECT_TRUE(copy_of_moved.is_closed());
  EXPECT_TRUE(sender_copy_of_moved.is_closed());
  EXPECT_EQ(rx.receiver_count(), 1U);  // no receiver was added by the copies
  EXPECT_EQ(tx.sender_count(), 1U);
  EXPECT_FALSE(tx.is_closed());  // and nothing was closed
  put(tx, 1);                    // the moved-to handles work
  EXPECT_EQ(take(rx), 1);
}

TEST(MpmcBounded, HandlesMoveAndCopyAssignWithTheirChannel) {
  auto a = make_channel<int>(2);
  auto b = make_channel<int>(2);
  put(a.tx, 1);
  put(b.tx, 2);
  a.tx = std::move(b.tx);  // a's only sender goes: a is closed, drains
  EXPECT_EQ(take(a.rx), 1);
  EXPECT_TRUE(a.rx.try_recv().disconnected());
  put(a.tx, 3);  // now into b
  EXPECT_EQ(take_all(b.rx), (std::vector<int>{2, 3}));
  a.rx = b.rx;  // copy-assigned: a's receiver goes, both now receive from b
  put(a.tx, 4);
  put(a.tx, 5);
  EXPECT_EQ(take(a.rx), 4);
  EXPECT_EQ(take(b.rx), 5);
  b.rx = std::move(a.rx);  // b's old receiver goes; one receiver is left
  EXPECT_EQ(a.tx.receiver_count(), 1U);
  put(a.tx, 6);
  EXPECT_EQ(take(b.rx), 6);
  mpmc::sender<int>& self = a.tx;
  a.tx = std::move(self);  // self-assignment keeps the channel
  put(a.tx, 7);
  EXPECT_EQ(take(b.rx), 7);
}

TEST(MpmcBounded, RecvBeforeSendSuspendsAndTheSendResumesItOnceOnItsScheduler) {
  fixture<> f(2);
  auto& p = f.recv(1, plain);
  expect_waiting(p);
  put(f.c.tx, 42);
  EXPECT_EQ(f.s.ready_count(), 1U);  // posted, not resumed inside try_send
  EXPECT_EQ(p.resumed, 0);
  f.s.run();
  expect_got(p, 42);
  EXPECT_TRUE(f.c.rx.empty());
}

TEST(MpmcBounded, ACoroutineWithoutASchedulerIsResumedInlineInsideTheSend) {
  auto c = make_channel<int>(1);
  std::optional<int> got;
  bool inside_send = false;
  bool resumed_inside_send = false;
  [](mpmc::receiver<int>& rx, std::optional<int>& out, bool& inside, bool& flag) -> bare_coroutine {
    auto r = co_await rx.recv();
    flag = inside;
    if (r.ok()) out = *r;
  }(c.rx, got, inside_send, resumed_inside_send);
  EXPECT_FALSE(got.has_value());
  inside_send = true;
  put(c.tx, 5);
  inside_send = false;
  EXPECT_EQ(got, 5);
  EXPECT_TRUE(resumed_inside_send);
}

TEST(MpmcBounded, MoveOnlyPayloadsAreDeliveredAndHandedBackIntact) {
  auto c = make_channel<std::unique_ptr<int>>(2);
  mpmc::receiver<std::unique_ptr<int>> other = c.rx;
  auto one = std::make_unique<int>(1);
  int* const one_address = one.get();
  EXPECT_TRUE(c.tx.try_send(std::move(one)).ok());
  EXPECT_TRUE(block_on(c.tx.send(std::make_unique<int>(2))).ok());
  auto three = std::make_unique<int>(3);
  int* const three_address = three.get();
  auto full = c.tx.try_send(std::move(three));
  ASSERT_TRUE(full.full());
  EXPECT_EQ(full.value().get(), three_address);  // the very same object comes back
  auto first = other.try_recv();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->get(), one_address);
  EXPECT_TRUE(c.tx.send_blocking(std::move(full.value())).ok());
  EXPECT_EQ(**block_on(c.rx.recv()), 2);
  auto third = other.recv_blocking();
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->get(), three_address);
  c.rx.close();
  auto five = std::make_unique<int>(5);
  int* const five_address = five.get();
  auto refused = block_on(c.tx.send(std::move(five)));
  ASSERT_TRUE(refused.disconnected());
  EXPECT_EQ(refused.value().get(), five_address);
}

// ---------------------------------------------------------------------------------------------
// Counter wrap-around: channels whose ring indexes (both tickets) start just below 2^32

TEST(MpmcBoundedWrap, TrySendAndTryRecvOfTwoReceiversAcrossTheWrapForEveryCapacity) {
  constexpr std::uint32_t max = std::numeric_limits<std::uint32_t>::max();
  for (const std::size_t capacity : {1U, 2U, 3U, 5U, 8U}) {
    for (const std::uint32_t k : {std::uint32_t{0}, std::uint32_t{1}, std::uint32_t{2},
                                  std::uint32_t(capacity), std::uint32_t(2 * capacity + 1)}) {
      SCOPED_TRACE(testing::Message() << "capacity " << capacity << ", first index max - " << k);
      auto c = make_channel_at<int>(capacity, max - k);
      mpmc::receiver<int> other = c.rx;
      int next_send = 0;
      int next_recv = 0;
      for (int step = 0; step < 6 * static_cast<int>(capacity) + 10; ++step) {
        while (c.tx.try_send(next_send).ok()) ++next_send;
        EXPECT_EQ(c.rx.len(), capacity);
        const int n = 1 + step % static_cast<int>(capacity);
        for (int i = 0; i < n; ++i) {
          auto r = (i % 2 == 0 ? c.rx : other).try_recv();
          ASSERT_TRUE(r.ok());
          EXPECT_EQ(*r, next_recv++);
        }
      }
      for (const int v : take_all(other)) EXPECT_EQ(v, next_recv++);
      EXPECT_EQ(next_recv, next_send);
      EXPECT_EQ(c.rx.len(), 0U);
      expect_free_capacity(c.tx, capacity);
    }
  }
}

// Senders and receivers waiting across the wrap, with a permit held all along, in a random
// order per seed: every value arrives once, in order per producer for each receiver.
TEST(MpmcBoundedWrap, WaitingSendersAndReceiversAcrossTheWrap) {
  constexpr std::uint32_t max = std::numeric_limits<std::uint32_t>::max();
  constexpr int kPerProducer = 12;
  constexpr int kConsumers = 3;
  for (std::uint64_t seed = 0; seed < 60; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    auto c = make_channel_at<int>(2 + seed % 3, max - static_cast<std::uint32_t>(seed % 7));
    test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
    auto held = c.tx.try_reserve();
    ASSERT_TRUE(held.ok());
    std::stop_source never;
    std::vector<std::vector<int>> received(kConsumers);
    for (int p = 0; p < 3; ++p) {
      s.spawn([](mpmc::sender<int> tx, int producer, std::stop_token stop) -> task<void> {
        for (int i = 1; i <= kPerProducer; ++i) {
          const int v = producer * 100 + i;
          if (producer == 0) {
            auto r = co_await tx.send(v);
            EXPECT_TRUE(r.ok());
          } else if (producer == 1) {
            auto r = co_await tx.send(v, stop);
            EXPECT_TRUE(r.ok());
          } else {
            auto permit = co_await tx.reserve();
            EXPECT_TRUE(permit.ok());
            if (permit.ok()) {
              EXPECT_TRUE(permit->send(v).ok());
            }
          }
        }
      }(c.tx, p, never.get_token()));
    }
    for (int k = 0; k < kConsumers; ++k) {
      s.spawn([](mpmc::receiver<int> rx, std::vector<int>& out, bool can_stop,
                 std::stop_token stop) -> task<void> {
        for (;;) {
          std::optional<result<int>> r;
          if (can_stop) {
            r.emplace(co_await rx.recv(stop));
          } else {
            r.emplace(co_await rx.recv());
          }
          if (!r->ok()) break;
          out.push_back(**r);
        }
      }(c.rx, received[k], k == 1, never.get_token()));
    }
    s.run();
    std::size_t total = 0;
    for (const auto& got : received) total += got.size();
    EXPECT_EQ(total, static_cast<std::size_t>(3 * kPerProducer));
    EXPECT_TRUE(held->send(999).ok());  // the permit, held all along
    drop(*held);
    drop(c.tx);
    s.run();
    std::vector<int> all;
    for (const auto& got : received) {
      all.insert(all.end(), got.begin(), got.end());
      for (int p = 0; p < 3; ++p) {
        int last = p * 100;
        for (const int v : got) {
          if (v == 999 || v / 100 != p) continue;
          EXPECT_GT(v, last) << "producer " << p << " out of order for one receiver";
          last = v;
        }
      }
    }
    std::sort(all.begin(), all.end());
    std::vector<int> expected;
    for (int p = 0; p < 3; ++p) {
      for (int i = 1; i <= kPerProducer; ++i) expected.push_back(p * 100 + i);
    }
    expected.push_back(999);
    EXPECT_EQ(all, expected);
    EXPECT_TRUE(c.rx.try_recv().disconnected());
    if (HasFailure()) break;
  }
}

// Threads across the wrap: the ring's counters wrap while producers block for capacity and
// receivers block for values.
TEST(MpmcBoundedWrap, ThreadsAcrossTheWrap) {
  constexpr std::uint32_t max = std::numeric_limits<std::uint32_t>::max();
  constexpr int kPerProducer = 500;
  auto c = make_channel_at<int>(3, max - 100);
  std::vector<std::thread> producers;
  for (int p = 0; p < 2; ++p) {
    producers.emplace_back([tx = c.tx, p]() mutable {
      for (int i = 1; i <= kPerProducer; ++i) EXPECT_TRUE(tx.send_blocking(p * 10000 + i).ok());
    });
  }
  drop(c.tx);
  std::vector<std::vector<int>> got(2);
  std::vector<std::thread> consumers;
  for (int k = 0; k < 2; ++k) {
    consumers.emplace_back([rx = c.rx, &out = got[k]]() mutable {
      for (auto r = rx.recv_blocking(); r.ok(); r = rx.recv_blocking()) out.push_back(*r);
    });
  }
  drop(c.rx);
  for (auto& t : producers) t.join();
  for (auto& t : consumers) t.join();
  std::vector<int> all;
  for (const auto& out : got) {
    int last[2] = {0, 10000};
    for (const int v : out) {
      EXPECT_GT(v, last[v / 10000]);
      last[v / 10000] = v;
    }
    all.insert(all.end(), out.begin(), out.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int> expected = range(1, kPerProducer + 1);
  for (const int v : range(10001, 10001 + kPerProducer)) expected.push_back(v);
  EXPECT_EQ(all, expected);
}

// ---------------------------------------------------------------------------------------------
// Several receivers: each value to exactly one receive, FIFO among waiting receives

// Three receives, each on its own copy of the receiver, queued in order: values sent one at a
// time, or all at once, go to them in that order.
TEST(MpmcBoundedReceivers, WaitingReceivesAreServedInFifoOrder) {
  for (const bool all_at_once : {false, true}) {
    SCOPED_TRACE(all_at_once);
    fixture<> f(4);
    auto& a = f.recv(1, plain);
    auto& b = f.recv(2, stoppable);
    auto& c = f.recv(3, plain);
    expect_waiting(a);
    expect_waiting(b);
    expect_waiting(c);
    for (int v = 10; v <= 12; ++v) {
      put(f.c.tx, v);
      if (!all_at_once) {
        EXPECT_EQ(f.s.ready_count(), 1U) << "one value wakes one receive";
        f.s.run();
      }
    }
    f.s.run();
    expect_got(a, 10);
    expect_got(b, 11);
    expect_got(c, 12);
    EXPECT_EQ(f.order, (std::vector<int>{1, 2, 3}));
    EXPECT_TRUE(f.c.rx.try_recv().empty());
  }
}

TEST(MpmcBoundedReceivers, CancellingWaitingReceivesInTheMiddleKeepsTheOrderOfTheOthers) {
  fixture<> f(4);
  auto& a = f.recv(1);
  auto& b = f.recv(2);
  auto& c = f.recv(3);
  auto& d = f.recv(4);
  f.stop(1).request_stop();
  f.stop(2).request_stop();
  f.s.run();
  expect_ended(b, wait_status::cancelled);
  expect_ended(c, wait_status::cancelled);
  put(f.c.tx, 10);
  put(f.c.tx, 11);
  f.s.run();
  expect_got(a, 10);
  expect_got(d, 11);
}

// A value sent while a receive waits is that receive's: neither a try_recv (of any copy) nor a
// new receive takes it, even one that runs before the woken receive resumes.
TEST(MpmcBoundedReceivers, NeitherATryRecvNorANewReceiveOvertakesAWaitingReceive) {
  fixture<> f(4);
  auto& a = f.recv(1, plain);
  put(f.c.tx, 10);
  EXPECT_EQ(f.s.ready_count(), 1U);
  EXPECT_TRUE(f.c.rx.try_recv().empty()) << "the value is the waiting receive's";
  EXPECT_TRUE(f.copies.front().try_recv().empty());
  recv_probe<int> b;
  b.id = 2;
  mpmc::receiver<int> rx_b = f.c.rx;
  auto tb = receive(rx_b, b);
  run_inline(f.s, tb);  // before the woken receive resumes
  expect_waiting(b);
  f.s.run();
  expect_got(a, 10);
  expect_waiting(b);
  put(f.c.tx, 11);
  f.s.run();
  EXPECT_EQ(b.got(), 11);
}

// A value sent while no receive waits goes to whichever receive comes next, of any copy.
TEST(MpmcBoundedReceivers, AValueSentWhileNoneWaitsGoesToTheNextReceiveOfAnyCopy) {
  fixture<> f(4);
  put(f.c.tx, 10);
  put(f.c.tx, 11);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  expect_got(a, 10);
  expect_got(b, 11);
  auto& c = f.recv(3, plain);
  expect_waiting(c);
}

// Producers and consumers (each on its own receiver copy) on a test scheduler, in a random order
// per seed, each consumer receiving until the channel is closed: every value is received exactly
// once, in order per producer within each consumer.
TEST(MpmcBoundedReceivers, EachValueGoesToExactlyOneOfSeveralReceivingCoroutines) {
  constexpr int kProducers = 3;
  constexpr int kConsumers = 3;
  constexpr int kPerProducer = 10;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    count_scope counts;
    std::vector<std::vector<int>> got(kConsumers);
    {
      test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
      auto c = make_channel<counted>(1 + seed % 4);
      for (int p = 0; p < kProducers; ++p) {
        s.spawn([](mpmc::sender<counted> tx, int producer) -> task<void> {
          for (int i = 1; i <= kPerProducer; ++i) {
            auto r = co_await tx.send(counted(producer * 100 + i));
            EXPECT_TRUE(r.ok());
          }
        }(c.tx, p));
      }
      for (int k = 0; k < kConsumers; ++k) {
        s.spawn([](mpmc::receiver<counted> rx, std::vector<int>& out) -> task<void> {
          for (;;) {
            auto r = co_await rx.recv();
            if (!r.ok()) {
              EXPECT_TRUE(r.closed());
              break;
            }
            out.push_back(r->id());
          }
        }(c.rx, got[k]));
      }
      drop(c.tx);
      drop(c.rx);
      s.run();
    }
    std::vector<int> all;
    for (const auto& out : got) {
      int last[kProducers] = {0, 100, 200};
      for (const int v : out) {
        EXPECT_GT(v, last[v / 100]) << "out of order for one receiver";
        last[v / 100] = v;
      }
      all.insert(all.end(), out.begin(), out.end());
    }
    std::sort(all.begin(), all.end());
    std::vector<int> expected;
    for (int p = 0; p < kProducers; ++p) {
      for (int i = 1; i <= kPerProducer; ++i) expected.push_back(p * 100 + i);
    }
    EXPECT_EQ(all, expected);
    if (HasFailure()) break;
  }
}

// OS threads and coroutines on a pool receive from copies of one receiver while three threads
// send: every value exactly once.
TEST(MpmcBoundedThreads, EachValueIsReceivedExactlyOnceByThreadsAndPoolCoroutines) {
  constexpr int kProducers = 3;
  constexpr int kPerProducer = under_sanitizer ? 1000 : 5000;
  count_scope counts;
  auto c = make_channel<counted>(8);
  std::vector<std::vector<int>> got(4);
  {
    thread_pool pool(2);
    completion pool_done(2);
    std::vector<std::thread> threads;
    for (int k = 0; k < 2; ++k) {
      threads.emplace_back([rx = c.rx, &out = got[k]]() mutable {
        for (auto r = rx.recv_blocking(); r.ok(); r = rx.recv_blocking()) out.push_back(r->id());
      });
    }
    for (int k = 2; k < 4; ++k) {
      asyncband::runtime::spawn(pool.ref(),
                                [](thread_pool& p, mpmc::receiver<counted> rx, std::vector<int>& out,
                                   completion& done) -> task<void> {
                                  co_await p.schedule();
                                  for (;;) {
                                    auto r = co_await rx.recv();
                                    if (!r.ok()) break;
                                    out.push_back(r->id());
                                  }
                                  drop(rx);
                                  done.done();
                                }(pool, c.rx, got[k], pool_done));
    }
    drop(c.rx);
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([tx = c.tx, p]() mutable {
        for (int i = 1; i <= kPerProducer; ++i) EXPECT_TRUE(tx.send_blocking(counted(p * 100000 + i)).ok());
      });
    }
    drop(c.tx);
    for (auto& t : threads) t.join();
    pool_done.wait_or_abort(60s, "mpmc pool receivers");
  }
  std::vector<int> all;
  for (const auto& out : got) {
    int last[kProducers] = {0, 100000, 200000};
    for (const int v : out) {
      EXPECT_GT(v, last[v / 100000]) << "out of order for one receiver";
      last[v / 100000] = v;
    }
    all.insert(all.end(), out.begin(), out.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kProducers * kPerProducer));
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "a value was received twice";
  RecordProperty("by_threads", static_cast<int>(got[0].size() + got[1].size()));
  RecordProperty("by_coroutines", static_cast<int>(got[2].size() + got[3].size()));
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's test points, and inside a send (between its claim of a
// place and its publication, where it constructs the value: a counted payload's move hook).

/// The points where a receive has found nothing and is on its way to suspending.
constexpr test_point registering[] = {test_point::queueing, test_point::published, test_point::before_arm};

// Two receives wait; one value wakes exactly one of them (the first), and the other keeps
// waiting for the next value.
TEST(MpmcBoundedRace, OneValueWakesExactlyOneOfTwoWaitingReceives) {
  for (const bool can_stop : {plain, stoppable}) {
    SCOPED_TRACE(can_stop);
    fixture<> f(4);
    auto& a = f.recv(1, can_stop);
    auto& b = f.recv(2, can_stop);
    put(f.c.tx, 10);
    EXPECT_EQ(f.s.ready_count(), 1U);
    f.s.run();
    expect_got(a, 10);
    expect_waiting(b);
    EXPECT_TRUE(f.c.rx.try_recv().empty());
    put(f.c.tx, 11);
    f.s.run();
    expect_got(b, 11);
  }
}

// A second value is sent while the first send's wake-up has claimed the first receive and not yet
// resolved it: each of the first two receives is woken once, with a value of its own (which one
// is decided when each resumes and claims its place), and the third still waits.
TEST(MpmcBoundedRace, ASecondValueSentWhileTheFirstWakeUpIsClaimedWakesTheSecondReceive) {
  fixture<> f(4);
  auto& a = f.recv(1);
  auto& b = f.recv(2);
  auto& c = f.recv(3);
  f.s.at(test_point::claimed_for_wake, [&f] { put(f.c.tx, 11); });
  put(f.c.tx, 10);
  EXPECT_EQ(f.s.pending_actions(), 0U);
  EXPECT_EQ(f.s.ready_count(), 2U);
  f.s.run();
  EXPECT_EQ(a.resumed, 1);
  EXPECT_EQ(b.resumed, 1);
  EXPECT_EQ((std::set<int>{a.got(), b.got()}), (std::set<int>{10, 11}));
  expect_waiting(c);
  EXPECT_TRUE(f.c.rx.try_recv().empty());
}

// A value sent while a second receive registers (it found nothing, and is queued or about to be)
// goes to the first, which waited longer; the second waits for the next value.
TEST(MpmcBoundedRace, AValueSentWhileASecondReceiveRegistersGoesToTheFirst) {
  for (const test_point point : registering) {
    for (const bool can_stop : {plain, stoppable}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", stoppable " << can_stop);
      fixture<> f(4);
      auto& a = f.recv(1, plain);
      f.s.at(point, [&f] { put(f.c.tx, 10); });
      auto& b = f.recv(2, can_stop);
      EXPECT_EQ(f.s.pending_actions(), 0U);
      expect_got(a, 10);
      expect_waiting(b);
      put(f.c.tx, 11);
      f.s.run();
      expect_got(b, 11);
    }
  }
}

// A value sent while the only receive registers completes it without suspending.
TEST(MpmcBoundedRace, AValueSentWhileTheOnlyReceiveRegistersCompletesItWithoutSuspending) {
  for (const test_point point : registering) {
    for (const bool can_stop : {plain, stoppable}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", stoppable " << can_stop);
      fixture<> f(2);
      f.s.at(point, [&f] { put(f.c.tx, 7); });
      auto& p = f.start_recv(1, can_stop);
      EXPECT_EQ(f.s.run(), 1U);  // one step: never suspended
      EXPECT_EQ(f.s.pending_actions(), 0U);
      expect_got(p, 7);
      f.stop(0).request_stop();  // nothing to cancel any more
      put(f.c.tx, 8);
      EXPECT_EQ(f.s.run(), 0U);
      EXPECT_EQ(take(f.c.rx), 8);
    }
  }
}

TEST(MpmcBoundedCancel, AnAlreadyStoppedTokenCancelsAtOnceAndTakesNothing) {
  count_scope counts;
  auto c = make_channel<counted>(2);
  std::stop_source stopped;
  stopped.request_stop();
  auto a = block_on(c.tx.send(counted(1), stopped.get_token()));  // capacity is there: still cancelled
  EXPECT_TRUE(a.cancelled());
  EXPECT_EQ(a.value().id(), 1);
  EXPECT_TRUE(block_on(c.tx.reserve(stopped.get_token())).cancelled());
  put(c.tx, 3);
  EXPECT_TRUE(block_on(c.rx.recv(stopped.get_token())).cancelled());  // a value is there: still cancelled
  EXPECT_TRUE(c.rx.recv_blocking(stopped.get_token()).cancelled());
  test_scheduler s;
  recv_probe<counted> p;
  s.spawn(receive(c.rx, p, stoppable, stopped.get_token()));
  EXPECT_EQ(s.run(), 1U);
  expect_ended(p, wait_status::cancelled);
  EXPECT_EQ(take(c.rx), 3);  // the value stayed
  expect_free_capacity(c.tx, 2);
}

// A receive woken for a value (its unit granted, not yet resumed) is stopped: it ends cancelled
// and takes nothing; the value goes to the next waiting receive, or stays in the channel.
TEST(MpmcBoundedRace, AReceiveWokenForAValueThenStoppedPassesItToTheNextWaitingReceive) {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    count_scope counts;
    fixture<counted> f(2);
    auto& a = f.recv(1, stoppable);
    recv_probe<counted>* b = next_waits ? &f.recv(2, plain) : nullptr;
    f.s.at(test_point::claimed_for_wake, [&f] { f.stop(0).request_stop(); });
    put(f.c.tx, 10);
    EXPECT_EQ(f.s.pending_actions(), 0U);
    f.s.run();
    expect_ended(a, wait_status::cancelled);
    if (next_waits) {
      expect_got(*b, 10);
      EXPECT_TRUE(f.c.rx.try_recv().empty());
    } else {
      EXPECT_EQ(f.c.rx.len(), 1U);
      EXPECT_EQ(take(f.c.rx), 10);
    }
    expect_free_capacity(f.c.tx, 2);
  }
}

// The stop request unlinked the first receive and released the lock; a value published before
// the stop resolves it goes to the second receive (or stays): one resumption each.
TEST(MpmcBoundedRace, AValueSentWhileAStopHoldsTheFirstReceiveClaimedGoesToTheSecond) {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    fixture<> f(2);
    auto& a = f.recv(1, stoppable);
    recv_probe<int>* b = next_waits ? &f.recv(2, plain) : nullptr;
    f.s.at(test_point::claimed_for_cancel, [&f] { put(f.c.tx, 10); });
    f.stop(0).request_stop();
    EXPECT_EQ(f.s.pending_actions(), 0U);
    EXPECT_EQ(f.s.ready_count(), next_waits ? 2U : 1U);
    f.s.run();
    expect_ended(a, wait_status::cancelled);
    if (next_waits) {
      expect_got(*b, 10);
    } else {
      EXPECT_EQ(take(f.c.rx), 10);
    }
  }
}

// A stop request while a receive registers cancels it; a value sent later goes to the next.
TEST(MpmcBoundedRace, AStopWhileAReceiveRegistersCancelsItAndTheValueStays) {
  for (const test_point point : registering) {
    SCOPED_TRACE(static_cast<int>(point));
    fixture<> f(2);
    f.s.at(point, [&f] { f.stop(0).request_stop(); });
    auto& p = f.start_recv(1, stoppable);
    EXPECT_EQ(f.s.run(), 1U);
    expect_ended(p, wait_status::cancelled);
    put(f.c.tx, 5);  // nobody is queued any more
    EXPECT_EQ(f.s.run(), 0U);
    EXPECT_EQ(take(f.c.rx), 5);
  }
}

// A suspended receive is destroyed (its frame): it takes nothing, and leaves the queue of
// receives, so a value sent later goes to the one behind it.
TEST(MpmcBoundedDestroy, DestroyingASuspendedReceiveTakesNothing) {
  for (const bool can_stop : {plain, stoppable}) {
    SCOPED_TRACE(can_stop);
    fixture<> f(2);
    auto& doomed = f.recv(1, can_stop);
    auto& next = f.recv(2, plain);
    f.task_of(0) = {};
    f.stop(0).request_stop();  // its stop callback went with it
    EXPECT_EQ(f.s.ready_count(), 0U);
    put(f.c.tx, 5);  // would touch freed memory if the node were still linked
    f.s.run();
    EXPECT_EQ(doomed.resumed, 0);
    expect_got(next, 5);
  }
}

// A send has claimed a receive for its value but not resolved it when the receive's frame is
// destroyed (on another thread): the destructor waits for the send to resolve it, and the value
// goes to the next waiting receive, or stays in the channel.
TEST(MpmcBoundedDestroy, AReceiveWokenForAValueThenDestroyedPassesItOn) {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    count_scope counts;
    auto c = make_channel<counted>(2);
    mpmc::receiver<counted> rx_b = c.rx;
    test_scheduler s;
    recv_probe<counted> doomed;
    recv_probe<counted> next;
    auto t = receive(c.rx, doomed);
    t.handle().resume();  // no scheduler: resumed inline by its resolver, if ever
    auto tb = receive(rx_b, next);
    if (next_waits) {
      start_on(s, tb);
      s.run();
      expect_waiting(next);
    }
    asyncband::manual_reset_event claimed;
    asyncband::manual_reset_event destroying;
    std::thread sender([&] {
      const thread_hook hook(test_point::claimed_for_wake, [&] {
        claimed.set();
        destroying.wait_blocking();  // resolve only once the destructor waits for it
      });
      put(c.tx, 5);
    });
    claimed.wait_blocking();
    {
      const thread_hook hook(test_point::awaiting_resolver, [&] { destroying.set(); });
      t = {};
    }
    sender.join();
    EXPECT_EQ(doomed.resumed, 0);
    if (next_waits) {
      EXPECT_EQ(s.ready_count(), 1U);
      s.run();
      expect_got(next, 5);
      EXPECT_TRUE(c.rx.try_recv().empty());
    } else {
      EXPECT_EQ(take(c.rx), 5);
    }
    expect_free_capacity(c.tx, 2);
  }
}

// Close (by either half) while a send writes its value, with three receives waiting: the send
// was accepted, so the first receive gets its value; the others end closed once it is taken.
TEST(MpmcBoundedRace, CloseWhileASendWritesItsValueWithReceivesWaiting) {
  for (const bool by_receiver : {false, true}) {
    SCOPED_TRACE(by_receiver);
    count_scope counts;
    fixture<counted> f(2);
    auto& a = f.recv(1, plain);
    auto& b = f.recv(2, stoppable);
    auto& c = f.recv(3, plain);
    counted::at_move(1, [&f, by_receiver] {
      if (by_receiver) {
        f.copies.back().close();
      } else {
        f.c.tx.close();
      }
      EXPECT_TRUE(f.c.rx.is_closed());
      EXPECT_TRUE(f.c.tx.try_send(counted(2)).disconnected());
      EXPECT_EQ(f.s.ready_count(), 0U) << "nothing is drained while the value is written";
    });
    put(f.c.tx, 1);
    f.s.run();
    expect_got(a, 1);
    expect_ended(b, wait_status::closed);
    expect_ended(c, wait_status::closed);
    EXPECT_TRUE(f.c.rx.try_recv().disconnected());
  }
}

// Close lands while a send's wake-up holds the first receive claimed: that receive still gets the
// value; the second ends closed only once the value is taken (its unit of capacity is back).
TEST(MpmcBoundedRace, CloseWhileAReceiveIsWokenForTheLastValue) {
  fixture<> f(2);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, plain);
  f.s.at(test_point::claimed_for_wake, [&f] { f.c.rx.close(); });
  put(f.c.tx, 1);
  EXPECT_EQ(f.s.pending_actions(), 0U);
  EXPECT_EQ(f.s.ready_count(), 1U) << "b must wait until the value is taken";
  f.s.run();
  expect_got(a, 1);
  expect_ended(b, wait_status::closed);
}

// Close with sends waiting for capacity and a value queued: the sends end disconnected with their
// values, the queued value still goes to a receive, and then every receive ends closed.
TEST(MpmcBoundedRace, CloseEndsWaitingSendsDisconnectedAndReceivesDrainWhatWasAccepted) {
  count_scope counts;
  fixture<counted> f(1, 1);
  auto& s1 = f.send(1, plain);
  auto& s2 = f.send(2, stoppable);
  reserve_probe<counted> r;
  f.s.spawn(reserve_into(f.c.tx, r));
  f.s.run();
  expect_waiting(s1);
  expect_waiting(r);
  f.c.rx.close();
  f.s.run();
  expect_handed_back(s1, send_status::disconnected);
  expect_handed_back(s2, send_status::disconnected);
  EXPECT_EQ(r.status, wait_status::closed);
  auto& a = f.recv(3, plain);
  auto& b = f.recv(4, plain);
  expect_got(a, 100);
  expect_ended(b, wait_status::closed);
  EXPECT_TRUE(f.c.rx.try_recv().disconnected());
}

// Close while a receive registers on an empty channel ends it closed without suspending; on a
// channel holding a value, it gets the value.
TEST(MpmcBoundedRace, CloseWhileAReceiveRegisters) {
  for (const test_point point : registering) {
    for (const bool with_value : {false, true}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", value " << with_value);
      fixture<> f(2);
      f.s.at(point, [&f, with_value] {
        if (with_value) put(f.c.tx, 5);
        f.c.tx.close();
      });
      auto& p = f.start_recv(1, plain);
      EXPECT_EQ(f.s.run(), 1U);
      if (with_value) {
        expect_got(p, 5);
      } else {
        expect_ended(p, wait_status::closed);
      }
      EXPECT_TRUE(f.c.rx.try_recv().disconnected());
    }
  }
}

// Permits held at close still send, and their values are received; receives end closed once every
// unit is back (used and received, or returned).
TEST(MpmcBoundedRace, PermitsHeldAtCloseStillSendAndTheirValuesAreReceived) {
  for (const bool return_one : {false, true}) {
    SCOPED_TRACE(return_one);
    fixture<> f(5);
    auto plain_permit = f.c.tx.try_reserve();
    auto owned = f.c.tx.try_reserve_owned();
    auto many = f.c.tx.try_reserve(2);
    auto spare = f.c.tx.try_reserve();
    ASSERT_TRUE(plain_permit.ok() && owned.ok() && many.ok() && spare.ok());
    f.c.tx.close();
    EXPECT_TRUE(f.c.tx.try_send(9).disconnected());
    EXPECT_TRUE(f.c.tx.try_reserve().disconnected());
    std::vector<recv_probe<int>*> r;
    for (int i = 1; i <= 5; ++i) r.push_back(&f.recv(i, i % 2 == 0));
    EXPECT_TRUE(plain_permit->send(1).ok());
    EXPECT_TRUE(owned->send(2).ok());
    EXPECT_TRUE(many->send(3).ok());
    EXPECT_TRUE(many->send(4).ok());
    f.s.run();
    for (int i = 0; i < 4; ++i) expect_got(*r[i], i + 1);
    expect_waiting(*r[4]);  // the spare unit is still out
    if (return_one) {
      drop(*spare);
    } else {
      EXPECT_TRUE(spare->send(5).ok());
    }
    f.s.run();
    if (return_one) {
      expect_ended(*r[4], wait_status::closed);
    } else {
      expect_got(*r[4], 5);
    }
    EXPECT_TRUE(f.c.rx.try_recv().disconnected());
  }
}

// The last receiver goes (its copies one after the other) while sends and a reservation wait for
// capacity: they end disconnected, the sends with their values; the value queued is destroyed once.
TEST(MpmcBoundedRace, TheLastReceiverGoingWakesWaitingSendsDisconnectedWithTheirValues) {
  count_scope counts;
  fixture<counted> f(1, 1);
  mpmc::receiver<counted> copy = f.c.rx;
  auto& s1 = f.send(1, plain);
  auto& s2 = f.send(2, stoppable);
  reserve_probe<counted> r;
  f.s.spawn(reserve_into(f.c.tx, r));
  f.s.run();
  drop(f.c.rx);  // not the last receiver
  f.s.run();
  expect_waiting(s1);
  expect_waiting(s2);
  expect_waiting(r);
  EXPECT_EQ(counts.values(), 3);
  drop(copy);  // the last one
  EXPECT_EQ(counts.values(), 2) << "the value received by nobody is destroyed now";
  f.s.run();
  expect_handed_back(s1, send_status::disconnected);
  expect_handed_back(s2, send_status::disconnected);
  EXPECT_EQ(r.status, wait_status::closed);
  EXPECT_FALSE(r.permit.has_value());
  EXPECT_TRUE(f.c.tx.is_closed());
}

// A unit was granted to a waiting send (a permit was returned); the last receiver goes before the
// send is resolved (at the test point) or before it resumes: the send hands its value back.
TEST(MpmcBoundedRace, TheLastReceiverGoingWhileAGrantedSendIsAboutToResumeHandsItsValueBack) {
  for (const bool at_point : {false, true}) {
    SCOPED_TRACE(at_point);
    count_scope counts;
    fixture<counted> f(1);
    auto permit = f.c.tx.try_reserve();
    ASSERT_TRUE(permit.ok());
    auto& a = f.send(1, stoppable);
    if (at_point) {
      f.s.at(test_point::claimed_for_wake, [&f] { drop(f.c.rx); });
      drop(*permit);
      EXPECT_EQ(f.s.pending_actions(), 0U);
    } else {
      drop(*permit);
      ASSERT_EQ(f.s.ready_count(), 1U);
      drop(f.c.rx);
    }
    f.s.run();
    expect_handed_back(a, send_status::disconnected);
    EXPECT_EQ(counts.values(), 1);  // the value handed back
  }
}

// The last receiver goes while a send waiting for capacity registers: it ends disconnected with
// its value, without suspending.
TEST(MpmcBoundedRace, TheLastReceiverGoingWhileASendRegistersEndsItDisconnected) {
  for (const test_point point : registering) {
    for (const bool can_stop : {plain, stoppable}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", stoppable " << can_stop);
      count_scope counts;
      fixture<counted> f(1, 1);
      f.s.at(point, [&f] { drop(f.c.rx); });
      auto& p = f.start_send(1, can_stop);
      EXPECT_EQ(f.s.run(), 1U);
      EXPECT_EQ(f.s.pending_actions(), 0U);
      expect_handed_back(p, send_status::disconnected);
      EXPECT_EQ(counts.values(), 1);  // only the value handed back
    }
  }
}

// The last sender goes: receives drain what was sent (the waiting ones first), then every
// receive ends closed.
TEST(MpmcBoundedRace, TheLastSenderGoingLetsReceivesDrainThenEndsThemClosed) {
  fixture<> f(4);
  mpmc::sender<int> other = f.c.tx;
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  auto& c = f.recv(3, plain);
  put(f.c.tx, 1);
  drop(f.c.tx);  // not the last sender
  f.s.run();
  expect_got(a, 1);
  expect_waiting(b);
  expect_waiting(c);
  put(other, 2);
  drop(other);  // the last one
  f.s.run();
  expect_got(b, 2);
  expect_ended(c, wait_status::closed);
  auto& d = f.recv(4, plain);
  expect_ended(d, wait_status::closed);
  EXPECT_TRUE(f.c.rx.try_recv().disconnected());
}

TEST(MpmcBoundedRace, ValuesQueuedWhenTheLastSenderGoesAreStillReceivedByAnyCopy) {
  fixture<> f(4);
  put(f.c.tx, 1);
  put(f.c.tx, 2);
  drop(f.c.tx);
  EXPECT_TRUE(f.c.rx.is_closed());
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  auto& c = f.recv(3, plain);
  expect_got(a, 1);
  expect_got(b, 2);
  expect_ended(c, wait_status::closed);
}

// The last sender goes while a receive registers: it ends closed without suspending, after a value
// that was sent first.
TEST(MpmcBoundedRace, TheLastSenderGoingWhileAReceiveRegistersEndsItClosed) {
  for (const test_point point : registering) {
    for (const bool with_value : {false, true}) {
      SCOPED_TRACE(testing::Message() << "point " << static_cast<int>(point) << ", value " << with_value);
      fixture<> f(2);
      f.s.at(point, [&f, with_value] {
        if (with_value) put(f.c.tx, 5);
        drop(f.c.tx);
      });
      auto& p = f.start_recv(1, plain);
      EXPECT_EQ(f.s.run(), 1U);
      if (with_value) {
        expect_got(p, 5);
        EXPECT_TRUE(block_on(f.c.rx.recv()).closed());
      } else {
        expect_ended(p, wait_status::closed);
      }
    }
  }
}

// Owned permits are producers: after every sender is gone they still send, and receives end
// closed only once the last of them is gone.
TEST(MpmcBoundedRace, OwnedPermitsKeepTheChannelOpenAfterEverySenderIsGone) {
  fixture<> f(4);
  auto owned = f.c.tx.try_reserve_owned(2);
  ASSERT_TRUE(owned.ok());
  drop(f.c.tx);
  EXPECT_FALSE(f.c.rx.is_closed());
  EXPECT_EQ(f.c.rx.sender_count(), 1U);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, plain);
  EXPECT_TRUE(owned->send(1).ok());
  f.s.run();
  expect_got(a, 1);
  expect_waiting(b);
  drop(*owned);  // the last producer, with one unit unused
  f.s.run();
  expect_ended(b, wait_status::closed);
}

// A receive on another thread holds a unit for a value published at a later place, while this
// thread is still writing the place before it (the receive's place, claimed before the other
// value's): the receive waits for that write (test point awaiting_publication, reached while the
// write is held) and takes its value; the later value stays for the next receive.
TEST(MpmcBoundedRace, AReceiveWaitsForAPlaceAnotherThreadIsWriting) {
  for (const int form : {0, 1, 2}) {
    SCOPED_TRACE(form);
    count_scope counts;
    auto c = make_channel<counted>(3);
    mpmc::sender<counted> other_tx = c.tx;
    mpmc::receiver<counted> other_rx = c.rx;
    std::latch receiver_waits(1);
    std::thread receiving;
    std::optional<int> got;
    std::stop_source never;
    counted::at_move(1, [&] {  // this thread's write of place 0
      receiving = std::thread([&] {
        put(other_tx, 2);  // place 1: published, a unit of items for it
        const thread_hook hook(test_point::awaiting_publication, [&] { receiver_waits.count_down(); });
        std::optional<result<counted>> r;
        if (form == 0) r.emplace(other_rx.recv_blocking());
        if (form == 1) r.emplace(other_rx.recv_blocking(never.get_token()));
        if (form == 2) r.emplace(block_on(other_rx.recv()));
        if (r->ok()) got = (*r)->id();
      });
      receiver_waits.wait();  // the receive is committed to waiting for this write
    });
    put(c.tx, 1);
    receiving.join();
    EXPECT_EQ(got, 1);
    EXPECT_EQ(take(c.rx), 2);
    EXPECT_TRUE(c.rx.try_recv().empty());
    expect_free_capacity(c.tx, 3);
  }
}

// A receive inside its own thread's write of the place it would claim can never finish: debug
// builds assert (contract).
TEST(MpmcBoundedMisuseDeathTest, AReceiveInsideItsOwnThreadsWriteOfItsPlaceIsCaughtInDebugBuilds) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  EXPECT_DEATH(
      {
        auto c = make_channel<counted>(3);
        counted::at_move(1, [&c] {
          put(c.tx, 2);           // a value at a later place, so the receive has a unit
          (void)c.rx.try_recv();  // claims place 0: this thread's write
        });
        put(c.tx, 1);
      },
      "a receive from inside the construction");
}

// Regression: the last receiver going inside this thread's construction of a value (place 0),
// with a later value published (place 1). The receiver's going destroyed the values received by
// nobody by claiming them one by one, and so waited for place 0's write, further up its own
// stack: a debug build asserted ("a receive from inside the construction"), a release build
// hung. Now it destroys the values up to the first place still being written, and the rest go
// with the channel.
TEST(MpmcBoundedRace, TheLastReceiverGoingInsideItsThreadsWriteOfAnEarlierPlaceDoesNotWaitForIt) {
  count_scope counts;
  auto c = make_channel<counted>(3);
  counted::at_move(1, [&] {
    put(c.tx, 2);
    drop(c.rx);
    EXPECT_EQ(counts.values(), 2) << "1 is being moved, 2 waits behind it";
  });
  put(c.tx, 1);  // accepted: it was sent before the receiver went
  EXPECT_EQ(counts.values(), 2);
  auto back = c.tx.try_send(counted(3));
  EXPECT_TRUE(back.disconnected());
  drop(c.tx);                     // the last reference: 1 and 2 go with the channel
  EXPECT_EQ(counts.values(), 1);  // only `back`
}

// The last receiver goes while another thread writes a value: that value is accepted, and
// destroyed once, with the channel.
TEST(MpmcBoundedRace, TheLastReceiverGoingWhileASendWritesDestroysTheValueOnceWithTheChannel) {
  count_scope counts;
  auto c = make_channel<counted>(3);
  put(c.tx, 1);
  counted::at_move(1, [&] {
    drop(c.rx);
    EXPECT_EQ(counts.values(), 1);  // 1 was destroyed with the receiver; 2 is being moved
  });
  put(c.tx, 2);
  EXPECT_EQ(counts.values(), 1);  // 2, in the channel
  drop(c.tx);
  EXPECT_EQ(counts.values(), 0);
}

// ---------------------------------------------------------------------------------------------
// when_any: a receive that loses takes nothing

/// `co_await when_any(rx.recv(), ev.wait())`, recording the winner and the value received.
task<void> recv_or_event(mpmc::receiver<int>& rx, asyncband::auto_reset_event& ev,
                         std::optional<std::size_t>& index, std::optional<int>& value) {
  auto r = co_await when_any(rx.recv(), ev.wait());
  index = r.index();
  if (r.index() == 0 && r.get<0>().ok()) value = *r.get<0>();
}

// The event is ready first: the receive loses, takes nothing, and a value sent later goes to
// the next receive.
TEST(MpmcBoundedWhenAny, AReceiveThatLosesAtOnceTakesNothing) {
  auto c = make_channel<int>(2);
  asyncband::auto_reset_event ev(true);
  auto r = block_on(when_any(c.rx.recv(), ev.wait()));
  EXPECT_EQ(r.index(), 1U);
  ASSERT_TRUE(r.has<0>());
  EXPECT_TRUE(r.get<0>().cancelled());
  put(c.tx, 5);
  EXPECT_EQ(take(c.rx), 5);
}

// A receive and an event wait, both queued; the event wins, and a value sent while the winner's
// wake-up is claimed (the losing receive still queued) is not given to the loser: it stays for
// the next receive, or goes to a receive queued behind the loser.
TEST(MpmcBoundedWhenAny, AReceiveThatLosesWhileQueuedTakesNothingAndDoesNotHoldUpOthers) {
  for (const bool next_waits : {false, true}) {
    SCOPED_TRACE(next_waits);
    fixture<> f(2);
    asyncband::auto_reset_event ev(false);
    std::optional<std::size_t> index;
    std::optional<int> value;
    auto t = recv_or_event(f.c.rx, ev, index, value);
    start_on(f.s, t);
    f.s.run();
    EXPECT_FALSE(index.has_value());
    recv_probe<int>* next = next_waits ? &f.recv(2, plain) : nullptr;
    f.s.at(test_point::claimed_for_wake, [&f] { put(f.c.tx, 5); });
    ev.notify_one();
    f.s.run();
    EXPECT_EQ(index, 1U);
    EXPECT_FALSE(value.has_value());
    if (next_waits) {
      expect_got(*next, 5);
    } else {
      EXPECT_EQ(take(f.c.rx), 5);
    }
    EXPECT_TRUE(f.c.rx.try_recv().empty());
  }
}

// The event branch publishes first; as the receive branch is about to queue, the event is
// notified (its branch wins) and a value is sent, which the receive branch takes as it publishes:
// having lost, it passes its unit on, so the value stays for the next receive.
TEST(MpmcBoundedWhenAny, AReceiveCompletingDuringItsPublicationAfterTheOtherBranchWonPassesItOn) {
  fixture<> f(2);
  asyncband::auto_reset_event ev(false);
  std::optional<std::size_t> index;
  f.s.spawn([](asyncband::auto_reset_event& e, mpmc::receiver<int>& rx,
               std::optional<std::size_t>& idx) -> task<void> {
    auto r = co_await when_any(e.wait(), rx.recv());
    idx = r.index();
  }(ev, f.c.rx, index));
  f.s.at(test_point::queueing, [] {});  // the event branch's
  f.s.at(test_point::queueing, [&f, &ev] {
    ev.notify_one();
    put(f.c.tx, 5);
  });
  f.s.run();
  EXPECT_EQ(f.s.pending_actions(), 0U);
  EXPECT_EQ(index, 0U);
  EXPECT_EQ(take(f.c.rx), 5);
  EXPECT_TRUE(f.c.rx.try_recv().empty());
}

// Receives of two channels: the one whose channel gets a value wins; the other takes nothing,
// and the values sent to its channel later stay for its next receive.
TEST(MpmcBoundedWhenAny, TwoReceivesOfTwoChannels) {
  for (const int winner : {0, 1}) {
    SCOPED_TRACE(winner);
    auto a = make_channel<int>(2);
    auto b = make_channel<int>(2);
    test_scheduler s;
    std::optional<std::size_t> index;
    std::optional<int> value;
    s.spawn([](mpmc::receiver<int>& ra, mpmc::receiver<int>& rb, std::optional<std::size_t>& idx,
               std::optional<int>& v) -> task<void> {
      auto r = co_await when_any(ra.recv(), rb.recv());
      idx = r.index();
      if (r.index() == 0) v = *r.get<0>();
      if (r.index() == 1) v = *r.get<1>();
    }(a.rx, b.rx, index, value));
    s.run();
    EXPECT_FALSE(index.has_value());
    put(winner == 0 ? a.tx : b.tx, 7);
    put(winner == 0 ? b.tx : a.tx, 8);  // after the winner: the loser must not take it
    s.run();
    EXPECT_EQ(index, static_cast<std::size_t>(winner));
    EXPECT_EQ(value, 7);
    EXPECT_EQ(take(winner == 0 ? b.rx : a.rx), 8);
    EXPECT_TRUE(a.rx.try_recv().empty());
    EXPECT_TRUE(b.rx.try_recv().empty());
  }
}

// Both channels hold a value: the first receive wins at once, the second channel's value stays.
TEST(MpmcBoundedWhenAny, TwoReadyReceivesTakeOnlyTheFirstValue) {
  auto a = make_channel<int>(2);
  auto b = make_channel<int>(2);
  put(a.tx, 1);
  put(b.tx, 2);
  auto r = block_on(when_any(a.rx.recv(), b.rx.recv()));
  ASSERT_EQ(r.index(), 0U);
  EXPECT_EQ(*r.get<0>(), 1);
  EXPECT_EQ(b.rx.len(), 1U);
  EXPECT_EQ(take(b.rx), 2);
}

// A send to a full channel loses: its value comes back in the result, and no unit is taken.
TEST(MpmcBoundedWhenAny, ASendThatLosesHandsItsValueBack) {
  auto c = make_channel<std::unique_ptr<int>>(1);
  EXPECT_TRUE(c.tx.try_send(std::make_unique<int>(1)).ok());  // full
  asyncband::auto_reset_event ev(true);
  auto r = block_on(when_any(c.tx.send(std::make_unique<int>(2)), ev.wait()));
  ASSERT_EQ(r.index(), 1U);
  ASSERT_TRUE(r.has<0>());
  EXPECT_TRUE(r.get<0>().cancelled());
  ASSERT_NE(r.get<0>().value(), nullptr);
  EXPECT_EQ(*r.get<0>().value(), 2);
  EXPECT_EQ(c.rx.len(), 1U);
}

// ---------------------------------------------------------------------------------------------
// A payload whose move constructor throws

/// The ways to send one value; each throws on the value's move into the ring (the sends that
/// hold the value in an awaiter or a parameter first move it once more).
enum class send_form { try_send, send_blocking, send_timeout, permit, owned_permit, await, await_stoppable };
constexpr send_form all_send_forms[] = {
    send_form::try_send,     send_form::send_blocking, send_form::send_timeout,   send_form::permit,
    send_form::owned_permit, send_form::await,         send_form::await_stoppable};

/// Sends counted(id) with `form`; the move into the ring throws. Returns how it ended (an
/// exception propagates).
send_result<counted> send_throwing(send_form form, mpmc::sender<counted>& tx, int id) {
  std::stop_source never;
  switch (form) {
    case send_form::try_send:
      return tx.try_send(counted(id, 1));
    case send_form::send_blocking:
      return tx.send_blocking(counted(id, 1));
    case send_form::send_timeout:
      return tx.send_timeout(counted(id, 1), 1h);
    case send_form::permit: {
      auto p = tx.try_reserve();
      EXPECT_TRUE(p.ok());
      return p->send(counted(id, 1));
    }
    case send_form::owned_permit: {
      auto p = tx.try_reserve_owned();
      EXPECT_TRUE(p.ok());
      return p->send(counted(id, 2));  // a parameter of its own first
    }
    case send_form::await:
      return block_on(tx.send(counted(id, 2)));  // the awaiter holds it first
    case send_form::await_stoppable:
      return block_on(tx.send(counted(id, 2), never.get_token()));
  }
  return {};
}

// The send propagates the exception and nothing is received; its place is empty, and its unit of
// capacity is back at once, without any receive or later value: the whole capacity can be sent.
// Regression: the empty place kept its unit until a receive holding a unit for a later value
// passed it, so a capacity-1 channel stayed full for good after one throwing send.
TEST(MpmcBoundedThrowing, AThrowingMoveInASendLeavesTheCapacityExactAndLosesNothing) {
  for (const std::size_t capacity : {1U, 3U}) {
    for (const send_form form : all_send_forms) {
      SCOPED_TRACE(testing::Message() << "capacity " << capacity << ", form " << static_cast<int>(form));
      count_scope counts;
      auto c = make_channel<counted>(capacity);
      EXPECT_THROW((void)send_throwing(form, c.tx, 1), payload_error);
      EXPECT_EQ(counts.values(), 0);
      EXPECT_EQ(c.rx.len(), 0U);
      EXPECT_TRUE(c.rx.try_recv().empty());
      expect_free_capacity(c.tx, capacity);
      for (int i = 0; i < static_cast<int>(capacity); ++i) put(c.tx, 2 + i);
      EXPECT_TRUE(c.tx.try_send(counted(99)).full());
      EXPECT_EQ(take_all(c.rx), range(2, 2 + static_cast<int>(capacity)));
      expect_free_capacity(c.tx, capacity);
    }
  }
}

// Empty places between values: each is passed by the receive of the value before it, so that the
// capacity is whole again once the values are received.
TEST(MpmcBoundedThrowing, AThrowingSendBetweenValuesKeepsTheOthers) {
  count_scope counts;
  auto c = make_channel<counted>(4);
  mpmc::receiver<counted> other = c.rx;
  put(c.tx, 1);
  EXPECT_THROW((void)c.tx.try_send(counted(2, 1)), payload_error);
  put(c.tx, 3);
  EXPECT_THROW((void)c.tx.try_send(counted(4, 1)), payload_error);
  EXPECT_EQ(take(c.rx), 1);
  EXPECT_EQ(take(other), 3);
  EXPECT_TRUE(c.rx.try_recv().empty());
  EXPECT_EQ(c.rx.len(), 0U);
  expect_free_capacity(c.tx, 4);
  drop(c.tx);
  EXPECT_TRUE(c.rx.try_recv().disconnected());
}

// Receives wait across a throwing send: it wakes none of them, its unit is back, and the next
// value goes to the first of them.
TEST(MpmcBoundedThrowing, WaitingReceivesSleepThroughAThrowingSendAndGetTheNextValues) {
  count_scope counts;
  fixture<counted> f(1);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  EXPECT_THROW((void)f.c.tx.try_send(counted(7, 1)), payload_error);
  EXPECT_EQ(f.s.ready_count(), 0U);
  auto& s = f.send(10, plain);  // capacity 1: it needs the unit the empty place had
  expect_sent(s);
  f.s.run();
  expect_got(a, 10);
  expect_waiting(b);
  put(f.c.tx, 11);
  f.s.run();
  expect_got(b, 11);
}

// Regression: on a closed channel with receives waiting and one permit outstanding, the permit's
// send throws. Its empty place kept its unit of capacity (no value followed to let a receive
// pass it), so the channel never drained and the receives waited for good although nothing
// could come any more.
TEST(MpmcBoundedThrowing, AClosedChannelWhoseLastPermitsSendThrowsEndsItsReceivesClosed) {
  count_scope counts;
  fixture<counted> f(2);
  auto permit = f.c.tx.try_reserve();
  ASSERT_TRUE(permit.ok());
  f.c.rx.close();
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  EXPECT_THROW((void)permit->send(counted(1, 1)), payload_error);
  f.s.run();
  expect_ended(a, wait_status::closed);
  expect_ended(b, wait_status::closed);
  EXPECT_TRUE(f.c.rx.try_recv().disconnected());
}

// As above, with a value accepted before the empty place: the receive of that value passes the
// empty place, and the next receive ends closed.
TEST(MpmcBoundedThrowing, AnEmptyPlaceBehindAValueIsPassedByTheValuesReceive) {
  count_scope counts;
  fixture<counted> f(3);
  auto permit = f.c.tx.try_reserve(2);
  ASSERT_TRUE(permit.ok());
  f.c.rx.close();
  EXPECT_TRUE(permit->send(counted(1)).ok());
  EXPECT_THROW((void)permit->send(counted(2, 1)), payload_error);
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, plain);
  expect_got(a, 1);
  expect_ended(b, wait_status::closed);
}

/// Receives once with try_recv, recv_blocking or a coroutine recv; the move out of the ring throws.
enum class recv_form { try_recv, blocking, await };

// The move out of the ring throws: the exception propagates, the value stays in the channel, and
// the next receive (of any copy) takes it before the newer values; the capacity is exact all along.
TEST(MpmcBoundedThrowing, AThrowingMoveInRecvLeavesTheValueForTheNextReceiveBeforeNewerOnes) {
  for (const recv_form form : {recv_form::try_recv, recv_form::blocking, recv_form::await}) {
    SCOPED_TRACE(static_cast<int>(form));
    count_scope counts;
    auto c = make_channel<counted>(3);
    mpmc::receiver<counted> other = c.rx;
    EXPECT_TRUE(c.tx.try_send(counted(1, 2)).ok());  // one move into the ring: the next one throws
    put(c.tx, 2);
    switch (form) {
      case recv_form::try_recv:
        EXPECT_THROW((void)c.rx.try_recv(), payload_error);
        break;
      case recv_form::blocking:
        EXPECT_THROW((void)c.rx.recv_blocking(), payload_error);
        break;
      case recv_form::await: {
        test_scheduler s;
        bool threw = false;
        s.spawn([](mpmc::receiver<counted>& rx, bool& out) -> task<void> {
          try {
            auto r = co_await rx.recv();
            ADD_FAILURE() << "no exception; status " << static_cast<int>(r.status());
          } catch (const payload_error&) {
            out = true;
          }
        }(c.rx, threw));
        s.run();
        EXPECT_TRUE(threw);
        break;
      }
    }
    EXPECT_EQ(counts.values(), 2);  // value 1 stayed in the channel
    EXPECT_EQ(c.rx.len(), 2U);
    expect_free_capacity(c.tx, 1);  // its unit stays taken
    put(c.tx, 3);
    EXPECT_EQ(take(other), 1);  // its fuse burnt out: the retry moves it
    EXPECT_EQ(take(c.rx), 2);
    EXPECT_EQ(take(other), 3);
    EXPECT_TRUE(c.rx.try_recv().empty());
    expect_free_capacity(c.tx, 3);
    drop(c.tx);
    EXPECT_TRUE(other.try_recv().disconnected());
  }
}

// The receive's move throws after another receive overtook it (started inside the first one's
// move, and took the next value): the value is parked for the next receive, which takes it;
// nothing is lost or received twice, and the capacity is exact.
TEST(MpmcBoundedThrowing, AReceiveWhoseMoveThrowsAfterAnotherOvertookLeavesTheValueForTheNextOne) {
  count_scope counts;
  auto c = make_channel<counted>(3);
  mpmc::receiver<counted> other = c.rx;
  EXPECT_TRUE(c.tx.try_send(counted(1, 2)).ok());
  put(c.tx, 2);
  put(c.tx, 3);
  counted::at_move(1, [&] { EXPECT_EQ(take(other), 2); });  // inside the move of 1, which then throws
  EXPECT_THROW((void)c.rx.try_recv(), payload_error);
  EXPECT_EQ(c.rx.len(), 2U);
  EXPECT_EQ(counts.values(), 2);
  expect_free_capacity(c.tx, 1);
  EXPECT_EQ(take(c.rx), 1);  // the parked value comes first
  EXPECT_EQ(take(other), 3);
  EXPECT_TRUE(c.rx.try_recv().empty());
  expect_free_capacity(c.tx, 3);
  put(c.tx, 4);  // the ring goes on
  EXPECT_EQ(take(other), 4);
}

// Regression (found by the seeded soak, in the first version of the fix above): an empty place
// behind a value whose receive throws. The receive passed the empty place before moving its
// value out; the move threw and the value was parked behind the ticket, with a unit of capacity
// free, so the next send came round the ring (two cells) to the parked value's cell and waited
// there for a receive, on the only thread: it hung. Empty places are now passed only after the
// receive's value is out, and not while a parked value holds its cell.
/// Refuses, on this thread, the storage a park moves its cell to: the value then holds its cell
/// (the fallback when that allocation fails).
class relocation_refused {
 public:
  relocation_refused() noexcept { mpmc::detail::refuse_relocation_for_tests = true; }
  relocation_refused(const relocation_refused&) = delete;
  relocation_refused& operator=(const relocation_refused&) = delete;
  ~relocation_refused() { mpmc::detail::refuse_relocation_for_tests = false; }
};

/// The scenario below; `refuse`: the parked value holds its cell (no storage to move it to).
void empty_places_behind_a_parked_value(bool refuse) {
  count_scope counts;
  auto c = make_channel<counted>(2);
  EXPECT_THROW((void)c.tx.try_send(counted(1, 1)), payload_error);  // place 0: empty, passed at once
  EXPECT_TRUE(c.tx.try_send(counted(2, 2)).ok());                   // place 1: its receive throws
  EXPECT_THROW((void)c.tx.try_send(counted(3, 1)), payload_error);  // place 2: empty, behind 2
  {
    std::optional<relocation_refused> refused;
    if (refuse) refused.emplace();
    EXPECT_THROW((void)c.rx.try_recv(), payload_error);  // 2 is parked
  }
  expect_free_capacity(c.tx, 0);              // the parked value and the empty place hold the two units
  if (::testing::Test::HasFailure()) return;  // a send now would come round to the parked value's cell
  EXPECT_EQ(take(c.rx), 2);                   // then passes the empty place
  expect_free_capacity(c.tx, 2);
  put(c.tx, 4);  // place 3, in the cell the parked value had
  put(c.tx, 5);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{4, 5}));
  EXPECT_EQ(c.rx.len(), 0U);
}

TEST(MpmcBoundedThrowing, EmptyPlacesBehindAParkedValueArePassedOnlyOnceItIsTaken) {
  empty_places_behind_a_parked_value(false);
}

TEST(MpmcBoundedThrowing, EmptyPlacesBehindAParkedValueHoldingItsCellArePassedOnlyOnceItIsTaken) {
  empty_places_behind_a_parked_value(true);
}

// A parked value (as above, on a ring of two cells) leaves its cell: a send that comes round the
// ring to that cell (on another thread) is delivered at once, before anyone takes the parked
// value, which still comes first. Nothing is lost or received twice.
TEST(MpmcBoundedThrowing, ASendComingRoundToAParkedValuesCellIsDeliveredAtOnce) {
  count_scope counts;
  auto c = make_channel<counted>(2);
  mpmc::receiver<counted> other = c.rx;
  EXPECT_TRUE(c.tx.try_send(counted(1, 2)).ok());  // place 0
  put(c.tx, 2);                                    // place 1
  counted::at_move(1, [&] { EXPECT_EQ(take(other), 2); });
  EXPECT_THROW((void)c.rx.try_recv(), payload_error);  // 1 parked; its cell goes on
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    put(c.tx, 3);  // place 2: the cell the parked value had
    sent = true;
  });
  spin_until([&] { return sent.load(); }, "the send was delivered without a receive");
  EXPECT_EQ(c.rx.len(), 2U);
  expect_free_capacity(c.tx, 0);
  EXPECT_EQ(take(c.rx), 1);  // (were the send still waiting, this would let it go on)
  sender.join();
  EXPECT_EQ(take(other), 3);
  EXPECT_TRUE(c.rx.try_recv().empty());
  expect_free_capacity(c.tx, 2);
  EXPECT_EQ(counts.values(), 0);
}

// The fallback: if the storage to move the cell to cannot be allocated, the parked value holds
// its cell, and a send that comes round the ring to it (on another thread) waits until the next
// receive takes it (contract), then is delivered.
TEST(MpmcBoundedThrowing, WithoutStorageASendComingRoundToAParkedValuesCellWaitsForItsTake) {
  count_scope counts;
  auto c = make_channel<counted>(2);
  mpmc::receiver<counted> other = c.rx;
  EXPECT_TRUE(c.tx.try_send(counted(1, 2)).ok());  // place 0
  put(c.tx, 2);                                    // place 1
  counted::at_move(1, [&] { EXPECT_EQ(take(other), 2); });
  {
    const relocation_refused refused;
    EXPECT_THROW((void)c.rx.try_recv(), payload_error);  // 1 parked in the cell of place 0
  }
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    put(c.tx, 3);  // place 2: the cell of the parked value
    sent = true;
  });
  EXPECT_EQ(take(c.rx), 1);
  sender.join();
  EXPECT_TRUE(sent.load());
  EXPECT_EQ(take(other), 3);
  EXPECT_TRUE(c.rx.try_recv().empty());
  expect_free_capacity(c.tx, 2);
  EXPECT_EQ(counts.values(), 0);
}

// Regression (race review): a receive whose move throws parks its value, after receives on
// another copy overtook it and a send (another thread) came round the ring to its cell. A
// receive on a third thread holds the unit of a later value and waits for that send's place.
// Nobody else receives. When the parked value held its cell, the send waited for a receive to
// take it and the receive waited for the send: both hung. The cell now goes on at once.
TEST(MpmcBoundedThrowing, AReceiveBehindASendOnAParkedValuesCellIsNotLeftWaiting) {
  count_scope counts;
  auto c = make_channel<counted>(4);
  mpmc::receiver<counted> other = c.rx;
  mpmc::receiver<counted> third = c.rx;
  mpmc::sender<counted> other_tx = c.tx;
  EXPECT_TRUE(c.tx.try_send(counted(1, 2)).ok());  // place 0: its receive's move throws
  for (int v = 2; v <= 4; ++v) put(c.tx, v);       // places 1..3
  std::thread wrapping;
  std::thread receiving;
  std::atomic<bool> sent{false};
  std::atomic<int> got{-1};
  std::latch receive_waits(1);
  counted::at_move(1, [&] {  // inside the receive's move of 1, which then throws
    EXPECT_EQ(take(other), 2);
    EXPECT_EQ(take(other), 3);
    EXPECT_EQ(take(other), 4);
    wrapping = std::thread([&] {
      put(other_tx, 5);  // place 4: the cell of place 0, whose value is being moved out
      sent = true;
    });
    spin_until([&] { return c.rx.len() == 1; }, "the send took place 4");
    put(c.tx, 6);  // place 5: a unit of items for the receive below
    receiving = std::thread([&] {
      const thread_hook hook(test_point::awaiting_publication, [&] { receive_waits.count_down(); });
      auto r = third.recv_blocking();
      got = r.ok() ? r->id() : 0;
    });
    receive_waits.wait();  // it holds a unit and waits for place 4
  });
  EXPECT_THROW((void)c.rx.try_recv(), payload_error);  // 1 is parked
  spin_until([&] { return got.load() != -1; }, "the waiting receive got a value");
  const int first = take(c.rx);  // the parked value (were both threads still waiting, they go on)
  wrapping.join();
  receiving.join();
  EXPECT_TRUE(sent.load());
  EXPECT_EQ(got.load(), 5);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(take_all(c.rx), (std::vector<int>{6}));
  expect_free_capacity(c.tx, 4);
  EXPECT_EQ(counts.values(), 0);
}

/// How the fuse scenarios (support/fuse_payload.hpp) use the channel. A receive that threw keeps
/// its value's unit: only the units of the values received are back.
struct mpmc_fuse_channel {
  static auto make(std::size_t capacity) { return mpmc::bounded<fuse_payload>(capacity); }
  static bool send(mpmc::sender<fuse_payload>& tx, int v) { return tx.try_send(fuse_payload(v)).ok(); }
  static void expect_value_held(mpmc::sender<fuse_payload>& tx, mpmc::receiver<fuse_payload>& rx) {
    EXPECT_GE(rx.len(), 1U);
    EXPECT_TRUE(tx.try_reserve(tx.capacity() - rx.len() + 1).full()) << "its unit stays taken";
  }
  static void expect_drained(mpmc::sender<fuse_payload>& tx, mpmc::receiver<fuse_payload>& /*unused*/) {
    EXPECT_TRUE(tx.try_reserve(tx.capacity()).ok()) << "every unit is back";
  }
};

TEST(MpmcBoundedThrowing, EveryReceiveFormMovesOnceAndTheNthMoveThrowingLosesNothing) {
  every_receive_form_with_the_nth_move_throwing<mpmc_fuse_channel>();
}

TEST(MpmcBoundedThrowing, AWaitingReceiveWhoseMoveThrowsLeavesTheValue) {
  awaiting_receive_whose_move_throws_leaves_the_value<mpmc_fuse_channel>();
}

// ---------------------------------------------------------------------------------------------
// Blocking twins

TEST(MpmcBoundedBlocking, RecvBlockingOfTwoThreadsIsWokenBySendsFromAnotherThread) {
  auto c = make_channel<int>(2);
  std::vector<int> got(2, -1);
  std::latch waiting(2);
  std::vector<std::thread> receivers;
  for (int k = 0; k < 2; ++k) {
    receivers.emplace_back([rx = c.rx, &out = got[k], &waiting]() mutable {
      const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
      auto r = rx.recv_blocking();
      if (r.ok()) out = *r;
    });
  }
  waiting.wait();  // both queued
  std::thread sender([&c] {
    put(c.tx, 1);
    put(c.tx, 2);
  });
  sender.join();
  for (auto& t : receivers) t.join();
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int>{1, 2}));
}

TEST(MpmcBoundedBlocking, RecvBlockingWithAStopTokenIsCancelledFromAnotherThreadAndTakesNothing) {
  auto c = make_channel<int>(2);
  std::stop_source stop;
  std::latch waiting(1);
  std::optional<wait_status> status;
  std::thread receiver([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    status = c.rx.recv_blocking(stop.get_token()).status();
  });
  waiting.wait();
  std::thread([&stop] { stop.request_stop(); }).join();
  receiver.join();
  EXPECT_EQ(status, wait_status::cancelled);
  put(c.tx, 5);
  EXPECT_EQ(*c.rx.recv_blocking(), 5);
}

TEST(MpmcBoundedBlocking, RecvTimeoutTimesOutAndTheValueIsReceivedLaterByAnotherCopy) {
  auto c = make_channel<int>(2);
  mpmc::receiver<int> other = c.rx;
  EXPECT_TRUE(c.rx.recv_timeout(1ms).timed_out());
  put(c.tx, 5);
  EXPECT_EQ(*other.recv_timeout(1h), 5);
  EXPECT_TRUE(other.recv_timeout(0ms).timed_out());
}

TEST(MpmcBoundedBlocking, RecvTimeoutIsWokenByASendFromAnotherThread) {
  auto c = make_channel<int>(2);
  std::latch waiting(1);
  std::optional<int> got;
  std::thread receiver([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    auto r = c.rx.recv_timeout(1h);
    if (r.ok()) got = *r;
  });
  waiting.wait();
  put(c.tx, 5);
  receiver.join();
  EXPECT_EQ(got, 5);
}

TEST(MpmcBoundedBlocking, SendBlockingWaitsForCapacityFreedOnAnotherThread) {
  auto c = make_channel<int>(1);
  put(c.tx, 1);
  std::latch waiting(1);
  std::optional<send_status> status;
  std::thread sender([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    status = c.tx.send_blocking(2).status();
  });
  waiting.wait();
  EXPECT_EQ(take(c.rx), 1);
  sender.join();
  EXPECT_EQ(status, send_status::ok);
  EXPECT_EQ(take(c.rx), 2);
}

TEST(MpmcBoundedBlocking, SendBlockingWithAStopTokenIsCancelledFromAnotherThreadWithTheValueBack) {
  count_scope counts;
  auto c = make_channel<counted>(1);
  put(c.tx, 1);
  std::stop_source stop;
  std::latch waiting(1);
  std::optional<send_status> status;
  int back = -1;
  std::thread sender([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    auto r = c.tx.send_blocking(counted(2), stop.get_token());
    status = r.status();
    if (!r.ok()) back = r.value().id();
  });
  waiting.wait();
  std::thread([&stop] { stop.request_stop(); }).join();
  sender.join();
  EXPECT_EQ(status, send_status::cancelled);
  EXPECT_EQ(back, 2);
  EXPECT_EQ(take(c.rx), 1);
  EXPECT_TRUE(c.rx.try_recv().empty());
}

TEST(MpmcBoundedBlocking, SendTimeoutTimesOutWithTheValueBack) {
  count_scope counts;
  auto c = make_channel<counted>(1);
  put(c.tx, 1);
  auto r = c.tx.send_timeout(counted(2), 1ms);
  EXPECT_TRUE(r.timed_out());
  EXPECT_EQ(r.value().id(), 2);
  auto now = c.tx.send_timeout(counted(3), 0ms);
  EXPECT_TRUE(now.timed_out());
  EXPECT_EQ(now.value().id(), 3);
  EXPECT_EQ(take(c.rx), 1);
  EXPECT_TRUE(c.rx.try_recv().empty());
}

TEST(MpmcBoundedBlocking, SendTimeoutCompletesWhenAnotherThreadFreesAUnit) {
  auto c = make_channel<int>(1);
  put(c.tx, 1);
  std::latch waiting(1);
  std::optional<send_status> status;
  std::thread sender([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    status = c.tx.send_timeout(2, 1h).status();
  });
  waiting.wait();
  EXPECT_EQ(take(c.rx), 1);
  sender.join();
  EXPECT_EQ(status, send_status::ok);
  EXPECT_EQ(take(c.rx), 2);
}

TEST(MpmcBoundedBlocking, ABlockedReceiveIsEndedClosedByTheLastSenderGoingOnAnotherThread) {
  auto c = make_channel<int>(1);
  std::latch waiting(1);
  std::optional<wait_status> status;
  std::thread receiver([&] {
    const thread_hook hook(test_point::before_arm, [&waiting] { waiting.count_down(); });
    status = c.rx.recv_blocking().status();
  });
  waiting.wait();
  drop(c.tx);
  receiver.join();
  EXPECT_EQ(status, wait_status::closed);
}

// ---------------------------------------------------------------------------------------------
// "Last one out": a waiter resumed inline may destroy the channel's handles (its own, the last
// ones) at once, while the call that woke it is still inside the channel.

TEST(MpmcBoundedLifetime, AReceiveResumedInlineByThePublicationMayDestroyTheLastReceiver) {
  count_scope counts;
  auto c = make_channel<counted>(3);
  auto rx = std::make_unique<mpmc::receiver<counted>>(std::move(c.rx));
  int got = -1;
  [](std::unique_ptr<mpmc::receiver<counted>>& receiver, int& out) -> bare_coroutine {
    auto r = co_await receiver->recv();
    out = r.ok() ? r->id() : -1;
    receiver.reset();
  }(rx, got);
  put(c.tx, 1);
  EXPECT_EQ(got, 1);
  EXPECT_EQ(rx, nullptr);
  EXPECT_TRUE(c.tx.try_send(counted(2)).disconnected());
}

TEST(MpmcBoundedLifetime, AReceiveResumedInlineByTheLastSenderMayDestroyTheLastReceiver) {
  auto c = make_channel<int>(2);
  auto rx = std::make_unique<mpmc::receiver<int>>(std::move(c.rx));
  std::optional<wait_status> status;
  [](std::unique_ptr<mpmc::receiver<int>>& receiver, std::optional<wait_status>& out) -> bare_coroutine {
    auto r = co_await receiver->recv();
    out = r.status();
    receiver.reset();  // inside the sender's departure
  }(rx, status);
  EXPECT_FALSE(status.has_value());
  drop(c.tx);  // the last handle after the receiver: it deletes the channel on its way out
  EXPECT_EQ(status, wait_status::closed);
  EXPECT_EQ(rx, nullptr);
}

TEST(MpmcBoundedLifetime, AReceiveResumedInlineByTheLastUnitOfAClosedChannelMayDestroyTheReceiver) {
  auto c = make_channel<int>(2);
  auto permit = c.tx.try_reserve();
  ASSERT_TRUE(permit.ok());
  c.rx.close();
  auto rx = std::make_unique<mpmc::receiver<int>>(std::move(c.rx));
  std::optional<wait_status> status;
  [](std::unique_ptr<mpmc::receiver<int>>& receiver, std::optional<wait_status>& out) -> bare_coroutine {
    auto r = co_await receiver->recv();
    out = r.status();
    receiver.reset();
  }(rx, status);
  drop(*permit);
  EXPECT_EQ(status, wait_status::closed);
  EXPECT_EQ(rx, nullptr);
}

// The channel's handles in a World its waiter destroys (support/lifetime.hpp): a receive woken by
// a send, the last sender, close or stop; a receive whose grant passes on to the next receive;
// a crowd of receives served one by one; a send woken by a receive or by the last receiver.
struct mpmc_world {
  std::pair<mpmc::sender<int>, mpmc::receiver<int>> ch = mpmc::bounded<int>(1);
};
struct mpmc_waker : lifetime::waker_base {
  std::optional<mpmc::sender<int>> tx;
  std::optional<mpmc::receiver<int>> rx;
};
struct mpmc_sender_world {
  std::optional<mpmc::sender<int>> tx;
};

std::vector<lifetime::row> mpmc_lifetime_rows() {
  using namespace lifetime;
  using W = mpmc_world;
  using K = mpmc_waker;
  std::vector<row> rows;
  const auto recv = [](W& w, std::stop_token) { return w.ch.second.recv(); };
  const auto recv_cancellable = [](W& w, std::stop_token t) { return w.ch.second.recv(std::move(t)); };
  const auto try_send = [](W* w, auto&) { (void)w->ch.first.try_send(1); };
  rows.push_back(coroutine_row<W, K>("try_send_wakes_receive", "ok", no_setup{}, recv, try_send));
  rows.push_back(coroutine_row<W, K>("try_send_wakes_cancellable_receive", "ok", no_setup{}, recv_cancellable,
                                     try_send));
  rows.push_back(coroutine_row<W, K>("co_send_wakes_receive", "ok", no_setup{}, recv,
                                     [](W* w, K&) { (void)block_on(w->ch.first.send(1)); }));
  rows.push_back(coroutine_row<W, K>(
      "copied_sender_wakes_receive", "ok", [](W& w, K& k) { k.tx.emplace(w.ch.first); }, recv,
      [](W*, K& k) { (void)k.tx->try_send(1); }));
  rows.push_back(coroutine_row<W, K>(
      "last_sender_gone_wakes_receive", "closed", [](W& w, K& k) { k.tx.emplace(std::move(w.ch.first)); },
      recv, [](W*, K& k) { k.tx.reset(); }));
  rows.push_back(coroutine_row<W, K>("close_wakes_receive", "closed", no_setup{}, recv,
                                     [](W* w, K&) { w->ch.first.close(); }));
  rows.push_back(
      coroutine_row<W, K>("stop_receive", "cancelled", no_setup{}, recv_cancellable, request_stop{}));
  // A, claimed for the value, is stopped at once: its grant passes to B, which resumes inside
  // A's pass-on and destroys everything.
  rows.push_back(
      pass_on_row<W, K>("stopped_receive_passes_its_value_on", no_setup{}, recv_cancellable, recv, try_send));
  // Twenty receives get a value each (more than the nesting limit of inline resolution), the
  // last one destroys everything.
  rows.push_back(crowd_row<W, K>(
      "crowd_of_receives_served_one_by_one", 20, "ok", [](W& w, K& k) { k.tx.emplace(w.ch.first); },
      recv_cancellable, recv,
      [](W*, K& k, std::stop_source&) {
        for (int i = 0; i <= 20; ++i) {
          while (!k.tx->try_send(i).ok()) {
          }
        }
      }));
  rows.push_back(thread_row<W, K>(
      "try_send_wakes_blocked_receive_thread", "ok", no_setup{},
      [](W& w, std::stop_token t) { return w.ch.second.recv_blocking(std::move(t)); }, try_send));

  using S = mpmc_sender_world;
  const auto full = [](S& w, K& k) {
    auto [tx, rx] = mpmc::bounded<int>(1);
    w.tx.emplace(std::move(tx));
    k.rx.emplace(std::move(rx));
    (void)w.tx->try_send(0);
  };
  const auto send = [](S& w, std::stop_token) { return w.tx->send(2); };
  rows.push_back(
      coroutine_row<S, K>("try_recv_wakes_send", "ok", full, send, [](S*, K& k) { (void)k.rx->try_recv(); }));
  rows.push_back(coroutine_row<S, K>("co_recv_wakes_send", "ok", full, send,
                                     [](S*, K& k) { (void)block_on(k.rx->recv()); }));
  rows.push_back(coroutine_row<S, K>("last_receiver_gone_wakes_send", "disconnected", full, send,
                                     [](S*, K& k) { k.rx.reset(); }));
  rows.push_back(coroutine_row<S, K>("receiver_close_wakes_send", "disconnected", full, send,
                                     [](S*, K& k) { k.rx->close(); }));
  return rows;
}

class MpmcBoundedLifetimeRows : public ::testing::TestWithParam<lifetime::row> {};

TEST_P(MpmcBoundedLifetimeRows, TheWaiterMayDestroyEverythingInsideTheCallThatWokeIt) {
  const lifetime::watchdog dog(GetParam().name, 60s);
  GetParam().body();
}

INSTANTIATE_TEST_SUITE_P(Rows, MpmcBoundedLifetimeRows, ::testing::ValuesIn(mpmc_lifetime_rows()),
                         [](const ::testing::TestParamInfo<lifetime::row>& info) { return info.param.name; });

// ---------------------------------------------------------------------------------------------
// Misuse

TEST(MpmcBoundedMisuse, AwaitingAReceiveAgainThrowsLogicError) {
  auto c = make_channel<int>(2);
  std::stop_source never;
  expect_awaiting_again_throws_logic_error([&c] { return c.rx.recv(); }, [&c] { put(c.tx, 1); });
  expect_awaiting_again_throws_logic_error([&c, &never] { return c.rx.recv(never.get_token()); },
                                           [&c] { put(c.tx, 2); });
}

// ---------------------------------------------------------------------------------------------
// Seeded soak on the test scheduler: >= 10^5 small channels (fewer under sanitizers: a time
// budget), each with 2-4 producing and 2-4 consuming coroutines in a seeded order, every choice
// drawn from the channel's seed: the form of each send (co_await send with or without a stop
// token, try_send until not full, reserve then send, an owned permit, a value whose move into the
// channel throws, or whose first move out of it throws), the form of each receive
// (co_await recv with or without a stop token, try_recv, a when_any against an event that may
// win), stop requests, closes by either half, and consumers dropping their receiver early (all
// of them, in some channels: the channel disconnects). Accounting by id: every value is accepted
// or handed back (or never offered, when a reservation failed), never both; the values received
// are distinct and accepted, and all of them unless every consumer went early; each consumer
// gets each producer's values in order; every payload is destroyed exactly once; and every
// coroutine finishes.

/// splitmix64: a small seeded generator for the plans.
class splitmix {
 public:
  explicit splitmix(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }

 private:
  std::uint64_t state_;
};

constexpr int kSoakMaxProducers = 4;
constexpr int kSoakMaxConsumers = 4;
constexpr int kSoakMaxPerProducer = 4;
constexpr int kSoakIdsPerChannel = kSoakMaxProducers * kSoakMaxPerProducer;

struct soak_producer {
  std::vector<int> sends;  // the form of each send
  int close_after = -1;    // closes the channel after this many sends
  std::vector<int> ok;
  std::vector<int> back;
  int bad = 0;
  bool done = false;
};

struct soak_consumer {
  std::vector<int> forms;  // the form of each receive, cycled
  int close_after = -1;    // closes the channel after this many values
  int drop_after = -1;     // drops its receiver after this many values
  std::vector<int> got;
  bool saw_closed = false;
  bool went_early = false;
  int cancels = 0;
  int lost_races = 0;
  int throws = 0;
  int bad = 0;
  bool done = false;
};

/// One channel of the soak and everything its coroutines share.
struct soak_world {
  int first_id = 0;
  std::uint64_t seed = 0;
  std::size_t capacity = 1;
  std::stop_source stop;
  asyncband::auto_reset_event race{false};  // the other branch of the when_any receives
  std::vector<soak_producer> producers;
  std::vector<soak_consumer> consumers;
  int chaos_steps = 0;
  int chaos_sets = 0;
};

/// Yields to the other coroutines of the test scheduler.
struct yield_to {
  test_scheduler& s;
  static bool await_ready() noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const noexcept { s.schedule(h); }
  static void await_resume() noexcept {}
};

task<void> soak_produce(test_scheduler& s, mpmc::sender<counted> tx, soak_world& w, int index) {
  soak_producer& me = w.producers[static_cast<std::size_t>(index)];
  const auto finish = [&me](int id, send_result<counted>& r) {
    if (r.ok()) {
      me.ok.push_back(id);
    } else if (r.value().id() == id) {
      me.back.push_back(id);
    } else {
      ++me.bad;
    }
  };
  for (std::size_t i = 0; i < me.sends.size(); ++i) {
    const int id = w.first_id + index * kSoakMaxPerProducer + static_cast<int>(i);
    if (static_cast<int>(i) == me.close_after) tx.close();
    switch (me.sends[i]) {
      case 0: {
        auto r = co_await tx.send(counted(id));
        finish(id, r);
        break;
      }
      case 1: {
        auto r = co_await tx.send(counted(id), w.stop.get_token());
        finish(id, r);
        break;
      }
      case 2: {
        std::optional<counted> value;
        value.emplace(id);
        for (;;) {
          auto r = tx.try_send(std::move(*value));
          if (!r.full()) {
            finish(id, r);
            break;
          }
          value.emplace(std::move(r.value()));
          co_await yield_to{s};
        }
        break;
      }
      case 3: {
        auto p = co_await tx.reserve(w.stop.get_token());
        if (!p.ok()) {
          const counted never_offered(id);
          me.back.push_back(id);
          break;
        }
        co_await yield_to{s};  // the permit is held across a step
        auto r = p->send(counted(id));
        finish(id, r);
        break;
      }
      case 5:    // a value whose move out of the channel throws once: parked for the next receive
      case 6: {  // a value whose move into the channel throws: an empty place
        try {
          auto r = tx.try_send(counted(id, me.sends[i] == 5 ? 2 : 1));
          finish(id, r);
        } catch (const payload_error&) {
          me.back.push_back(id);  // never accepted
        }
        break;
      }
      default: {
        auto p = co_await tx.reserve_owned();
        if (!p.ok()) {
          const counted never_offered(id);
          me.back.push_back(id);
          break;
        }
        if (i + 1 == me.sends.size()) drop(tx);  // its last send: the owned permit outlives the sender
        co_await yield_to{s};
        auto r = p->send(counted(id));
        finish(id, r);
        break;
      }
    }
  }
  drop(tx);
  me.done = true;
}

task<void> soak_consume(test_scheduler& s, mpmc::receiver<counted> rx, soak_world& w, int index) {
  soak_consumer& me = w.consumers[static_cast<std::size_t>(index)];
  bool may_stop = true;
  const auto in_range = [&w](int id) { return id >= w.first_id && id < w.first_id + kSoakIdsPerChannel; };
  for (std::size_t n = 0;; ++n) {
    if (static_cast<int>(me.got.size()) == me.close_after) rx.close();
    if (static_cast<int>(me.got.size()) == me.drop_after) {
      me.went_early = true;
      break;
    }
    const int form = me.forms[n % me.forms.size()];
    std::optional<result<counted>> r;
    try {
      if (form == 0 || (form == 1 && !may_stop)) {
        r.emplace(co_await rx.recv());
      } else if (form == 1) {
        r.emplace(co_await rx.recv(w.stop.get_token()));
        if (r->cancelled()) {
          may_stop = false;  // the token stays stopped
          ++me.cancels;
          continue;
        }
      } else if (form == 2) {
        auto t = rx.try_recv();
        if (t.empty()) {
          co_await yield_to{s};
          continue;
        }
        if (t.disconnected()) {
          me.saw_closed = true;
          break;
        }
        if (!in_range(t->id())) ++me.bad;
        me.got.push_back(t->id());
        continue;
      } else {
        auto any = co_await when_any(rx.recv(), w.race.wait());
        if (any.index() != 0) {
          ++me.lost_races;
          if (!any.get<0>().cancelled()) ++me.bad;
          continue;
        }
        r.emplace(std::move(any.get<0>()));
      }
    } catch (const payload_error&) {
      ++me.throws;  // the value stays in the channel, for the next receive
      continue;
    }
    if (!r->ok()) {
      if (r->closed()) {
        me.saw_closed = true;
      } else {
        ++me.bad;
      }
      break;
    }
    if (!in_range((*r)->id())) ++me.bad;
    me.got.push_back((*r)->id());
  }
  drop(rx);
  me.done = true;
}

/// Requests stop and sets the race event at seeded steps.
task<void> soak_chaos(test_scheduler& s, soak_world& w, std::uint64_t plan) {
  splitmix rng(plan);
  const int steps = rng.below(12);
  for (int i = 0; i < steps; ++i) {
    co_await yield_to{s};
    ++w.chaos_steps;
    if (rng.below(4) == 0) {
      w.race.notify_one();
      ++w.chaos_sets;
    }
  }
  if (rng.below(2) == 0) w.stop.request_stop();
}

/// Builds channel `index`'s plan, runs it to the end, and checks it; false (with a failure
/// naming the seed) if it broke a rule.
bool soak_one_channel(int index, const std::vector<std::atomic<int>>& finals, soak_world& w) {
  w.seed = static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ULL + 12345;
  w.first_id = 1 + index * kSoakIdsPerChannel;
  splitmix rng(w.seed);
  w.capacity = 1 + static_cast<std::size_t>(rng.below(4));
  const int producers = 2 + rng.below(kSoakMaxProducers - 1);
  const int consumers = 2 + rng.below(kSoakMaxConsumers - 1);
  const bool all_go_early = rng.below(8) == 0;
  w.producers.resize(static_cast<std::size_t>(producers));
  w.consumers.resize(static_cast<std::size_t>(consumers));
  for (auto& p : w.producers) {
    const int n = 1 + rng.below(kSoakMaxPerProducer);
    for (int i = 0; i < n; ++i) p.sends.push_back(rng.below(8));
    if (rng.below(10) == 0) p.close_after = rng.below(n + 1);
  }
  for (auto& c : w.consumers) {
    const int n = 1 + rng.below(3);
    for (int i = 0; i < n; ++i) c.forms.push_back(rng.below(4));
    if (rng.below(10) == 0) c.close_after = rng.below(4);
    if (all_go_early || rng.below(6) == 0) c.drop_after = rng.below(4);
  }
  {
    test_scheduler s(rng.next());
    auto c = make_channel<counted>(w.capacity);
    for (int i = 0; i < producers; ++i) s.spawn(soak_produce(s, c.tx, w, i));
    for (int i = 0; i < consumers; ++i) s.spawn(soak_consume(s, c.rx, w, i));
    s.spawn(soak_chaos(s, w, rng.next()));
    drop(c.tx);
    drop(c.rx);
    s.run(10'000'000);
  }
  std::string problems;
  const auto fail = [&problems](const std::string& what) { problems += what + "; "; };
  std::set<int> ok;
  std::set<int> back;
  int sends = 0;
  for (std::size_t i = 0; i < w.producers.size(); ++i) {
    const auto& p = w.producers[i];
    if (!p.done) fail("producer " + std::to_string(i) + " never finished");
    if (p.bad != 0) fail("producer " + std::to_string(i) + ": a send handed back a value not its own");
    ok.insert(p.ok.begin(), p.ok.end());
    back.insert(p.back.begin(), p.back.end());
    sends += static_cast<int>(p.sends.size());
  }
  if (ok.size() + back.size() != static_cast<std::size_t>(sends)) fail("sends unaccounted for");
  for (const int id : back) {
    if (ok.count(id) != 0) fail("value " + std::to_string(id) + " both accepted and handed back");
  }
  std::vector<int> all;
  bool drained = false;
  for (std::size_t i = 0; i < w.consumers.size(); ++i) {
    const auto& c = w.consumers[i];
    if (!c.done) fail("consumer " + std::to_string(i) + " never finished");
    if (c.bad != 0) fail("consumer " + std::to_string(i) + ": a bad outcome");
    if (c.saw_closed) drained = true;
    all.insert(all.end(), c.got.begin(), c.got.end());
    std::vector<int> last(kSoakMaxProducers, 0);
    for (const int id : c.got) {
      const int producer = (id - w.first_id) / kSoakMaxPerProducer;
      if (producer < 0 || producer >= kSoakMaxProducers) continue;
      if (id <= last[static_cast<std::size_t>(producer)]) fail("a producer's values out of order");
      last[static_cast<std::size_t>(producer)] = id;
    }
  }
  const std::set<int> received(all.begin(), all.end());
  if (received.size() != all.size()) fail("a value received twice");
  if (!std::includes(ok.begin(), ok.end(), received.begin(), received.end())) fail("a value received unsent");
  if (drained && received != ok) fail("an accepted value was not received, though a receive saw the end");
  for (int id = w.first_id; id < w.first_id + kSoakIdsPerChannel; ++id) {
    const int producer = (id - w.first_id) / kSoakMaxPerProducer;
    const int k = (id - w.first_id) % kSoakMaxPerProducer;
    const bool made = producer < producers &&
                      k < static_cast<int>(w.producers[static_cast<std::size_t>(producer)].sends.size());
    const int destroyed = finals[static_cast<std::size_t>(id)].load();
    if (destroyed != (made ? 1 : 0))
      fail("value " + std::to_string(id) + " destroyed " + std::to_string(destroyed) + " times");
  }
  EXPECT_TRUE(problems.empty()) << "channel " << index << " (seed " << w.seed << ", capacity " << w.capacity
                                << ", " << producers << " producers, " << consumers
                                << " consumers): " << problems;
  return problems.empty();
}

TEST(MpmcBoundedStress, SeededSoakOnTheTestSchedulerDeliversOrHandsBackEveryValueExactlyOnce) {
  constexpr int kChannels = 100'000;
  count_scope counts;
  std::vector<std::atomic<int>> finals(static_cast<std::size_t>(kChannels * kSoakIdsPerChannel + 1));
  const finals_scope scope(finals);
  int received = 0;
  int handed_back = 0;
  int cancels = 0;
  int lost_races = 0;
  int throws = 0;
  int went_early = 0;
  int disconnected = 0;
  const auto start = std::chrono::steady_clock::now();
  const int channels = repeat_for(kChannels, under_sanitizer ? 8s : 60s, [&](int index) {
    soak_world w;
    const bool good = soak_one_channel(index, finals, w);
    bool all_early = true;
    for (const auto& c : w.consumers) {
      received += static_cast<int>(c.got.size());
      cancels += c.cancels;
      lost_races += c.lost_races;
      throws += c.throws;
      went_early += c.went_early ? 1 : 0;
      all_early = all_early && c.went_early;
    }
    for (const auto& p : w.producers) handed_back += static_cast<int>(p.back.size());
    disconnected += all_early ? 1 : 0;
    return good;
  });
  const auto elapsed =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  EXPECT_GT(received, 0);
  EXPECT_GT(handed_back, 0);
  EXPECT_GT(cancels, 0);
  EXPECT_GT(lost_races, 0);
  EXPECT_GT(throws, 0);
  EXPECT_GT(disconnected, 0);
  if (!under_sanitizer) {
    EXPECT_EQ(channels, kChannels) << "the time budget ran out before 10^5 channels";
  }
  RecordProperty("channels", channels);
  RecordProperty("received", received);
  RecordProperty("handed_back", handed_back);
  RecordProperty("elapsed_ms", static_cast<int>(elapsed.count()));
  std::printf(
      "mpmc soak (test scheduler): %d channels (%d disconnected by their receivers); %d values received, "
      "%d handed back or never offered, %d receives cancelled, %d when_any receives lost, %d receives threw, "
      "%d consumers gone early, in %lld ms\n",
      channels, disconnected, received, handed_back, cancels, lost_races, throws, went_early,
      static_cast<long long>(elapsed.count()));
}

// ---------------------------------------------------------------------------------------------
// Bounded real-thread stress: 2-4 producer threads and 2-4 consumer threads per round on a small
// channel, with cancellations from a stop epoch, timeouts, try forms, permits, values whose move
// into the channel (or first move out of it) throws, and in some rounds a consumer closing the
// channel or going early. The same accounting as the soak.

struct thread_round_log {
  std::vector<int> ok;
  std::vector<int> back;
  std::vector<int> got;
  int throws = 0;
  int bad = 0;
  bool saw_closed = false;
};

void stress_send_one(mpmc::sender<counted>& tx, stop_epoch& epoch, int id, int mode, thread_round_log& log) {
  const auto finish = [&](send_result<counted>& r) {
    if (r.ok()) {
      log.ok.push_back(id);
    } else if (r.value().id() == id) {
      log.back.push_back(id);
    } else {
      ++log.bad;
    }
  };
  const auto never_offered = [&] {
    const counted unused(id);
    log.back.push_back(id);
  };
  switch (mode) {
    case 0: {
      auto r = tx.send_blocking(counted(id));
      finish(r);
      return;
    }
    case 1: {
      auto r = tx.send_blocking(counted(id), epoch.token());
      finish(r);
      return;
    }
    case 2: {
      auto r = tx.send_timeout(counted(id), 50us);
      finish(r);
      return;
    }
    case 3: {
      std::optional<counted> value;
      value.emplace(id);
      for (;;) {
        auto r = tx.try_send(std::move(*value));
        if (!r.full()) {
          finish(r);
          return;
        }
        value.emplace(std::move(r.value()));
        std::this_thread::yield();
      }
    }
    case 4: {
      auto r = block_on(tx.send(counted(id), epoch.token()));
      finish(r);
      return;
    }
    case 6:    // the first receive's move of it throws: parked for the next receive
    case 7: {  // its move into the channel throws: an empty place
      try {
        auto r = tx.try_send(counted(id, mode == 6 ? 2 : 1));
        finish(r);
      } catch (const payload_error&) {
        log.back.push_back(id);
      }
      return;
    }
    default: {
      auto p = block_on(tx.reserve(epoch.token()));
      if (!p.ok()) {
        never_offered();
        return;
      }
      auto r = p->send(counted(id));
      finish(r);
      return;
    }
  }
}

void stress_receive(mpmc::receiver<counted> rx, stop_epoch& epoch, int style, int close_after, int drop_after,
                    int first_id, int last_id, thread_round_log& log) {
  for (int n = 0;; ++n) {
    if (static_cast<int>(log.got.size()) == close_after) rx.close();
    if (static_cast<int>(log.got.size()) == drop_after) return;
    const int mode = (style + n) % 5;
    std::optional<result<counted>> r;
    try {
      if (mode == 0) {
        r.emplace(rx.recv_blocking());
      } else if (mode == 1) {
        r.emplace(rx.recv_blocking(epoch.token()));
        if (r->cancelled()) continue;
      } else if (mode == 2) {
        r.emplace(rx.recv_timeout(30us));
        if (r->timed_out()) continue;
      } else if (mode == 3) {
        auto t = rx.try_recv();
        if (t.empty()) {
          std::this_thread::yield();
          continue;
        }
        if (t.disconnected()) {
          log.saw_closed = true;
          return;
        }
        if (t->id() < first_id || t->id() >= last_id) ++log.bad;
        log.got.push_back(t->id());
        continue;
      } else {
        r.emplace(block_on(rx.recv(epoch.token())));
        if (r->cancelled()) continue;
      }
    } catch (const payload_error&) {
      ++log.throws;  // the value stays in the channel, for the next receive
      continue;
    }
    if (!r->ok()) {
      if (r->closed()) {
        log.saw_closed = true;
      } else {
        ++log.bad;
      }
      return;
    }
    if ((*r)->id() < first_id || (*r)->id() >= last_id) ++log.bad;
    log.got.push_back((*r)->id());
  }
}

constexpr int kStressPerProducer = 300;
constexpr int kStressMaxRounds = 400;
constexpr int kStressIdsPerRound = 4 * kStressPerProducer;

TEST(MpmcBoundedStress, ThreadsSendReceiveCancelAndCloseDeliverOrHandBackEveryValueExactlyOnce) {
  count_scope counts;
  std::vector<std::atomic<int>> finals(static_cast<std::size_t>(kStressMaxRounds * kStressIdsPerRound + 1));
  const finals_scope scope(finals);
  int received = 0;
  int handed_back = 0;
  int throws = 0;
  const int rounds = repeat_for(kStressMaxRounds, under_sanitizer ? 4s : 6s, [&](int round) {
    const int producers = 2 + round % 3;
    const int consumers = 2 + (round / 3) % 3;
    const int first_id = 1 + round * kStressIdsPerRound;
    const bool closing = round % 4 == 3;
    const bool going = round % 5 == 4;
    auto c = make_channel<counted>(1 + static_cast<std::size_t>(round % 5));
    stop_epoch epoch;
    std::vector<thread_round_log> plogs(static_cast<std::size_t>(producers));
    std::vector<thread_round_log> clogs(static_cast<std::size_t>(consumers));
    std::atomic<bool> stop_cancelling{false};
    std::thread canceller([&] {
      while (!stop_cancelling.load()) {
        epoch.cancel_current();
        std::this_thread::sleep_for(20us);
      }
    });
    std::vector<std::thread> threads;
    for (int k = 0; k < consumers; ++k) {
      const int close_after = closing && k == 0 ? kStressPerProducer / 2 : -1;
      const int drop_after = going && k != 0 ? kStressPerProducer / 4 : -1;
      threads.emplace_back(stress_receive, c.rx, std::ref(epoch), round + k, close_after, drop_after,
                           first_id, first_id + kStressIdsPerRound,
                           std::ref(clogs[static_cast<std::size_t>(k)]));
    }
    drop(c.rx);
    for (int p = 0; p < producers; ++p) {
      threads.emplace_back([tx = c.tx, &epoch, &log = plogs[static_cast<std::size_t>(p)], p, round,
                            first = first_id + p * kStressPerProducer]() mutable {
        for (int i = 0; i < kStressPerProducer; ++i)
          stress_send_one(tx, epoch, first + i, (round + p + i) % 8, log);
      });
    }
    drop(c.tx);
    for (auto& t : threads) t.join();
    stop_cancelling = true;
    canceller.join();
    std::set<int> ok;
    std::set<int> back;
    std::vector<int> all;
    bool drained = false;
    bool good = true;
    for (const auto& l : plogs) {
      EXPECT_EQ(l.bad, 0);
      EXPECT_EQ(l.ok.size() + l.back.size(), static_cast<std::size_t>(kStressPerProducer));
      ok.insert(l.ok.begin(), l.ok.end());
      back.insert(l.back.begin(), l.back.end());
      handed_back += static_cast<int>(l.back.size());
    }
    for (const int id : back) EXPECT_EQ(ok.count(id), 0U) << "both accepted and handed back: " << id;
    for (const auto& l : clogs) {
      EXPECT_EQ(l.bad, 0);
      throws += l.throws;
      drained = drained || l.saw_closed;
      all.insert(all.end(), l.got.begin(), l.got.end());
      std::vector<int> last(4, 0);
      for (const int id : l.got) {
        const int producer = (id - first_id) / kStressPerProducer;
        if ((round + producer + (id - first_id) % kStressPerProducer) % 8 == 6) {
          continue;  // its receive may have thrown: then it went to the next receive, after later values
        }
        EXPECT_GT(id, last[static_cast<std::size_t>(producer)])
            << "a producer's values out of order for one consumer";
        last[static_cast<std::size_t>(producer)] = id;
      }
    }
    received += static_cast<int>(all.size());
    const std::set<int> got(all.begin(), all.end());
    EXPECT_EQ(got.size(), all.size()) << "a value was received twice";
    EXPECT_TRUE(std::includes(ok.begin(), ok.end(), got.begin(), got.end())) << "a value received unsent";
    EXPECT_TRUE(drained) << "the last consumer never saw the end";
    EXPECT_EQ(got, ok) << "an accepted value was not received";
    for (int id = first_id; id < first_id + producers * kStressPerProducer; ++id) {
      EXPECT_EQ(finals[static_cast<std::size_t>(id)].load(), 1) << "value " << id;
    }
    good = !::testing::Test::HasFailure();
    if (!good)
      ADD_FAILURE() << "round " << round << ": " << producers << " producers, " << consumers << " consumers";
    return good;
  });
  EXPECT_GT(rounds, 0);
  EXPECT_GT(received, 0);
  EXPECT_GT(throws, 0);
  RecordProperty("rounds", rounds);
  RecordProperty("received", received);
  RecordProperty("handed_back", handed_back);
  std::printf("mpmc thread stress: %d rounds, %d values received, %d handed back, %d receives threw\n",
              rounds, received, handed_back, throws);
}

// --- the senders' closed() wait ----------------------------------------------------------------

/// A coroutine awaiting tx.closed() (with a stop token if `stop` is given); `done` counts its
/// resumptions, `status` says how it ended.
bare_coroutine await_closed(mpmc::sender<int>& tx, int& done, std::optional<wait_status>& status,
                            std::stop_token* stop = nullptr) {
  if (stop == nullptr) {
    co_await tx.closed();
    status = wait_status::ok;
  } else {
    auto r = co_await tx.closed(*stop);
    status = r.status();
  }
  ++done;
}

TEST(MpmcBoundedClosed, ClosedWaitsUntilAReceiverClosesTheChannel) {
  auto c = make_channel<int>(2);
  int done = 0;
  std::optional<wait_status> status;
  await_closed(c.tx, done, status);
  put(c.tx, 1);  // sends still succeed: not closed
  EXPECT_EQ(done, 0);
  c.rx.close();
  EXPECT_EQ(done, 1);
  EXPECT_EQ(status, wait_status::ok);
  EXPECT_EQ(take(c.rx), 1);  // what was accepted still drains
}

TEST(MpmcBoundedClosed, ClosedCompletesWhenTheLastReceiverGoesAndNotBefore) {
  auto c = make_channel<int>(2);
  std::optional<mpmc::receiver<int>> other(c.rx);
  int done = 0;
  std::optional<wait_status> status;
  await_closed(c.tx, done, status);
  drop(c.rx);
  EXPECT_EQ(done, 0);  // a receiver is left
  other.reset();
  EXPECT_EQ(done, 1);
  EXPECT_TRUE(c.tx.try_send(2).disconnected());
}

TEST(MpmcBoundedClosed, ClosedOnAClosedChannelCompletesAtOnceInEveryForm) {
  auto c = make_channel<int>(2);
  c.tx.close();
  int done = 0;
  std::optional<wait_status> status;
  await_closed(c.tx, done, status);
  EXPECT_EQ(done, 1);
  c.tx.closed_blocking();
  EXPECT_TRUE(c.tx.closed_blocking(std::stop_token{}).ok());
  EXPECT_TRUE(c.tx.closed_timeout(std::chrono::milliseconds(0)).ok());
}

TEST(MpmcBoundedClosed, AStoppedClosedWaitEndsCancelledOnceAndALaterCloseFindsNobody) {
  auto c = make_channel<int>(2);
  std::stop_source source;
  std::stop_token token = source.get_token();
  int done = 0;
  std::optional<wait_status> status;
  await_closed(c.tx, done, status, &token);
  EXPECT_EQ(done, 0);
  source.request_stop();
  EXPECT_EQ(done, 1);
  EXPECT_EQ(status, wait_status::cancelled);
  c.rx.close();
  EXPECT_EQ(done, 1);
}

TEST(MpmcBoundedClosed, ClosedTimeoutTimesOutOnAnOpenChannel) {
  auto c = make_channel<int>(2);
  EXPECT_EQ(c.tx.closed_timeout(std::chrono::milliseconds(1)).status(), wait_status::timeout);
}

TEST(MpmcBoundedClosed, ClosedBlockingIsWokenByTheLastReceiverGoingOnAnotherThread) {
  auto c = make_channel<int>(2);
  std::latch waiting(1);
  std::thread t([&] {
    waiting.count_down();
    c.tx.closed_blocking();
  });
  waiting.wait();
  drop(c.rx);  // whether the thread sleeps yet or not, it returns
  t.join();
  EXPECT_TRUE(c.tx.is_closed());
}

TEST(MpmcBoundedClosed, AClosedWaitResumedInlineMayDestroyEveryHandleInsideTheClose) {
  count_scope counts;
  auto c = make_channel<counted>(2);
  auto tx = std::make_unique<mpmc::sender<counted>>(std::move(c.tx));
  auto rx = std::make_unique<mpmc::receiver<counted>>(std::move(c.rx));
  ASSERT_TRUE(tx->try_send(counted(1)).ok());
  bool done = false;
  [](std::unique_ptr<mpmc::sender<counted>>& sender, std::unique_ptr<mpmc::receiver<counted>>& receiver,
     bool& out) -> bare_coroutine {
    co_await sender->closed();
    sender.reset();    // inside the receiver's close(): the last sender
    receiver.reset();  // and the last receiver: the channel goes, with the value nobody received
    out = true;
  }(tx, rx, done);
  EXPECT_FALSE(done);
  rx->close();
  EXPECT_TRUE(done);
  EXPECT_EQ(tx, nullptr);
  EXPECT_EQ(rx, nullptr);
}

TEST(MpmcBoundedClosed, AClosedWaitResumedInlineByTheLastReceiverGoingMayDestroyTheLastSender) {
  auto c = make_channel<int>(2);
  auto tx = std::make_unique<mpmc::sender<int>>(std::move(c.tx));
  bool done = false;
  [](std::unique_ptr<mpmc::sender<int>>& sender, bool& out) -> bare_coroutine {
    co_await sender->closed();
    sender.reset();  // inside the last receiver's departure
    out = true;
  }(tx, done);
  drop(c.rx);
  EXPECT_TRUE(done);
  EXPECT_EQ(tx, nullptr);
}

}  // namespace
