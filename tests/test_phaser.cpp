// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::phaser: phase ids; registration one by one and in batches; arrival,
// repeated arrival and waiting for the phase of an arrival; withdrawal (arrive_and_deregister,
// destroying participants and batches) and the empty phaser; observers; close(); the counter's
// wrap-around; cancellation (an arrival commits when the wait starts); deterministic races on the
// test scheduler and at the waiter core's test points; resumption on thread pools; and bounded
// multi-threaded stress with per-phase invariants.
#include "asyncband/phaser.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <latch>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/block_on.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/runtime/thread_pool.hpp"
#include "asyncband/stop_token.hpp"
#include "support/destroyed_with_waiters.hpp"
#include "support/last_one_out.hpp"
#include "support/lifetime.hpp"
#include "support/probe.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"

namespace asyncband {
/// GoogleTest prints phase ids in failure messages through this (found by argument-dependent
/// lookup).
inline void PrintTo(phase_id p, std::ostream* os) {
  *os << "phase " << p.value();
}
}  // namespace asyncband

namespace {

using namespace asyncband_test;
using asyncband::phase_id;
using asyncband::phaser;
using asyncband::phaser_batch;
using asyncband::phaser_participant;
using asyncband::runtime::thread_pool;
using phase_result = asyncband::result<phase_id>;

constexpr std::uint64_t kLastPhase = std::numeric_limits<std::uint64_t>::max();

// ---------------------------------------------------------------------------------------------
// Helpers

/// Registers one participant (the phaser is open).
phaser_participant join(phaser& ph) {
  return ph.enroll().value();
}

std::vector<phaser_participant> join_n(phaser& ph, int n) {
  std::vector<phaser_participant> all;
  for (int i = 0; i < n; ++i) all.push_back(join(ph));
  return all;
}

/// `r` is ok and yields phase `expected`.
testing::AssertionResult is_phase(const phase_result& r, std::uint64_t expected) {
  if (!r.ok()) {
    return testing::AssertionFailure()
           << "status " << asyncband::to_string(r.status()) << ", expected phase " << expected;
  }
  if (r->value() != expected) {
    return testing::AssertionFailure() << "phase " << r->value() << ", expected phase " << expected;
  }
  return testing::AssertionSuccess();
}

/// The phaser is in `phase`, with `participants` registered and `unarrived` of them yet to arrive.
testing::AssertionResult state_is(const phaser& ph, std::uint64_t phase, std::size_t participants,
                                  std::size_t unarrived) {
  const std::uint64_t now = ph.phase().value();
  const std::size_t registered = ph.participants();
  const std::size_t owing = ph.unarrived();
  if (now == phase && registered == participants && owing == unarrived) return testing::AssertionSuccess();
  return testing::AssertionFailure() << "(phase, participants, unarrived) = (" << now << ", " << registered
                                     << ", " << owing << "), expected (" << phase << ", " << participants
                                     << ", " << unarrived << ")";
}

/// What one wait reported (see probe), and the phase it yielded.
struct outcome : probe {
  std::optional<phase_id> phase;
  void record(const phase_result& r) {
    finish(r.status());
    if (r.ok()) phase = *r;
  }
};

/// The wait ended exactly once, with `status` (and, when `expected` is given, with that phase).
testing::AssertionResult ended_once(const outcome& o, wait_status status,
                                    std::optional<std::uint64_t> expected = std::nullopt) {
  if (o.resumed != 1) return testing::AssertionFailure() << "resumed " << o.resumed << " times";
  if (o.status != status) {
    return testing::AssertionFailure() << "ended " << (o.status ? asyncband::to_string(*o.status) : "?")
                                       << ", expected " << asyncband::to_string(status);
  }
  if (expected && (!o.phase || o.phase->value() != *expected)) {
    return testing::AssertionFailure()
           << "yielded phase " << (o.phase ? std::to_string(o.phase->value()) : std::string("none"))
           << ", expected " << *expected;
  }
  return testing::AssertionSuccess();
}

testing::AssertionResult ended_ok_at(const outcome& o, std::uint64_t phase) {
  return ended_once(o, wait_status::ok, phase);
}

task<void> participant_wait(phaser_participant& p, outcome& out) {
  ++out.started;
  const phase_result r = co_await p.wait();
  out.record(r);
}

task<void> participant_wait_until(phaser_participant& p, asyncband::stop_token token, outcome& out) {
  ++out.started;
  const phase_result r = co_await p.wait(std::move(token));
  out.record(r);
}

/// Owns its participant: destroying the suspended frame destroys the participant too.
task<void> owning_participant_wait(phaser_participant p, outcome& out) {
  ++out.started;
  const phase_result r = co_await p.wait();
  out.record(r);
}

task<void> observer_wait(phaser& ph, phase_id observed, outcome& out) {
  ++out.started;
  const phase_result r = co_await ph.wait(observed);
  out.record(r);
}

task<void> observer_wait_until(phaser& ph, phase_id observed, asyncband::stop_token token, outcome& out) {
  ++out.started;
  const phase_result r = co_await ph.wait(observed, std::move(token));
  out.record(r);
}

/// Drives the awaiter `make()` returns, running `between` where another thread can cut in: after
/// the wait's lock-free check (await_ready) found it not ready, and before the wait takes the
/// phaser's lock to arrive and queue (await_suspend). The waiter core has no test point there.
template <class Awaiter, class Between>
class cut_in {
 public:
  template <class Make>
  cut_in(Make& make, Between& between) : awaiter_(make()), between_(between) {}
  cut_in(const cut_in&) = delete;
  cut_in& operator=(const cut_in&) = delete;
  ~cut_in() = default;

  bool await_ready() {
    if (awaiter_.await_ready()) return true;
    between_();
    return false;
  }
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    return awaiter_.await_suspend(h);
  }
  auto await_resume() { return awaiter_.await_resume(); }

 private:
  Awaiter awaiter_;
  Between& between_;
};

/// Waits once with the awaiter `make()` returns, with `between` cutting in (see cut_in).
template <class Make, class Between>
task<void> wait_with_cut_in(Make make, Between between, outcome& out) {
  ++out.started;
  const phase_result r = co_await cut_in<std::invoke_result_t<Make&>, Between>(make, between);
  out.record(r);
}

/// The forms of a wait driven from a plain thread (block_on drives the coroutine awaiter).
enum class wait_form { await, await_stop, blocking, blocking_stop, timeout };
constexpr wait_form all_wait_forms[] = {wait_form::await, wait_form::await_stop, wait_form::blocking,
                                        wait_form::blocking_stop, wait_form::timeout};

const char* form_name(wait_form f) {
  switch (f) {
    case wait_form::await:
      return "block_on(wait())";
    case wait_form::await_stop:
      return "block_on(wait(token))";
    case wait_form::blocking:
      return "wait_blocking()";
    case wait_form::blocking_stop:
      return "wait_blocking(token)";
    case wait_form::timeout:
      return "wait_timeout";
  }
  return "?";
}

/// A participant's wait in form `f`; the timeout form with `timeout`.
phase_result wait_in(phaser_participant& p, wait_form f, std::chrono::nanoseconds timeout = 0ns) {
  asyncband::stop_source never;
  switch (f) {
    case wait_form::await:
      return asyncband::block_on(p.wait());
    case wait_form::await_stop:
      return asyncband::block_on(p.wait(never.get_token()));
    case wait_form::blocking:
      return p.wait_blocking();
    case wait_form::blocking_stop:
      return p.wait_blocking(never.get_token());
    case wait_form::timeout:
      return p.wait_timeout(timeout);
  }
  return wait_status::closed;
}

/// An observer's wait in form `f`; the timeout form with `timeout`.
phase_result observe_in(phaser& ph, phase_id observed, wait_form f, std::chrono::nanoseconds timeout = 0ns) {
  asyncband::stop_source never;
  switch (f) {
    case wait_form::await:
      return asyncband::block_on(ph.wait(observed));
    case wait_form::await_stop:
      return asyncband::block_on(ph.wait(observed, never.get_token()));
    case wait_form::blocking:
      return ph.wait_blocking(observed);
    case wait_form::blocking_stop:
      return ph.wait_blocking(observed, never.get_token());
    case wait_form::timeout:
      return ph.wait_timeout(observed, timeout);
  }
  return wait_status::closed;
}

/// Polls `done()` (yielding) until it holds; aborts rather than hang if it never does.
template <class Done>
void spin_until(Done done, const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "%s: never happened\n", what);
      std::abort();
    }
    std::this_thread::yield();
  }
}

/// Busy-waits about n short steps.
void spin_for(int n) {
  for (int k = 0; k < n; ++k) std::atomic_signal_fence(std::memory_order_seq_cst);
}

/// Runs `t`, then counts `done` down.
task<void> counted(task<void> t, completion& done) {
  co_await std::move(t);
  done.done();
}

std::uint64_t next_random(std::uint64_t& state) noexcept {  // splitmix64
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31U);
}

// ---------------------------------------------------------------------------------------------
// phase_id

TEST(PhaseId, EqualityNextAndWrap) {
  static_assert(phase_id().value() == 0);
  static_assert(phase_id() == phase_id(0));
  static_assert(phase_id(5).next() == phase_id(6));
  static_assert(phase_id(3) != phase_id(4));
  static_assert(phase_id(kLastPhase).next() == phase_id(0));
  constexpr phase_id p(41);
  EXPECT_EQ(p.value(), 41U);
  EXPECT_EQ(p, phase_id(41));
  EXPECT_NE(p, p.next());
  EXPECT_EQ(p.next().value(), 42U);

  phase_id wrapping(kLastPhase - 1);
  std::vector<std::uint64_t> seen;
  for (int i = 0; i < 4; ++i) {
    wrapping = wrapping.next();
    seen.push_back(wrapping.value());
  }
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{kLastPhase, 0, 1, 2}));
}

// ---------------------------------------------------------------------------------------------
// Registration

TEST(Phaser, ANewPhaserIsEmptyAndDormantInItsStartPhase) {
  const auto ph = phaser::create();
  EXPECT_TRUE(state_is(*ph, 0, 0, 0));
  EXPECT_FALSE(ph->is_closed());
  // Nothing advances by itself.
  EXPECT_TRUE(ph->wait_timeout(phase_id(0), 1ms).timed_out());
  EXPECT_EQ(ph->phase(), phase_id(0));

  const auto late = phaser::create(phase_id(1000));
  EXPECT_TRUE(state_is(*late, 1000, 0, 0));
}

TEST(Phaser, EnrollRegistersAParticipantOwingAnArrivalInTheCurrentPhase) {
  const auto ph = phaser::create(phase_id(7));
  auto a = join(*ph);
  EXPECT_TRUE(static_cast<bool>(a));
  EXPECT_EQ(a.phaser(), ph);
  EXPECT_TRUE(state_is(*ph, 7, 1, 1));
  auto b = join(*ph);
  EXPECT_TRUE(state_is(*ph, 7, 2, 2));
  EXPECT_TRUE(is_phase(a.arrive(), 7));
  EXPECT_TRUE(state_is(*ph, 7, 2, 1));
  EXPECT_TRUE(is_phase(b.arrive(), 7));
  EXPECT_TRUE(state_is(*ph, 8, 2, 2));
}

TEST(Phaser, EnrollManyHandsOutItsRegistrationsOneByOne) {
  const auto ph = phaser::create();
  auto enrolled = ph->enroll(3);
  ASSERT_TRUE(enrolled.ok());
  phaser_batch batch = std::move(enrolled).value();
  EXPECT_EQ(batch.size(), 3U);
  EXPECT_FALSE(batch.empty());
  EXPECT_TRUE(state_is(*ph, 0, 3, 3));  // registered at once, in phase 0

  std::vector<phaser_participant> taken;
  for (int i = 0; i < 3; ++i) {
    auto p = batch.take();
    ASSERT_TRUE(p.has_value());
    EXPECT_TRUE(static_cast<bool>(*p));
    EXPECT_EQ(p->phaser(), ph);
    taken.push_back(std::move(*p));
    EXPECT_EQ(batch.size(), static_cast<std::size_t>(2 - i));
    EXPECT_TRUE(state_is(*ph, 0, 3, 3));  // taking registers nothing more
  }
  EXPECT_TRUE(batch.empty());
  EXPECT_FALSE(batch.take().has_value());
  // All three owe phase 0.
  EXPECT_TRUE(is_phase(taken[0].arrive(), 0));
  EXPECT_TRUE(is_phase(taken[1].arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 3, 1));
  EXPECT_TRUE(is_phase(taken[2].arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 3, 3));
}

TEST(Phaser, EnrollZeroIsAnEmptyBatch) {
  const auto ph = phaser::create();
  auto batch = ph->enroll(0).value();
  EXPECT_TRUE(batch.empty());
  EXPECT_FALSE(batch.take().has_value());
  EXPECT_TRUE(state_is(*ph, 0, 0, 0));
}

TEST(Phaser, DestroyingABatchWithdrawsTheRegistrationsNotTaken) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  std::optional<phaser_participant> t;
  {
    auto batch = ph->enroll(3).value();
    EXPECT_TRUE(state_is(*ph, 0, 4, 4));
    t = batch.take();
  }
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));  // the two not taken are gone, obligations included
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  EXPECT_TRUE(is_phase(t->arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(Phaser, DestroyingTheRestOfABatchMayCompleteThePhase) {
  test_scheduler s;
  const auto ph = phaser::create();
  std::optional<phaser_batch> batch = ph->enroll(2).value();
  auto a = join(*ph);
  outcome wa;
  auto ta = participant_wait(a, wa);
  start_on(s, ta);
  s.run();
  EXPECT_EQ(wa.resumed, 0);
  auto t = batch->take().value();
  EXPECT_TRUE(is_phase(t.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 3, 1));  // the registration still in the batch owes the rest

  batch.reset();  // its withdrawal is the last obligation of phase 0
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_TRUE(ended_ok_at(wa, 1));
}

TEST(Phaser, MovingABatchTransfersTheRestAndMoveAssignmentWithdrawsTheOldRest) {
  const auto ph = phaser::create();
  auto first = ph->enroll(2).value();
  phaser_batch second(std::move(first));
  EXPECT_EQ(first.size(), 0U);  // NOLINT(bugprone-use-after-move): moved-from batches are empty
  EXPECT_FALSE(first.take().has_value());
  EXPECT_EQ(second.size(), 2U);
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));

  auto third = ph->enroll(1).value();
  EXPECT_TRUE(state_is(*ph, 0, 3, 3));
  third = std::move(second);  // third's own registration is withdrawn
  EXPECT_EQ(third.size(), 2U);
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));
}

