// SPDX-License-Identifier: Apache-2.0
// examples/locks.cpp: the lock family on a thread pool.
//
// A bounded work queue built from asyncband::mutex<std::deque<int>> and two condvars
// ("not empty", "not full"): 3 producers push 20 jobs each, 2 consumers pop them. A consumer
// never polls: it waits on the condvar with wait_while, which unlocks the mutex while it waits
// and holds it again when the predicate has turned false. Each job then needs one of 2 "GPU
// slots", a semaphore, so at most 2 jobs are processed at once; an atomic counter checks it.
// Finally a stop token cancels a consumer that waits for a job that never comes: its wait
// returns `cancelled` without the mutex, and nothing is left queued.
//
// 5 tasks run on a pool of 2 threads: waiting suspends a task, it does not hold a thread.
#include <atomic>
#include <cstdio>
#include <deque>
#include <utility>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>
#include <asyncband/stop_token.hpp>

namespace {

namespace rt = asyncband::runtime;

constexpr int kProducers = 3;
constexpr int kJobsPerProducer = 20;
constexpr int kConsumers = 2;
constexpr std::size_t kQueueCapacity = 4;
constexpr int kDone = -1;  // one per consumer, after the last job

struct work_queue {
  asyncband::mutex<std::deque<int>> jobs;
  asyncband::condvar not_empty;
  asyncband::condvar not_full;

  rt::task<void> push(int job) {
    auto queue = co_await jobs.lock();
    queue = co_await not_full.wait_while(std::move(queue),
                                         [](const std::deque<int>& q) { return q.size() == kQueueCapacity; });
    queue->push_back(job);
    not_empty.notify_one();
  }

  rt::task<int> pop() {
    auto queue = co_await jobs.lock();
    queue =
        co_await not_empty.wait_while(std::move(queue), [](const std::deque<int>& q) { return q.empty(); });
    const int job = queue->front();
    queue->pop_front();
    not_full.notify_one();
    co_return job;
  }
};

struct gpu {
  asyncband::semaphore slots{2};
  std::atomic<int> busy{0};
  std::atomic<int> most_busy{0};

  rt::task<void> process(int /*job*/) {
    const asyncband::semaphore_permit slot = co_await slots.acquire();
    const int now = ++busy;
    int seen = most_busy.load();
    while (now > seen && !most_busy.compare_exchange_weak(seen, now)) {
    }
    --busy;  // the permit goes back when `slot` is destroyed
  }
};

rt::task<int> producer(rt::thread_pool& pool, work_queue& q, int id) {
  co_await pool.schedule();
  for (int i = 0; i < kJobsPerProducer; ++i) co_await q.push(id * 100 + i);
  co_return kJobsPerProducer;
}

rt::task<int> consumer(rt::thread_pool& pool, work_queue& q, gpu& g) {
  co_await pool.schedule();
  int done = 0;
  for (int job = co_await q.pop(); job != kDone; job = co_await q.pop()) {
    co_await g.process(job);
    ++done;
  }
  co_return done;
}

/// Producers and consumers through the queue; returns how many jobs were processed.
rt::task<int> produce_and_consume(rt::thread_pool& pool, work_queue& q, gpu& g) {
  std::vector<rt::task<int>> producers;
  for (int id = 0; id < kProducers; ++id) producers.push_back(producer(pool, q, id));
  std::vector<rt::task<int>> consumers;
  for (int c = 0; c < kConsumers; ++c) consumers.push_back(consumer(pool, q, g));

  auto produce_then_stop_consumers = [&]() -> rt::task<int> {
    co_await rt::when_all(std::move(producers));
    for (int c = 0; c < kConsumers; ++c) co_await q.push(kDone);
    co_return 0;
  };
  auto consume = [&]() -> rt::task<int> {
    int total = 0;
    const std::vector<int> per_consumer = co_await rt::when_all(std::move(consumers));
    for (std::size_t c = 0; c < per_consumer.size(); ++c) {
      std::printf("consumer %zu processed %d jobs\n", c, per_consumer[c]);
      total += per_consumer[c];
    }
    co_return total;
  };
  const auto [ignored, total] = co_await rt::when_all(produce_then_stop_consumers(), consume());
  co_return total;
}

/// A consumer waits for a job that never comes until its stop token fires.
rt::task<asyncband::wait_status> idle_consumer_stopped(rt::thread_pool& pool, work_queue& q) {
  asyncband::stop_source stop;
  auto wait_for_a_job = [&]() -> rt::task<asyncband::wait_status> {
    auto queue = co_await q.jobs.lock();
    auto r = co_await q.not_empty.wait_while(
        std::move(queue), [](const std::deque<int>& jobs) { return jobs.empty(); }, stop.get_token());
    co_return r.status();  // cancelled: r holds no guard, the mutex is not held
  };
  auto request_stop = [&]() -> rt::task<asyncband::wait_status> {
    co_await pool.schedule();
    stop.request_stop();
    co_return asyncband::wait_status::ok;
  };
  const auto [status, ignored] = co_await rt::when_all(wait_for_a_job(), request_stop());
  co_return status;
}

rt::task<bool> run(rt::thread_pool& pool) {
  co_await pool.schedule();
  work_queue q;
  gpu g;
  const int total = co_await produce_and_consume(pool, q, g);
  std::printf("%d jobs processed, at most %d at once on 2 GPU slots\n", total, g.most_busy.load());
  const asyncband::wait_status status = co_await idle_consumer_stopped(pool, q);
  std::printf("an idle consumer stopped: %s, mutex free: %s\n", asyncband::to_string(status),
              q.jobs.is_locked() ? "no" : "yes");
  co_return total == kProducers* kJobsPerProducer&& g.most_busy.load() <= 2 &&
      status == asyncband::wait_status::cancelled && !q.jobs.is_locked();
}

}  // namespace

int main() {
  rt::thread_pool pool(2);
  return asyncband::block_on(run(pool)) ? 0 : 1;
}
