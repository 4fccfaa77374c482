// SPDX-License-Identifier: Apache-2.0
// What the tests of the keyed "run once" primitives (once_map, singleflight::group) share: a
// user's own expected-like type, initialisers that record their runs and end as told, callers
// that record what their call yielded or threw, a key held by a run in progress (which the shared
// wait scenarios of wait_contract.hpp see as a primitive), and a bounded stress round.
//
// A primitive is reached through a `Calls` type naming its forms (once_map: compute...,
// singleflight: work...):
//
//   struct calls {
//     using primitive_type = ...;                           // keyed by int, values int
//     static auto await(primitive_type&, Args&&...);        // compute / work
//     static auto block(primitive_type&, Args&&...);        // compute_blocking / work_blocking
//     static auto block_for(primitive_type&, Args&&...);    // compute_timeout / work_timeout
//     static auto try_await(primitive_type&, Args&&...);    // try_compute / try_work
//     static auto try_block(primitive_type&, Args&&...);    // try_..._blocking
//   };
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <asyncband/block_on.hpp>
#include <asyncband/init_result.hpp>
#include <asyncband/manual_reset_event.hpp>
#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/stop_token.hpp>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "lifetime.hpp"
#include "probe.hpp"
#include "stress.hpp"

namespace asyncband_test {

/// A user's own expected-like type (neither init_result nor std::expected): an int, or an error
/// message.
class fallible_int {
 public:
  static fallible_int of(int v) { return fallible_int(content(std::in_place_index<0>, v)); }
  static fallible_int failure(std::string e) {
    return fallible_int(content(std::in_place_index<1>, std::move(e)));
  }
  [[nodiscard]] bool has_value() const noexcept { return content_.index() == 0; }
  [[nodiscard]] int value() const { return std::get<0>(content_); }
  [[nodiscard]] const std::string& error() const { return std::get<1>(content_); }

 private:
  using content = std::variant<int, std::string>;
  explicit fallible_int(content c) : content_(std::move(c)) {}
  content content_;
};

/// What a try_ form of the primitives yields for a fallible_int initialiser.
using try_outcome = asyncband::init_result<int, std::string>;

/// How a test initialiser ends.
enum class ending {
  value,      ///< yields its id as its value
  exception,  ///< throws std::runtime_error(failure_of(id))
  error,      ///< (a fallible_int initialiser) yields the error failure_of(id)
};

/// The message of initialiser `id`'s failure: a caller that sees it knows whose it is.
inline std::string failure_of(int id) {
  return "f" + std::to_string(id) + " failed";
}

/// Ends initialiser `id` as told: its value (an int, or a fallible_int), or its failure.
template <class Yield>
Yield end_as(int id, ending end) {
  if (end == ending::exception) throw std::runtime_error(failure_of(id));
  if constexpr (std::is_same_v<Yield, fallible_int>) {
    return end == ending::error ? fallible_int::failure(failure_of(id)) : fallible_int::of(id);
  } else {
    return id;
  }
}

/// The initialisers of one single-threaded test: who started a run, in order, and how many
/// runs were in progress at once (never more than one per key in these tests).
struct run_log {
  std::vector<int> started;
  int inside = 0;
  int most_inside = 0;

  void enter(int id) {
    started.push_back(id);
    most_inside = std::max(most_inside, ++inside);
  }
  void leave() { --inside; }
};

/// A hand-written awaitable: the initialiser waiting in it is resumed inline by release(), with
/// no asyncband code in between (so no test point fires before the run completes).
class pause_point {
 public:
  struct awaiter {
    pause_point* owner;
    static bool await_ready() noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) noexcept { owner->paused_ = h; }
    static void await_resume() noexcept {}
  };
  awaiter wait() noexcept { return {this}; }
  [[nodiscard]] bool holding() const noexcept { return static_cast<bool>(paused_); }
  void release() { std::exchange(paused_, {}).resume(); }

 private:
  std::coroutine_handle<> paused_;
};

/// A test initialiser: records its run in `log`, waits for `hold` (a manual_reset_event or a
/// pause_point) if given, then ends as told. Yields Yield (int, or fallible_int for try_ forms).
template <class Yield = int, class Hold = asyncband::manual_reset_event>
struct scripted {
  run_log* log;
  int id;
  Hold* hold = nullptr;
  ending end = ending::value;

