// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::rwlock: readers against writers in its one FIFO queue, a cancelled
// writer with readers queued behind it, and a downgrade, under the explorer's schedules.
#include <asyncband/rwlock.hpp>
#include <asyncband/stop_token.hpp>

#include "kept.hpp"
#include "model.hpp"

namespace {

using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

// A writer excludes readers and readers exclude the writer; readers may share.
TEST(ModelRwlock, WriterExcludesReaders) {
  EXPECT_TRUE(model::explored(301, [] {
    model::kept<asyncband::rwlock<int>> kept_l(0, 4);
    auto& l = *kept_l;
    atomic<int> readers{0};
    atomic<int> writers{0};
    thread writer([&] {
      auto g = l.write_blocking();
      check(writers.fetch_add(1) == 0 && readers.load() == 0, "a writer shares the rwlock");
      *g = 1;
      writers.fetch_sub(1);
    });
    const auto reader = [&] {
      auto g = l.read_blocking();
      readers.fetch_add(1);
      check(writers.load() == 0, "a reader shares the rwlock with a writer");
      check(*g == 0 || *g == 1, "a reader saw a torn value");
      readers.fetch_sub(1);
    };
    thread r(reader);
    reader();
    writer.join();
    r.join();
    check(!l.is_locked(), "a share or the write lock was lost");
  }));
}

// A writer queued behind a reader is cancelled while the reader unlocks; a reader queued behind
// the writer must get in whichever way the race goes (the writer's cancellation lets it in, or
// the writer's grant passes on, or the writer holds and unlocks). Otherwise it waits for good:
// a deadlock the explorer reports.
TEST(ModelRwlock, CancelledWriterLetsTheReadersBehindItIn) {
  EXPECT_TRUE(model::explored(302, [] {
    model::kept<asyncband::rwlock<int>> kept_l(0, 4);
    auto& l = *kept_l;
    asyncband::stop_source stop;
    auto held = l.read_blocking();
    thread writer([&] {
      auto r = l.write_blocking(stop.get_token());
      if (r.ok()) **r = 1;
    });
    thread reader([&] {
      auto g = l.read_blocking();  // behind the writer if it queued first: write-preferring
      check(*g == 0 || *g == 1, "a reader saw a torn value");
    });
    thread canceller([&] { stop.request_stop(); });
    held.unlock();
    canceller.join();
    writer.join();
    reader.join();
    check(!l.is_locked(), "a cancelled writer kept its grant");
  }));
}

// A downgrade keeps one read share and lets in the readers queued behind the writer, but not
// the writer queued behind them.
TEST(ModelRwlock, DowngradeLetsQueuedReadersInButNoWriter) {
  EXPECT_TRUE(model::explored(303, [] {
    model::kept<asyncband::rwlock<int>> kept_l(0, 4);
    auto& l = *kept_l;
    atomic<int> readers{0};
    atomic<int> writers{0};
    auto w = l.write_blocking();
    *w = 1;
    thread reader([&] {
      auto g = l.read_blocking();
      readers.fetch_add(1);
      check(writers.load() == 0, "a reader shares the rwlock with a writer");
      check(*g != 0, "a reader got in before the first writer");
      readers.fetch_sub(1);
    });
    thread writer([&] {
      auto g = l.write_blocking();
      check(writers.fetch_add(1) == 0 && readers.load() == 0, "a writer got in beside readers");
      *g = 2;
      writers.fetch_sub(1);
    });
    {
      auto r = std::move(w).downgrade();
      readers.fetch_add(1);
      check(writers.load() == 0, "a writer got in during the downgrade");
      readers.fetch_sub(1);
    }
    reader.join();
    writer.join();
    auto g = l.try_read();
    check(g.has_value() && **g == 2, "the second writer did not run");
  }));
}

}  // namespace