TEST(Phaser, EnrollingBeyondMaxThrowsOverflowErrorAndChangesNothing) {
  static_assert(phaser::max() == std::numeric_limits<std::size_t>::max() / 2);
  {
    const auto ph = phaser::create();
    EXPECT_THROW((void)ph->enroll(phaser::max() + 1), std::overflow_error);
    EXPECT_TRUE(state_is(*ph, 0, 0, 0));
    EXPECT_TRUE(ph->enroll().ok());  // the throw left the phaser usable
  }
  const auto ph = phaser::create();
  {
    auto all = ph->enroll(phaser::max()).value();
    EXPECT_TRUE(state_is(*ph, 0, phaser::max(), phaser::max()));
    EXPECT_THROW((void)ph->enroll(), std::overflow_error);
    EXPECT_THROW((void)ph->enroll(1), std::overflow_error);
    EXPECT_TRUE(state_is(*ph, 0, phaser::max(), phaser::max()));
  }
  // Withdrawing every registration removed phase 0's last obligation.
  EXPECT_TRUE(state_is(*ph, 1, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// Arrival and waiting

TEST(Phaser, ThePhaseCompletesWhenEveryParticipantHasArrived) {
  const auto ph = phaser::create();
  auto ps = join_n(*ph, 3);
  for (std::uint64_t k = 0; k < 3; ++k) {
    EXPECT_TRUE(is_phase(ps[0].arrive(), k));
    EXPECT_TRUE(state_is(*ph, k, 3, 2));
    EXPECT_TRUE(is_phase(ps[1].arrive(), k));
    EXPECT_TRUE(state_is(*ph, k, 3, 1));
    EXPECT_TRUE(is_phase(ps[2].arrive(), k));  // the final arrival: it arrived in k, k completed
    EXPECT_TRUE(state_is(*ph, k + 1, 3, 3));
  }
}

TEST(Phaser, RepeatedArrivalsInOnePhaseCountOnceAndReturnTheSamePhase) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(is_phase(a.arrive(), 0));
    EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  }
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  // A new phase: a's arrival counts again, once.
  EXPECT_TRUE(is_phase(a.arrive(), 1));
  EXPECT_TRUE(is_phase(a.arrive(), 1));
  EXPECT_TRUE(state_is(*ph, 1, 2, 1));
}

TEST(Phaser, WaitArrivesAndTheFinalArrivalWakesTheWaitersOfThePhase) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto ps = join_n(*ph, 3);
  outcome w0, w1;
  auto t0 = participant_wait(ps[0], w0);
  auto t1 = participant_wait(ps[1], w1);
  start_on(s, t0);
  start_on(s, t1);
  s.run();
  EXPECT_EQ(w0.resumed + w1.resumed, 0);
  EXPECT_TRUE(state_is(*ph, 0, 3, 1));  // both arrived when they started waiting

  EXPECT_TRUE(is_phase(ps[2].arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 3, 3));
  EXPECT_EQ(s.ready_count(), 2U);  // posted to their scheduler, not resumed inline
  EXPECT_EQ(w0.resumed + w1.resumed, 0);
  s.run();
  EXPECT_TRUE(ended_ok_at(w0, 1));
  EXPECT_TRUE(ended_ok_at(w1, 1));
  EXPECT_TRUE(t0.done() && t1.done());
}

TEST(Phaser, TheFinalArrivalsOwnWaitCompletesWithoutSuspending) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  outcome wa, wb;
  auto ta = participant_wait(a, wa);
  auto tb = participant_wait(b, wb);
  start_on(s, ta);
  s.run();
  start_on(s, tb);
  EXPECT_TRUE(s.step());  // b's wait: its arrival completes phase 0, it continues at once
  EXPECT_TRUE(ended_ok_at(wb, 1));
  EXPECT_EQ(wa.resumed, 0);
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_TRUE(ended_ok_at(wa, 1));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(Phaser, WaitAfterArriveWaitsForThatPhaseWithoutArrivingAgain) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto ps = join_n(*ph, 3);
  EXPECT_TRUE(is_phase(ps[0].arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 3, 2));
  outcome w;
  auto t = participant_wait(ps[0], w);
  start_on(s, t);
  s.run();
  EXPECT_EQ(w.resumed, 0);
  EXPECT_TRUE(state_is(*ph, 0, 3, 2));  // no second arrival
  EXPECT_TRUE(is_phase(ps[1].arrive(), 0));
  s.run();
  EXPECT_EQ(w.resumed, 0);  // one obligation left
  EXPECT_TRUE(is_phase(ps[2].arrive(), 0));
  s.run();
  EXPECT_TRUE(ended_ok_at(w, 1));
  EXPECT_TRUE(state_is(*ph, 1, 3, 3));
}

TEST(Phaser, WaitAfterArriveReportsAPhaseThatAlreadyCompletedAtOnceInEveryForm) {
  for (const wait_form f : all_wait_forms) {
    SCOPED_TRACE(form_name(f));
    const auto ph = phaser::create();
    auto a = join(*ph);
    auto b = join(*ph);
    EXPECT_TRUE(is_phase(a.arrive(), 0));
    EXPECT_TRUE(is_phase(b.arrive(), 0));
    EXPECT_TRUE(state_is(*ph, 1, 2, 2));
    // a's arrival in phase 0 is reported, without arriving in phase 1 (the timeout has expired
    // already: it is not needed).
    EXPECT_TRUE(is_phase(wait_in(a, f), 1));
    EXPECT_TRUE(state_is(*ph, 1, 2, 2));
    // Reported once: the next wait arrives in phase 1 (and times out: b has not arrived).
    EXPECT_TRUE(a.wait_timeout(0ms).timed_out());
    EXPECT_TRUE(state_is(*ph, 1, 2, 1));
  }
}

TEST(Phaser, EveryWaitFormOfASoleParticipantCompletesAPhase) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  std::uint64_t expected = 0;
  for (const wait_form f : all_wait_forms) {
    SCOPED_TRACE(form_name(f));
    EXPECT_TRUE(is_phase(wait_in(a, f), ++expected));  // its arrival is the final one
  }
  test_scheduler s;
  std::vector<outcome> outs(5);
  std::vector<task<void>> tasks;
  for (auto& out : outs) {
    tasks.push_back(participant_wait(a, out));
    start_on(s, tasks.back());
    s.run();
    EXPECT_TRUE(ended_ok_at(out, ++expected));
  }
  EXPECT_TRUE(state_is(*ph, expected, 1, 1));
}

TEST(Phaser, BlockingWaitsOnOtherThreadsAreReleasedByTheFinalArrival) {
  constexpr int kPhases = 3;
  const auto ph = phaser::create();
  auto main_participant = join(*ph);
  auto ps = join_n(*ph, 5);
  std::vector<std::vector<std::uint64_t>> yielded(ps.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < kPhases; ++k) {
        const phase_result r = wait_in(ps[i], all_wait_forms[i % std::size(all_wait_forms)], 10min);
        yielded[i].push_back(r.ok() ? r->value() : 999);
      }
    });
  }
  for (std::uint64_t k = 0; k < kPhases; ++k) {
    // Every thread has arrived (and is blocked, or about to block) before the final arrival.
    spin_until([&] { return ph->phase() == phase_id(k) && ph->unarrived() == 1; }, "blocking arrivals");
    EXPECT_TRUE(is_phase(main_participant.arrive(), k));
  }
  for (auto& t : threads) t.join();
  for (const auto& y : yielded) EXPECT_EQ(y, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_TRUE(state_is(*ph, kPhases, 6, 6));
}

// arrive() completes a phase without a wake-up only while nobody waits for it: here the only
// waiters are plain threads in untimed waits, which have no node and sleep on the broadcast word.
// Each thread's parking hook runs just before it sleeps, with the word's key already read: an
// arrival that does not move the word leaves it asleep. The test then closes the phaser (which
// always moves the word) so that such a failure ends instead of hanging.
TEST(Phaser, AnArrivalThatCompletesAPhaseReleasesThreadsThatWaitWithoutANode) {
  const auto ph = phaser::create();
  auto arriving = join(*ph);
  auto waiting = join(*ph);
  std::atomic<int> parking{0};
  std::atomic<int> returned{0};
  phase_result participant_saw = wait_status::closed;
  phase_result observer_saw = wait_status::closed;
  const auto block = [&](const std::function<phase_result()>& wait, phase_result& saw) {
    return std::thread([&, wait] {
      const thread_hook before_sleep(test_point::parking, [&] { parking.fetch_add(1); });
      saw = wait();
      returned.fetch_add(1);
    });
  };
  std::thread participant = block([&] { return waiting.wait_blocking(); }, participant_saw);
  std::thread observer = block([&] { return ph->wait_blocking(phase_id(0)); }, observer_saw);
  spin_until([&] { return parking.load() == 2; }, "both threads about to sleep");

  EXPECT_TRUE(is_phase(arriving.arrive(), 0));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (returned.load() != 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(returned.load(), 2) << "the final arrive() left threads asleep";
  ph->close();  // releases them if the arrival did not (the failure above), and does nothing else
  participant.join();
  observer.join();
  EXPECT_TRUE(is_phase(participant_saw, 1));
  EXPECT_TRUE(is_phase(observer_saw, 1));
}

// ---------------------------------------------------------------------------------------------
// Withdrawal

TEST(Phaser, ArriveAndDeregisterArrivesLeavesAndEmptiesTheHandle) {
  const auto ph = phaser::create();
  auto ps = join_n(*ph, 3);
  EXPECT_TRUE(is_phase(ps[0].arrive_and_deregister(), 0));
  EXPECT_FALSE(static_cast<bool>(ps[0]));
  EXPECT_EQ(ps[0].phaser(), nullptr);
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));
  EXPECT_TRUE(is_phase(ps[1].arrive(), 0));
  EXPECT_TRUE(is_phase(ps[2].arrive_and_deregister(), 0));  // the last obligation of phase 0
  EXPECT_TRUE(state_is(*ph, 1, 1, 1));
  EXPECT_TRUE(is_phase(ps[1].arrive(), 1));  // alone now
  EXPECT_TRUE(state_is(*ph, 2, 1, 1));
}

TEST(Phaser, ArriveAndDeregisterAfterArrivingDoesNotArriveAgain) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  auto c = join(*ph);
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 3, 2));
  EXPECT_TRUE(is_phase(a.arrive_and_deregister(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));  // b and c still owe phase 0
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(is_phase(c.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(Phaser, DestroyingAParticipantThatHadNotArrivedCompletesThePhaseIfItWasTheLastObligation) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  std::optional<phaser_participant> b = join(*ph);
  std::optional<phaser_participant> c = join(*ph);
  outcome wa;
  auto ta = participant_wait(a, wa);
  start_on(s, ta);
  s.run();
  EXPECT_TRUE(state_is(*ph, 0, 3, 2));
  b.reset();  // not the last obligation: c still owes
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  EXPECT_EQ(s.ready_count(), 0U);
  c.reset();  // the last one
  EXPECT_TRUE(state_is(*ph, 1, 1, 1));
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_TRUE(ended_ok_at(wa, 1));
}

TEST(Phaser, DestroyingAParticipantThatHadArrivedLeavesTheCurrentPhasesCountAlone) {
  const auto ph = phaser::create();
  std::optional<phaser_participant> a = join(*ph);
  auto b = join(*ph);
  auto c = join(*ph);
  EXPECT_TRUE(is_phase(a->arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 3, 2));
  a.reset();
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(is_phase(c.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));  // phase 1 does not count a
}

TEST(Phaser, DestroyingAParticipantWhosePhaseCompletedWithdrawsItFromTheNextPhase) {
  const auto ph = phaser::create();
  std::optional<phaser_participant> a = join(*ph);
  auto b = join(*ph);
  EXPECT_TRUE(is_phase(a->arrive(), 0));
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  a.reset();  // it owed phase 1
  EXPECT_TRUE(state_is(*ph, 1, 1, 1));
  EXPECT_TRUE(is_phase(b.arrive(), 1));
  EXPECT_TRUE(state_is(*ph, 2, 1, 1));
}

TEST(Phaser, MovingAParticipantTransfersItsRegistrationAndItsArrival) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  phaser_participant moved(std::move(a));
  EXPECT_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move): a moved-from handle is empty
  EXPECT_TRUE(static_cast<bool>(moved));
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  EXPECT_TRUE(is_phase(moved.arrive(), 0));  // the arrival moved with it: counted once
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(is_phase(moved.wait_blocking(), 1));  // the unreported completion moved too
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(Phaser, MoveAssigningOverARegisteredParticipantWithdrawsIt) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  auto c = join(*ph);
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  c = std::move(a);                    // c had not arrived: its obligation goes with it
  EXPECT_FALSE(static_cast<bool>(a));  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  EXPECT_TRUE(is_phase(c.wait_blocking(), 1));  // a's arrival, reported through c
}

TEST(Phaser, UsingAnEmptyParticipantThrowsLogicError) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  auto other = join(*ph);
  phaser_participant keeper(std::move(a));              // a: moved from
  EXPECT_TRUE(is_phase(b.arrive_and_deregister(), 0));  // b: deregistered
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));
  asyncband::stop_source never;
  for (phaser_participant* empty : {&a, &b}) {
    EXPECT_FALSE(static_cast<bool>(*empty));
    EXPECT_EQ(empty->phaser(), nullptr);
    EXPECT_THROW((void)empty->arrive(), std::logic_error);
    EXPECT_THROW((void)empty->wait(), std::logic_error);
    EXPECT_THROW((void)empty->wait(never.get_token()), std::logic_error);
    EXPECT_THROW((void)empty->wait_blocking(), std::logic_error);
    EXPECT_THROW((void)empty->wait_blocking(never.get_token()), std::logic_error);
    EXPECT_THROW((void)empty->wait_timeout(1h), std::logic_error);
    EXPECT_THROW((void)empty->arrive_and_deregister(), std::logic_error);
  }
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));  // nothing changed
}