  task<Yield> operator()() const {
    log->enter(id);
    if (hold != nullptr) co_await hold->wait();
    log->leave();
    co_return end_as<Yield>(id, end);
  }
};

/// A test initialiser that takes the call's stop token: it waits for `hold` until stopped, and
/// throws failure_of(id) if it was stopped.
struct stop_aware {
  run_log* log;
  int id;
  asyncband::manual_reset_event* hold;

  task<int> operator()(asyncband::stop_token stop) const {
    log->enter(id);
    const auto waited = co_await hold->wait(std::move(stop));
    log->leave();
    co_return end_as<int>(id, waited.ok() ? ending::value : ending::exception);
  }
};

/// What one call yielded: its value, its own failure (an exception's message, or the error of a
/// try_ form), or the status that ended its wait (`status`, from the probe).
struct call_probe : probe {
  std::optional<int> value;
  std::string failure;

  void record(int v) {
    finish(wait_status::ok);
    value = v;
  }
  void record(const try_outcome& r) {
    finish(wait_status::ok);
    if (r.has_value()) {
      value = r.value();
    } else {
      failure = r.error();
    }
  }
  template <class T>
  void record(const asyncband::result<T>& r) {
    if (r.ok()) {
      record(*r);
    } else {
      finish(r.status());
    }
  }
  void fail(const char* what) {
    finish(wait_status::ok);
    failure = what;
  }
};

/// A coroutine making one call: awaits `call()` (which returns the call's awaiter) and records
/// what it yielded or threw.
template <class Call>
task<void> caller(Call call, call_probe& p) {
  ++p.started;
  try {
    const auto outcome = co_await call();
    p.record(outcome);
  } catch (const std::runtime_error& e) {
    p.fail(e.what());
  }
}

/// A blocking call on this thread: runs `call()` and records what it returned or threw.
template <class Call>
void call_blocking(Call call, call_probe& p) {
  ++p.started;
  try {
    p.record(call());
  } catch (const std::runtime_error& e) {
    p.fail(e.what());
  }
}

/// The primitive's key `key` held by a run in progress: the holder (a coroutine without a
/// scheduler, started at construction) runs initialiser 1, which waits in a pause_point until
/// release(), so every other call for the key queues behind it. As the wait scenarios
/// (wait_contract.hpp) see a primitive, wait() is a call for the key with initialiser 2, which
/// runs (and yields 2 at once) only if the run comes to it.
template <class Calls>
struct held_key {
  static constexpr int key = 1;
  typename Calls::primitive_type primitive;
  run_log log;
  pause_point paused;
  ending holder_end = ending::value;
  call_probe holder;
  task<void> holding = caller(
      [this] {
        return Calls::await(primitive, key, [this]() -> task<int> {
          log.enter(1);
          co_await paused.wait();
          log.leave();
          co_return end_as<int>(1, holder_end);
        });
      },
      holder);

  held_key() { holding.handle().resume(); }

  [[nodiscard]] scripted<> waiter_init() { return {&log, 2}; }
  [[nodiscard]] auto wait() { return Calls::await(primitive, key, waiter_init()); }
  [[nodiscard]] auto wait(asyncband::stop_token stop) {
    return Calls::await(primitive, key, waiter_init(), std::move(stop));
  }
  auto wait_blocking() { return Calls::block(primitive, key, waiter_init()); }
  auto wait_blocking(asyncband::stop_token stop) {
    return Calls::block(primitive, key, waiter_init(), std::move(stop));
  }
  template <class Rep, class Period>
  auto wait_timeout(std::chrono::duration<Rep, Period> timeout) {
    return Calls::block_for(primitive, key, waiter_init(), timeout);
  }

  /// The holder's run ends as told (inline, on this thread).
  void release(ending end = ending::value) {
    holder_end = end;
    paused.release();
  }
};

/// The wait scenarios' wake: the holder's run succeeds.
inline constexpr auto release_held = [](auto& h) { h.release(); };

/// A waiter's probe for the wait scenarios that also keeps the value its wait yielded.
struct valued_probe : probe {
  std::optional<int> value;
  template <class Primitive>
  void after_wait(Primitive& /*unused*/) noexcept {}
  template <class Primitive>
  void after_wait(Primitive& /*unused*/, int v) noexcept {
    value = v;
  }
};

