// SPDX-License-Identifier: Apache-2.0
// tests/support/mpmc_soak.hpp: the seeded soak on the test scheduler and the bounded real-thread
// stress that the MPMC channels' tests share (the channel `Kind` of support/mpmc_channel.hpp).
// Each test file brings the sending side of its channel (its send forms); the receiving side, the
// plans, the bookkeeping by id and the checks are here.
//
// Soak: >= 10^5 small channels (fewer under sanitizers: a time budget), each with 2-4 producing
// and 2-4 consuming coroutines in a seeded order, every choice drawn from the channel's seed: the
// form of each send (the test file's), the form of each receive (co_await recv with or without a
// stop token, try_recv, a when_any against an event that may win), stop requests, closes by
// either half, and consumers dropping their receiver early (all of them, in some channels: the
// channel disconnects). Accounting by id: every value is accepted or handed back (or never
// offered), never both; the values received are distinct and accepted, and all of them unless
// every consumer went early; each consumer gets each producer's values in order; every payload is
// destroyed exactly once; and every coroutine finishes.
//
// Thread stress: 2-4 producer threads and 2-4 consumer threads per round on a small channel, with
// cancellations from a stop epoch, timeouts, try forms, values whose first move out of the
// channel throws, and in some rounds a consumer closing the channel or going early. The same
// accounting as the soak.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <asyncband/auto_reset_event.hpp>
#include <asyncband/block_on.hpp>
#include <asyncband/result.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/test_scheduler.hpp>
#include <asyncband/stop_token.hpp>
#include <asyncband/when_any.hpp>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "channel_probes.hpp"
#include "counted.hpp"
#include "mpmc_channel.hpp"
#include "probe.hpp"
#include "stress.hpp"

namespace asyncband_test::mpmc_soak {

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

/// Yields to the other coroutines of the test scheduler.
struct yield_to {
  test_scheduler& s;
  static bool await_ready() noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const noexcept { s.schedule(h); }
  static void await_resume() noexcept {}
};

// ---------------------------------------------------------------------------------------------
// The soak on the test scheduler

inline constexpr int kSoakMaxProducers = 4;
inline constexpr int kSoakMaxConsumers = 4;
inline constexpr int kSoakMaxPerProducer = 4;
inline constexpr int kSoakIdsPerChannel = kSoakMaxProducers * kSoakMaxPerProducer;

/// How a producer's sends ended, by id.
struct send_log {
  std::vector<int> ok;
  std::vector<int> back;
  int bad = 0;

  /// How send `id` ended: accepted, or handed back with its own value.
  template <class Result>
  void finish(int id, Result& r) {
    if (r.ok()) {
      ok.push_back(id);
    } else if (r.value().id() == id) {
      back.push_back(id);
    } else {
      ++bad;
    }
  }
  /// Value `id` was never accepted: its move into the channel threw (`made`: the payload was made
  /// and destroyed already), or it was never offered (a reservation failed: it is made and
  /// destroyed here, once, for the count of its destructions).
  void never_accepted(int id, bool made) {
    if (!made) {
      const counted unused(id);
    }
    back.push_back(id);
  }
};

struct soak_producer : send_log {
  std::vector<int> sends;  // the form of each send
  int close_after = -1;    // closes the channel after this many sends
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

/// The ids of the values a receive held and gave back to the channel (parked after its move
/// threw, or given back by a receive woken for it and then cancelled): the only ones that may
/// reach a consumer after later values of their producer. Set by the channel's test hook while
/// a reoffered_scope lives; indexed like the finals.
inline std::vector<std::atomic<bool>>* reoffered = nullptr;

/// Installs the hook that fills `reoffered` (values are `counted`) for the scope's life.
class reoffered_scope {
 public:
  explicit reoffered_scope(std::vector<std::atomic<bool>>& ids) {
    reoffered = &ids;
    asyncband::mpmc::detail::on_value_reoffered_for_tests.store([](const void* value) {
      const auto id = static_cast<std::size_t>(static_cast<const counted*>(value)->id());
      if (id < reoffered->size()) (*reoffered)[id].store(true);
    });
  }
  reoffered_scope(const reoffered_scope&) = delete;
  reoffered_scope& operator=(const reoffered_scope&) = delete;
  ~reoffered_scope() {
    asyncband::mpmc::detail::on_value_reoffered_for_tests.store(nullptr);
    reoffered = nullptr;
  }
};

/// A value of `id` may come after later values of its producer (see reoffered).
inline bool was_reoffered(int id) {
  return reoffered != nullptr && id >= 0 && static_cast<std::size_t>(id) < reoffered->size() &&
         (*reoffered)[static_cast<std::size_t>(id)].load();
}

/// One channel of the soak and everything its coroutines share.
struct soak_world {
  int first_id = 0;
  std::uint64_t seed = 0;
  std::size_t room = 1;  // the bounded channel's capacity
  asyncband::stop_source stop;
  asyncband::auto_reset_event race{false};  // the other branch of the when_any receives
  std::vector<soak_producer> producers;
  std::vector<soak_consumer> consumers;
  int chaos_steps = 0;
  int chaos_sets = 0;