TEST(Phaser, ParticipantsJoinAndLeaveAcrossPhases) {
  test_scheduler s;
  const auto ph = phaser::create();
  // An observer follows every phase change.
  std::vector<std::uint64_t> observed;
  auto follow = [](phaser& p, std::vector<std::uint64_t>& log) -> task<void> {
    for (phase_id seen = p.phase();;) {
      const phase_result r = co_await p.wait(seen);
      if (!r.ok()) co_return;
      log.push_back(r->value());
      seen = *r;
    }
  };
  auto observer = follow(*ph, observed);
  start_on(s, observer);
  s.run();

  auto a = join(*ph);
  EXPECT_TRUE(state_is(*ph, 0, 1, 1));
  // Phase 0: b joins, a arrives, c joins during the phase, b and c arrive.
  std::optional<phaser_participant> b = join(*ph);
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  std::optional<phaser_participant> c = join(*ph);
  EXPECT_TRUE(state_is(*ph, 0, 3, 2));
  EXPECT_TRUE(is_phase(b->arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 3, 1));
  EXPECT_TRUE(is_phase(c->arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 3, 3));
  s.run();
  // Phase 1: a leaves (arriving), d joins, b arrives, c is destroyed before arriving, d arrives.
  EXPECT_TRUE(is_phase(a.arrive_and_deregister(), 1));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  std::optional<phaser_participant> d = join(*ph);
  EXPECT_TRUE(state_is(*ph, 1, 3, 3));
  EXPECT_TRUE(is_phase(b->arrive(), 1));
  EXPECT_TRUE(state_is(*ph, 1, 3, 2));
  c.reset();
  EXPECT_TRUE(state_is(*ph, 1, 2, 1));
  EXPECT_TRUE(is_phase(d->arrive(), 1));
  EXPECT_TRUE(state_is(*ph, 2, 2, 2));
  s.run();
  // Phase 2: b arrives, a batch of two joins, d and the first of the batch arrive, the second
  // leaves (arriving): the last obligation.
  EXPECT_TRUE(is_phase(b->arrive(), 2));
  EXPECT_TRUE(state_is(*ph, 2, 2, 1));
  auto batch = ph->enroll(2).value();
  std::optional<phaser_participant> e1 = batch.take();
  std::optional<phaser_participant> e2 = batch.take();
  EXPECT_TRUE(state_is(*ph, 2, 4, 3));
  EXPECT_TRUE(is_phase(d->arrive(), 2));
  EXPECT_TRUE(is_phase(e1->arrive(), 2));
  EXPECT_TRUE(state_is(*ph, 2, 4, 1));
  EXPECT_TRUE(is_phase(e2->arrive_and_deregister(), 2));
  EXPECT_TRUE(state_is(*ph, 3, 3, 3));
  s.run();
  // Phase 3: b arrives and is destroyed (its arrival stays counted), d and e1 arrive.
  EXPECT_TRUE(is_phase(b->arrive(), 3));
  b.reset();
  EXPECT_TRUE(state_is(*ph, 3, 2, 2));
  EXPECT_TRUE(is_phase(d->arrive(), 3));
  EXPECT_TRUE(is_phase(e1->arrive(), 3));
  EXPECT_TRUE(state_is(*ph, 4, 2, 2));
  s.run();
  // Phase 4: everybody leaves; the phase completes with nobody left.
  EXPECT_TRUE(is_phase(d->arrive_and_deregister(), 4));
  EXPECT_TRUE(state_is(*ph, 4, 1, 1));
  e1.reset();
  EXPECT_TRUE(state_is(*ph, 5, 0, 0));
  s.run();
  // Phase 5: dormant until f joins it; f completes it alone.
  auto f = join(*ph);
  EXPECT_TRUE(state_is(*ph, 5, 1, 1));
  EXPECT_TRUE(is_phase(f.arrive(), 5));
  EXPECT_TRUE(state_is(*ph, 6, 1, 1));
  s.run();
  // Phase 6: g joins; both arrive, g by waiting.
  auto g = join(*ph);
  EXPECT_TRUE(is_phase(f.arrive(), 6));
  EXPECT_TRUE(is_phase(g.wait_blocking(), 7));
  EXPECT_TRUE(state_is(*ph, 7, 2, 2));
  s.run();

  EXPECT_EQ(observed, (std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7}));
  ph->close();  // ends the observer
  s.run();
  EXPECT_TRUE(observer.done());
}

// ---------------------------------------------------------------------------------------------
// The empty phaser

TEST(Phaser, AnEmptyPhaserStaysDormantAndALaterRegistrationJoinsTheNextPhase) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  outcome first, second;
  auto t1 = observer_wait(*ph, phase_id(0), first);
  start_on(s, t1);
  s.run();
  EXPECT_TRUE(is_phase(a.arrive_and_deregister(), 0));  // the last obligation of phase 0
  EXPECT_TRUE(state_is(*ph, 1, 0, 0));
  s.run();
  EXPECT_TRUE(ended_ok_at(first, 1));

  auto t2 = observer_wait(*ph, phase_id(1), second);
  start_on(s, t2);
  s.run();
  EXPECT_EQ(second.resumed, 0);
  EXPECT_TRUE(ph->wait_timeout(phase_id(1), 1ms).timed_out());  // dormant: nothing advances
  EXPECT_TRUE(state_is(*ph, 1, 0, 0));

  auto b = join(*ph);  // joins phase 1
  EXPECT_TRUE(state_is(*ph, 1, 1, 1));
  EXPECT_EQ(second.resumed, 0);
  EXPECT_TRUE(is_phase(b.arrive(), 1));
  EXPECT_TRUE(state_is(*ph, 2, 1, 1));
  s.run();
  EXPECT_TRUE(ended_ok_at(second, 2));
}

TEST(Phaser, WithdrawingTheLastObligationCompletesThePhaseEvenIfNobodyIsLeft) {
  const auto ph = phaser::create();
  { auto a = join(*ph); }  // destroyed before arriving
  EXPECT_TRUE(state_is(*ph, 1, 0, 0));
  { auto batch = ph->enroll(3).value(); }  // none taken
  EXPECT_TRUE(state_is(*ph, 2, 0, 0));
  {
    // A sole participant's arrival completes phase 2; it then owes phase 3, and its withdrawal
    // is that phase's last obligation.
    auto a = join(*ph);
    EXPECT_TRUE(is_phase(a.arrive(), 2));
    EXPECT_TRUE(state_is(*ph, 3, 1, 1));
  }
  EXPECT_TRUE(state_is(*ph, 4, 0, 0));
  auto late = join(*ph);
  EXPECT_TRUE(state_is(*ph, 4, 1, 1));
  EXPECT_TRUE(is_phase(late.wait_blocking(), 5));
}

// ---------------------------------------------------------------------------------------------
// Observers

TEST(PhaserObserver, AWaitIsReadyAtOnceWhenThePhaseAlreadyDiffers) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  EXPECT_TRUE(is_phase(a.arrive(), 1));  // now in phase 2
  for (const std::uint64_t observed : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{3}, kLastPhase}) {
    SCOPED_TRACE(observed);
    for (const wait_form f : all_wait_forms) {
      SCOPED_TRACE(form_name(f));
      EXPECT_TRUE(is_phase(observe_in(*ph, phase_id(observed), f), 2));  // the current phase
    }
    test_scheduler s;
    outcome out;
    auto t = observer_wait(*ph, phase_id(observed), out);
    start_on(s, t);
    EXPECT_EQ(s.run(), 1U);  // never suspended
    EXPECT_TRUE(ended_ok_at(out, 2));
  }
  EXPECT_TRUE(state_is(*ph, 2, 1, 1));  // observers do not register or arrive
}

TEST(PhaserObserver, AWaitOnTheCurrentPhaseWaitsForTheAdvanceAndYieldsTheNewPhase) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  asyncband::stop_source never;
  outcome plain, stoppable;
  auto t1 = observer_wait(*ph, phase_id(0), plain);
  auto t2 = observer_wait_until(*ph, phase_id(0), never.get_token(), stoppable);
  start_on(s, t1);
  start_on(s, t2);
  s.run();
  EXPECT_EQ(plain.resumed + stoppable.resumed, 0);
  EXPECT_TRUE(ph->wait_timeout(phase_id(0), 0ms).timed_out());
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));  // observers do not register

  std::vector<phase_result> blocking;
  std::vector<std::thread> threads;
  std::mutex results_mutex;
  for (const wait_form f : all_wait_forms) {
    threads.emplace_back([&, f] {
      const phase_result r = observe_in(*ph, phase_id(0), f, 10min);
      const std::lock_guard lock(results_mutex);
      blocking.push_back(r);
    });
  }
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  s.run();
  EXPECT_EQ(plain.resumed + stoppable.resumed, 0);
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_EQ(s.ready_count(), 2U);
  s.run();
  EXPECT_TRUE(ended_ok_at(plain, 1));
  EXPECT_TRUE(ended_ok_at(stoppable, 1));
  for (auto& t : threads) t.join();
  ASSERT_EQ(blocking.size(), std::size(all_wait_forms));
  for (const auto& r : blocking) EXPECT_TRUE(is_phase(r, 1));
}

TEST(PhaserObserver, AWaitYieldsThePhaseTheCompletionStartedEvenIfThePhaserMovedOn) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  outcome out;
  auto t = observer_wait(*ph, phase_id(0), out);
  start_on(s, t);
  s.run();
  EXPECT_TRUE(is_phase(a.arrive(), 0));  // wakes the observer (posted)
  EXPECT_TRUE(is_phase(a.arrive(), 1));  // and the phaser moves on before it runs
  EXPECT_EQ(ph->phase(), phase_id(2));
  s.run();
  EXPECT_TRUE(ended_ok_at(out, 1));
}

TEST(PhaserObserver, ACancelledObserverResumesOnceAndTheAdvanceFindsNothingToWake) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(ph->wait_blocking(phase_id(0), stopped.get_token()).cancelled());
  EXPECT_TRUE(asyncband::block_on(ph->wait(phase_id(0), stopped.get_token())).cancelled());

  asyncband::stop_source src;
  outcome out;
  auto t = observer_wait_until(*ph, phase_id(0), src.get_token(), out);
  start_on(s, t);
  s.run();
  EXPECT_EQ(out.resumed, 0);
  src.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_TRUE(ended_once(out, wait_status::cancelled));
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_EQ(out.resumed, 1);
}

// ---------------------------------------------------------------------------------------------
// close()

TEST(PhaserClose, WaitersOfTheUnfinishedPhaseEndClosed) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  auto c = join(*ph);  // never arrives
  asyncband::stop_source never;
  outcome wa, wb, o1, o2;
  auto ta = participant_wait(a, wa);
  auto tb = participant_wait_until(b, never.get_token(), wb);
  auto t1 = observer_wait(*ph, phase_id(0), o1);
  auto t2 = observer_wait_until(*ph, phase_id(0), never.get_token(), o2);
  for (auto* t : {&ta, &tb, &t1, &t2}) start_on(s, *t);
  s.run();
  EXPECT_EQ(wa.resumed + wb.resumed + o1.resumed + o2.resumed, 0);

  ph->close();
  EXPECT_TRUE(ph->is_closed());
  EXPECT_EQ(s.ready_count(), 4U);
  s.run();
  for (const outcome* o : {&wa, &wb, &o1, &o2}) EXPECT_TRUE(ended_once(*o, wait_status::closed));
  // The phase is frozen: the missing arrival is refused, and waits for it still end closed.
  EXPECT_TRUE(c.arrive().closed());
  EXPECT_TRUE(a.wait_blocking().closed());
  EXPECT_TRUE(ph->wait_blocking(phase_id(0)).closed());
  EXPECT_EQ(ph->phase(), phase_id(0));
  ph->close();  // idempotent
  EXPECT_TRUE(ph->is_closed());
  EXPECT_EQ(s.run(), 0U);
}

TEST(PhaserClose, BlockingWaitersOfTheUnfinishedPhaseEndClosed) {
  const auto ph = phaser::create();
  auto ps = join_n(*ph, 5);
  auto missing = join(*ph);  // never arrives
  std::vector<std::optional<phase_result>> participant_results(ps.size());
  std::vector<std::optional<phase_result>> observer_results(std::size(all_wait_forms));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    threads.emplace_back([&, i] { participant_results[i] = wait_in(ps[i], all_wait_forms[i], 10min); });
  }
  for (std::size_t i = 0; i < observer_results.size(); ++i) {
    threads.emplace_back(
        [&, i] { observer_results[i] = observe_in(*ph, phase_id(0), all_wait_forms[i], 10min); });
  }
  // Every participant has arrived (they are blocked, or about to be) when close() comes.
  spin_until([&] { return ph->unarrived() == 1; }, "blocking arrivals before close");
  ph->close();
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE(form_name(all_wait_forms[i]));
    ASSERT_TRUE(participant_results[i].has_value());
    EXPECT_TRUE(participant_results[i]->closed());
    ASSERT_TRUE(observer_results[i].has_value());
    EXPECT_TRUE(observer_results[i]->closed());
  }
  EXPECT_EQ(ph->phase(), phase_id(0));
}