/// Runs a lifetime row (support/lifetime.hpp), aborting on a hang.
inline void run_row(const lifetime::row& r) {
  const lifetime::watchdog guard(r.name, std::chrono::seconds(30));
  r.body();
}

/// The completing side of a lifetime row: the holder of the key's run (a coroutine without a
/// scheduler, outside the primitive the waiter destroys), paused in initialiser 1 until
/// release(), which ends it as told.
struct held_run_waker : lifetime::waker_base {
  run_log log;
  pause_point paused;
  ending end = ending::value;
  call_probe holder;
  task<void> holding;

  template <class Calls>
  void start(typename Calls::primitive_type& primitive) {
    holding = caller(
        [this, &primitive] {
          return Calls::await(primitive, 1, [this]() -> task<int> {
            log.enter(1);
            co_await paused.wait();
            log.leave();
            co_return end_as<int>(1, end);
          });
        },
        holder);
    holding.handle().resume();
  }
  void release(ending how) {
    end = how;
    paused.release();
  }
};

/// The lifetime rows (support/lifetime.hpp) of a keyed primitive, named `prefix`_...: a
/// waiter (a coroutine without a scheduler, or a blocked plain thread) queued behind the
/// holder's run destroys the primitive as soon as its call returns, while the call that woke it
/// is still on the stack: the holder's run completing (the waiter gets its value), failing or
/// destroyed (the run passes to the waiter, which runs its own initialiser), or a cancellable
/// waiter handed the failed run that passes it on because its stop was requested.
template <class Calls>
std::vector<lifetime::row> held_run_rows(const std::string& prefix) {
  using lifetime::row;
  struct world {
    typename Calls::primitive_type primitive;
  };
  using waker = held_run_waker;
  const auto hold = [](world& w, waker& k) { k.start<Calls>(w.primitive); };
  const auto own_init = []() -> task<int> { co_return 2; };
  const auto call = [own_init](world& w, const asyncband::stop_token& /*unused*/) {
    return Calls::await(w.primitive, 1, own_init);
  };
  const auto call_until = [own_init](world& w, asyncband::stop_token stop) {
    return Calls::await(w.primitive, 1, own_init, std::move(stop));
  };
  const auto call_blocking = [own_init](world& w, asyncband::stop_token stop) {
    return Calls::block(w.primitive, 1, own_init, std::move(stop));
  };
  const auto succeed = [](world* /*unused*/, waker& k) { k.release(ending::value); };
  const auto fail = [](world* /*unused*/, waker& k) { k.release(ending::exception); };
  const auto destroy_holder = [](world* /*unused*/, waker& k) { k.holding = {}; };
  std::vector<row> rows;
  rows.push_back(lifetime::coroutine_row<world, waker>(prefix + "_run_completed", "ok", hold, call, succeed));
  rows.push_back(lifetime::coroutine_row<world, waker>(prefix + "_run_completed_cancellable", "ok", hold,
                                                       call_until, succeed));
  rows.push_back(
      lifetime::coroutine_row<world, waker>(prefix + "_run_failed_passed_on", "ok", hold, call, fail));
  rows.push_back(lifetime::coroutine_row<world, waker>(prefix + "_holder_destroyed_run_passed_on", "ok", hold,
                                                       call, destroy_holder));
  rows.push_back(lifetime::pass_on_row<world, waker>(prefix + "_run_passed_on_by_a_stopped_waiter", hold,
                                                     call_until, call, fail));
  rows.push_back(lifetime::crowd_row<world, waker>(
      prefix + "_run_completed_crowd", 20, "ok", hold, call, call,
      [](world* /*unused*/, waker& k, asyncband::stop_source& /*unused*/) { k.release(ending::value); }));
  rows.push_back(lifetime::thread_row<world, waker>(prefix + "_run_completed_blocked_thread", "ok", hold,
                                                    call_blocking, succeed));
  rows.push_back(lifetime::thread_row<world, waker>(prefix + "_run_failed_blocked_thread", "ok", hold,
                                                    call_blocking, fail));
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Stress: each round, a fresh primitive and a few keys with 2-8 callers each, pool coroutines and
// plain threads, in every form; their initialisers hop to the pool and fail at random, and some
// rounds request stop mid-round. Each caller records what it got, each key its runs.

/// One key of a stress round.
struct stress_key {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};  // runs of the key that started while another was in progress
  std::mutex mutex;
  std::vector<int> produced;  // the values of its runs that succeeded
};

