// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::rwlock: readers against writers in its one FIFO queue, a cancelled
// writer with readers queued behind it, a downgrade, and bounded barging (retrying writers,
// barging readers, the starving bound, a writer that destroys the rwlock after its serve),
// under the explorer's schedules.
#include <asyncband/rwlock.hpp>
#include <asyncband/stop_token.hpp>

#include "kept.hpp"
#include "mailbox.hpp"
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

/// A stoppable writer queued behind a held read is cancelled while `read_behind` (on a thread
/// of its own) reads, and the held read unlocks: the reader must get in whichever way the race
/// goes (the writer's cancellation lets it in, the writer's grant passes on, or the writer holds
/// and unlocks). Otherwise it waits for good: a deadlock the explorer reports.
template <class ReadBehind>
void cancelled_writer_with_a_reader_behind(std::size_t max_readers, ReadBehind read_behind) {
  model::kept<asyncband::rwlock<int>> kept_l(0, max_readers);
  auto& l = *kept_l;
  asyncband::stop_source stop;
  auto held = l.read_blocking();
  thread writer([&] {
    auto r = l.write_blocking(stop.get_token());
    if (r.ok()) **r = 1;
  });
  thread reader([&] { read_behind(l); });
  thread canceller([&] { stop.request_stop(); });
  held.unlock();
  canceller.join();
  writer.join();
  reader.join();
  check(!l.is_locked(), "a cancelled writer kept its grant, or a share was lost");
}

// With a plain thread's read behind the writer (queued behind it if it queued first, with
// strict FIFO or while the rwlock starves; else it barges).
TEST(ModelRwlock, CancelledWriterLetsTheReadersBehindItIn) {
  EXPECT_TRUE(model::explored(302, [] {
    cancelled_writer_with_a_reader_behind(4, [](asyncband::rwlock<int>& l) {
      auto g = l.read_blocking();
      check(*g == 0 || *g == 1, "a reader saw a torn value");
    });
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

/// Counts the holders of one rwlock: a writer alone, readers together.
struct holders {
  atomic<int> readers{0};
  atomic<int> writers{0};
  void write() {
    check(writers.fetch_add(1) == 0 && readers.load() == 0, "a writer shares the rwlock");
    writers.fetch_sub(1);
  }
  void read() {
    readers.fetch_add(1);
    check(writers.load() == 0, "a reader shares the rwlock with a writer");
    readers.fetch_sub(1);
  }
};

// Bounded barging: two coroutine writers on schedulers of their own write twice each (a release
// frees the lock and posts the head writer's retry, which takes it or queues again at the
// front), a thread reads twice with read_blocking (a thread's retry), and the main thread
// barges with try_read and try_write. With max_passes = 2 in a model build the rwlock starves
// along the way. Holders exclude each other, no write is lost, everybody ends (a waiter nobody
// serves is a deadlock the explorer reports).
TEST(ModelRwlock, RetryingWritersAReaderAndABargerExcludeAndAllEnd) {
  EXPECT_TRUE(model::explored(304, [] {
    model::kept<asyncband::rwlock<int>> kept_l(0, 4);
    auto& l = *kept_l;
    holders h;
    const auto writer = [&l, &h]() -> asyncband::runtime::task<void> {
      for (int i = 0; i != 2; ++i) {
        auto g = co_await l.write();
        h.write();
        ++*g;
      }
    };
    thread a([&] {
      model::mailbox box;
      model::run_on(box, writer());
    });
    thread b([&] {
      model::mailbox box;
      model::run_on(box, writer());
    });
    thread reader([&] {
      for (int i = 0; i != 2; ++i) {
        auto g = l.read_blocking();
        h.read();
      }
    });
    int barged = 0;
    if (auto g = l.try_write()) {
      h.write();
      ++**g;
      ++barged;
    }
    if (auto g = l.try_read()) h.read();
    a.join();
    b.join();
    reader.join();
    auto g = l.try_write();
    check(g.has_value(), "a share or the write lock was lost");
    if (g) check(**g == 4 + barged, "a write was lost");
  }));
}

// The same with a coroutine reader on a scheduler of its own, and two shares, so that a
// release or the cancellation may have to hand the reader its share past the writer.
TEST(ModelRwlock, ACancelledWriterAtTheHeadLetsTheCoroutineReaderBehindItIn) {
  EXPECT_TRUE(model::explored(305, [] {
    cancelled_writer_with_a_reader_behind(2, [](asyncband::rwlock<int>& l) {
      const auto read = [&l]() -> asyncband::runtime::task<void> {
        auto g = co_await l.read();
        check(*g == 0 || *g == 1, "a reader saw a torn value");
      };
      model::mailbox box;
      model::run_on(box, read());
    });
  }));
}

// Last one out, with a retry: the reader's release serves the queued coroutine writer (posting
// its retry and freeing the lock); the writer takes it, unlocks and destroys the rwlock at once,
// while the release that served it may still be returning (the sanitizers see a use after free).
// A thread also reads, so that the serving release may find the lock taken again.
TEST(ModelRwlock, ARetryingWriterDestroysTheRwlockAfterItsServe) {
  EXPECT_TRUE(model::explored(306, [] {
    model::kept<asyncband::rwlock<int>> l(0, 2);
    auto held = l->read_blocking();
    atomic<bool> done{false};
    atomic<bool> other_done{false};
    const auto last = [&]() -> asyncband::runtime::task<void> {
      auto g = co_await l->write();
      g.unlock();
      while (!other_done.load()) model::ex::yield();
      l.reset();
      done.store(true);
    };
    thread waiter([&] {
      model::mailbox box;
      model::run_on(box, last());
    });
    thread other([&] {
      { auto g = l->read_blocking(); }
      other_done.store(true);
    });
    held.unlock();
    other.join();
    waiter.join();
    check(done.load(), "the writer did not finish");
  }));
}

}  // namespace