TEST(PhaserClose, CompletedPhasesStillReportOk) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  ph->close();  // freezes phase 1; phase 0 had completed
  EXPECT_EQ(ph->phase(), phase_id(1));

  // The arrivals in phase 0 are reported ok, in any form.
  EXPECT_TRUE(is_phase(a.wait_blocking(), 1));
  test_scheduler s;
  outcome wb;
  auto tb = participant_wait(b, wb);
  start_on(s, tb);
  s.run();
  EXPECT_TRUE(ended_ok_at(wb, 1));
  for (const wait_form f : all_wait_forms) {
    SCOPED_TRACE(form_name(f));
    EXPECT_TRUE(is_phase(observe_in(*ph, phase_id(0), f), 1));
    EXPECT_TRUE(observe_in(*ph, phase_id(1), f, 1h).closed());
  }
  // Phase 1 will not complete: its waits end closed.
  for (const wait_form f : all_wait_forms) {
    SCOPED_TRACE(form_name(f));
    EXPECT_TRUE(wait_in(a, f, 1h).closed());
  }
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(PhaserClose, LaterRegistrationsAndArrivalsReportClosed) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  std::optional<phaser_participant> c = join(*ph);
  ph->close();
  EXPECT_TRUE(ph->enroll().closed());
  EXPECT_TRUE(ph->enroll(2).closed());
  EXPECT_TRUE(state_is(*ph, 0, 3, 3));

  EXPECT_TRUE(a.arrive().closed());
  EXPECT_TRUE(state_is(*ph, 0, 3, 3));  // refused: not counted
  for (const wait_form f : all_wait_forms) {
    SCOPED_TRACE(form_name(f));
    EXPECT_TRUE(wait_in(a, f, 1h).closed());
  }
  EXPECT_TRUE(state_is(*ph, 0, 3, 3));

  EXPECT_TRUE(b.arrive_and_deregister().closed());  // it leaves all the same
  EXPECT_FALSE(static_cast<bool>(b));
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));
  c.reset();
  EXPECT_TRUE(state_is(*ph, 0, 1, 1));
  { phaser_participant last(std::move(a)); }
  // Every obligation of phase 0 is gone, but the phase is frozen.
  EXPECT_TRUE(state_is(*ph, 0, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// The counter's wrap-around

/// A participant that waits `phases` times (alternating plain and cancellable waits) and logs the
/// phases its waits yielded.
task<void> run_phases(phaser_participant& p, int phases, std::vector<std::uint64_t>& log) {
  asyncband::stop_source never;
  for (int k = 0; k < phases; ++k) {
    phase_result r = wait_status::closed;
    if (k % 2 == 0) {
      r = co_await p.wait();
    } else {
      r = co_await p.wait(never.get_token());
    }
    log.push_back(r.ok() ? r->value() : 12345);
  }
}

TEST(PhaserWrap, PhasesRunAcrossTheCounterWrap) {
  constexpr int kPhases = 6;
  for (const std::uint64_t seed : {0ULL, 1ULL, 2ULL, 3ULL}) {
    SCOPED_TRACE(seed);
    test_scheduler s(seed == 0 ? std::nullopt : std::optional<std::uint64_t>(seed));
    const auto ph = phaser::create(phase_id(kLastPhase - 2));
    EXPECT_EQ(ph->phase(), phase_id(kLastPhase - 2));
    auto ps = join_n(*ph, 3);
    std::vector<std::vector<std::uint64_t>> logs(ps.size());
    std::vector<std::uint64_t> observed;
    auto follow = [](phaser& p, std::vector<std::uint64_t>& log) -> task<void> {
      for (phase_id seen = p.phase();;) {
        const phase_result r = co_await p.wait(seen);
        if (!r.ok()) co_return;
        log.push_back(r->value());
        seen = phase_id(log.back());
      }
    };
    std::vector<task<void>> tasks;
    for (std::size_t i = 0; i < ps.size(); ++i) tasks.push_back(run_phases(ps[i], kPhases, logs[i]));
    tasks.push_back(follow(*ph, observed));
    for (auto& t : tasks) start_on(s, t);
    s.run();
    const std::vector<std::uint64_t> expected{kLastPhase - 1, kLastPhase, 0, 1, 2, 3};
    for (const auto& log : logs) EXPECT_EQ(log, expected);
    EXPECT_TRUE(state_is(*ph, 3, 3, 3));
    // The observer followed the changes to the end (it skips those that came before it ran).
    ASSERT_FALSE(observed.empty());
    EXPECT_EQ(observed.back(), 3U);
    // Arrivals and observers around the wrap point.
    EXPECT_TRUE(is_phase(ps[0].arrive(), 3));
    EXPECT_TRUE(is_phase(ph->wait_blocking(phase_id(kLastPhase)), 3));
    ph->close();
    s.run();
    for (std::size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(tasks[i].done());
  }
  // An observer of the largest value is woken by the advance to 0.
  test_scheduler s;
  const auto ph = phaser::create(phase_id(kLastPhase));
  auto a = join(*ph);
  auto b = join(*ph);
  outcome out;
  auto t = observer_wait(*ph, phase_id(kLastPhase), out);
  start_on(s, t);
  s.run();
  EXPECT_TRUE(is_phase(a.arrive(), kLastPhase));
  EXPECT_TRUE(is_phase(b.arrive(), kLastPhase));
  s.run();
  EXPECT_TRUE(ended_ok_at(out, 0));
  EXPECT_TRUE(is_phase(a.wait_blocking(), 0));  // a's arrival in the largest phase, reported
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));
}

// ---------------------------------------------------------------------------------------------
// Cancellation

TEST(PhaserCancel, AStopWhileWaitingKeepsTheArrivalAndTheNextWaitWaitsForTheSamePhase) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  asyncband::stop_source src;
  outcome first, retry;
  auto t1 = participant_wait_until(a, src.get_token(), first);
  start_on(s, t1);
  s.run();
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  src.request_stop();
  EXPECT_EQ(s.ready_count(), 1U);  // posted to its scheduler
  s.run();
  EXPECT_TRUE(ended_once(first, wait_status::cancelled));
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));  // the arrival stays

  auto t2 = participant_wait(a, retry);
  start_on(s, t2);
  s.run();
  EXPECT_EQ(retry.resumed, 0);
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));   // it did not arrive twice
  EXPECT_TRUE(is_phase(b.arrive(), 0));  // b's arrival completes phase 0
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  s.run();
  EXPECT_TRUE(ended_ok_at(retry, 1));
  EXPECT_EQ(first.resumed, 1);
}

TEST(PhaserCancel, ARetryAfterThePhaseCompletedReportsItAtOnceInEveryForm) {
  for (const wait_form f : all_wait_forms) {
    SCOPED_TRACE(form_name(f));
    test_scheduler s;
    const auto ph = phaser::create();
    auto a = join(*ph);
    auto b = join(*ph);
    asyncband::stop_source src;
    outcome first;
    auto t = participant_wait_until(a, src.get_token(), first);
    start_on(s, t);
    s.run();
    src.request_stop();
    s.run();
    EXPECT_TRUE(ended_once(first, wait_status::cancelled));
    EXPECT_TRUE(is_phase(b.arrive(), 0));  // completes phase 0 with a's kept arrival
    EXPECT_TRUE(state_is(*ph, 1, 2, 2));
    EXPECT_TRUE(is_phase(wait_in(a, f), 1));
    EXPECT_TRUE(state_is(*ph, 1, 2, 2));  // no arrival in phase 1
  }
}

TEST(PhaserCancel, AWaitWithAnAlreadyStoppedTokenDoesNotArrive) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  asyncband::stop_source stopped;
  stopped.request_stop();
  EXPECT_TRUE(a.wait_blocking(stopped.get_token()).cancelled());
  EXPECT_TRUE(asyncband::block_on(a.wait(stopped.get_token())).cancelled());
  outcome out;
  auto t = participant_wait_until(a, stopped.get_token(), out);
  start_on(s, t);
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_TRUE(ended_once(out, wait_status::cancelled));
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));  // none of the three arrived

  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));  // a still owes phase 0
  EXPECT_TRUE(is_phase(a.wait_blocking(), 1));
}

TEST(PhaserCancel, DestroyingASuspendedWaitKeepsTheArrivalAndUnlinksTheNode) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  auto c = join(*ph);
  auto d = join(*ph);
  asyncband::stop_source src;
  outcome doomed_plain, doomed_stoppable, survivor;
  auto t_plain = participant_wait(a, doomed_plain);
  auto t_survivor = participant_wait(c, survivor);
  auto t_stoppable = participant_wait_until(b, src.get_token(), doomed_stoppable);
  start_on(s, t_plain);
  start_on(s, t_survivor);
  start_on(s, t_stoppable);
  s.run();
  EXPECT_TRUE(state_is(*ph, 0, 4, 1));

  t_plain = {};  // destroys the suspended frames: the nodes leave the list, the arrivals stay
  t_stoppable = {};
  src.request_stop();  // the stop callback went with the frame
  EXPECT_EQ(s.ready_count(), 0U);
  EXPECT_TRUE(state_is(*ph, 0, 4, 1));
  EXPECT_TRUE(is_phase(d.arrive(), 0));  // would touch freed memory if a node were still linked
  EXPECT_TRUE(state_is(*ph, 1, 4, 4));
  s.run();
  EXPECT_EQ(doomed_plain.resumed + doomed_stoppable.resumed, 0);
  EXPECT_TRUE(ended_ok_at(survivor, 1));
  // The destroyed waits' arrivals in phase 0 are still reported to their participants.
  EXPECT_TRUE(is_phase(a.wait_blocking(), 1));
  EXPECT_TRUE(is_phase(b.wait_blocking(), 1));
  EXPECT_TRUE(state_is(*ph, 1, 4, 4));
}

TEST(PhaserCancel, DestroyingACoroutineThatOwnsItsParticipantKeepsTheArrivalThenWithdraws) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  outcome out;
  auto t = owning_participant_wait(join(*ph), out);
  start_on(s, t);
  s.run();
  EXPECT_TRUE(state_is(*ph, 0, 3, 2));
  t = {};  // the wait is destroyed, then the participant, which had arrived
  EXPECT_TRUE(state_is(*ph, 0, 2, 2));
  EXPECT_EQ(out.resumed, 0);
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(PhaserCancel, WaitTimeoutTimesOutAndKeepsTheArrival) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  EXPECT_TRUE(a.wait_timeout(0ms).timed_out());
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  EXPECT_TRUE(a.wait_timeout(2ms).timed_out());  // a short one, queued and cancelled
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));           // still one arrival
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  EXPECT_TRUE(is_phase(a.wait_timeout(0ms), 1));  // reported without arriving again
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  // An observer's timeout changes nothing.
  EXPECT_TRUE(ph->wait_timeout(phase_id(1), 2ms).timed_out());
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(PhaserCancel, ABlockingWaitStoppedFromAnotherThreadKeepsTheArrival) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  asyncband::stop_source src;
  std::latch published(1);
  std::optional<phase_result> r;
  std::thread waiter([&] {
    // Stopped only once the wait has arrived and registered its stop callback.
    const thread_hook hook(test_point::before_arm, [&] { published.count_down(); });
    r = a.wait_blocking(src.get_token());
  });
  published.wait();
  src.request_stop();
  waiter.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->cancelled());
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));  // a's arrival stays
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_TRUE(is_phase(a.wait_blocking(), 1));  // reported without arriving in phase 1
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(PhaserCancel, ABlockingObserverStoppedFromAnotherThreadEndsCancelled) {
  const auto ph = phaser::create();
  auto a = join(*ph);
  asyncband::stop_source src;
  std::latch published(1);
  std::optional<phase_result> r;
  std::thread observer([&] {
    const thread_hook hook(test_point::before_arm, [&] { published.count_down(); });
    r = ph->wait_blocking(phase_id(0), src.get_token());
  });
  published.wait();
  src.request_stop();
  observer.join();
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->cancelled());
  EXPECT_TRUE(state_is(*ph, 0, 1, 1));
}

TEST(PhaserCancel, AStopDuringPublicationCancelsWithoutSuspendingAndKeepsTheArrival) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    SCOPED_TRACE(static_cast<int>(point));
    test_scheduler s;
    const auto ph = phaser::create();
    auto a = join(*ph);
    auto b = join(*ph);
    asyncband::stop_source src;
    outcome out;
    s.at(point, [&] { src.request_stop(); });
    auto t = participant_wait_until(a, src.get_token(), out);
    start_on(s, t);
    EXPECT_EQ(s.run(), 1U);
    EXPECT_TRUE(ended_once(out, wait_status::cancelled));
    EXPECT_TRUE(state_is(*ph, 0, 2, 1));
    EXPECT_TRUE(is_phase(b.arrive(), 0));  // nothing queued: nothing to wake
    EXPECT_EQ(s.run(), 0U);
    EXPECT_TRUE(is_phase(a.wait_blocking(), 1));
  }
}

// ---------------------------------------------------------------------------------------------
// Deterministic races (test_scheduler::at, thread hooks, and cut_in where no test point exists)

TEST(PhaserRace, AnEnrollmentBeforeTheFinalArrivalJoinsTheCurrentPhase) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  std::optional<phaser_participant> c;
  outcome wa, wb;
  auto ta = participant_wait(a, wa);
  start_on(s, ta);
  s.run();
  // b's wait has found phase 0 unfinished; c's registration lands before b's arrival.
  auto tb = wait_with_cut_in([&b] { return b.wait(); }, [&] { c = join(*ph); }, wb);
  start_on(s, tb);
  s.run();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(wa.resumed + wb.resumed, 0);  // b's arrival was not the final one
  EXPECT_TRUE(state_is(*ph, 0, 3, 1));    // c owes phase 0
  EXPECT_TRUE(is_phase(c->arrive(), 0));
  EXPECT_TRUE(state_is(*ph, 1, 3, 3));
  EXPECT_EQ(s.ready_count(), 2U);
  s.run();
  EXPECT_TRUE(ended_ok_at(wa, 1));
  EXPECT_TRUE(ended_ok_at(wb, 1));
}

TEST(PhaserRace, AnEnrollmentAfterTheFinalArrivalJoinsTheNextPhase) {
  for (const bool final_arrival_waits : {false, true}) {
    SCOPED_TRACE(final_arrival_waits ? "final arrival by wait()" : "final arrival by arrive()");
    test_scheduler s;
    const auto ph = phaser::create();
    auto a = join(*ph);
    auto b = join(*ph);
    std::optional<phaser_participant> c;
    outcome wa, wb;
    auto ta = participant_wait(a, wa);
    start_on(s, ta);
    s.run();
    // The final arrival has advanced and released the lock; a is claimed, not yet resumed.
    bool joined_next_phase = false;
    s.at(test_point::claimed_for_wake, [&] {
      c = join(*ph);
      joined_next_phase = state_is(*ph, 1, 3, 3);
    });
    task<void> tb;
    if (final_arrival_waits) {
      tb = participant_wait(b, wb);
      start_on(s, tb);
      EXPECT_TRUE(s.step());
      EXPECT_TRUE(ended_ok_at(wb, 1));
    } else {
      EXPECT_TRUE(is_phase(b.arrive(), 0));
    }
    EXPECT_EQ(s.pending_actions(), 0U);
    ASSERT_TRUE(c.has_value());
    EXPECT_TRUE(joined_next_phase);
    EXPECT_EQ(s.ready_count(), 1U);  // a, once
    s.run();
    EXPECT_TRUE(ended_ok_at(wa, 1));
    // c owes phase 1, and only phase 1.
    EXPECT_TRUE(is_phase(a.arrive(), 1));
    EXPECT_TRUE(is_phase(b.arrive(), 1));
    EXPECT_TRUE(state_is(*ph, 1, 3, 1));
    EXPECT_TRUE(is_phase(c->arrive(), 1));
    EXPECT_TRUE(state_is(*ph, 2, 3, 3));
  }
}

enum class leave_kind { deregister, destroy };
enum class leave_order { before_the_final_arrival, as_the_last_obligation, after_the_advance };

struct leave_race {
  leave_kind kind;
  leave_order order;
};

void PrintTo(const leave_race& r, std::ostream* os) {
  *os << (r.kind == leave_kind::deregister ? "arrive_and_deregister" : "destruction") << ", "
      << (r.order == leave_order::before_the_final_arrival ? "before the final arrival"
          : r.order == leave_order::as_the_last_obligation ? "as the last obligation"
                                                           : "after the advance");
}

