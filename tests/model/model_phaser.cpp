// SPDX-License-Identifier: Apache-2.0
// Model tests of asyncband::phaser: phases completed by the last of three arrivals, a withdrawal
// completing a phase under an observer, a cancelled wait that keeps its arrival, and close()
// against the final arrival, under the explorer's schedules.
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

}  // namespace
