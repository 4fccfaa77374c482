// SPDX-License-Identifier: Apache-2.0
// examples/phaser_dynamic_workers.cpp: workers joining and leaving a phaser between phases.
//
// main is a participant, the coordinator: in each phase it registers the workers that join
// there (enroll() for one, enroll(n) for a batch handed out with take()), waits until everybody
// else has arrived or left, prints participants(), and arrives last. The phase cannot complete
// before main arrives, so a worker registered in it joins that very phase. Workers (coroutines
// on a pool of 2 threads, and one plain thread) arrive with arrive(), tell main (an
// auto_reset_event), then wait() (which does not arrive again). They leave in three ways:
// arrive_and_deregister() in their last phase; destroying their participant (withdraws without
// arriving); and a batch registration never taken is withdrawn when the batch is destroyed.
#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <thread>
#include <utility>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>

namespace {

namespace rt = asyncband::runtime;
using asyncband::phaser_participant;

constexpr int kPhases = 5;
// A worker takes part in phases [first, last]; in `last` it arrives and deregisters, or, if
// `drop`, destroys its participant without arriving.
struct plan {
  int first;
  int last;
  bool drop;
};
constexpr std::array<plan, 5> kPlans{
    {{0, 4, false}, {0, 2, false}, {1, 3, true}, {1, 4, false}, {3, 4, false}}};
// Per phase: the log, the workers arriving in it, and participants() after them (main included).
struct expected {
  const char* changes;
  int arrived;
  std::size_t participants;
};
constexpr std::array<expected, kPhases> kExpected{
    {{"+A +B", 2, 3}, {"+C +D", 4, 5}, {"-B", 4, 4}, {"xC +E", 3, 4}, {"-A -D -E", 3, 1}}};

struct shared {
  std::array<std::atomic<int>, kPhases> arrived{};  // workers that arrived in each phase
  std::atomic<int> bad_waits{0};                    // waits that did not yield the next phase
  asyncband::auto_reset_event progress;             // "a worker arrived or left"
};

// One phase of a worker: false once it has left.
bool arrive_or_leave(shared& s, phaser_participant& me, const plan& p, int phase) {
  if (phase == p.last && p.drop) {
    const phaser_participant leaving(std::move(me));  // withdraws when it goes, at the brace
  } else {
    ++s.arrived[static_cast<std::size_t>(phase)];
    (void)(phase == p.last ? me.arrive_and_deregister() : me.arrive());
  }
  s.progress.notify_one();
  return phase != p.last;
}

// Started by rt::spawn on the pool, whose wake-ups then resume it there.
rt::task<void> coroutine_worker(shared& s, phaser_participant me, plan p) {
  for (int phase = p.first; arrive_or_leave(s, me, p, phase); ++phase) {
    const auto next = co_await me.wait();  // already arrived: only waits
    if (!next || *next != asyncband::phase_id(static_cast<unsigned>(phase) + 1)) ++s.bad_waits;
  }
}

void thread_worker(shared& s, phaser_participant me, plan p) {
  for (int phase = p.first; arrive_or_leave(s, me, p, phase); ++phase) {
    const auto next = me.wait_blocking();
    if (!next || *next != asyncband::phase_id(static_cast<unsigned>(phase) + 1)) ++s.bad_waits;
  }
}

}  // namespace

int main() {
  auto ph = asyncband::phaser::create();
  shared s;
  std::thread thread_d;
  rt::thread_pool pool(2);  // declared last: joined before `s` is destroyed
  phaser_participant me = ph->enroll().value();
  bool ok = true;
  std::printf("workers A-E: + enrolls, - arrive_and_deregister, x destroys its participant\n");

  for (int phase = 0; phase < kPhases; ++phase) {
    if (phase == 0 || phase == 3) {
      for (const plan& p : kPlans) {
        if (p.first == phase) rt::spawn(pool.ref(), coroutine_worker(s, ph->enroll().value(), p));
      }
    } else if (phase == 1) {
      asyncband::phaser_batch batch = ph->enroll(3).value();  // C, D and a spare
      rt::spawn(pool.ref(), coroutine_worker(s, std::move(*batch.take()), kPlans[2]));
      thread_d = std::thread(thread_worker, std::ref(s), std::move(*batch.take()), kPlans[3]);
      std::printf("phase 1: batch of 3 registered, %zu never taken: withdrawn with the batch\n",
                  batch.size());
    }                                                        // the batch is destroyed here
    while (ph->unarrived() > 1) s.progress.wait_blocking();  // everybody but main is done
    const expected& e = kExpected[static_cast<std::size_t>(phase)];
    const int arrived = s.arrived[static_cast<std::size_t>(phase)];
    std::printf("phase %d: %-9s %d workers arrived, then participants() = %zu (main included)\n", phase,
                e.changes, arrived, ph->participants());
    ok = ok && arrived == e.arrived && ph->participants() == e.participants;
    // main arrives last: the phase completes. In the last one, main leaves too.
    ok = ok && (phase + 1 < kPhases ? me.wait_blocking() : me.arrive_and_deregister()).ok();
  }
  thread_d.join();
  std::printf("after the last departure: phase %llu, participants() = %zu, main's handle empty: %s\n",
              static_cast<unsigned long long>(ph->phase().value()), ph->participants(), me ? "no" : "yes");
  ok =
      ok && s.bad_waits == 0 && ph->participants() == 0 && ph->phase() == asyncband::phase_id(kPhases) && !me;
  return ok ? 0 : 1;
}
