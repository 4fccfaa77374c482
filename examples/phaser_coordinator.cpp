// SPDX-License-Identifier: Apache-2.0
// examples/phaser_coordinator.cpp: a coordinator that processes each round's results before
// the next round starts.
//
// One phaser; main (a plain thread, blocking twins) is a participant like the 3 workers, which
// are tasks started with rt::spawn on a pool of 2 threads, each given only its participant.
// Every round r takes two phases:
//   phase 2r    "collect": a worker writes its result into its slot and arrive()s, which does not
//               wait; it does its own bookkeeping meanwhile, then wait()s, which does not arrive
//               again: it waits for the phase it arrived in. The coordinator's wait_blocking()
//               returns once every result is in;
//   phase 2r+1  "process": the workers arrive, and wait as observers for that phase to end,
//               reaching the phaser through their participant: me.phaser()->wait(arrived_in).
//               The coordinator processes the results, publishes the next round's input, and
//               only then arrives: the phase cannot complete, nor round r+1 start, before that.
// The phaser orders everything: the results are written before the collect phase completes,
// the input before the process phase completes, so no lock is needed.
#include <array>
#include <atomic>
#include <cstdio>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>

namespace {

namespace rt = asyncband::runtime;

constexpr int kWorkers = 3;
constexpr int kRounds = 4;

struct shared {
  long input = 1;                           // written by the coordinator between rounds
  std::array<long, kWorkers> results{};     // slot per worker, written in the collect phase
  std::array<long, kWorkers> own_totals{};  // each worker's sum of its own results, at the end
  std::atomic<int> failures{0};
  asyncband::latch done{kWorkers};
};

long work(long input, int id) {
  return input * (id + 2) + id;
}
long next_input(long total) {
  return total % 97 + 1;
}

rt::task<void> worker(shared& s, asyncband::phaser_participant me, int id) {
  long own_total = 0;
  for (int r = 0; r < kRounds; ++r) {
    const long result = work(s.input, id);
    s.results[static_cast<std::size_t>(id)] = result;
    const auto arrived = me.arrive();  // collect: my result is in; does not wait
    own_total += result;               // own work, while the others finish theirs
    const auto collected = co_await me.wait();
    const auto ready = me.arrive();  // process: ready for the coordinator's next input
    const auto released = co_await me.phaser()->wait(*ready);
    if (!arrived || !collected || !ready || !released || *released != arrived->next().next()) {
      ++s.failures;
      break;
    }
  }
  s.own_totals[static_cast<std::size_t>(id)] = own_total;
  (void)me.arrive_and_deregister();
  s.done.count_down();
}

}  // namespace

int main() {
  auto ph = asyncband::phaser::create();
  shared s;
  rt::thread_pool pool(2);  // declared after `s`: joined before `s` is destroyed
  asyncband::phaser_participant me = ph->enroll().value();
  for (int id = 0; id < kWorkers; ++id) rt::spawn(pool.ref(), worker(s, ph->enroll().value(), id));

  bool ok = true;
  std::array<long, kWorkers> seen_totals{};  // per worker, as the coordinator saw the results
  long replayed = 1;                         // the input, computed again without the workers
  for (int r = 0; r < kRounds; ++r) {
    const auto collected = me.wait_blocking();  // collect: every result is in
    long total = 0;
    long expected = 0;
    for (int id = 0; id < kWorkers; ++id) {
      total += s.results[static_cast<std::size_t>(id)];
      seen_totals[static_cast<std::size_t>(id)] += s.results[static_cast<std::size_t>(id)];
      expected += work(replayed, id);
    }
    std::printf("round %d: input %2ld -> results %3ld %3ld %3ld, total %3ld -> next input %2ld\n", r, s.input,
                s.results[0], s.results[1], s.results[2], total, next_input(total));
    s.input = replayed = next_input(total);    // published before the coordinator arrives
    const auto released = me.wait_blocking();  // process: arrives, which releases the workers
    ok = ok && collected && released && total == expected;
  }
  s.done.wait_blocking();  // the workers have left the phaser
  std::printf("each worker's own sum of its results: %ld %ld %ld (coordinator's: %ld %ld %ld)\n",
              s.own_totals[0], s.own_totals[1], s.own_totals[2], seen_totals[0], seen_totals[1],
              seen_totals[2]);
  std::printf("phase %llu: %d rounds of 2 phases; participants() = %zu (the coordinator)\n",
              static_cast<unsigned long long>(ph->phase().value()), kRounds, ph->participants());
  ok = ok && s.failures == 0 && s.own_totals == seen_totals && ph->participants() == 1 &&
       ph->phase() == asyncband::phase_id(2 * kRounds);
  return ok ? 0 : 1;
}
