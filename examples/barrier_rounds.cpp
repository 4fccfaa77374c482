// SPDX-License-Identifier: Apache-2.0
// examples/barrier_rounds.cpp: an iterative computation in rounds, with a barrier.
//
// 1-D heat diffusion (Jacobi relaxation) on a rod whose ends are held at 0 and 100 degrees.
// The rod is cut into slices, one per worker task; 4 tasks run on a pool of 2 threads (a
// barrier wait suspends the task, it does not hold a pool thread). Each round:
//   1. every worker computes its slice of the next temperatures from the current ones and
//      records how much its slice changed, then waits on the barrier;
//   2. the wait that completes the round returns is_leader(): that worker alone does the
//      per-round work (sums the changes, swaps the buffers, decides whether to stop, logs);
//   3. everybody waits on the barrier again, so nobody reads the buffers or the decision
//      before the leader is done. (asyncband::barrier has no completion function: the leader's
//      work runs between two waits.)
// The barrier makes every write of a round happen-before every read after it, so the shared
// arrays need no locks.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <utility>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>

namespace {

namespace rt = asyncband::runtime;

constexpr std::size_t kCells = 34;  // 32 inner cells plus the two fixed ends
constexpr int kWorkers = 4;
constexpr double kTolerance = 1e-3;  // stop when a round changes the rod by less than this
constexpr int kMaxRounds = 5000;

struct simulation {
  std::vector<double> current = std::vector<double>(kCells, 0.0);
  std::vector<double> next = std::vector<double>(kCells, 0.0);
  std::vector<double> change = std::vector<double>(kWorkers, 0.0);  // per worker, this round
  int rounds = 0;
  double last_change = 0.0;
  bool stop = false;
  asyncband::barrier barrier{kWorkers};

  simulation() { current.back() = next.back() = 100.0; }
};

// Work of the round's leader, between the two barrier waits: nobody else is running.
void finish_round(simulation& sim) {
  double total = 0.0;
  for (double c : sim.change) total += c;
  std::swap(sim.current, sim.next);
  ++sim.rounds;
  sim.last_change = total;
  sim.stop = total < kTolerance || sim.rounds == kMaxRounds;
  if (sim.rounds % 500 == 0 || sim.stop) {
    std::printf("round %4d: total change %.6f, middle cell %.3f\n", sim.rounds, total,
                sim.current[kCells / 2]);
  }
}

rt::task<int> worker(rt::thread_pool& pool, simulation& sim, int id) {
  co_await pool.schedule();
  // Inner cells [1, kCells - 1) split evenly.
  const std::size_t inner = kCells - 2;
  const std::size_t begin = 1 + inner * static_cast<std::size_t>(id) / kWorkers;
  const std::size_t end = 1 + inner * static_cast<std::size_t>(id + 1) / kWorkers;
  int times_leader = 0;
  for (;;) {
    double change = 0.0;
    for (std::size_t i = begin; i < end; ++i) {
      sim.next[i] = 0.5 * (sim.current[i - 1] + sim.current[i + 1]);
      change += std::fabs(sim.next[i] - sim.current[i]);
    }
    sim.change[static_cast<std::size_t>(id)] = change;

    if ((co_await sim.barrier.wait()).is_leader()) {
      ++times_leader;
      finish_round(sim);
    }
    co_await sim.barrier.wait();  // the leader's results are visible after this
    if (sim.stop) break;
  }
  co_return times_leader;
}

rt::task<std::vector<int>> run(rt::thread_pool& pool, simulation& sim) {
  std::vector<rt::task<int>> workers;
  for (int id = 0; id < kWorkers; ++id) workers.push_back(worker(pool, sim, id));
  co_return co_await rt::when_all(std::move(workers));
}

}  // namespace

int main() {
  simulation sim;
  std::vector<int> leaders;
  {
    rt::thread_pool pool(2);
    leaders = asyncband::block_on(run(pool, sim));
  }

  // At equilibrium the temperature is linear: 100 * i / (kCells - 1).
  const double expected_middle = 100.0 * (kCells / 2) / (kCells - 1);
  std::printf("stopped after %d rounds (%llu barrier generations); middle cell %.2f, exact %.2f\n",
              sim.rounds, static_cast<unsigned long long>(sim.barrier.generation()), sim.current[kCells / 2],
              expected_middle);
  std::printf("rounds led by each worker:");
  int total_leads = 0;
  for (int n : leaders) {
    std::printf(" %d", n);
    total_leads += n;
  }
  std::printf(" (sum %d: exactly one leader per round)\n", total_leads);

  const bool converged = std::fabs(sim.current[kCells / 2] - expected_middle) < 1.0;
  return (converged && total_leads == sim.rounds) ? 0 : 1;
}