  /// The id of producer `index`'s `i`-th value.
  [[nodiscard]] int id_of_send(int index, std::size_t i) const {
    return first_id + index * kSoakMaxPerProducer + static_cast<int>(i);
  }
};

template <class Receiver>
task<void> soak_consume(test_scheduler& s, Receiver rx, soak_world& w, int index) {
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
    std::optional<asyncband::result<counted>> r;
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
        if (t.closed()) {
          me.saw_closed = true;
          break;
        }
        if (!in_range(t->id())) ++me.bad;
        me.got.push_back(t->id());
        continue;
      } else {
        auto any = co_await asyncband::when_any(rx.recv(), w.race.wait());
        if (any.index() != 0) {
          ++me.lost_races;
          if (!any.template get<0>().cancelled()) ++me.bad;
          continue;
        }
        r.emplace(std::move(any.template get<0>()));
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

/// Producer `index` of the soak: sends its values in the forms of its plan, each by
/// `co_await send_one(s, tx, w, me, id, form, last)` (the test file's send forms; `last`: its
/// last send), closing the channel before the send its plan says, and drops its sender at the
/// end.
template <class Sender, class SendOne>
task<void> soak_produce(test_scheduler& s, Sender tx, soak_world& w, int index, SendOne send_one) {
  soak_producer& me = w.producers[static_cast<std::size_t>(index)];
  for (std::size_t i = 0; i < me.sends.size(); ++i) {
    if (static_cast<int>(i) == me.close_after) tx.close();
    co_await send_one(s, tx, w, me, w.id_of_send(index, i), me.sends[i], i + 1 == me.sends.size());
  }
  drop(tx);
  me.done = true;
}

/// Requests stop and sets the race event at seeded steps.
inline task<void> soak_chaos(test_scheduler& s, soak_world& w, std::uint64_t plan) {
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

/// What broke a rule in channel `w` once its coroutines ran (empty: nothing).
inline std::string soak_problems(const soak_world& w, const std::vector<std::atomic<int>>& finals) {
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
      if (producer < 0 || producer >= kSoakMaxProducers || was_reoffered(id)) continue;
      if (id <= last[static_cast<std::size_t>(producer)]) fail("a producer's values out of order");
      last[static_cast<std::size_t>(producer)] = id;
    }
  }
  const std::set<int> received(all.begin(), all.end());
  if (received.size() != all.size()) fail("a value received twice");
  if (!std::includes(ok.begin(), ok.end(), received.begin(), received.end())) fail("a value received unsent");
  if (drained && received != ok) fail("an accepted value was not received, though a receive saw the end");
  const int producers = static_cast<int>(w.producers.size());
  for (int id = w.first_id; id < w.first_id + kSoakIdsPerChannel; ++id) {
    const int producer = (id - w.first_id) / kSoakMaxPerProducer;
    const int k = (id - w.first_id) % kSoakMaxPerProducer;
    const bool made = producer < producers &&
                      k < static_cast<int>(w.producers[static_cast<std::size_t>(producer)].sends.size());
    const int destroyed = finals[static_cast<std::size_t>(id)].load();
    if (destroyed != (made ? 1 : 0))
      fail("value " + std::to_string(id) + " destroyed " + std::to_string(destroyed) + " times");
  }
  return problems;
}

/// Builds channel `index`'s plan (each producer's sends are forms in [0, send_forms)), runs it
/// to the end with producers sending by `send_one` (see soak_produce), and checks it; false
/// (with a failure naming the seed) if it broke a rule.
template <class Kind, class SendOne>
bool soak_one_channel(int index, const std::vector<std::atomic<int>>& finals, soak_world& w, int send_forms,
                      SendOne send_one) {
  w.seed = static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ULL + 12345;
  w.first_id = 1 + index * kSoakIdsPerChannel;
  splitmix rng(w.seed);
  w.room = 1 + static_cast<std::size_t>(rng.below(4));
  const int producers = 2 + rng.below(kSoakMaxProducers - 1);
  const int consumers = 2 + rng.below(kSoakMaxConsumers - 1);
  const bool all_go_early = rng.below(8) == 0;
  w.producers.resize(static_cast<std::size_t>(producers));
  w.consumers.resize(static_cast<std::size_t>(consumers));
  for (auto& p : w.producers) {
    const int n = 1 + rng.below(kSoakMaxPerProducer);
    for (int i = 0; i < n; ++i) p.sends.push_back(rng.below(send_forms));
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
    auto c = Kind::template make<counted>(w.room);
    for (int i = 0; i < producers; ++i) s.spawn(soak_produce(s, c.tx, w, i, send_one));
    for (int i = 0; i < consumers; ++i) s.spawn(soak_consume(s, c.rx, w, i));
    s.spawn(soak_chaos(s, w, rng.next()));
    drop(c.tx);
    drop(c.rx);
    s.run(10'000'000);
  }
  const std::string problems = soak_problems(w, finals);
  EXPECT_TRUE(problems.empty()) << "channel " << index << " (seed " << w.seed << ", room " << w.room << ", "
                                << producers << " producers, " << consumers << " consumers): " << problems;
  return problems.empty();
}

/// Runs the soak: 10^5 channels (fewer under sanitizers: a time budget), each by
/// `one_channel(index, finals, world)` (soak_one_channel with the test file's producers), and
/// checks that every kind of event happened somewhere. `label` names the channel in the summary.
template <class OneChannel>
void run_seeded_soak(const char* label, OneChannel one_channel) {
  constexpr int kChannels = 100'000;
  const count_scope counts;
  std::vector<std::atomic<int>> finals(static_cast<std::size_t>(kChannels * kSoakIdsPerChannel + 1));
  const finals_scope scope(finals);
  std::vector<std::atomic<bool>> reoffered_ids(finals.size());
  const reoffered_scope reoffers(reoffered_ids);
  int received = 0;
  int handed_back = 0;
  int cancels = 0;
  int lost_races = 0;
  int throws = 0;
  int went_early = 0;
  int disconnected = 0;
  const auto start = std::chrono::steady_clock::now();
  const int channels = repeat_for(kChannels, under_sanitizer ? 4s : 60s, [&](int index) {
    soak_world w;
    const bool good = one_channel(index, finals, w);
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
  ::testing::Test::RecordProperty("channels", channels);
  ::testing::Test::RecordProperty("received", received);
  ::testing::Test::RecordProperty("handed_back", handed_back);
  ::testing::Test::RecordProperty("elapsed_ms", static_cast<int>(elapsed.count()));
  std::printf(
      "%s soak (test scheduler): %d channels (%d disconnected by their receivers); %d values received, "
      "%d handed back or never offered, %d receives cancelled, %d when_any receives lost, %d receives threw, "
      "%d consumers gone early, in %lld ms\n",
      label, channels, disconnected, received, handed_back, cancels, lost_races, throws, went_early,
      static_cast<long long>(elapsed.count()));
}

// ---------------------------------------------------------------------------------------------
// The bounded real-thread stress

struct thread_round_log : send_log {
  std::vector<int> got;
  int throws = 0;
  bool saw_closed = false;
};

template <class Receiver>
void stress_receive(Receiver rx, stop_epoch& epoch, int style, int close_after, int drop_after, int first_id,
                    int last_id, thread_round_log& log) {
  for (int n = 0;; ++n) {
    if (static_cast<int>(log.got.size()) == close_after) rx.close();
    if (static_cast<int>(log.got.size()) == drop_after) return;
    const int mode = (style + n) % 5;
    std::optional<asyncband::result<counted>> r;
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
        if (t.closed()) {
          log.saw_closed = true;
          return;
        }
        if (t->id() < first_id || t->id() >= last_id) ++log.bad;
        log.got.push_back(t->id());
        continue;
      } else {
        r.emplace(asyncband::block_on(rx.recv(epoch.token())));
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

inline constexpr int kStressPerProducer = 300;
inline constexpr int kStressMaxRounds = 400;
inline constexpr int kStressIdsPerRound = 4 * kStressPerProducer;

/// The totals of the thread stress.
struct thread_stress_totals {
  int received = 0;
  int handed_back = 0;
  int throws = 0;
};

/// One round of the thread stress: `send_one(tx, epoch, id, mode, log)` sends value `id` in
/// form `mode` (in [0, modes)); a value sent in a form for which `reordered(mode)` holds may be
/// received after its producer's later values (its first receive threw). False after a failure.
template <class Kind, class SendOne, class Reordered>
bool stress_round(int round, const std::vector<std::atomic<int>>& finals, int modes, SendOne send_one,
                  Reordered reordered, thread_stress_totals& totals) {
  const int producers = 2 + round % 3;
  const int consumers = 2 + (round / 3) % 3;
  const int first_id = 1 + round * kStressIdsPerRound;
  const bool closing = round % 4 == 3;
  const bool going = round % 5 == 4;
  auto c = Kind::template make<counted>(1 + static_cast<std::size_t>(round % 5));
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
    threads.emplace_back(stress_receive<typename Kind::template receiver<counted>>, c.rx, std::ref(epoch),
                         round + k, close_after, drop_after, first_id, first_id + kStressIdsPerRound,
                         std::ref(clogs[static_cast<std::size_t>(k)]));
  }
  drop(c.rx);
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([tx = c.tx, &epoch, &log = plogs[static_cast<std::size_t>(p)], p, round, modes,
                          &send_one, first = first_id + p * kStressPerProducer]() mutable {
      for (int i = 0; i < kStressPerProducer; ++i)
        send_one(tx, epoch, first + i, (round + p + i) % modes, log);
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
  for (const auto& l : plogs) {
    EXPECT_EQ(l.bad, 0);
    EXPECT_EQ(l.ok.size() + l.back.size(), static_cast<std::size_t>(kStressPerProducer));
    ok.insert(l.ok.begin(), l.ok.end());
    back.insert(l.back.begin(), l.back.end());
    totals.handed_back += static_cast<int>(l.back.size());
  }
  for (const int id : back) EXPECT_EQ(ok.count(id), 0U) << "both accepted and handed back: " << id;
  for (const auto& l : clogs) {
    EXPECT_EQ(l.bad, 0);
    totals.throws += l.throws;
    drained = drained || l.saw_closed;
    all.insert(all.end(), l.got.begin(), l.got.end());
    std::vector<int> last(4, 0);
    for (const int id : l.got) {
      const int producer = (id - first_id) / kStressPerProducer;
      if (reordered((round + producer + (id - first_id) % kStressPerProducer) % modes) || was_reoffered(id)) {
        continue;  // its receive may have thrown, or been cancelled: then it went to the next receive
      }
      EXPECT_GT(id, last[static_cast<std::size_t>(producer)])
          << "a producer's values out of order for one consumer";
      last[static_cast<std::size_t>(producer)] = id;
    }
  }
  totals.received += static_cast<int>(all.size());
  const std::set<int> got(all.begin(), all.end());
  EXPECT_EQ(got.size(), all.size()) << "a value was received twice";
  EXPECT_TRUE(std::includes(ok.begin(), ok.end(), got.begin(), got.end())) << "a value received unsent";
  EXPECT_TRUE(drained) << "the last consumer never saw the end";
  EXPECT_EQ(got, ok) << "an accepted value was not received";
  for (int id = first_id; id < first_id + producers * kStressPerProducer; ++id) {
    EXPECT_EQ(finals[static_cast<std::size_t>(id)].load(), 1) << "value " << id;
  }
  const bool good = !::testing::Test::HasFailure();
  if (!good)
    ADD_FAILURE() << "round " << round << ": " << producers << " producers, " << consumers << " consumers";
  return good;
}

/// Runs the rounds of the thread stress (bounded in count and time) by `round(index, finals,
/// totals)` (stress_round with the test file's sends), and checks that values were received and
/// receives threw. `label` names the channel in the summary.
template <class Round>
void run_thread_stress(const char* label, Round round) {
  const count_scope counts;
  std::vector<std::atomic<int>> finals(static_cast<std::size_t>(kStressMaxRounds * kStressIdsPerRound + 1));
  const finals_scope scope(finals);
  std::vector<std::atomic<bool>> reoffered_ids(finals.size());
  const reoffered_scope reoffers(reoffered_ids);
  thread_stress_totals totals;
  const int rounds = repeat_for(kStressMaxRounds, under_sanitizer ? 4s : 6s,
                                [&](int index) { return round(index, finals, totals); });
  EXPECT_GT(rounds, 0);
  EXPECT_GT(totals.received, 0);
  EXPECT_GT(totals.throws, 0);
  ::testing::Test::RecordProperty("rounds", rounds);
  ::testing::Test::RecordProperty("received", totals.received);
  ::testing::Test::RecordProperty("handed_back", totals.handed_back);
  std::printf("%s thread stress: %d rounds, %d values received, %d handed back, %d receives threw\n", label,
              rounds, totals.received, totals.handed_back, totals.throws);
}

}  // namespace asyncband_test::mpmc_soak