class PhaserLeaveRace : public ::testing::TestWithParam<leave_race> {};

// a waits; b makes the final arrival; c leaves (explicitly or destroyed) just before b arrives,
// just after (its withdrawal is then the last obligation), or once b's arrival has completed the
// phase, c having arrived in it (c then withdraws from the next phase).
TEST_P(PhaserLeaveRace, TheWithdrawalCountsInThePhaseItLandsIn) {
  const leave_race param = GetParam();
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  std::optional<phaser_participant> c = join(*ph);
  std::optional<phase_result> deregistered;
  std::optional<std::uint64_t> left_in;
  const auto leave = [&] {
    left_in = ph->phase().value();
    if (param.kind == leave_kind::deregister) {
      deregistered = c->arrive_and_deregister();
    } else {
      c.reset();
    }
  };
  outcome wa, wb;
  auto ta = participant_wait(a, wa);
  start_on(s, ta);
  s.run();

  task<void> tb;
  switch (param.order) {
    case leave_order::before_the_final_arrival:
      // Between b's lock-free check and its locked arrival: c's withdrawal is not the last
      // obligation (b owes), b's arrival is, and b's wait completes without suspending.
      tb = wait_with_cut_in([&b] { return b.wait(); }, leave, wb);
      start_on(s, tb);
      EXPECT_TRUE(s.step());
      EXPECT_TRUE(ended_ok_at(wb, 1));
      break;
    case leave_order::as_the_last_obligation:
      tb = participant_wait(b, wb);
      start_on(s, tb);
      s.run();
      EXPECT_EQ(wb.resumed, 0);
      leave();
      EXPECT_EQ(s.ready_count(), 2U);
      break;
    case leave_order::after_the_advance:
      EXPECT_TRUE(is_phase(c->arrive(), 0));
      s.at(test_point::claimed_for_wake, leave);
      tb = participant_wait(b, wb);
      start_on(s, tb);
      EXPECT_TRUE(s.step());
      EXPECT_EQ(s.pending_actions(), 0U);
      EXPECT_TRUE(ended_ok_at(wb, 1));
      break;
  }
  EXPECT_FALSE(c.has_value() && static_cast<bool>(*c));
  ASSERT_TRUE(left_in.has_value());
  if (param.kind == leave_kind::deregister) {
    ASSERT_TRUE(deregistered.has_value());
    EXPECT_TRUE(is_phase(*deregistered, *left_in));  // the phase it arrived in
  }
  EXPECT_EQ(*left_in, param.order == leave_order::after_the_advance ? 1U : 0U);
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));  // phase 1 owes a and b only
  s.run();
  EXPECT_TRUE(ended_ok_at(wa, 1));
  EXPECT_TRUE(ended_ok_at(wb, 1));
  EXPECT_TRUE(is_phase(a.arrive(), 1));
  EXPECT_TRUE(is_phase(b.arrive(), 1));
  EXPECT_TRUE(state_is(*ph, 2, 2, 2));
  EXPECT_EQ(wa.resumed, 1);
}

INSTANTIATE_TEST_SUITE_P(
    KindsAndOrders, PhaserLeaveRace,
    ::testing::Values(leave_race{leave_kind::deregister, leave_order::before_the_final_arrival},
                      leave_race{leave_kind::deregister, leave_order::as_the_last_obligation},
                      leave_race{leave_kind::deregister, leave_order::after_the_advance},
                      leave_race{leave_kind::destroy, leave_order::before_the_final_arrival},
                      leave_race{leave_kind::destroy, leave_order::as_the_last_obligation},
                      leave_race{leave_kind::destroy, leave_order::after_the_advance}),
    [](const ::testing::TestParamInfo<leave_race>& info) {
      const std::string kind = info.param.kind == leave_kind::deregister ? "Deregister" : "Destroy";
      switch (info.param.order) {
        case leave_order::before_the_final_arrival:
          return kind + "BeforeTheFinalArrival";
        case leave_order::as_the_last_obligation:
          return kind + "AsTheLastObligation";
        case leave_order::after_the_advance:
          return kind + "AfterTheAdvance";
      }
      return kind;
    });

TEST(PhaserRace, ACancellationThatUnlinkedTheWaiterBeforeTheFinalArrivalWins) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  asyncband::stop_source src;
  outcome wa;
  auto ta = participant_wait_until(a, src.get_token(), wa);
  start_on(s, ta);
  s.run();
  // The stop has unlinked a (not yet resolved) when b's final arrival comes.
  s.at(test_point::claimed_for_cancel, [&] { EXPECT_TRUE(is_phase(b.arrive(), 0)); });
  src.request_stop();
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));  // a's kept arrival let b's complete phase 0
  EXPECT_EQ(s.ready_count(), 1U);       // one resumption: the cancellation's
  s.run();
  EXPECT_TRUE(ended_once(wa, wait_status::cancelled));
  // The retry reports phase 0's completion without arriving in phase 1.
  outcome retry;
  auto tr = participant_wait(a, retry);
  start_on(s, tr);
  EXPECT_EQ(s.run(), 1U);
  EXPECT_TRUE(ended_ok_at(retry, 1));
  EXPECT_TRUE(state_is(*ph, 1, 2, 2));
}

TEST(PhaserRace, AFinalArrivalThatClaimedTheWaiterBeforeTheStopWins) {
  for (const bool observer : {false, true}) {
    SCOPED_TRACE(observer ? "observer" : "participant");
    test_scheduler s;
    const auto ph = phaser::create();
    auto a = join(*ph);
    auto b = join(*ph);
    asyncband::stop_source src;
    outcome w;
    auto t = observer ? observer_wait_until(*ph, phase_id(0), src.get_token(), w)
                      : participant_wait_until(a, src.get_token(), w);
    start_on(s, t);
    s.run();
    if (observer) {
      EXPECT_TRUE(is_phase(a.arrive(), 0));
    }
    s.at(test_point::claimed_for_wake, [&] { src.request_stop(); });
    EXPECT_TRUE(is_phase(b.arrive(), 0));
    EXPECT_EQ(s.pending_actions(), 0U);
    EXPECT_TRUE(src.stop_requested());
    EXPECT_EQ(s.ready_count(), 1U);  // one resumption: the advance's
    s.run();
    EXPECT_TRUE(ended_ok_at(w, 1));
    EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  }
}

class PhaserFinalArrivalAt : public ::testing::TestWithParam<std::pair<test_point, bool>> {};

// The final arrival comes while a's wait is linked but has not armed: a continues without
// suspending, once.
TEST_P(PhaserFinalArrivalAt, AWaiterResolvedBeforeItArmsContinuesOnce) {
  const auto [point, cancellable] = GetParam();
  for (const bool observer : {false, true}) {
    SCOPED_TRACE(observer ? "observer" : "participant");
    test_scheduler s;
    const auto ph = phaser::create();
    auto a = join(*ph);
    auto b = join(*ph);
    asyncband::stop_source src;  // never stopped
    outcome w;
    task<void> t;
    if (observer) {
      EXPECT_TRUE(is_phase(a.arrive(), 0));
      t = cancellable ? observer_wait_until(*ph, phase_id(0), src.get_token(), w)
                      : observer_wait(*ph, phase_id(0), w);
    } else {
      t = cancellable ? participant_wait_until(a, src.get_token(), w) : participant_wait(a, w);
    }
    s.at(point, [&] { EXPECT_TRUE(is_phase(b.arrive(), 0)); });
    start_on(s, t);
    EXPECT_TRUE(s.step());
    EXPECT_EQ(s.pending_actions(), 0U);
    EXPECT_TRUE(ended_ok_at(w, 1));
    EXPECT_EQ(s.ready_count(), 0U);  // continued inline: nothing posted
    src.request_stop();              // the stop callback is gone
    EXPECT_EQ(s.run(), 0U);
    EXPECT_EQ(w.resumed, 1);
    EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Points, PhaserFinalArrivalAt,
    ::testing::Values(std::pair{test_point::published, false}, std::pair{test_point::before_arm, false},
                      std::pair{test_point::published, true}, std::pair{test_point::before_arm, true}),
    [](const ::testing::TestParamInfo<std::pair<test_point, bool>>& info) {
      return std::string(info.param.first == test_point::published ? "Published" : "BeforeArm") +
             (info.param.second ? "Cancellable" : "Plain");
    });

TEST(PhaserRace, ACloseBeforeTheFinalArrivalFreezesThePhase) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  outcome wa, wb;
  auto ta = participant_wait(a, wa);
  start_on(s, ta);
  s.run();
  // close() lands between b's lock-free check and its locked arrival.
  auto tb = wait_with_cut_in([&b] { return b.wait(); }, [&] { ph->close(); }, wb);
  start_on(s, tb);
  s.run();
  EXPECT_TRUE(ended_once(wa, wait_status::closed));
  EXPECT_TRUE(ended_once(wb, wait_status::closed));  // its arrival was refused
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));
  EXPECT_TRUE(b.arrive().closed());
  EXPECT_TRUE(ph->wait_blocking(phase_id(0)).closed());
}

TEST(PhaserRace, ACloseAfterTheFinalArrivalFreezesTheNextPhase) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  outcome wa, observer;
  auto ta = participant_wait(a, wa);
  auto to = observer_wait(*ph, phase_id(0), observer);
  start_on(s, ta);
  start_on(s, to);
  s.run();
  // The final arrival has advanced and holds a and the observer claimed; close() comes then.
  s.at(test_point::claimed_for_wake, [&] { ph->close(); });
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_TRUE(ph->is_closed());
  EXPECT_EQ(s.ready_count(), 2U);  // one resumption each, from the advance
  s.run();
  EXPECT_TRUE(ended_ok_at(wa, 1));  // phase 0 completed before the close
  EXPECT_TRUE(ended_ok_at(observer, 1));
  EXPECT_EQ(ph->phase(), phase_id(1));
  EXPECT_TRUE(is_phase(b.wait_blocking(), 1));  // b's arrival in phase 0, reported
  EXPECT_TRUE(a.wait_blocking().closed());      // phase 1 is frozen
  EXPECT_TRUE(b.arrive().closed());
  EXPECT_TRUE(is_phase(ph->wait_blocking(phase_id(0)), 1));
  EXPECT_TRUE(ph->wait_blocking(phase_id(1)).closed());
}

TEST(PhaserRace, ACloseWhileAWaiterPublishesEndsItClosedWithoutSuspending) {
  for (const test_point point : {test_point::published, test_point::before_arm}) {
    for (const bool observer : {false, true}) {
      SCOPED_TRACE(testing::Message()
                   << "point " << static_cast<int>(point) << (observer ? ", observer" : ""));
      test_scheduler s;
      const auto ph = phaser::create();
      auto a = join(*ph);
      auto b = join(*ph);
      outcome w;
      auto t = observer ? observer_wait(*ph, phase_id(0), w) : participant_wait(a, w);
      s.at(point, [&] { ph->close(); });
      start_on(s, t);
      EXPECT_EQ(s.run(), 1U);
      EXPECT_TRUE(ended_once(w, wait_status::closed));
      EXPECT_TRUE(state_is(*ph, 0, 2, observer ? 2 : 1));
    }
  }
}

TEST(PhaserRace, AnObserverQueuedJustBeforeTheAdvanceIsWokenByIt) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  outcome out;
  auto t = observer_wait(*ph, phase_id(0), out);
  start_on(s, t);
  s.run();
  EXPECT_EQ(out.resumed, 0);
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_EQ(s.ready_count(), 1U);
  s.run();
  EXPECT_TRUE(ended_ok_at(out, 1));
}

TEST(PhaserRace, AnObserverWhoseCheckPrecededTheAdvanceSeesItUnderTheLock) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  EXPECT_TRUE(is_phase(a.arrive(), 0));
  outcome out;
  bool cut = false;
  // The observer read phase 0; the advance lands before it takes the lock to queue.
  auto t = wait_with_cut_in([&ph] { return ph->wait(phase_id(0)); },
                            [&] {
                              cut = true;
                              EXPECT_TRUE(is_phase(b.arrive(), 0));
                            },
                            out);
  start_on(s, t);
  EXPECT_EQ(s.run(), 1U);  // never suspended
  EXPECT_TRUE(cut);
  EXPECT_TRUE(ended_ok_at(out, 1));
}

TEST(PhaserRace, AnObserverStartingJustAfterTheAdvanceIsReadyAtOnce) {
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  outcome wa, late;
  auto ta = participant_wait(a, wa);
  start_on(s, ta);
  s.run();
  auto tl = observer_wait(*ph, phase_id(0), late);
  // The advance has released the lock; its claimed waiter a is not resumed yet.
  s.at(test_point::claimed_for_wake, [&] { run_inline(s, tl); });
  EXPECT_TRUE(is_phase(b.arrive(), 0));
  EXPECT_EQ(s.pending_actions(), 0U);
  EXPECT_TRUE(ended_ok_at(late, 1));  // completed inline, before a resumes
  EXPECT_EQ(wa.resumed, 0);
  s.run();
  EXPECT_TRUE(ended_ok_at(wa, 1));
}

// A participant's wait that follows an arrival whose phase has not completed yet (after arrive(),
// or a wait cancelled after arriving) must wait for that phase without arriving again. Here the
// final arrival of that phase lands between the wait's lock-free check (phase still unfinished)
// and its locked step: the wait must then report the completed phase (ok, phase 1) without
// arriving in phase 1.
enum class earlier_arrival { by_arrive, by_a_cancelled_wait };

void PrintTo(earlier_arrival e, std::ostream* os) {
  *os << (e == earlier_arrival::by_arrive ? "after arrive()" : "after a cancelled wait");
}

class PhaserWaitAfterAnArrivalRace : public ::testing::TestWithParam<std::pair<earlier_arrival, bool>> {};