/// One caller of a stress round, and what it got.
struct stress_caller {
  int id = 0;
  int key = 0;
  /// 0-3 a pool coroutine's await, 4-7 a plain thread's blocking call; odd: the try_ form;
  /// 2, 3, 6, 7: with the round's stop token.
  int form = 0;
  bool fails = false;  // its own initialiser fails (throws, or yields an error)
  std::atomic<bool> ran{false};
  call_probe got;

  [[nodiscard]] bool stoppable() const noexcept { return form % 4 >= 2; }
};

/// A stress caller's initialiser: checks that no other run of its key is in progress, hops to
/// the pool (the run goes on and completes there), then yields its value (its id) or fails.
template <class Yield>
struct stress_init {
  stress_key* key;
  stress_caller* me;
  asyncband::runtime::thread_pool* pool;

  task<Yield> operator()() const {
    if (key->inside.fetch_add(1) != 0) key->overlaps.fetch_add(1);
    me->ran = true;
    co_await pool->schedule();
    key->inside.fetch_sub(1);
    if (!me->fails) {
      const std::lock_guard lock(key->mutex);
      key->produced.push_back(me->id);
    }
    constexpr ending failure = std::is_same_v<Yield, int> ? ending::exception : ending::error;
    co_return end_as<Yield>(me->id, me->fails ? failure : ending::value);
  }
};

/// One round of the stress test on a fresh primitive.
template <class Calls>
class stress_round {
 public:
  static constexpr int keys = 2;

  stress_round(asyncband::runtime::thread_pool& pool, std::mt19937& rng, bool stop_mid_round)
      : pool_(pool), stop_mid_round_(stop_mid_round) {
    std::uniform_int_distribution<int> callers_per_key(2, 8);
    std::uniform_int_distribution<int> form(0, 7);
    std::uniform_int_distribution<int> one_in_three(0, 2);
    int id = 0;
    for (int k = 0; k < keys; ++k) {
      for (int n = callers_per_key(rng); n > 0; --n) {
        auto c = std::make_unique<stress_caller>();
        c->id = id++;
        c->key = k;
        c->form = form(rng);
        c->fails = one_in_three(rng) == 0;
        callers_.push_back(std::move(c));
      }
    }
  }

  /// Starts every caller (the threaded ones on two plain threads), requests stop mid-round if
  /// told, and returns once every caller has its outcome and the stop request has returned.
  void run() {
    finished_.reset(static_cast<int>(callers_.size()) + (stop_mid_round_ ? 1 : 0));
    std::vector<stress_caller*> threaded[2];
    for (std::size_t i = 0; i < callers_.size(); ++i) {
      stress_caller& c = *callers_[i];
      if (c.form < 4) {
        asyncband::runtime::spawn(pool_.ref(), pool_caller(c));
      } else {
        threaded[i % 2].push_back(&c);
      }
      if (stop_mid_round_ && i == callers_.size() / 2) {
        asyncband::runtime::spawn(pool_.ref(), stopper());
      }
    }
    std::vector<std::thread> threads;
    for (auto& list : threaded) {
      threads.emplace_back([this, list] {
        for (stress_caller* c : list) {
          blocking_caller(*c);
          finished_.done();
        }
      });
    }
    finished_.wait_or_abort(std::chrono::seconds(60), "once stress");
    for (auto& t : threads) t.join();
  }

  typename Calls::primitive_type& primitive() noexcept { return primitive_; }
  [[nodiscard]] const stress_key& key(int k) const noexcept { return keys_[k]; }

