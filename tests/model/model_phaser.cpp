// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::phaser: phases completed by the last of three arrivals, a withdrawal
// completing a phase under an observer, a cancelled wait that keeps its arrival, close() against
// the final arrival, and threads that destroy the phaser as soon as they see its phase move,
// under the explorer's schedules.
#include <asyncband/phaser.hpp>
#include <asyncband/stop_token.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "kept.hpp"
#include "model.hpp"

namespace {

using asyncband::phase_id;
using model::ex::atomic;
using model::ex::check;
using model::ex::thread;

/// n participants of a new phaser, registered at once (in phase 0).
std::vector<asyncband::phaser_participant> enroll(const std::shared_ptr<asyncband::phaser>& ph,
                                                  std::size_t n) {
  auto batch = ph->enroll(n);
  std::vector<asyncband::phaser_participant> out;
  while (auto p = batch->take()) out.push_back(std::move(*p));
  return out;
}

// Three participants, two phases: each wait returns the phase its arrival's completion started,
// only after all three arrived.
TEST(ModelPhaser, ThreeParticipantsTwoPhases) {
  EXPECT_TRUE(model::explored(901, [] {
    const model::kept<std::shared_ptr<asyncband::phaser>> kept_ph(asyncband::phaser::create());
    const auto& ph = *kept_ph;
    auto parts = enroll(ph, 3);
    atomic<int> arrivals{0};
    const auto participant = [&arrivals](asyncband::phaser_participant& p) {
      for (std::uint64_t phase = 1; phase <= 2; ++phase) {
        arrivals.fetch_add(1);
        auto r = p.wait_blocking();
        check(r.ok() && *r == phase_id(phase), "a wait reported another phase");
        check(arrivals.load() >= 3 * static_cast<int>(phase),
              "a wait returned before its phase was complete");
      }
    };
    thread a([&] { participant(parts[0]); });
    thread b([&] { participant(parts[1]); });
    participant(parts[2]);
    a.join();
    b.join();
    check(ph->phase() == phase_id(2), "a phase was lost or doubled");
  }));
}

// A withdrawal (destroying a participant) completes the phase that a participant's wait and an
// observer's wait for: the observer's plain wait parks on the broadcast word and is released by it.
TEST(ModelPhaser, WithdrawalCompletesThePhaseForAnObserver) {
  EXPECT_TRUE(model::explored(902, [] {
    const model::kept<std::shared_ptr<asyncband::phaser>> kept_ph(asyncband::phaser::create());
    const auto& ph = *kept_ph;
    auto parts = enroll(ph, 2);
    thread waiter([&] {
      auto r = parts[0].wait_blocking();
      check(r.ok() && *r == phase_id(1), "a wait reported another phase");
    });
    thread leaver([&] { const asyncband::phaser_participant gone = std::move(parts[1]); });
    auto seen = ph->wait_blocking(phase_id(0));
    check(seen.ok() && *seen == phase_id(1), "the observer saw another phase");
    waiter.join();
    leaver.join();
    check(ph->participants() == 1, "a withdrawal was lost");
  }));
}

// A participant's wait cancelled after it arrived keeps its arrival, and its next wait waits for
// that same phase without arriving again (one cancelled before it arrived arrives then): either
// way both participants see phase 1 complete, once.
TEST(ModelPhaser, CancelledWaitKeepsItsArrival) {
  EXPECT_TRUE(model::explored(903, [] {
    const model::kept<std::shared_ptr<asyncband::phaser>> kept_ph(asyncband::phaser::create());
    const auto& ph = *kept_ph;
    auto parts = enroll(ph, 2);
    asyncband::stop_source stop;
    thread cancellable([&] {
      auto r = parts[0].wait_blocking(stop.get_token());
      if (!r.ok()) {
        check(r.status() == asyncband::wait_status::cancelled, "a wait ended neither ok nor cancelled");
        r = parts[0].wait_blocking();
      }
      check(r.ok() && *r == phase_id(1), "the cancellable participant saw another phase");
    });
    thread canceller([&] { stop.request_stop(); });
    auto r = parts[1].wait_blocking();
    check(r.ok() && *r == phase_id(1), "a wait reported another phase");
    canceller.join();
    cancellable.join();
    check(ph->phase() == phase_id(1), "an arrival was counted twice");
  }));
}

// close() against the final arrival: the phase completes for both participants or is frozen for
// both, never one of each.
TEST(ModelPhaser, CloseRacesTheFinalArrival) {
  EXPECT_TRUE(model::explored(904, [] {
    const model::kept<std::shared_ptr<asyncband::phaser>> kept_ph(asyncband::phaser::create());
    const auto& ph = *kept_ph;
    auto parts = enroll(ph, 2);
    atomic<bool> first_ok{false};
    thread waiter([&] { first_ok.store(parts[0].wait_blocking().ok()); });
    thread closer([&] { ph->close(); });
    const bool second_ok = parts[1].wait_blocking().ok();
    closer.join();
    waiter.join();
    check(first_ok.load() == second_ok, "the phase completed for one participant and froze for the other");
    check(second_ok == (ph->phase() == phase_id(1)), "a wait's outcome and the phase disagree");
  }));
}

// Last one out without a pin: an advance that finds no blocked thread counted takes no pin and
// releases no word, so nothing of the phaser may be touched after its unlock. A thread that sees
// the new phase (blocked, or spinning on phase() without the lock) destroys everything at once,
// the arriving participant included; ASan reports a later access of the arrival that the
// explorer reaches (an access after the unlock was injected during review and found this way).
// It cannot stop a thread after its last atomic operation, so a plain read after the unlock
// escapes it: PhaserLastOneOut.AQuietArrivalTouchesNothingAfterItsLock (test_phaser) stops
// there with a test hook.

struct arriving {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_participant p = std::move(*ph->enroll());
};
struct two_arriving {
  std::shared_ptr<asyncband::phaser> ph = asyncband::phaser::create();
  asyncband::phaser_participant mine = std::move(*ph->enroll());
  asyncband::phaser_participant other = std::move(*ph->enroll());
};

/// An explored run: on a thread of its own, `see(world)` returns once it has seen phase 1, and the
/// thread destroys the world at once, while this thread's `arrive(world)` completes phase 0.
template <class World, class See, class Arrive>
bool destroyed_on_sight(std::uint64_t seed, See see, Arrive arrive) {
  return model::explored(seed, [see, arrive] {
    auto* w = new World;
    thread seer([w, see] {
      see(*w);
      delete w;
    });
    arrive(*w);
    seer.join();
  });
}

TEST(ModelPhaser, ObserverDestroysWhileTheFinalArrivalReturns) {
  EXPECT_TRUE(destroyed_on_sight<arriving>(
      905,
      [](arriving& w) {
        const auto r = w.ph->wait_blocking(phase_id(0));
        check(r.ok() && *r == phase_id(1), "the observer saw another phase");
      },
      [](arriving& w) { (void)w.p.arrive(); }));
}

TEST(ModelPhaser, ParticipantDestroysWhileTheFinalArrivalReturns) {
  EXPECT_TRUE(destroyed_on_sight<two_arriving>(
      906,
      [](two_arriving& w) {
        const auto r = w.mine.wait_blocking();
        check(r.ok() && *r == phase_id(1), "the participant saw another phase");
      },
      [](two_arriving& w) { (void)w.other.arrive(); }));
}

TEST(ModelPhaser, LockFreeReaderDestroysWhileTheFinalArrivalReturns) {
  EXPECT_TRUE(destroyed_on_sight<arriving>(
      907,
      [](arriving& w) {
        while (w.ph->phase() == phase_id(0)) asyncband::detail::yield_thread();
      },
      [](arriving& w) { (void)w.p.arrive(); }));
}

// A batch's withdrawal completes the phase that a blocked observer and a blocked participant
// wait for: both counted themselves, so the advance releases the word.
TEST(ModelPhaser, BatchWithdrawalReleasesBlockedThreads) {
  EXPECT_TRUE(model::explored(908, [] {
    const model::kept<std::shared_ptr<asyncband::phaser>> kept_ph(asyncband::phaser::create());
    const auto& ph = *kept_ph;
    auto mine = std::move(*ph->enroll());
    auto batch = std::make_unique<asyncband::phaser_batch>(std::move(*ph->enroll(2)));
    thread observer([&] { check(ph->wait_blocking(phase_id(0)).ok(), "the observer was not released"); });
    thread waiting([&] { check(mine.wait_blocking().ok(), "the participant was not released"); });
    batch.reset();
    observer.join();
    waiting.join();
  }));
}

}  // namespace