TEST_P(PhaserWaitAfterAnArrivalRace, TheFinalArrivalBetweenTheCheckAndTheLockDoesNotMakeItArriveAgain) {
  const auto [earlier, stoppable] = GetParam();
  test_scheduler s;
  const auto ph = phaser::create();
  auto a = join(*ph);
  auto b = join(*ph);
  asyncband::stop_source never;
  outcome cancelled, out;
  task<void> first;
  if (earlier == earlier_arrival::by_arrive) {
    EXPECT_TRUE(is_phase(a.arrive(), 0));
  } else {
    asyncband::stop_source src;
    first = participant_wait_until(a, src.get_token(), cancelled);
    start_on(s, first);
    s.run();
    src.request_stop();
    s.run();
    EXPECT_TRUE(ended_once(cancelled, wait_status::cancelled));
  }
  EXPECT_TRUE(state_is(*ph, 0, 2, 1));

  bool cut = false;
  const auto final_arrival = [&] {
    cut = true;
    EXPECT_TRUE(is_phase(b.arrive(), 0));
    EXPECT_TRUE(state_is(*ph, 1, 2, 2));
  };
  task<void> t;
  if (stoppable) {
    t = wait_with_cut_in([&] { return a.wait(never.get_token()); }, final_arrival, out);
  } else {
    t = wait_with_cut_in([&a] { return a.wait(); }, final_arrival, out);
  }
  start_on(s, t);
  s.run();
  EXPECT_TRUE(cut);
  EXPECT_TRUE(ended_ok_at(out, 1))
      << "the wait must report the completion of phase 0, the phase a arrived in";
  EXPECT_TRUE(state_is(*ph, 1, 2, 2)) << "a must not have arrived in phase 1";
}

INSTANTIATE_TEST_SUITE_P(Forms, PhaserWaitAfterAnArrivalRace,
                         ::testing::Values(std::pair{earlier_arrival::by_arrive, false},
                                           std::pair{earlier_arrival::by_arrive, true},
                                           std::pair{earlier_arrival::by_a_cancelled_wait, false},
                                           std::pair{earlier_arrival::by_a_cancelled_wait, true}),
                         [](const ::testing::TestParamInfo<std::pair<earlier_arrival, bool>>& info) {
                           return std::string(info.param.first == earlier_arrival::by_arrive
                                                  ? "AfterArrive"
                                                  : "AfterACancelledWait") +
                                  (info.param.second ? "WaitWithToken" : "Wait");
                         });

// ---------------------------------------------------------------------------------------------
// Per-phase bookkeeping of the seeded and stress tests

/// What the participants of every phase did, checked when phases complete. Each participant, in
/// each phase it is registered in, counts itself in `members` (and in `stayers` if it will wait
/// for the phase's completion rather than leave) and writes its mark (a plain write) right
/// before its arrival or withdrawal. Any wait that observes a phase's completion then reads the
/// phase's member count (it must be final: nothing may discharge a phase that has completed) and
/// every mark of the phase (TSan reports a mark written without happening-before the read).
class phase_ledger {
 public:
  phase_ledger(std::size_t phases, int ids)
      : phases_(phases),
        ids_(ids),
        members_(phases),
        stayers_(phases),
        observed_(phases),
        readers_(phases),
        read_sum_(phases),
        marks_(phases * static_cast<std::size_t>(ids), 0) {}

  /// Whether phase k (and the one after) are tracked.
  [[nodiscard]] bool has_room(std::uint64_t k) const noexcept { return k + 2 < phases_; }

  /// Right before participant `id` arrives in phase k or withdraws from it.
  void before_discharge(std::uint64_t k, int id, bool stays) {
    if (!has_room(k)) return;
    mark(k, id) = k + 1;
    members_[k].fetch_add(1, std::memory_order_relaxed);
    if (stays) stayers_[k].fetch_add(1, std::memory_order_relaxed);
  }

  /// After the wait of a participant that arrived in phase k; false if it did not end ok (closed).
  bool after_participant_wait(std::uint64_t k, const phase_result& r) {
    if (!r.ok()) {
      if (!r.closed()) violation("a participant's wait ended ", asyncband::to_string(r.status()));
      return false;
    }
    if (r->value() != k + 1) {
      violation("a participant that arrived in phase ", std::to_string(k), " was told phase ",
                std::to_string(r->value()), " completed");
    }
    if (has_room(k)) observed_[k].fetch_add(1, std::memory_order_relaxed);
    completed(k);
    return true;
  }

  /// After an observer's wait of phase k ended ok with `now`.
  void after_observer_wait(std::uint64_t k, phase_id now) {
    if (now == phase_id(k)) violation("an observer of phase ", std::to_string(k), " woke in it");
    completed(k);
  }

  /// What arrive() or arrive_and_deregister() reported for an arrival in phase k.
  void expect_phase(const phase_result& r, std::uint64_t k, const char* what) {
    if (!r.ok() || r->value() != k) {
      violation(what, " in phase ", std::to_string(k), " reported ",
                r.ok() ? std::to_string(r->value()) : std::string(asyncband::to_string(r.status())));
    }
  }

  template <class... Parts>
  void violation(const Parts&... parts) {
    violations_.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard lock(messages_mutex_);
    if (messages_.size() < 8) messages_.push_back((std::string() + ... + std::string(parts)));
  }

  void count_cancelled() noexcept { cancelled_.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] int cancelled() const noexcept { return cancelled_.load(); }

  /// Once every participant is done: the phases before `end` completed.
  void verify(std::uint64_t end) const {
    {
      const std::lock_guard lock(messages_mutex_);
      std::string all;
      for (const auto& m : messages_) all += "\n  " + m;
      EXPECT_EQ(violations_.load(), 0) << all;
    }
    int mismatches = 0;
    for (std::uint64_t k = 0; k < end && has_room(k); ++k) {
      const auto i = static_cast<std::size_t>(k);
      const int members = members_[i].load();
      const bool ok = observed_[i].load() == stayers_[i].load() &&
                      read_sum_[i].load() == static_cast<long long>(readers_[i].load()) * members;
      if (!ok && ++mismatches <= 5) {
        ADD_FAILURE() << "phase " << k << ": " << members << " members, " << stayers_[i].load()
                      << " waited for its completion, " << observed_[i].load() << " were told of it; "
                      << readers_[i].load() << " readers read " << read_sum_[i].load() << " members in all";
      }
    }
    EXPECT_EQ(mismatches, 0);
  }

 private:
  std::uint64_t& mark(std::uint64_t k, int id) {
    return marks_[static_cast<std::size_t>(k) * static_cast<std::size_t>(ids_) +
                  static_cast<std::size_t>(id)];
  }

  /// After a wait that observed the completion of phase k.
  void completed(std::uint64_t k) {
    if (!has_room(k)) return;
    const auto i = static_cast<std::size_t>(k);
    readers_[i].fetch_add(1, std::memory_order_relaxed);
    read_sum_[i].fetch_add(members_[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
    for (int id = 0; id < ids_; ++id) {
      const std::uint64_t m = mark(k, id);  // plain read: the phaser orders it after the write
      if (m != 0 && m != k + 1) violation("phase ", std::to_string(k), " has a foreign mark");
    }
  }

  std::size_t phases_;
  int ids_;
  std::vector<std::atomic<int>> members_;
  std::vector<std::atomic<int>> stayers_;
  std::vector<std::atomic<int>> observed_;
  std::vector<std::atomic<int>> readers_;
  std::vector<std::atomic<long long>> read_sum_;
  std::vector<std::uint64_t> marks_;
  std::atomic<int> violations_{0};
  std::atomic<int> cancelled_{0};
  mutable std::mutex messages_mutex_;
  std::vector<std::string> messages_;
};

// ---------------------------------------------------------------------------------------------
// Seeded interleavings on the test scheduler

/// `stints` times: joins, waits a few phases (a random form each, cancelling the others' waits
/// now and then), and leaves (arrive_and_deregister or destruction); yields to the scheduler
/// between any two steps.
task<void> seeded_member(test_scheduler& s, phaser& ph, phase_ledger& ledger, stop_epoch& stop, int id,
                         std::uint64_t seed, int stints) {
  std::uint64_t rng = seed;
  for (int stint = 0; stint < stints; ++stint) {
    co_await s.schedule();
    std::optional<phaser_participant> p = join(ph);
    std::uint64_t k = ph.phase().value();  // the phase it joined: it cannot complete without p
    const auto stay = next_random(rng) % 4;
    for (std::uint64_t j = 0;; ++j) {
      co_await s.schedule();
      const bool leaving = j == stay;
      ledger.before_discharge(k, id, !leaving);
      if (leaving) {
        if (next_random(rng) % 2 == 0) {
          ledger.expect_phase(p->arrive_and_deregister(), k, "arrive_and_deregister");
        } else {
          p.reset();
        }
        break;
      }
      phase_result r = wait_status::cancelled;
      switch (next_random(rng) % 4) {
        case 0:
          r = co_await p->wait();
          break;
        case 1:
          ledger.expect_phase(p->arrive(), k, "arrive");
          co_await s.schedule();
          r = co_await p->wait();
          break;
        case 2:
          r = co_await p->wait(stop.token());
          break;
        default:
          stop.cancel_current();  // cancels the waits of the others that took a token
          r = co_await p->wait(stop.token());
          break;
      }
      while (r.cancelled()) {
        ledger.count_cancelled();
        co_await s.schedule();
        r = co_await p->wait(stop.token());
      }
      if (!ledger.after_participant_wait(k, r)) co_return;
      k = r->value();
    }
  }
}

TEST(PhaserRace, SeededInterleavingsOfJoiningArrivingAndLeavingKeepEveryPhaseConsistent) {
  constexpr int kMembers = 5;
  constexpr int kStints = 12;
  int cancelled = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    test_scheduler s(seed);
    const auto ph = phaser::create();
    phase_ledger ledger(4096, kMembers);
    stop_epoch stop;
    std::vector<task<void>> tasks;
    for (int id = 0; id < kMembers; ++id) {
      tasks.push_back(
          seeded_member(s, *ph, ledger, stop, id, seed * 1000 + static_cast<std::uint64_t>(id), kStints));
    }
    for (auto& t : tasks) start_on(s, t);
    s.run();
    for (const auto& t : tasks) EXPECT_TRUE(t.done());  // nobody stuck
    EXPECT_TRUE(state_is(*ph, ph->phase().value(), 0, 0));
    EXPECT_GT(ph->phase().value(), 0U);
    ledger.verify(ph->phase().value());
    cancelled += ledger.cancelled();
  }
  EXPECT_GT(cancelled, 0);  // the mix did cancel waits
}

// ---------------------------------------------------------------------------------------------
// Resumption on thread pools

task<void> pool_participant(thread_pool& pool, phaser_participant& p, int phases,
                            std::vector<std::uint64_t>& log, bool& always_on_pool) {
  co_await pool.schedule();
  for (int k = 0; k < phases; ++k) {
    const phase_result r = co_await p.wait();
    log.push_back(r.ok() ? r->value() : 999);
    always_on_pool = always_on_pool && pool.on_worker_thread();
  }
}

task<void> pool_observer(thread_pool& pool, phaser& ph, std::uint64_t last, std::vector<std::uint64_t>& log,
                         bool& always_on_pool) {
  co_await pool.schedule();
  for (phase_id seen(0); seen != phase_id(last);) {
    const phase_result r = co_await ph.wait(seen);
    if (!r.ok()) break;
    seen = *r;
    log.push_back(seen.value());
    always_on_pool = always_on_pool && pool.on_worker_thread();
  }
}

TEST(PhaserPool, EveryWaiterOfACompletedPhaseResumesOnceOnItsOwnScheduler) {
  constexpr int kPhases = 3;
  constexpr int kPerPool = 3;
  thread_pool pool_a(2);
  thread_pool pool_b(1);
  const auto ph = phaser::create();
  auto main_participant = join(*ph);
  auto ps = join_n(*ph, 2 * kPerPool);
  constexpr std::size_t kObservers = 4;
  struct waiter_log {
    std::vector<std::uint64_t> phases;
    bool on_pool = true;  // every resumption ran on the waiter's own pool
  };
  std::vector<waiter_log> logs(ps.size() + kObservers);
  completion done(static_cast<int>(logs.size()));
  for (std::size_t i = 0; i < ps.size(); ++i) {
    thread_pool& pool = i < kPerPool ? pool_a : pool_b;
    asyncband::runtime::spawn(
        pool.ref(), counted(pool_participant(pool, ps[i], kPhases, logs[i].phases, logs[i].on_pool), done));
  }
  for (std::size_t j = 0; j < kObservers; ++j) {
    const std::size_t i = ps.size() + j;
    thread_pool& pool = j % 2 == 0 ? pool_a : pool_b;
    asyncband::runtime::spawn(
        pool.ref(), counted(pool_observer(pool, *ph, kPhases, logs[i].phases, logs[i].on_pool), done));
  }
  for (std::uint64_t k = 0; k < kPhases; ++k) {
    // Every pool participant has arrived (and suspended, or is about to) before the final arrival,
    // made from this plain thread: the waiters are posted to their pools, not run here.
    spin_until([&] { return ph->phase() == phase_id(k) && ph->unarrived() == 1; }, "pool arrivals");
    EXPECT_TRUE(is_phase(main_participant.arrive(), k));
  }
  done.wait_or_abort(60s, "phaser pool resumption");
  for (std::size_t i = 0; i < ps.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(logs[i].phases, (std::vector<std::uint64_t>{1, 2, 3}));  // each completion once
    EXPECT_TRUE(logs[i].on_pool);
  }
  for (std::size_t i = ps.size(); i < logs.size(); ++i) {
    SCOPED_TRACE(i);
    const auto& phases = logs[i].phases;
    ASSERT_FALSE(phases.empty());
    EXPECT_EQ(phases.back(), static_cast<std::uint64_t>(kPhases));
    EXPECT_TRUE(std::is_sorted(phases.begin(), phases.end()));
    EXPECT_TRUE(std::adjacent_find(phases.begin(), phases.end()) == phases.end());  // no phase twice
    EXPECT_TRUE(logs[i].on_pool);
  }
}

// ---------------------------------------------------------------------------------------------
// Stress: bounded by an iteration cap and a time budget. Members join, stay a random number of
// phases (waiting in every form, cancelling each other's waits now and then), leave by
// arrive_and_deregister or destruction, and join again; observers follow the phases; the ledger
// checks every completed phase.

constexpr auto kStressTime = 800ms;
constexpr int kStressIterations = 150000;
constexpr std::size_t kStressPhases = 150000;

struct stress_run {
  explicit stress_run(int ids) : ledger(kStressPhases, ids) {}
  std::shared_ptr<phaser> ph = phaser::create();
  phase_ledger ledger;
  stress_budget budget{kStressIterations, kStressTime};
  stop_epoch stop;
  completion members;
  completion observers;
};

/// Leaves phase k: arrive_and_deregister or destruction.
void leave(stress_run& run, std::optional<phaser_participant>& p, std::uint64_t k, bool deregister) {
  if (deregister) {
    run.ledger.expect_phase(p->arrive_and_deregister(), k, "arrive_and_deregister");
  } else {
    p.reset();
  }
}

task<void> pool_member(thread_pool& pool, stress_run& run, int id) {
  co_await pool.schedule();
  std::uint64_t rng = 0xC0FFEE + static_cast<std::uint64_t>(id);
  bool open = true;
  for (int i = 0; open && run.budget.keep_going(i);) {
    auto enrolled = run.ph->enroll();
    if (!enrolled.ok()) break;  // closed: a hang was rescued
    std::optional<phaser_participant> p = std::move(enrolled).value();
    std::uint64_t k = run.ph->phase().value();  // the phase it joined: it cannot complete without p
    const auto stay = next_random(rng) % 16;
    for (std::uint64_t j = 0;; ++j) {
      ++i;
      if (!run.ledger.has_room(k)) {
        p.reset();
        open = false;
        break;
      }
      const bool leaving = j == stay || !run.budget.keep_going(i);
      run.ledger.before_discharge(k, id, !leaving);
      if (leaving) {
        leave(run, p, k, next_random(rng) % 2 == 0);
        break;
      }
      phase_result r = wait_status::cancelled;
      switch (i % 5) {
        case 0:
          r = co_await p->wait();
          break;
        case 1:
          r = co_await p->wait(run.stop.token());
          break;
        case 2:
          run.ledger.expect_phase(p->arrive(), k, "arrive");
          co_await pool.schedule();
          r = co_await p->wait();
          break;
        case 3:
          run.stop.cancel_current();  // cancels the others' waits that took a token
          r = co_await p->wait(run.stop.token());
          break;
        default:
          run.ledger.expect_phase(p->arrive(), k, "arrive");
          r = co_await p->wait(run.stop.token());
          break;
      }
      while (r.cancelled()) {
        run.ledger.count_cancelled();
        if (next_random(rng) % 2 == 0) {
          r = co_await p->wait();
        } else {
          r = co_await p->wait(run.stop.token());
        }
      }
      if (!pool.on_worker_thread()) run.ledger.violation("a member resumed off its pool");
      if (!run.ledger.after_participant_wait(k, r)) {
        open = false;
        break;
      }
      k = r->value();
    }
  }
  run.members.done();
}

void thread_member(stress_run& run, int id) {
  std::uint64_t rng = 0xBEEF + static_cast<std::uint64_t>(id);
  bool open = true;
  for (int i = 0; open && run.budget.keep_going(i);) {
    auto enrolled = run.ph->enroll();
    if (!enrolled.ok()) break;
    std::optional<phaser_participant> p = std::move(enrolled).value();
    std::uint64_t k = run.ph->phase().value();
    const auto stay = next_random(rng) % 16;
    for (std::uint64_t j = 0;; ++j) {
      ++i;
      if (!run.ledger.has_room(k)) {
        p.reset();
        open = false;
        break;
      }
      const bool leaving = j == stay || !run.budget.keep_going(i);
      run.ledger.before_discharge(k, id, !leaving);
      if (leaving) {
        leave(run, p, k, next_random(rng) % 2 == 0);
        break;
      }
      phase_result r = wait_status::cancelled;
      switch (i % 6) {
        case 0:
          r = p->wait_blocking();  // the parking path without a node
          break;
        case 1:
          r = p->wait_blocking(run.stop.token());
          break;
        case 2:
          run.ledger.expect_phase(p->arrive(), k, "arrive");
          std::this_thread::yield();
          r = p->wait_blocking();
          break;
        case 3:
          r = p->wait_timeout(200us);  // may time out: the arrival stays, retried below
          break;
        case 4:
          r = asyncband::block_on(p->wait());
          break;
        default:
          run.stop.cancel_current();
          r = p->wait_blocking(run.stop.token());
          break;
      }
      while (r.cancelled() || r.timed_out()) {
        run.ledger.count_cancelled();
        switch (next_random(rng) % 3) {
          case 0:
            r = p->wait_blocking();
            break;
          case 1:
            r = p->wait_blocking(run.stop.token());
            break;
          default:
            r = p->wait_timeout(200us);
            break;
        }
      }
      if (!run.ledger.after_participant_wait(k, r)) {
        open = false;
        break;
      }
      k = r->value();
    }
  }
  run.members.done();
}

task<void> pool_stress_observer(thread_pool& pool, stress_run& run) {
  co_await pool.schedule();
  for (int i = 0;; ++i) {
    const phase_id seen = run.ph->phase();
    phase_result r = wait_status::cancelled;
    if (i % 2 == 0) {
      r = co_await run.ph->wait(seen);
    } else {
      r = co_await run.ph->wait(seen, run.stop.token());
    }
    if (r.closed()) break;
    if (r.ok()) run.ledger.after_observer_wait(seen.value(), *r);
    if (!pool.on_worker_thread()) run.ledger.violation("an observer resumed off its pool");
  }
  run.observers.done();
}

void thread_stress_observer(stress_run& run) {
  for (int i = 0;; ++i) {
    const phase_id seen = run.ph->phase();
    phase_result r = wait_status::cancelled;
    switch (i % 3) {
      case 0:
        r = run.ph->wait_blocking(seen);
        break;
      case 1:
        r = run.ph->wait_blocking(seen, run.stop.token());
        break;
      default:
        r = run.ph->wait_timeout(seen, 1ms);
        break;
    }
    if (r.closed()) break;
    if (r.ok()) run.ledger.after_observer_wait(seen.value(), *r);
  }
  run.observers.done();
}

/// Waits for the members (closing the phaser to release them if they hang), then closes the
/// phaser to end the observers, and checks every completed phase.
void finish(stress_run& run, const char* what) {
  if (!run.members.wait_for(kStressTime + 60s)) {
    ADD_FAILURE() << what << ": the members never finished (a lost wake-up or arrival); closing the phaser";
    run.ph->close();
  }
  run.members.wait_or_abort(60s, what);
  EXPECT_EQ(run.ph->participants(), 0U);
  run.ph->close();
  run.observers.wait_or_abort(60s, what);
  const std::uint64_t phases = run.ph->phase().value();
  EXPECT_GT(phases, 0U);
  run.ledger.verify(phases);
  ::testing::Test::RecordProperty("phases", static_cast<int>(phases));
  ::testing::Test::RecordProperty("cancelled", run.ledger.cancelled());
}

TEST(PhaserStress, PoolTasksJoinArriveAndLeave) {
  constexpr int kMembers = 6;  // more tasks than pool threads
  stress_run run(kMembers);
  thread_pool pool(2);
  run.members.reset(kMembers);
  run.observers.reset(1);
  run.budget.restart();
  for (int id = 0; id < kMembers; ++id) asyncband::runtime::spawn(pool.ref(), pool_member(pool, run, id));
  asyncband::runtime::spawn(pool.ref(), pool_stress_observer(pool, run));
  finish(run, "phaser pool stress");
}

TEST(PhaserStress, PlainThreadsJoinArriveAndLeaveWithBlockingTwins) {
  constexpr int kMembers = 4;
  stress_run run(kMembers);
  run.members.reset(kMembers);
  run.observers.reset(1);
  run.budget.restart();
  std::vector<std::thread> threads;
  for (int id = 0; id < kMembers; ++id) threads.emplace_back(thread_member, std::ref(run), id);
  threads.emplace_back(thread_stress_observer, std::ref(run));
  finish(run, "phaser thread stress");
  for (auto& t : threads) t.join();
}

TEST(PhaserStress, PoolTasksAndPlainThreadsTogether) {
  constexpr int kTasks = 3;
  constexpr int kThreads = 2;
  stress_run run(kTasks + kThreads);
  thread_pool pool(2);
  run.members.reset(kTasks + kThreads);
  run.observers.reset(2);
  run.budget.restart();
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) threads.emplace_back(thread_member, std::ref(run), id);
  threads.emplace_back(thread_stress_observer, std::ref(run));
  for (int id = kThreads; id < kThreads + kTasks; ++id) {
    asyncband::runtime::spawn(pool.ref(), pool_member(pool, run, id));
  }
  asyncband::runtime::spawn(pool.ref(), pool_stress_observer(pool, run));
  finish(run, "phaser mixed stress");
  for (auto& t : threads) t.join();
}

