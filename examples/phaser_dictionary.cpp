// SPDX-License-Identifier: Apache-2.0
// examples/phaser_dictionary.cpp: a shared dictionary built in rounds, with a phaser.
//
// Four workers (two coroutines on a pool of 2 threads, two plain threads using the blocking
// twins) each hold a phaser_participant. Every round r takes two phases:
//   phase 2r    each worker adds its entry for round r under the rwlock's write guard (the
//               workers of a round write concurrently), then waits: the phase completes once
//               every entry of round r is in;
//   phase 2r+1  each worker reads the whole dictionary under a read guard (all at once),
//               derives its next entry from it, and waits again: nobody adds round r+1 before
//               everybody has read round r.
// So every worker sees the same dictionary after each round; main replays the rounds one
// worker after another and checks every worker's views against the replay.
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

namespace {

namespace rt = asyncband::runtime;
using dictionary = std::map<std::string, long>;
using views = std::vector<std::pair<std::size_t, long>>;  // per round: entries, sum of values

constexpr int kWorkers = 4;
constexpr int kRounds = 4;

// A worker's entry for `round`, derived from the sum it read after the previous round.
std::pair<std::string, long> entry(int round, int id, long sum_seen) {
  return {"r" + std::to_string(round) + ".w" + std::to_string(id), sum_seen % 1000 + 10 * id + 1};
}

std::pair<std::size_t, long> view(const dictionary& d) {
  long sum = 0;
  for (const auto& kv : d) sum += kv.second;
  return {d.size(), sum};
}

rt::task<views> coroutine_worker(rt::thread_pool& pool, asyncband::rwlock<dictionary>& dict,
                                 asyncband::phaser_participant me, int id) {
  co_await pool.schedule();
  views seen;
  for (int r = 0; r < kRounds; ++r) {
    (co_await dict.write())->insert(entry(r, id, seen.empty() ? 0 : seen.back().second));
    if (!(co_await me.wait())) break;  // phase 2r: every entry of round r is in
    seen.push_back(view(*co_await dict.read()));
    if (!(co_await me.wait())) break;  // phase 2r+1: everybody has read round r
  }
  co_return seen;
}

views thread_worker(asyncband::rwlock<dictionary>& dict, asyncband::phaser_participant me, int id) {
  views seen;
  for (int r = 0; r < kRounds; ++r) {
    dict.write_blocking()->insert(entry(r, id, seen.empty() ? 0 : seen.back().second));
    if (!me.wait_blocking()) break;
    seen.push_back(view(*dict.read_blocking()));
    if (!me.wait_blocking()) break;
  }
  return seen;
}

// The same rounds, one worker after another.
views replay() {
  dictionary d;
  views expected;
  for (int r = 0; r < kRounds; ++r) {
    for (int id = 0; id < kWorkers; ++id)
      d.insert(entry(r, id, expected.empty() ? 0 : expected.back().second));
    expected.push_back(view(d));
  }
  return expected;
}

}  // namespace

int main() {
  auto rounds = asyncband::phaser::create();
  asyncband::rwlock<dictionary> dict;
  std::vector<views> seen(kWorkers);
  {
    rt::thread_pool pool(2);
    std::vector<rt::task<views>> tasks;
    for (int id = 0; id < 2; ++id)
      tasks.push_back(coroutine_worker(pool, dict, rounds->enroll().value(), id));
    std::vector<std::thread> threads;
    for (int id = 2; id < kWorkers; ++id) {
      threads.emplace_back([&dict, &seen, me = rounds->enroll().value(), id]() mutable {
        seen[static_cast<std::size_t>(id)] = thread_worker(dict, std::move(me), id);
      });
    }
    std::vector<views> from_tasks = asyncband::block_on(rt::when_all(std::move(tasks)));
    for (auto& t : threads) t.join();
    for (std::size_t i = 0; i < from_tasks.size(); ++i) seen[i] = std::move(from_tasks[i]);
  }

  const views expected = replay();
  bool ok = true;
  for (std::size_t r = 0; r < expected.size(); ++r) {
    int agree = 0;
    for (const views& v : seen) agree += (r < v.size() && v[r] == expected[r]) ? 1 : 0;
    std::printf("after round %zu: %2zu entries, sum of values %5ld; read exactly so by %d of %d workers\n", r,
                expected[r].first, expected[r].second, agree, kWorkers);
    ok = ok && agree == kWorkers;
  }
  // 2 phases per round; the participants' withdrawals at the end complete one more, empty phase.
  std::printf("phase %llu (2 per round, then 1 completed by the final withdrawals), participants() = %zu\n",
              static_cast<unsigned long long>(rounds->phase().value()), rounds->participants());
  ok = ok && rounds->phase() == asyncband::phase_id(2 * kRounds + 1) && rounds->participants() == 0;
  return ok ? 0 : 1;
}