  /// What holds for every caller of both primitives: one outcome; a failure only its own (its
  /// initialiser ran and failed); cancelled only with a stop requested and its initialiser never
  /// run; a value that a successful run of its key produced (its own, if its own ran). And no
  /// two runs of a key overlapped.
  void expect_every_caller_consistent(int round) const {
    for (int k = 0; k < keys; ++k)
      EXPECT_EQ(keys_[k].overlaps.load(), 0) << "round " << round << " key " << k;
    for (const auto& c : callers_) {
      const call_probe& got = c->got;
      const auto& produced = keys_[c->key].produced;
      SCOPED_TRACE(testing::Message() << "round " << round << " caller " << c->id << " form " << c->form);
      EXPECT_EQ(got.resumed, 1);
      if (got.status != wait_status::ok) {
        EXPECT_EQ(got.status, wait_status::cancelled);
        EXPECT_TRUE(c->stoppable() && stop_mid_round_);
        EXPECT_FALSE(c->ran.load());
      } else if (!got.failure.empty()) {
        EXPECT_EQ(got.failure, failure_of(c->id));
        EXPECT_TRUE(c->ran.load() && c->fails);
      } else {
        ASSERT_TRUE(got.value.has_value());
        EXPECT_NE(std::find(produced.begin(), produced.end(), *got.value), produced.end());
        if (c->ran) {
          EXPECT_EQ(*got.value, c->id);
        }
      }
    }
  }

  /// Adds up how the calls ended: {values, failures, cancellations}.
  void add_to(std::array<int, 3>& totals) const {
    for (const auto& c : callers_) {
      const int i = c->got.status != wait_status::ok ? 2 : c->got.failure.empty() ? 0 : 1;
      ++totals[static_cast<std::size_t>(i)];
    }
  }

 private:
  template <class Yield>
  stress_init<Yield> init(stress_caller& c) {
    return {&keys_[c.key], &c, &pool_};
  }
  asyncband::stop_token token(const stress_caller& c) const {
    return c.stoppable() ? stop_.get_token() : asyncband::stop_token{};
  }

  /// Requests stop from a pool thread; a participant, so that the round outlives it.
  task<void> stopper() {
    co_await pool_request_stop(pool_, stop_);
    finished_.done();
  }

  task<void> pool_caller(stress_caller& c) {
    auto& p = primitive_;
    switch (c.form) {
      case 0:
        co_await caller([&] { return Calls::await(p, c.key, init<int>(c)); }, c.got);
        break;
      case 1:
        co_await caller([&] { return Calls::try_await(p, c.key, init<fallible_int>(c)); }, c.got);
        break;
      case 2:
        co_await caller([&] { return Calls::await(p, c.key, init<int>(c), token(c)); }, c.got);
        break;
      default:
        co_await caller([&] { return Calls::try_await(p, c.key, init<fallible_int>(c), token(c)); }, c.got);
    }
    finished_.done();
  }

  void blocking_caller(stress_caller& c) {
    auto& p = primitive_;
    switch (c.form) {
      case 4:
        call_blocking([&] { return Calls::block(p, c.key, init<int>(c)); }, c.got);
        break;
      case 5:
        call_blocking([&] { return Calls::try_block(p, c.key, init<fallible_int>(c)); }, c.got);
        break;
      case 6:
        call_blocking([&] { return Calls::block(p, c.key, init<int>(c), token(c)); }, c.got);
        break;
      default:
        call_blocking([&] { return Calls::try_block(p, c.key, init<fallible_int>(c), token(c)); }, c.got);
    }
  }

  asyncband::runtime::thread_pool& pool_;
  bool stop_mid_round_;
  typename Calls::primitive_type primitive_;
  stress_key keys_[keys];
  std::vector<std::unique_ptr<stress_caller>> callers_;
  asyncband::stop_source stop_;
  completion finished_;
};

/// Runs stress rounds (at most 300, about two seconds) on a pool of two threads; after each,
/// every caller must be consistent, then `check(round, r)` checks the primitive's own
/// guarantees. Every third round requests stop mid-round.
template <class Calls, class Check>
void run_stress_rounds(Check check) {
  asyncband::runtime::thread_pool pool(2);
  std::mt19937 rng(20240612);
  std::array<int, 3> totals{};
  const int rounds = repeat_for(300, std::chrono::seconds(2), [&](int round) {
    stress_round<Calls> r(pool, rng, round % 3 == 0);
    r.run();
    r.expect_every_caller_consistent(round);
    check(round, r);
    r.add_to(totals);
    return !testing::Test::HasFailure();
  });
  EXPECT_GT(rounds, 0);
  EXPECT_GT(totals[0], 0);
  testing::Test::RecordProperty("rounds", rounds);
  testing::Test::RecordProperty("failures", totals[1]);
  testing::Test::RecordProperty("cancelled", totals[2]);
}

}  // namespace asyncband_test