// Two-participant rounds: a stop request, or a close(), races the final arrival.

constexpr auto kRoundsTime = 500ms;

/// a's wait with `token` on the pool; a cancelled wait is retried without a token (it must then
/// report phase 0's completion, without arriving again).
task<void> pool_wait_then_retry(thread_pool& pool, phaser_participant& a, asyncband::stop_token token,
                                outcome& first, outcome& retry) {
  co_await pool.schedule();
  const phase_result r = co_await a.wait(std::move(token));
  first.record(r);
  if (r.cancelled()) {
    const phase_result again = co_await a.wait();
    retry.record(again);
  }
}

task<void> pool_arrive(thread_pool& pool, phaser_participant& p, outcome& out) {
  co_await pool.schedule();
  out.record(p.arrive());
}

task<void> pool_close(thread_pool& pool, phaser& ph) {
  co_await pool.schedule();
  ph.close();
}

TEST(PhaserStress, StopRacesTheFinalArrival) {
  thread_pool pool(2);
  int failures = 0;
  int cancelled = 0;
  const int rounds = repeat_for(3000, kRoundsTime, [&](int round) {
    const auto ph = phaser::create();
    auto a = join(*ph);
    auto b = join(*ph);
    asyncband::stop_source src;
    outcome first, retry, arrival;
    completion others(2);
    completion waiter(1);
    std::thread blocking;
    if (round % 2 == 0) {
      asyncband::runtime::spawn(
          pool.ref(), counted(pool_wait_then_retry(pool, a, src.get_token(), first, retry), waiter));
    } else {
      blocking = std::thread([&] {  // the blocking twins; the retry takes the parking path
        const phase_result r = a.wait_blocking(src.get_token());
        first.record(r);
        if (r.cancelled()) retry.record(a.wait_blocking());
        waiter.done();
      });
    }
    asyncband::runtime::spawn(pool.ref(), counted(pool_arrive(pool, b, arrival), others));
    asyncband::runtime::spawn(pool.ref(), counted(pool_request_stop(pool, src), others));
    others.wait_or_abort(60s, "phaser stop race");
    // Phase 0 completes once a has arrived (by its first wait or its retry) and b has. A retry
    // that wrongly arrived again would wait for phase 1 forever: close() releases it (closed).
    spin_until([&] { return ph->phase() != phase_id(0); }, "phase 0 of the stop race");
    ph->close();
    waiter.wait_or_abort(60s, "phaser stop race");
    if (blocking.joinable()) blocking.join();
    bool good = ph->phase() == phase_id(1) && ended_ok_at(arrival, 0);
    if (first.status == wait_status::cancelled) {
      ++cancelled;
      good = good && ended_ok_at(retry, 1);
    } else {
      good = good && ended_ok_at(first, 1) && retry.resumed == 0;
    }
    good = good && first.resumed == 1;
    if (!good && ++failures <= 3) {
      ADD_FAILURE() << "round " << round << ": first " << (first.status ? to_string(*first.status) : "?")
                    << ", retry " << (retry.status ? to_string(*retry.status) : "-") << " (phase "
                    << (retry.phase ? std::to_string(retry.phase->value()) : "-") << "), phaser in phase "
                    << ph->phase().value();
    }
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
  EXPECT_GT(rounds, 0);
  ::testing::Test::RecordProperty("rounds", rounds);
  ::testing::Test::RecordProperty("cancelled", cancelled);
}

TEST(PhaserStress, CloseRacesTheFinalArrival) {
  thread_pool pool(2);
  int failures = 0;
  const int rounds = repeat_for(3000, kRoundsTime, [&](int round) {
    const auto ph = phaser::create();
    auto a = join(*ph);
    auto b = join(*ph);
    asyncband::stop_source never;
    outcome wa, arrival;
    completion done(3);
    if (round % 2 == 0) {
      asyncband::runtime::spawn(pool.ref(), counted(participant_wait(a, wa), done));
    } else {
      asyncband::runtime::spawn(pool.ref(), counted(participant_wait_until(a, never.get_token(), wa), done));
    }
    asyncband::runtime::spawn(pool.ref(), counted(pool_arrive(pool, b, arrival), done));
    asyncband::runtime::spawn(pool.ref(), counted(pool_close(pool, *ph), done));
    done.wait_or_abort(60s, "phaser close race");
    // Either both arrivals came before close() (phase 0 completed: a's wait is ok), or the
    // second was refused and phase 0 is frozen (a's wait is closed).
    const bool completed = ph->phase() == phase_id(1);
    bool good = wa.resumed == 1 && arrival.resumed == 1 && ph->phase().value() <= 1;
    if (completed) {
      good = good && ended_ok_at(wa, 1) && ended_ok_at(arrival, 0);
    } else {
      good = good && ended_once(wa, wait_status::closed) &&
             (ended_ok_at(arrival, 0) || ended_once(arrival, wait_status::closed));
    }
    if (!good && ++failures <= 3) {
      ADD_FAILURE() << "round " << round << ": a " << (wa.status ? to_string(*wa.status) : "?") << ", b "
                    << (arrival.status ? to_string(*arrival.status) : "?") << ", phase "
                    << ph->phase().value();
    }
  });
  EXPECT_EQ(failures, 0) << "in " << rounds << " rounds";
  EXPECT_GT(rounds, 0);
  ::testing::Test::RecordProperty("rounds", rounds);
}

// The window of PhaserWaitAfterAnArrivalRace, between two threads and in every form, including
// the blocking ones, which have no test point there: a's wait after a.arrive() races b's final
// arrival of the same phase. Whichever comes first, a's wait must report phase 0's completion
// without arriving in phase 1. (A wait that arrived in phase 1 would wait for it forever: the
// helper then closes the phaser, which ends that wait closed.)
TEST(PhaserStress, AWaitAfterArriveRacesTheFinalArrival) {
  struct round_state {
    int id = 0;            // from 1
    int helper_delay = 0;  // spins before each side starts, swept to cover the window
    int main_delay = 0;
    std::shared_ptr<phaser> ph = phaser::create();
    phaser_participant a = join(*ph);
    phaser_participant b = join(*ph);
    std::optional<phase_result> arrival;
    std::atomic<bool> waited{false};
    std::atomic<bool> helper_done{false};
  };
  // The round is published by its id; its state is destroyed only once the helper is done with it.
  std::atomic<round_state*> current{nullptr};
  std::atomic<int> current_id{0};
  std::atomic<bool> quit{false};
  std::thread helper([&] {
    for (int seen = 0, idle = 0;;) {
      const int id = current_id.load(std::memory_order_acquire);
      if (id == seen) {
        if (quit.load()) return;
        if (++idle % 256 == 0) std::this_thread::yield();  // mostly spin: the threads meet in the window
        continue;
      }
      seen = id;
      round_state* const r = current.load(std::memory_order_relaxed);
      spin_for(r->helper_delay);
      r->arrival = r->b.arrive();
      while (!r->waited.load(std::memory_order_acquire)) {
        if (r->ph->unarrived() == 1) {  // a arrived in phase 1
          r->ph->close();
          break;
        }
        std::this_thread::yield();
      }
      r->helper_done.store(true, std::memory_order_release);
    }
  });
  constexpr wait_form forms[] = {wait_form::blocking, wait_form::blocking_stop, wait_form::timeout,
                                 wait_form::await, wait_form::await_stop};
  std::vector<int> failures(std::size(forms), 0);
  std::uint64_t rng = 42;
  const int rounds = repeat_for(100000, kRoundsTime, [&](int round) {
    auto r = std::make_unique<round_state>();
    r->id = round + 1;
    r->helper_delay = static_cast<int>(next_random(rng) % 64);
    r->main_delay = static_cast<int>(next_random(rng) % 256);
    EXPECT_TRUE(is_phase(r->a.arrive(), 0));
    const std::size_t f = static_cast<std::size_t>(round) % std::size(forms);
    current.store(r.get(), std::memory_order_relaxed);
    current_id.store(r->id, std::memory_order_release);
    spin_for(r->main_delay);
    const phase_result result = wait_in(r->a, forms[f], 10min);
    r->waited.store(true, std::memory_order_release);
    spin_until([&] { return r->helper_done.load(std::memory_order_acquire); }, "the helper's arrival");
    const bool good = is_phase(result, 1) && r->arrival.has_value() && is_phase(*r->arrival, 0) &&
                      state_is(*r->ph, 1, 2, 2);
    if (!good && ++failures[f] <= 2) {
      ADD_FAILURE() << form_name(forms[f]) << ", round " << round << ": a's wait "
                    << (result.ok() ? "yielded phase " + std::to_string(result->value())
                                    : std::string("ended ") + asyncband::to_string(result.status()))
                    << ", unarrived " << r->ph->unarrived() << " (a arrived in phase 1 if 1)";
    }
  });
  quit = true;
  helper.join();
  for (std::size_t f = 0; f < std::size(forms); ++f) {
    EXPECT_EQ(failures[f], 0) << form_name(forms[f]) << ": in " << rounds << " rounds";
  }
  ::testing::Test::RecordProperty("rounds", rounds);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// A waiter resumed inline by an arrival may destroy the arriving participant's handle before
// arrive() returns: arrive() must not read the handle after the final arrival (review finding).

namespace {
task<void> observer_dropping_worker(std::shared_ptr<phaser> ph, std::unique_ptr<phaser_participant>& worker,
                                    outcome& out) {
  ++out.started;
  const phase_result r = co_await ph->wait(phase_id(0));
  out.record(r);
  worker.reset();
}

/// Phase 0 of a phaser whose coordinator has arrived: the worker's arrival is the final one. An
/// observer with no scheduler waits for it, and destroys the worker when the advance resumes it
/// (inline, inside whatever call of the worker made the final arrival).
struct worker_dropped_by_observer {
  std::shared_ptr<phaser> ph = phaser::create();
  phaser_participant coordinator = std::move(ph->enroll()).value();
  std::unique_ptr<phaser_participant> holder =
      std::make_unique<phaser_participant>(std::move(ph->enroll()).value());
  outcome seen;
  task<void> observer;

  worker_dropped_by_observer() {
    EXPECT_TRUE(coordinator.arrive().ok());
    observer = observer_dropping_worker(ph, holder, seen);
    observer.handle().resume();  // no scheduler: the advance resumes it inline
    EXPECT_EQ(seen.resumed, 0);
  }

  /// After the worker's final arrival: the observer ran once and destroyed the worker.
  void expect_worker_dropped() const {
    EXPECT_TRUE(ended_ok_at(seen, 1));
    EXPECT_EQ(holder, nullptr);
    EXPECT_EQ(ph->participants(), 1U);
  }
};
}  // namespace

TEST(PhaserLifetime, AWaiterResumedInlineByTheFinalArrivalMayDestroyTheArrivingHandle) {
  worker_dropped_by_observer t;
  const phase_result arrived = t.holder->arrive();  // completes phase 0; the observer destroys the worker
  t.expect_worker_dropped();
  ASSERT_TRUE(arrived.ok());
  EXPECT_EQ(arrived->value(), 0U);
}

// Last one out through assignment (found by the lifetime harness, tests/test_lifetime.cpp):
// assigning to a participant or batch withdraws it, which may complete the phase and resume a
// scheduler-less observer inline; that observer may destroy the handle at once. The assignment
// used to write the handle after withdrawing (heap-use-after-free; without ASan, the harness's
// quarantine sees the late write).

namespace {
struct observed_participant {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_participant p = std::move(*ph->enroll());
};
struct observed_batch {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_batch batch = std::move(*ph->enroll(2));
};
struct elsewhere : asyncband_test::lifetime::waker_base {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
};
}  // namespace

TEST(PhaserLastOneOut, MoveAssigningTheLastParticipantLetsTheObserverDestroyIt) {
  using namespace asyncband_test::lifetime;
  coroutine_row<observed_participant, elsewhere>(
      "participant_move_assigned", "ok", no_setup{},
      [](observed_participant& w, asyncband::stop_token) { return w.ph->wait(asyncband::phase_id{}); },
      [](observed_participant* w, elsewhere& k) { w->p = std::move(*k.ph->enroll()); })
      .body();
}

TEST(PhaserLastOneOut, MoveAssigningTheLastBatchLetsTheObserverDestroyIt) {
  using namespace asyncband_test::lifetime;
  coroutine_row<observed_batch, elsewhere>(
      "batch_move_assigned", "ok", no_setup{},
      [](observed_batch& w, asyncband::stop_token) { return w.ph->wait(asyncband::phase_id{}); },
      [](observed_batch* w, elsewhere& k) { w->batch = std::move(*k.ph->enroll(1)); })
      .body();
}

TEST(PhaserLastOneOut, AssignmentMovesTheRegistration) {
  auto a = asyncband::phaser::create();
  auto b = asyncband::phaser::create();
  auto p = std::move(*a->enroll());
  auto batch = std::move(*a->enroll(2));
  p = std::move(*b->enroll());
  batch = std::move(*b->enroll(3));
  EXPECT_EQ(a->participants(), 0U);
  EXPECT_EQ(a->phase(), asyncband::phase_id{1});  // the last obligations went: the phase completed
  EXPECT_EQ(b->participants(), 4U);
  EXPECT_EQ(p.phaser(), b);
  EXPECT_EQ(batch.size(), 3U);
}

// Last one out for plain threads (found by the lifetime harness's review of the broadcast
// parking): an advance or a close makes its change under the lock and notifies the parked threads
// after unlocking, but a thread that sees the change without having parked (spinning in
// atomic::wait, or arriving at the wait late) may destroy the phaser at once; the notify then
// touched a destroyed phaser. The waker now pins the phaser until it has notified. The tests stop
// the waker exactly there (test point woken) and check that destruction waits for it. (An advance
// that finds no blocked thread counted notifies nobody and needs no pin: see the last test here,
// and the model tests ModelPhaser.*DestroysWhileTheFinalArrivalReturns.)

namespace {
struct arriving_world {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_participant p = std::move(*ph->enroll());
};
}  // namespace

TEST(PhaserLastOneOut, ObserverThreadMayDestroyThePhaserWhileCloseNotifies) {
  asyncband_test::waiter_destroys_while_the_waker_returns(
      [] { return asyncband::phaser::create(); }, [](asyncband::phaser& p) { p.close(); },
      [](asyncband::phaser& p) { EXPECT_TRUE(p.wait_blocking(asyncband::phase_id{}).closed()); });
}

// A final arrival releases the word (and pins) only for threads that counted themselves as
// blocked: the observer here is stopped right after it did, and sees the new phase before the
// notify.
TEST(PhaserLastOneOut, ObserverThreadMayDestroyThePhaserWhileTheFinalArrivalNotifies) {
  asyncband_test::released_thread_destroys_while_the_waker_notifies(
      [] { return std::make_unique<arriving_world>(); }, [](arriving_world& w) { (void)w.p.arrive(); },
      [](arriving_world& w) {
        EXPECT_EQ(*w.ph->wait_blocking(asyncband::phase_id{}), asyncband::phase_id{1});
      },
      test_point::woken);
}

namespace {
struct two_participants {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_participant mine = std::move(*ph->enroll());
  asyncband::phaser_participant other = std::move(*ph->enroll());
};
}  // namespace

TEST(PhaserLastOneOut, ParticipantThreadMayDestroyThePhaserWhileTheFinalArrivalNotifies) {
  for (const test_point stop : {test_point::woken, test_point::releasing}) {
    asyncband_test::released_thread_destroys_while_the_waker_notifies(
        [] { return std::make_unique<two_participants>(); },
        [](two_participants& w) { (void)w.other.arrive(); },
        [](two_participants& w) { EXPECT_EQ(*w.mine.wait_blocking(), asyncband::phase_id{1}); }, stop);
  }
}

// The other side of the above: an advance that finds no blocked thread counted has nothing to
// release after its lock (no pin, no move of the word, no notify), and no thread that sees the new
// phase can destroy the phaser while the lock is held: the arriving participant's reference goes
// only through a withdrawal, which takes that lock. (With no waiter either, arrive() takes its
// quiet path, without a wake batch; the test holds for both.)
TEST(PhaserLastOneOut, AnAdvanceThatFindsNoBlockedThreadReleasesNothingAfterItsLock) {
  auto ph = phaser::create();
  auto p = std::move(*ph->enroll());
  int released = 0;
  {
    const thread_hook after_unlock(test_point::woken, [&] { ++released; });
    ASSERT_TRUE(p.arrive().ok());
  }
  EXPECT_EQ(released, 0) << "the advance pinned the phaser to release a word nobody sleeps on";
  EXPECT_EQ(ph->phase(), phase_id(1));
}

// The quiet arrival's side of it: once its lock is released, a thread reading phase() lock-free
// may see the new phase and destroy everything, the arriving participant included
// (ModelPhaser.LockFreeReaderDestroysWhileTheFinalArrivalReturns, whose explorer cannot stop a
// thread after its last atomic operation). The hook plays that thread right after the unlock, for
// a final arrival and for an earlier one (another participant then completes the phase). ASan
// (./x sanitize) reports any access after it; the phase yielded must be the one read under the lock.
TEST(PhaserLastOneOut, AQuietArrivalTouchesNothingAfterItsLock) {
  for (const bool final_arrival : {true, false}) {
    auto w = std::make_unique<two_participants>();
    if (final_arrival) w->mine = phaser_participant(std::move(w->other));  // withdraws `mine`: one left
    phaser_participant& arriving = final_arrival ? w->mine : w->other;
    int destroyed = 0;
    phase_result r = wait_status::closed;
    {
      const thread_hook after_unlock(test_point::returning, [&] {
        w.reset();
        ++destroyed;
      });
      r = arriving.arrive();
    }
    EXPECT_EQ(destroyed, 1) << "the arrival did not take the quiet path";
    EXPECT_TRUE(is_phase(r, 0));
  }
}

// The same for a wait whose own arrival completes the phase (issue 11): every wait form must be
// over, with nothing of the participant left to touch, once its arrival has resumed the observer.

namespace {

/// How the worker's wait is made: each form arrives, completing phase 0, and so resumes the
/// observer inline, which destroys the worker before the form returns.
enum class final_wait_form { co_await_plain, co_await_stop, blocking, blocking_stop, timeout };

task<void> await_as_worker(phaser_participant& worker, final_wait_form form,
                           std::optional<phase_result>& out) {
  asyncband::stop_source never;
  if (form == final_wait_form::co_await_plain) {
    out.emplace(co_await worker.wait());
  } else {
    out.emplace(co_await worker.wait(never.get_token()));
  }
}

phase_result wait_as_worker(phaser_participant& worker, final_wait_form form) {
  asyncband::stop_source never;
  switch (form) {
    case final_wait_form::blocking:
      return worker.wait_blocking();
    case final_wait_form::blocking_stop:
      return worker.wait_blocking(never.get_token());
    default:
      return worker.wait_timeout(10min);  // the phase completes in the call: no waiting at all
  }
}

class PhaserFinalWaitLifetime : public ::testing::TestWithParam<final_wait_form> {};

}  // namespace

TEST_P(PhaserFinalWaitLifetime, AWaiterResumedInlineByTheWaitsOwnArrivalMayDestroyTheParticipant) {
  worker_dropped_by_observer t;
  phaser_participant& worker = *t.holder;
  std::optional<phase_result> waited;
  task<void> waiting;  // keeps a coroutine form's frame until the end of the test
  if (GetParam() == final_wait_form::co_await_plain || GetParam() == final_wait_form::co_await_stop) {
    waiting = await_as_worker(worker, GetParam(), waited);
    waiting.handle().resume();  // arrives, completes phase 0, the observer destroys the worker
    ASSERT_TRUE(waiting.done());
  } else {
    waited = wait_as_worker(worker, GetParam());
  }
  t.expect_worker_dropped();
  ASSERT_TRUE(waited.has_value());
  ASSERT_TRUE(waited->ok());
  EXPECT_EQ((*waited)->value(), 1U);
  EXPECT_EQ(t.ph->phase(), phase_id(1));
}

INSTANTIATE_TEST_SUITE_P(EveryForm, PhaserFinalWaitLifetime,
                         ::testing::Values(final_wait_form::co_await_plain, final_wait_form::co_await_stop,
                                           final_wait_form::blocking, final_wait_form::blocking_stop,
                                           final_wait_form::timeout));

// ---------------------------------------------------------------------------------------------
// Misuse: destroyed with a pending wait (a debug-build assertion names the primitive)

// An observer does not keep the phaser alive; with nobody registered its phase never completes.
TEST(PhaserDeathTest, DestroyingAPhaserWithAPendingObserverWaitAssertsNamingIt) {
  if (!debug_asserts) GTEST_SKIP() << "assertions are off";
  threadsafe_death_tests();
  const auto wait_on = [](phaser& ph) -> task<void> { (void)co_await ph.wait(phase_id(0)); };
  EXPECT_DEATH(destroy_while_waiting(phaser::create(), wait_on), "asyncband::phaser destroyed with waiters");
}
