// SPDX-License-Identifier: Apache-2.0
// examples/phaser_group_failure.cpp: one member of a group fails, and every member learns of it.
//
// Four members (two coroutines on a pool of 2 threads, two plain threads) work in phases: in
// phase p each writes its part of the phase's output, then waits for the others. In phase 3,
// member 1 fails: instead of arriving, it close()s the phaser (via its participant's phaser()):
// withdrawing would let the others complete the phase without its part. close() freezes the
// unfinished phase: every wait for it, already queued or started later (member 3 is slow: it
// most likely starts after the close), yields wait_status::closed. Phases completed before stay
// completed: their output is whole, and a wait for them still succeeds after the close.
#include <array>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

namespace {

namespace rt = asyncband::runtime;
using asyncband::wait_status;

constexpr int kMembers = 4;
constexpr int kFailing = 1;
constexpr int kFailPhase = 3;
constexpr int kSlow = 3;
constexpr int kMaxPhases = 10;

// parts[p][id]: member id's output in phase p (0: not written).
using outputs = std::array<std::array<int, kMembers>, kMaxPhases>;

struct outcome {
  int completed = 0;                   // phases whose wait succeeded
  wait_status last = wait_status::ok;  // how its last wait ended
  void record(const asyncband::result<asyncband::phase_id>& r) {
    last = r.status();
    completed += r.ok() ? 1 : 0;
  }
};

// One phase of member `id`: writes its part, or fails and closes the group.
void do_phase(outputs& parts, asyncband::phaser_participant& me, int id, int phase) {
  if (id == kFailing && phase == kFailPhase) {
    std::printf("member %d: phase %d failed, closing the group\n", id, phase);
    me.phaser()->close();
    return;
  }
  if (id == kSlow && phase == kFailPhase) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  parts[static_cast<std::size_t>(phase)][static_cast<std::size_t>(id)] = 100 * phase + id + 1;
}

rt::task<void> coroutine_member(rt::thread_pool& pool, outputs& parts, outcome& o,
                                asyncband::phaser_participant me, int id) {
  co_await pool.schedule();
  for (int phase = 0; phase < kMaxPhases && o.last == wait_status::ok; ++phase) {
    do_phase(parts, me, id, phase);
    o.record(co_await me.wait());
  }
}

void thread_member(outputs& parts, outcome& o, asyncband::phaser_participant me, int id) {
  for (int phase = 0; phase < kMaxPhases && o.last == wait_status::ok; ++phase) {
    do_phase(parts, me, id, phase);
    o.record(me.wait_blocking());
  }
}

}  // namespace

int main() {
  auto group = asyncband::phaser::create();
  outputs parts{};
  std::vector<outcome> outcomes(kMembers);
  {
    rt::thread_pool pool(2);
    std::vector<rt::task<void>> tasks;
    std::vector<std::thread> threads;
    for (std::size_t id = 0; id < kMembers; ++id) {
      auto me = group->enroll().value();
      if (id < 2) {
        tasks.push_back(coroutine_member(pool, parts, outcomes[id], std::move(me), static_cast<int>(id)));
      } else {
        threads.emplace_back(thread_member, std::ref(parts), std::ref(outcomes[id]), std::move(me),
                             static_cast<int>(id));
      }
    }
    (void)asyncband::block_on(rt::when_all(std::move(tasks)));
    for (auto& t : threads) t.join();
  }

  bool ok = group->is_closed() && group->phase() == asyncband::phase_id(kFailPhase);
  for (int id = 0; id < kMembers; ++id) {
    const outcome& o = outcomes[static_cast<std::size_t>(id)];
    std::printf("member %d: %d phases completed, then its wait in phase %d: %s\n", id, o.completed,
                kFailPhase, asyncband::to_string(o.last));
    ok = ok && o.completed == kFailPhase && o.last == wait_status::closed;
  }
  for (int p = 0; p <= kFailPhase; ++p) {
    int written = 0;
    for (int part : parts[static_cast<std::size_t>(p)]) written += part != 0 ? 1 : 0;
    std::printf("phase %d output: %d of %d parts%s\n", p, written, kMembers,
                p < kFailPhase ? "" : " (abandoned)");
    ok = ok && written == (p < kFailPhase ? kMembers : kMembers - 1);
  }
  // After the close: a completed phase's wait still succeeds; the frozen one's, and enroll(), fail.
  const auto done = group->wait_blocking(asyncband::phase_id(kFailPhase - 1));
  const auto frozen = group->wait_blocking(asyncband::phase_id(kFailPhase));
  const auto late = group->enroll();
  std::printf("after close: wait(phase %d) %s, wait(phase %d) %s, enroll() %s\n", kFailPhase - 1,
              asyncband::to_string(done.status()), kFailPhase, asyncband::to_string(frozen.status()),
              asyncband::to_string(late.status()));
  ok = ok && done.ok() && frozen.closed() && late.closed();
  return ok ? 0 : 1;
}
