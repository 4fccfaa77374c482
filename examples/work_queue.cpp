// SPDX-License-Identifier: Apache-2.0
// examples/work_queue.cpp: a work queue drained by a pool of coroutine workers, closed
// gracefully.
//
// 2 producers submit 40 jobs each into a bounded MPMC channel of capacity 8; 4 worker coroutines,
// each with its own copy of the receiver, take jobs from it and record which worker ran which
// job. On the way:
//   - backpressure: `co_await tx.send(job)` waits while 8 jobs are queued;
//   - each job goes to exactly one worker: waiting workers are served in FIFO order;
//   - a worker whose wait is cancelled (its stop token fires while it waits) takes nothing: the
//     job it might have been woken for goes to another worker;
//   - graceful close: once both producers are done, the last sender goes and the channel closes;
//     the workers still drain every queued job, then their recv() ends `closed` and they return.
// Checked at the end: every job ran exactly once; any mismatch exits with 1.
//
// 7 tasks on a pool of 2 threads: a wait suspends a task, it does not hold a thread.
#include <array>
#include <atomic>
#include <cstdio>
#include <utility>
#include <vector>

#include <asyncband/block_on.hpp>
#include <asyncband/mpmc/bounded.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>
#include <asyncband/stop_token.hpp>

namespace {

namespace rt = asyncband::runtime;
namespace mpmc = asyncband::mpmc;

constexpr int kProducers = 2;
constexpr int kJobsPerProducer = 40;
constexpr int kJobs = kProducers * kJobsPerProducer;
constexpr int kWorkers = 4;
constexpr std::size_t kQueueCapacity = 8;

struct job {
  int id;
  long input;
};

long work_on(const job& j) {  // stands for the real work
  return j.input * j.input;
}

/// Submits its jobs, then drops its sender: the last one to go closes the channel. (A
/// coroutine's parameters live as long as its frame, which when_all destroys only at the very
/// end: the sender is moved into a local, which goes when the submitting is done.)
rt::task<int> producer(rt::thread_pool& pool, mpmc::sender<job> tx_arg, int first) {
  co_await pool.schedule();
  mpmc::sender<job> tx = std::move(tx_arg);
  int sent = 0;
  for (int i = 0; i < kJobsPerProducer; ++i) {
    const asyncband::send_result<job> r = co_await tx.send(job{first + i, first + i});
    if (!r) co_return sent;  // every worker is gone: the job comes back in r.value()
    ++sent;
  }
  co_return sent;
}

/// Runs jobs until the queue is closed and drained. `ran[id]` counts the runs of each job.
rt::task<int> worker(rt::thread_pool& pool, mpmc::receiver<job> rx, std::array<std::atomic<int>, kJobs>& ran,
                     std::array<std::atomic<long>, kJobs>& results) {
  co_await pool.schedule();
  int done = 0;
  for (;;) {
    asyncband::result<job> next = co_await rx.recv();
    if (!next) break;  // closed: every producer is gone and the queue is empty
    results[static_cast<std::size_t>(next->id)] = work_on(*next);
    ran[static_cast<std::size_t>(next->id)].fetch_add(1);
    ++done;
    co_await pool.schedule();  // stands for the job's own waits (I/O...): other workers run meanwhile
  }
  co_return done;
}

/// A worker that gives up waiting: its cancelled receive takes nothing.
rt::task<int> impatient_worker(rt::thread_pool& pool, mpmc::receiver<job> rx) {
  co_await pool.schedule();
  asyncband::stop_source stop;
  stop.request_stop();  // stands for a deadline that has passed
  const asyncband::result<job> next = co_await rx.recv(stop.get_token());
  co_return next.cancelled() ? 0 : -1;
}

}  // namespace

int main() {
  rt::thread_pool pool(2);
  std::array<std::atomic<int>, kJobs> ran{};
  std::array<std::atomic<long>, kJobs> results{};
  auto [tx, rx] = mpmc::bounded<job>(kQueueCapacity);

  std::vector<rt::task<int>> tasks;
  for (int w = 0; w < kWorkers; ++w) tasks.push_back(worker(pool, rx, ran, results));
  tasks.push_back(impatient_worker(pool, rx));
  for (int p = 0; p < kProducers; ++p) tasks.push_back(producer(pool, tx, p * kJobsPerProducer));
  {
    // main's own handles go now: the producers' senders are the last, and the workers' receivers.
    auto drop_tx = std::move(tx);
    auto drop_rx = std::move(rx);
  }
  const std::vector<int> counts = asyncband::block_on(rt::when_all(std::move(tasks)));

  int worked = 0;
  for (int w = 0; w < kWorkers; ++w) worked += counts[static_cast<std::size_t>(w)];
  const int impatient = counts[kWorkers];
  const int submitted = counts[kWorkers + 1] + counts[kWorkers + 2];
  bool ok = submitted == kJobs && worked == kJobs && impatient == 0;
  for (int id = 0; id < kJobs; ++id) {
    const auto i = static_cast<std::size_t>(id);
    ok = ok && ran[i].load() == 1 && results[i].load() == long{id} * id;
  }
  std::printf("work_queue: %d jobs submitted by %d producers, run by %d workers (", submitted, kProducers,
              kWorkers);
  for (int w = 0; w < kWorkers; ++w)
    std::printf("%s%d", w == 0 ? "" : " ", counts[static_cast<std::size_t>(w)]);
  std::printf("), each exactly once: %s\n", ok ? "yes" : "NO");
  return ok ? 0 : 1;
}
