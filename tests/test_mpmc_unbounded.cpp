// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband::mpmc::unbounded: sending (never waits) and receiving in every form; the
// queries; the counts of senders and receivers through copies and moves; moved-from handles;
// close by either half; several receivers (each value received exactly once, FIFO among waiting
// receives, no overtaking by try_recv); deterministic races at the waiter core's test points and
// inside a send's or a receive's move of the value (two receives woken for one value, a receive
// woken then cancelled or destroyed, close against in-flight sends, a refused send still counted,
// a receive moving the last value out, and waiting receives; the last sender or receiver going);
// when_any; payloads whose move constructor throws on either side (parked values); the blocking
// twins; "last one out"; and seeded soaks on the test scheduler and on threads. The scenarios of
// the receiving half, which the bounded channel shares, are written once in
// support/mpmc_receive_scenarios.hpp.
#include "asyncband/mpmc/unbounded.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <latch>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "asyncband/auto_reset_event.hpp"
#include "asyncband/block_on.hpp"
#include "asyncband/result.hpp"
#include "asyncband/runtime/task.hpp"
#include "asyncband/runtime/test_scheduler.hpp"
#include "asyncband/stop_token.hpp"
#include "asyncband/when_any.hpp"
#include "support/channel_probes.hpp"
#include "support/counted.hpp"
#include "support/fuse_payload.hpp"
#include "support/lifetime.hpp"
#include "support/mpmc_channel.hpp"
#include "support/mpmc_receive_scenarios.hpp"
#include "support/mpmc_soak.hpp"
#include "support/probe.hpp"
#include "support/recv_many.hpp"
#include "support/stress.hpp"
#include "support/thread_hook.hpp"

namespace {

using namespace asyncband_test;
using namespace asyncband_test::mpmc_scenarios;
using namespace asyncband_test::mpmc_soak;
namespace mpmc = asyncband::mpmc;

// ---------------------------------------------------------------------------------------------
// Channels and handles

template <class T>
auto make_channel() {
  return halves_of(mpmc::unbounded<T>());
}

/// How the shared scenarios (support/mpmc_channel.hpp) use an unbounded channel: it has room
/// for any number of values; every send is immediate; there is no capacity to keep exact.
struct unbounded_kind {
  template <class T>
  using sender = mpmc::unbounded_sender<T>;
  template <class T>
  using receiver = mpmc::unbounded_receiver<T>;

  template <class T>
  static auto make(std::size_t /*room*/) {
    return make_channel<T>();
  }
  template <class T>
  static asyncband::send_result<T> offer(sender<T>& tx, int v, int fuse = 0) {
    return tx.send(asyncband_test::make<T>(v, fuse));
  }
  template <class T>
  static void put(sender<T>& tx, int v) {
    auto r = tx.send(asyncband_test::make<T>(v));
    EXPECT_TRUE(r.ok()) << "send(" << v << "): " << asyncband::to_string(r.status());
  }
  template <class T>
  static void send_blocking(sender<T>& tx, int v) {
    put(tx, v);
  }
  template <class T>
  static void expect_exact(sender<T>& /*unused*/, receiver<T>& /*unused*/) {}
};

/// A send that must be accepted.
template <class T>
void put(mpmc::unbounded_sender<T>& tx, int v) {
  unbounded_kind::put(tx, v);
}

/// A channel on a test scheduler holding `filled` values 100, 101, ... (see channel_fixture).
template <class T = int>
struct fixture : channel_fixture<unbounded_kind, T> {
  explicit fixture(int filled = 0) : channel_fixture<unbounded_kind, T>(1, filled) {}
};

/// A receive on a coroutine that catches a throwing move: it records the value, the end, or the
/// throw.
struct catching_probe : recv_probe<counted> {
  bool threw = false;
};

template <class Receiver>
task<void> receive_catching(Receiver& rx, catching_probe& p) {
  ++p.started;
  try {
    auto r = co_await rx.recv();
    record(p, r);
  } catch (const payload_error&) {
    p.threw = true;
    ++p.resumed;
  }
}

// ---------------------------------------------------------------------------------------------
// Sending and receiving, the queries, the handles

// Sends never wait: any number of values is held, counted by len() on every copy of the
// receiver, and received in the order sent by whichever copy asks.
TEST(MpmcUnbounded, SendsNeverWaitAndTheValuesAreReceivedInOrderByAnyCopy) {
  constexpr int kValues = 20'000;
  auto c = make_channel<int>();
  mpmc::unbounded_receiver<int> other = c.rx;
  EXPECT_TRUE(c.rx.empty());
  EXPECT_TRUE(c.rx.try_recv().empty());
  for (int i = 1; i <= kValues; ++i) put(c.tx, i);
  EXPECT_EQ(c.rx.len(), static_cast<std::size_t>(kValues));
  EXPECT_EQ(other.len(), static_cast<std::size_t>(kValues));
  EXPECT_FALSE(other.empty());
  std::vector<int> got;
  for (int i = 0; i < kValues; ++i) got.push_back(take(i % 3 == 0 ? other : c.rx));
  EXPECT_EQ(got, range(1, kValues + 1));
  EXPECT_TRUE(c.rx.empty());
  EXPECT_TRUE(other.try_recv().empty());
  EXPECT_FALSE(c.tx.is_closed());
  EXPECT_FALSE(other.is_closed());
}

TEST(MpmcUnbounded, EveryReceiveFormYieldsAValueThatIsThere) {
  every_receive_form_yields_a_value_that_is_there<unbounded_kind>();
}

TEST(MpmcUnbounded, SenderAndReceiverCountsFollowCopiesMovesAndDestruction) {
  counts_follow_copies_moves_and_destruction<unbounded_kind>([](auto& /*unused*/, const auto& /*unused*/) {});
}

TEST(MpmcUnbounded, ReceiverCopiesShareTheChannelWhichDisconnectsOnlyWithTheLastOne) {
  auto c = make_channel<counted>();
  receiver_copies_share_the_channel_which_disconnects_only_with_the_last_one<unbounded_kind>(c);
  EXPECT_TRUE(c.tx.is_closed());
}

TEST(MpmcUnbounded, MovedFromHandlesThrowLogicErrorAndReportNothing) {
  auto c = make_channel<int>();
  mpmc::unbounded_sender<int> tx = std::move(c.tx);
  mpmc::unbounded_receiver<int> rx = std::move(c.rx);
  expect_moved_from_halves<unbounded_kind>(c.tx, c.rx);  // NOLINT(bugprone-use-after-move): what is tested
  expect_moved_to_halves_untouched<unbounded_kind>(tx, rx);
}

TEST(MpmcUnbounded, HandlesMoveAndCopyAssignWithTheirChannel) {
  handles_move_and_copy_assign_with_their_channel<unbounded_kind>();
}

TEST(MpmcUnbounded, RecvBeforeSendSuspendsAndTheSendResumesItOnceOnItsScheduler) {
  recv_before_send_suspends_and_the_send_resumes_it_once_on_its_scheduler<unbounded_kind>();
}

TEST(MpmcUnbounded, ACoroutineWithoutASchedulerIsResumedInlineInsideTheSend) {
  a_coroutine_without_a_scheduler_is_resumed_inline_inside_the_send<unbounded_kind>();
}

TEST(MpmcUnbounded, MoveOnlyPayloadsAreDeliveredAndHandedBackIntact) {
  auto c = make_channel<std::unique_ptr<int>>();
  mpmc::unbounded_receiver<std::unique_ptr<int>> other = c.rx;
  auto one = std::make_unique<int>(1);
  int* const one_address = one.get();
  EXPECT_TRUE(c.tx.send(std::move(one)).ok());
  EXPECT_TRUE(c.tx.send(std::make_unique<int>(2)).ok());
  auto first = other.try_recv();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->get(), one_address);  // the very same object
  EXPECT_EQ(**asyncband::block_on(c.rx.recv()), 2);
  c.rx.close();
  auto three = std::make_unique<int>(3);
  int* const three_address = three.get();
  auto refused = c.tx.send(std::move(three));
  ASSERT_TRUE(refused.closed());
  EXPECT_EQ(refused.value().get(), three_address);  // the very same object comes back
}

// Close, by either half: later sends hand their value back; what was accepted is still received,
// by any copy, and then every receive form ends closed (or disconnected).
TEST(MpmcUnbounded, CloseByEitherHalfRefusesLaterSendsAndDrainsWhatWasAccepted) {
  for (const bool by_receiver : {false, true}) {
    SCOPED_TRACE(by_receiver);
    const count_scope counts;
    auto c = make_channel<counted>();
    mpmc::unbounded_receiver<counted> other = c.rx;
    put(c.tx, 1);
    put(c.tx, 2);
    if (by_receiver) {
      other.close();
    } else {
      c.tx.close();
    }
    c.rx.close();  // again: nothing changes
    EXPECT_TRUE(c.tx.is_closed());
    EXPECT_TRUE(c.rx.is_closed());
    EXPECT_EQ(c.rx.len(), 2U);
    auto refused = c.tx.send(counted(3));
    EXPECT_TRUE(refused.closed());
    EXPECT_EQ(refused.value().id(), 3);
    EXPECT_EQ(c.rx.len(), 2U);
    EXPECT_EQ(take(other), 1);
    EXPECT_EQ(asyncband::block_on(c.rx.recv())->id(), 2);
    EXPECT_EQ(c.rx.len(), 0U);
    EXPECT_TRUE(other.try_recv().closed());
    EXPECT_TRUE(c.rx.recv_blocking().closed());
    EXPECT_TRUE(asyncband::block_on(other.recv()).closed());
    EXPECT_EQ(c.tx.sender_count(), 1U);  // closing drops no handle
    EXPECT_EQ(c.tx.receiver_count(), 2U);
  }
}

// A send's value is constructed before it is linked, so a receive made from inside that
// construction (by code it resumes, on the same thread) does not wait for it: it takes what was
// there, or finds the channel empty.
TEST(MpmcUnbounded, AReceiveInsideTheConstructionOfAValueSentToTheSameChannelDoesNotWaitForIt) {
  const count_scope counts;
  auto c = make_channel<counted>();
  counted::at_move(1, [&c] {
    put(c.tx, 1);
    EXPECT_EQ(take(c.rx), 1);
    EXPECT_TRUE(c.rx.try_recv().empty());
    EXPECT_TRUE(c.rx.recv_timeout(0ms).timed_out());
  });
  put(c.tx, 2);
  EXPECT_EQ(take(c.rx), 2);
}

// ---------------------------------------------------------------------------------------------
// Several receivers: each value to exactly one receive, FIFO among waiting receives

TEST(MpmcUnboundedReceivers, WaitingReceivesAreServedInFifoOrder) {
  waiting_receives_are_served_in_fifo_order<unbounded_kind>();
}

TEST(MpmcUnboundedReceivers, CancellingWaitingReceivesInTheMiddleKeepsTheOrderOfTheOthers) {
  cancelling_waiting_receives_in_the_middle_keeps_the_order_of_the_others<unbounded_kind>();
}

TEST(MpmcUnboundedReceivers, NeitherATryRecvNorANewReceiveOvertakesAWaitingReceive) {
  neither_a_try_recv_nor_a_new_receive_overtakes_a_waiting_receive<unbounded_kind>();
}

TEST(MpmcUnboundedReceivers, AValueSentWhileNoneWaitsGoesToTheNextReceiveOfAnyCopy) {
  a_value_sent_while_none_waits_goes_to_the_next_receive_of_any_copy<unbounded_kind>();
}

TEST(MpmcUnboundedReceivers, EachValueGoesToExactlyOneOfSeveralReceivingCoroutines) {
  each_value_goes_to_exactly_one_of_several_receiving_coroutines<unbounded_kind>(
      [](test_scheduler& s, mpmc::unbounded_sender<counted> tx, int producer, int count) -> task<void> {
        for (int i = 1; i <= count; ++i) {
          EXPECT_TRUE(tx.send(counted(producer * 100 + i)).ok());
          co_await yield_to{s};
        }
      });
}

TEST(MpmcUnboundedThreads, EachValueIsReceivedExactlyOnceByThreadsAndPoolCoroutines) {
  each_value_is_received_exactly_once_by_threads_and_pool_coroutines<unbounded_kind>();
}

/// Threads send while the channel ends (`close`: closed, or its last receiver goes) on this
/// thread: each value is accepted or handed back, an accepted value is received (by the threads
/// receiving until the end) or destroyed, and every value is destroyed once. The values whose
/// send returned before the last receiver went are destroyed by the time its departure returns
/// (a sender kept here keeps the channel: none of them waits for the channel's end).
void sends_on_threads_racing_the_end(bool close) {
  constexpr int kProducers = 3;
  constexpr int kPerProducer = under_sanitizer ? 300 : 2000;
  constexpr int kIds = kProducers * kPerProducer + 1;
  const count_scope counts;
  std::vector<std::atomic<int>> finals(kIds);
  const finals_scope scope(finals);
  std::vector<send_log> logs(kProducers);
  std::vector<std::atomic<int>> completed(kProducers);  // sends returned, per producer
  std::vector<std::vector<int>> got(2);
  {
    auto c = make_channel<counted>();
    std::latch started(kProducers + 1);
    std::vector<std::thread> threads;
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([tx = c.tx, &log = logs[static_cast<std::size_t>(p)],
                            &done = completed[static_cast<std::size_t>(p)], &started, p]() mutable {
        started.arrive_and_wait();
        for (int i = 0; i < kPerProducer; ++i) {
          const int id = 1 + p * kPerProducer + i;
          auto r = tx.send(counted(id));
          log.finish(id, r);
          done.store(i + 1);
        }
      });
    }
    if (close) {
      for (auto& out : got) {
        threads.emplace_back([rx = c.rx, &out]() mutable {
          for (auto r = rx.recv_blocking(); r.ok(); r = rx.recv_blocking()) out.push_back(r->id());
        });
      }
    }
    started.arrive_and_wait();
    std::this_thread::yield();
    if (close) {
      c.rx.close();
    } else {
      std::vector<int> before(kProducers);
      for (int p = 0; p < kProducers; ++p)
        before[static_cast<std::size_t>(p)] = completed[static_cast<std::size_t>(p)];
      drop(c.rx);  // the last receiver: queued values are destroyed now, later sends hand back
      for (int p = 0; p < kProducers; ++p) {
        for (int i = 0; i < before[static_cast<std::size_t>(p)]; ++i) {
          EXPECT_EQ(finals[static_cast<std::size_t>(1 + p * kPerProducer + i)].load(), 1)
              << "value " << 1 + p * kPerProducer + i << ", accepted before the last receiver went";
        }
      }
    }
    for (auto& t : threads) t.join();
  }
  std::set<int> ok;
  std::set<int> back;
  for (const auto& log : logs) {
    EXPECT_EQ(log.bad, 0);
    ok.insert(log.ok.begin(), log.ok.end());
    back.insert(log.back.begin(), log.back.end());
  }
  EXPECT_EQ(ok.size() + back.size(), static_cast<std::size_t>(kProducers * kPerProducer));
  std::vector<int> all;
  for (const auto& out : got) all.insert(all.end(), out.begin(), out.end());
  const std::set<int> received(all.begin(), all.end());
  EXPECT_EQ(received.size(), all.size()) << "a value was received twice";
  if (close) {
    EXPECT_EQ(received, ok) << "an accepted value was not received, or a refused one was";
  }
  for (int id = 1; id < kIds; ++id) {
    EXPECT_EQ(finals[static_cast<std::size_t>(id)].load(), 1) << "value " << id;
  }
  ::testing::Test::RecordProperty("accepted", static_cast<int>(ok.size()));
}

TEST(MpmcUnboundedThreads, SendsRacingCloseAreReceivedOnceOrHandedBack) {
  sends_on_threads_racing_the_end(true);
}

TEST(MpmcUnboundedThreads, SendsRacingTheLastReceiverAreDestroyedOnceOrHandedBack) {
  sends_on_threads_racing_the_end(false);
}

// ---------------------------------------------------------------------------------------------
// Deterministic races at the waiter core's test points, and inside the move of a value (into the
// channel by a send, before the send counts it; back out of it by a refused send, still counted;
// out of it by a receive, which has claimed it).

TEST(MpmcUnboundedRace, OneValueWakesExactlyOneOfTwoWaitingReceives) {
  one_value_wakes_exactly_one_of_two_waiting_receives<unbounded_kind>();
}

TEST(MpmcUnboundedRace, ASecondValueSentWhileTheFirstWakeUpIsClaimedWakesTheSecondReceive) {
  a_second_value_sent_while_the_first_wake_up_is_claimed_wakes_the_second_receive<unbounded_kind>();
}

TEST(MpmcUnboundedRace, AValueSentWhileASecondReceiveRegistersGoesToTheFirst) {
  a_value_sent_while_a_second_receive_registers_goes_to_the_first<unbounded_kind>();
}

TEST(MpmcUnboundedRace, AValueSentWhileTheOnlyReceiveRegistersCompletesItWithoutSuspending) {
  a_value_sent_while_the_only_receive_registers_completes_it_without_suspending<unbounded_kind>();
}

TEST(MpmcUnboundedCancel, AnAlreadyStoppedTokenCancelsAtOnceAndTakesNothing) {
  const count_scope counts;
  auto c = make_channel<counted>();
  asyncband::stop_source stopped;
  stopped.request_stop();
  receives_with_a_stopped_token_take_nothing<unbounded_kind>(c, stopped.get_token());
}

TEST(MpmcUnboundedRace, AReceiveWokenForAValueThenStoppedPassesItToTheNextWaitingReceive) {
  a_receive_woken_for_a_value_then_stopped_passes_it_to_the_next_waiting_receive<unbounded_kind>();
}

TEST(MpmcUnboundedRace, AValueSentWhileAStopHoldsTheFirstReceiveClaimedGoesToTheSecond) {
  a_value_sent_while_a_stop_holds_the_first_receive_claimed_goes_to_the_second<unbounded_kind>();
}

TEST(MpmcUnboundedRace, AStopWhileAReceiveRegistersCancelsItAndTheValueStays) {
  a_stop_while_a_receive_registers_cancels_it_and_the_value_stays<unbounded_kind>();
}

TEST(MpmcUnboundedDestroy, DestroyingASuspendedReceiveTakesNothing) {
  destroying_a_suspended_receive_takes_nothing<unbounded_kind>();
}

TEST(MpmcUnboundedDestroy, AReceiveWokenForAValueThenDestroyedPassesItOn) {
  a_receive_woken_for_a_value_then_destroyed_passes_it_on<unbounded_kind>();
}

/// How a race test ends the channel: closed by its sender or by a receiver, or its last sender
/// goes.
enum class ending { sender_closes, receiver_closes, last_sender_goes };
constexpr ending every_ending[] = {ending::sender_closes, ending::receiver_closes, ending::last_sender_goes};

template <class T>
void end_channel(ending how, fixture<T>& f) {
  switch (how) {
    case ending::sender_closes:
      f.c.tx.close();
      break;
    case ending::receiver_closes:
      f.c.rx.close();
      break;
    case ending::last_sender_goes:
      drop(f.c.tx);
      break;
  }
}

// Close (by either half) lands while a send constructs its value, before the send counts it,
// with three receives waiting: nothing was pending, so they end closed at once; the send, seeing
// the channel closed once it counts itself, hands its value back. Nothing is received.
TEST(MpmcUnboundedRace, CloseWhileASendConstructsItsValueHandsItBackAndEndsTheWaitingReceives) {
  for (const bool by_receiver : {false, true}) {
    SCOPED_TRACE(by_receiver);
    const count_scope counts;
    fixture<counted> f;
    mpmc::unbounded_sender<counted> other = f.c.tx;
    auto& a = f.recv(1, plain);
    auto& b = f.recv(2, stoppable);
    auto& c = f.recv(3, plain);
    counted::at_move(1, [&f, &other, by_receiver] {
      if (by_receiver) {
        f.copies.back().close();
      } else {
        other.close();
      }
      EXPECT_TRUE(f.c.rx.is_closed());
      EXPECT_EQ(f.s.ready_count(), 3U) << "nothing is pending: the receives end now";
      auto refused = other.send(counted(2));
      EXPECT_TRUE(refused.closed());
    });
    auto r = f.c.tx.send(counted(1));
    ASSERT_TRUE(r.closed());
    EXPECT_EQ(r.value().id(), 1);
    f.s.run();
    expect_ended(a, wait_status::closed);
    expect_ended(b, wait_status::closed);
    expect_ended(c, wait_status::closed);
    EXPECT_EQ(f.c.rx.len(), 0U);
    EXPECT_TRUE(f.c.rx.try_recv().closed());
  }
}

// A value is queued when close lands while a send constructs its value (so close ends nothing).
// The send then counts itself, finds the channel closed and moves its value back out to hand it
// back; meanwhile the queued value is received, and receives come. They cannot tell that the
// counted send will not deliver, so they may wait; then the send's withdrawal, the last value to
// leave, must end them closed. No value is there for them at any point.
TEST(MpmcUnboundedRace, ReceivesWhileARefusedSendIsStillCountedEndClosedAtTheLatestByItsWithdrawal) {
  for (const ending how : {ending::sender_closes, ending::receiver_closes}) {
    SCOPED_TRACE(static_cast<int>(how));
    const count_scope counts;
    fixture<counted> f(1);  // value 100
    mpmc::unbounded_receiver<counted> taker = f.c.rx;
    counted::at_move(1, [&] {  // the move into the message: not counted yet
      end_channel(how, f);
      counted::at_move(1, [&] {  // the hand-back: counted, not withdrawn yet
        EXPECT_EQ(take(taker), 100);
        f.recv(1, plain);
        f.recv(2, stoppable);
        EXPECT_FALSE(f.c.rx.try_recv().ok());
      });
    });
    {
      auto r = f.c.tx.send(counted(1));
      ASSERT_TRUE(r.closed());
      EXPECT_EQ(r.value().id(), 1);
    }
    f.s.run();
    expect_ended(f.recvs[0], wait_status::closed);
    expect_ended(f.recvs[1], wait_status::closed);
    EXPECT_EQ(f.c.rx.len(), 0U);
    EXPECT_TRUE(f.c.rx.try_recv().closed());
  }
}

// The channel ends (close by either half, or the last sender) while a receive moves the last
// value out (it has claimed it; the value is still pending): receives that come then wait, and
// end closed only once the value is out.
TEST(MpmcUnboundedRace, TheEndWhileAReceiveMovesTheLastValueOutEndsTheOthersOnlyOnceItIsOut) {
  for (const ending how : every_ending) {
    SCOPED_TRACE(static_cast<int>(how));
    const count_scope counts;
    fixture<counted> f(1);  // value 100
    mpmc::unbounded_receiver<counted> taker = f.c.rx;
    counted::at_move(1, [&] {  // the receive's move of 100 out of the channel
      end_channel(how, f);
      EXPECT_TRUE(f.c.rx.is_closed());
      auto& a = f.recv(1, plain);
      auto& b = f.recv(2, stoppable);
      expect_waiting(a);
      expect_waiting(b);
      EXPECT_TRUE(f.c.rx.try_recv().empty()) << "not disconnected while a value is being received";
    });
    EXPECT_EQ(take(taker), 100);
    EXPECT_EQ(f.s.ready_count(), 2U);
    f.s.run();
    expect_ended(f.recvs[0], wait_status::closed);
    expect_ended(f.recvs[1], wait_status::closed);
    EXPECT_TRUE(taker.try_recv().closed());
  }
}

TEST(MpmcUnboundedRace, CloseWhileAReceiveIsWokenForTheLastValue) {
  close_while_a_receive_is_woken_for_the_last_value<unbounded_kind>();
}

TEST(MpmcUnboundedRace, CloseWhileAReceiveRegisters) {
  the_end_while_a_receive_registers<unbounded_kind>([](auto& tx) { tx.close(); });
}

TEST(MpmcUnboundedRace, TheLastSenderGoingLetsReceivesDrainThenEndsThemClosed) {
  the_last_sender_going_lets_receives_drain_then_ends_them_closed<unbounded_kind>();
}

TEST(MpmcUnboundedRace, ValuesQueuedWhenTheLastSenderGoesAreStillReceivedByAnyCopy) {
  values_queued_when_the_last_sender_goes_are_still_received_by_any_copy<unbounded_kind>();
}

TEST(MpmcUnboundedRace, TheLastSenderGoingWhileAReceiveRegistersEndsItClosed) {
  the_end_while_a_receive_registers<unbounded_kind>([](auto& tx) { drop(tx); });
}

// The last receiver goes (its copies one after the other): the values nobody received are
// destroyed then, once, a parked one (whose receive threw) included; later sends hand their
// value back.
TEST(MpmcUnboundedRace, TheLastReceiverGoingDestroysTheQueuedValuesOnceAndLaterSendsHandTheirValueBack) {
  const count_scope counts;
  auto c = make_channel<counted>();
  mpmc::unbounded_receiver<counted> copy = c.rx;
  EXPECT_TRUE(c.tx.send(counted(1, 2)).ok());  // its receive's move throws: parked
  put(c.tx, 2);
  put(c.tx, 3);
  EXPECT_THROW((void)copy.try_recv(), payload_error);
  drop(c.rx);  // not the last receiver
  EXPECT_FALSE(c.tx.is_closed());
  EXPECT_EQ(counts.values(), 3);
  drop(copy);  // the last one
  EXPECT_EQ(counts.values(), 0) << "the values received by nobody are destroyed now";
  EXPECT_TRUE(c.tx.is_closed());
  EXPECT_EQ(c.tx.receiver_count(), 0U);
  auto back = c.tx.send(counted(4));
  EXPECT_TRUE(back.closed());
  EXPECT_EQ(back.value().id(), 4);
}

// The last receiver goes while a send constructs its value (before the send counts it): the
// values queued are destroyed then, and the send hands its value back.
TEST(MpmcUnboundedRace, TheLastReceiverGoingWhileASendConstructsItsValueHandsItBack) {
  const count_scope counts;
  auto c = make_channel<counted>();
  put(c.tx, 1);
  put(c.tx, 2);
  counted::at_move(1, [&] {
    drop(c.rx);
    EXPECT_EQ(counts.values(), 1) << "1 and 2 are destroyed; 3 is being moved";
  });
  auto r = c.tx.send(counted(3));
  ASSERT_TRUE(r.closed());
  EXPECT_EQ(r.value().id(), 3);
  EXPECT_EQ(counts.values(), 1);  // only the value handed back
}

// A value holding the last sender is received by nobody: the last receiver destroys it, and with
// it the last sender, inside its own departure. Everything is destroyed once.
struct carrier {
  int id = 0;
  std::optional<mpmc::unbounded_sender<carrier>> tx;
};

TEST(MpmcUnboundedRace, AQueuedValueHoldingTheLastSenderIsDestroyedWhenTheLastReceiverGoes) {
  auto c = make_channel<carrier>();
  EXPECT_TRUE(c.tx.send(carrier{1, c.tx}).ok());
  drop(c.tx);
  EXPECT_EQ(c.rx.sender_count(), 1U);  // the one in the value
  EXPECT_FALSE(c.rx.is_closed());
  drop(c.rx);  // ASan: nothing is touched after the channel goes
}

// ---------------------------------------------------------------------------------------------
// when_any: a receive that loses takes nothing

TEST(MpmcUnboundedWhenAny, AReceiveThatLosesAtOnceTakesNothing) {
  a_receive_that_loses_at_once_takes_nothing<unbounded_kind>();
}

TEST(MpmcUnboundedWhenAny, AReceiveThatLosesWhileQueuedTakesNothingAndDoesNotHoldUpOthers) {
  a_receive_that_loses_while_queued_takes_nothing_and_does_not_hold_up_others<unbounded_kind>();
}

TEST(MpmcUnboundedWhenAny, AReceiveCompletingDuringItsPublicationAfterTheOtherBranchWonPassesItOn) {
  a_receive_completing_during_its_publication_after_the_other_branch_won_passes_it_on<unbounded_kind>();
}

TEST(MpmcUnboundedWhenAny, TwoReceivesOfTwoChannels) {
  two_receives_of_two_channels<unbounded_kind>();
}

TEST(MpmcUnboundedWhenAny, TwoReadyReceivesTakeOnlyTheFirstValue) {
  two_ready_receives_take_only_the_first_value<unbounded_kind>();
}

// Two receives of one channel (two copies of its receiver) in one when_any, both queued: the
// first value goes to the first; a second value sent while that wake-up is claimed is granted
// to the second branch, which lost: it passes it on, so the value stays for the next receive.
TEST(MpmcUnboundedWhenAny, TwoReceivesOfOneChannelInOneWhenAnyTakeOneValue) {
  for (const bool second_value : {false, true}) {
    SCOPED_TRACE(second_value);
    fixture<> f;
    mpmc::unbounded_receiver<int> copy = f.c.rx;
    std::optional<std::size_t> index;
    std::optional<int> value;
    f.s.spawn([](mpmc::unbounded_receiver<int>& a, mpmc::unbounded_receiver<int>& b,
                 std::optional<std::size_t>& idx, std::optional<int>& v) -> task<void> {
      auto r = co_await asyncband::when_any(a.recv(), b.recv());
      idx = r.index();
      v = r.index() == 0 ? *r.get<0>() : *r.get<1>();
    }(f.c.rx, copy, index, value));
    f.s.run();
    EXPECT_FALSE(index.has_value());
    if (second_value) f.s.at(test_point::claimed_for_wake, [&f] { put(f.c.tx, 2); });
    put(f.c.tx, 1);
    f.s.run();
    EXPECT_EQ(index, 0U);
    EXPECT_EQ(value, 1);
    if (second_value) {
      EXPECT_EQ(take(copy), 2);
    }
    EXPECT_TRUE(f.c.rx.try_recv().empty());
  }
}

// ---------------------------------------------------------------------------------------------
// Payloads whose move constructor throws

// The move into the channel throws: the send propagates the exception and nothing is sent or
// counted; waiting receives sleep through it and get the next value. On a closed channel, the
// move of the value handed back throws: it propagates, and the channel stays drained.
TEST(MpmcUnboundedThrowing, AThrowingMoveInASendSendsNothingAndLosesNothing) {
  const count_scope counts;
  fixture<counted> f;
  auto& a = f.recv(1, plain);
  auto& b = f.recv(2, stoppable);
  EXPECT_THROW((void)f.c.tx.send(counted(7, 1)), payload_error);
  EXPECT_EQ(counts.values(), 0);
  EXPECT_EQ(f.c.rx.len(), 0U);
  EXPECT_EQ(f.s.ready_count(), 0U);
  put(f.c.tx, 10);
  f.s.run();
  expect_got(a, 10);
  expect_waiting(b);
  f.c.rx.close();
  f.s.run();
  expect_ended(b, wait_status::closed);
  EXPECT_THROW((void)f.c.tx.send(counted(8, 1)), payload_error);
  EXPECT_EQ(f.c.rx.len(), 0U);
  EXPECT_TRUE(f.c.rx.try_recv().closed());
}

// Close lands while a send constructs its value, and the move of the value back out (to hand it
// back) throws: the exception propagates, the value is destroyed, and the send's count is
// withdrawn all the same, so the receives waiting end closed.
TEST(MpmcUnboundedThrowing, AThrowingHandBackAfterACloseInFlightLeavesNothingCounted) {
  const count_scope counts;
  fixture<counted> f;
  auto& a = f.recv(1, plain);
  counted::at_move(1, [&f] {
    f.c.rx.close();
    counted::at_move(1, [&f] { f.recv(2, stoppable); });  // the hand-back: counted, waits
  });
  EXPECT_THROW((void)f.c.tx.send(counted(1, 2)), payload_error);
  EXPECT_EQ(counts.values(), 0);
  EXPECT_EQ(f.c.rx.len(), 0U);
  f.s.run();
  expect_ended(a, wait_status::closed);
  expect_ended(f.recvs[1], wait_status::closed);
  EXPECT_TRUE(f.c.rx.try_recv().closed());
}

TEST(MpmcUnboundedThrowing, AThrowingMoveInRecvLeavesTheValueForTheNextReceiveBeforeNewerOnes) {
  a_throwing_move_in_recv_leaves_the_value_for_the_next_receive_before_newer_ones<unbounded_kind>();
}

TEST(MpmcUnboundedThrowing, AReceiveWhoseMoveThrowsAfterAnotherOvertookLeavesTheValueForTheNextOne) {
  a_receive_whose_move_throws_after_another_overtook_leaves_the_value_for_the_next_one<unbounded_kind>();
}

// Two receives throw, one inside the other's move (each had claimed its own value): both values
// are parked, and both go to the next receives before the newer value.
TEST(MpmcUnboundedThrowing, ParkedValuesGoToTheNextReceivesBeforeNewerOnes) {
  const count_scope counts;
  auto c = make_channel<counted>();
  mpmc::unbounded_receiver<counted> other = c.rx;
  EXPECT_TRUE(c.tx.send(counted(1, 2)).ok());
  EXPECT_TRUE(c.tx.send(counted(2, 2)).ok());
  put(c.tx, 3);
  counted::at_move(1, [&other] { EXPECT_THROW((void)other.try_recv(), payload_error); });
  EXPECT_THROW((void)c.rx.try_recv(), payload_error);
  EXPECT_EQ(c.rx.len(), 3U);
  EXPECT_EQ(counts.values(), 3);
  const int first = take(other);
  const int second = take(c.rx);
  EXPECT_EQ((std::set<int>{first, second}), (std::set<int>{1, 2}));
  EXPECT_EQ(take(other), 3);
  EXPECT_TRUE(c.rx.try_recv().empty());
}

// A receive woken for a value (two wait) throws as it moves the value out: the value is parked,
// and its unit goes on to the other waiting receive, which gets it.
TEST(MpmcUnboundedThrowing, AWokenReceiveWhoseMoveThrowsLeavesTheValueToTheNextWaitingReceive) {
  const count_scope counts;
  fixture<counted> f;
  mpmc::unbounded_receiver<counted> rx_a = f.c.rx;
  catching_probe a;
  auto ta = receive_catching(rx_a, a);
  start_on(f.s, ta);
  f.s.run();
  auto& b = f.recv(2, stoppable);
  EXPECT_TRUE(f.c.tx.send(counted(1, 2)).ok());
  EXPECT_EQ(f.s.ready_count(), 1U) << "one value wakes one receive";
  f.s.run();
  EXPECT_TRUE(a.threw);
  EXPECT_EQ(a.resumed, 1);
  expect_got(b, 1);
  EXPECT_TRUE(f.c.rx.try_recv().empty());
}

/// How the fuse scenarios (support/fuse_payload.hpp) use the channel: a receive that threw
/// leaves its value counted by len().
struct mpmc_unbounded_fuse_channel {
  static auto make(std::size_t /*capacity*/) { return mpmc::unbounded<fuse_payload>(); }
  static bool send(mpmc::unbounded_sender<fuse_payload>& tx, int v) { return tx.send(fuse_payload(v)).ok(); }
  static void expect_value_held(mpmc::unbounded_sender<fuse_payload>& /*unused*/,
                                mpmc::unbounded_receiver<fuse_payload>& rx) {
    EXPECT_GE(rx.len(), 1U);
  }
  static void expect_drained(mpmc::unbounded_sender<fuse_payload>& /*unused*/,
                             mpmc::unbounded_receiver<fuse_payload>& rx) {
    EXPECT_EQ(rx.len(), 0U);
  }
};

TEST(MpmcUnboundedThrowing, EveryReceiveFormMovesOnceAndTheNthMoveThrowingLosesNothing) {
  every_receive_form_with_the_nth_move_throwing<mpmc_unbounded_fuse_channel>();
}

TEST(MpmcUnboundedThrowing, AWaitingReceiveWhoseMoveThrowsLeavesTheValue) {
  awaiting_receive_whose_move_throws_leaves_the_value<mpmc_unbounded_fuse_channel>();
}

// ---------------------------------------------------------------------------------------------
// Blocking twins

TEST(MpmcUnboundedBlocking, RecvBlockingOfTwoThreadsIsWokenBySendsFromAnotherThread) {
  recv_blocking_of_two_threads_is_woken_by_sends_from_another_thread<unbounded_kind>();
}

TEST(MpmcUnboundedBlocking, RecvBlockingWithAStopTokenIsCancelledFromAnotherThreadAndTakesNothing) {
  recv_blocking_with_a_stop_token_is_cancelled_from_another_thread_and_takes_nothing<unbounded_kind>();
}

TEST(MpmcUnboundedBlocking, RecvTimeoutTimesOutAndTheValueIsReceivedLaterByAnotherCopy) {
  recv_timeout_times_out_and_the_value_is_received_later_by_another_copy<unbounded_kind>();
}

TEST(MpmcUnboundedBlocking, RecvTimeoutIsWokenByASendFromAnotherThread) {
  recv_timeout_is_woken_by_a_send_from_another_thread<unbounded_kind>();
}

TEST(MpmcUnboundedBlocking, ABlockedReceiveIsEndedClosedByTheLastSenderGoingOnAnotherThread) {
  a_blocked_receive_is_ended_closed_by_the_last_sender_going_on_another_thread<unbounded_kind>();
}

// Two threads block in a receive, the first with a stop token: a stop request from a third thread
// cancels it (it takes nothing), and the value sent then goes to the other.
TEST(MpmcUnboundedBlocking, AStoppedBlockedReceiveTakesNothingAndAnotherThreadsReceiveGetsTheValue) {
  auto c = make_channel<int>();
  asyncband::stop_source stop;
  std::optional<wait_status> stopped_status;
  std::optional<int> got;
  std::latch first_queued(1);
  std::latch second_queued(1);
  std::thread first([&first_queued, &stopped_status, token = stop.get_token(), rx = c.rx]() mutable {
    const thread_hook hook(test_point::before_arm, [&first_queued] { first_queued.count_down(); });
    stopped_status = rx.recv_blocking(std::move(token)).status();
  });
  first_queued.wait();
  std::thread second([&second_queued, &got, rx = c.rx]() mutable {
    const thread_hook hook(test_point::before_arm, [&second_queued] { second_queued.count_down(); });
    auto r = rx.recv_blocking();
    if (r.ok()) got = *r;
  });
  second_queued.wait();
  std::thread([&stop] { stop.request_stop(); }).join();
  first.join();
  EXPECT_EQ(stopped_status, wait_status::cancelled);
  put(c.tx, 5);
  second.join();
  EXPECT_EQ(got, 5);
  EXPECT_TRUE(c.rx.try_recv().empty());
}

// ---------------------------------------------------------------------------------------------
// "Last one out": a waiter resumed inline may destroy the channel's handles (its own, the last
// ones) at once, while the call that woke it is still inside the channel.

TEST(MpmcUnboundedLifetime, AReceiveResumedInlineByThePublicationMayDestroyTheLastReceiver) {
  a_receive_resumed_inline_by_the_publication_may_destroy_the_last_receiver<unbounded_kind>();
}

TEST(MpmcUnboundedLifetime, AReceiveResumedInlineByTheLastSenderMayDestroyTheLastReceiver) {
  a_receive_resumed_inline_by_the_last_sender_may_destroy_the_last_receiver<unbounded_kind>();
}

// A value is queued when close lands while a send constructs its value; the send, refused, is
// still counted when that value is received and a receive starts waiting. Its withdrawal ends
// that receive, inline, and the receive destroys both halves of the channel (the last ones) at
// once, inside the refused send.
TEST(MpmcUnboundedLifetime, AReceiveResumedInlineByARefusedSendsWithdrawalMayDestroyEverything) {
  const count_scope counts;
  auto c = make_channel<counted>();
  put(c.tx, 100);
  auto tx = std::make_unique<mpmc::unbounded_sender<counted>>(std::move(c.tx));
  auto rx = std::make_unique<mpmc::unbounded_receiver<counted>>(std::move(c.rx));
  std::optional<wait_status> status;
  counted::at_move(1, [&] {
    rx->close();
    counted::at_move(1, [&] {  // the hand-back: the send is still counted
      EXPECT_EQ(take(*rx), 100);
      [](std::unique_ptr<mpmc::unbounded_receiver<counted>>& r_owner,
         std::unique_ptr<mpmc::unbounded_sender<counted>>& t_owner,
         std::optional<wait_status>& out) -> bare_coroutine {
        auto r = co_await r_owner->recv();
        out = r.status();
        r_owner.reset();
        t_owner.reset();
      }(rx, tx, status);
      ASSERT_FALSE(status.has_value()) << "it waits while the send is counted (else this tests nothing)";
    });
  });
  auto r = tx->send(counted(1));
  EXPECT_TRUE(r.closed());
  EXPECT_EQ(r.value().id(), 1);
  EXPECT_EQ(status, wait_status::closed);
  EXPECT_EQ(rx, nullptr);
  EXPECT_EQ(tx, nullptr);
}

// The senders' closed() wait (as the bounded channel's, tested there in every form).
TEST(MpmcUnboundedClosed, ClosedWaitsUntilTheChannelIsClosedAndThenSendsHandTheirValueBack) {
  auto c = make_channel<int>();
  bool done = false;
  [](mpmc::unbounded_sender<int>& tx, bool& out) -> bare_coroutine {
    co_await tx.closed();
    out = true;
  }(c.tx, done);
  EXPECT_TRUE(c.tx.send(1).ok());
  EXPECT_FALSE(done);
  c.rx.close();
  EXPECT_TRUE(done);
  EXPECT_TRUE(c.tx.send(2).closed());
  EXPECT_EQ(take(c.rx), 1);
  EXPECT_EQ(c.tx.closed_timeout(std::chrono::milliseconds(0)).status(), wait_status::ok);
}

// The close keeps a reference of its own: a closed() wait it resumes inline may destroy every
// handle, with the channel and the value nobody received (ASan checks the close touches none).
TEST(MpmcUnboundedClosed, AClosedWaitResumedInlineMayDestroyEveryHandleInsideTheClose) {
  const count_scope counts;
  auto c = make_channel<counted>();
  auto tx = std::make_unique<mpmc::unbounded_sender<counted>>(std::move(c.tx));
  auto rx = std::make_unique<mpmc::unbounded_receiver<counted>>(std::move(c.rx));
  ASSERT_TRUE(tx->send(counted(1)).ok());
  bool done = false;
  [](std::unique_ptr<mpmc::unbounded_sender<counted>>& t_owner,
     std::unique_ptr<mpmc::unbounded_receiver<counted>>& r_owner, bool& out) -> bare_coroutine {
    co_await t_owner->closed();
    t_owner.reset();
    r_owner.reset();
    out = true;
  }(tx, rx, done);
  rx->close();
  EXPECT_TRUE(done);
  EXPECT_EQ(tx, nullptr);
  EXPECT_EQ(rx, nullptr);
  EXPECT_EQ(counts.values(), 0);
}

std::vector<lifetime::row> mpmc_unbounded_lifetime_rows() {
  std::vector<lifetime::row> rows;
  add_receive_lifetime_rows<unbounded_kind>(rows, "send");
  return rows;
}

ASYNCBAND_LIFETIME_ROWS(MpmcUnboundedLifetimeRows, mpmc_unbounded_lifetime_rows);

// ---------------------------------------------------------------------------------------------
// Misuse

TEST(MpmcUnboundedMisuse, AwaitingAReceiveAgainThrowsLogicError) {
  awaiting_a_receive_again_throws_logic_error<unbounded_kind>();
}

// ---------------------------------------------------------------------------------------------
// Seeded soak on the test scheduler (support/mpmc_soak.hpp) with the unbounded channel's sends:
// a send, a send through a copy of the sender made for it, a value whose first move out of the
// channel throws or whose move into it throws; a producer yields after each send in some forms
// and before it in others, so that sends and receives interleave.

task<void> soak_send(test_scheduler& s, mpmc::unbounded_sender<counted>& tx, soak_world& /*unused*/,
                     soak_producer& me, int id, int form, bool /*last*/) {
  if (form == 4) co_await yield_to{s};
  if (form == 2 || form == 3) {
    // 3: its move into the channel throws: never accepted. 2: its first receive's move throws
    // (parked for the next receive); on a closed channel, the move handing it back throws.
    try {
      auto r = tx.send(counted(id, form == 3 ? 1 : 2));
      me.finish(id, r);
    } catch (const payload_error&) {
      me.never_accepted(id, true);
    }
  } else if (form == 1) {  // through a copy of the sender, gone right after
    mpmc::unbounded_sender<counted> copy = tx;
    auto r = copy.send(counted(id));
    me.finish(id, r);
  } else {
    auto r = tx.send(counted(id));
    me.finish(id, r);
  }
  if (form != 4) co_await yield_to{s};
}

TEST(MpmcUnboundedStress, SeededSoakOnTheTestSchedulerDeliversOrHandsBackEveryValueExactlyOnce) {
  run_seeded_soak("mpmc unbounded",
                  [](int index, const std::vector<std::atomic<int>>& finals, soak_world& w) {
                    return soak_one_channel<unbounded_kind>(index, finals, w, 5, soak_send);
                  });
}

// ---------------------------------------------------------------------------------------------
// Bounded real-thread stress (support/mpmc_soak.hpp) with the unbounded channel's sends: a send,
// through a copy of the sender, of a value whose first move out of the channel throws or whose
// move into it throws, and a send followed by a yield.

void stress_send_one(mpmc::unbounded_sender<counted>& tx, stop_epoch& /*unused*/, int id, int mode,
                     thread_round_log& log) {
  if (mode == 2 || mode == 3) {  // see soak_produce
    try {
      auto r = tx.send(counted(id, mode == 3 ? 1 : 2));
      log.finish(id, r);
    } catch (const payload_error&) {
      log.never_accepted(id, true);
    }
    return;
  }
  if (mode == 1) {
    mpmc::unbounded_sender<counted> copy = tx;
    auto r = copy.send(counted(id));
    log.finish(id, r);
    return;
  }
  auto r = tx.send(counted(id));
  log.finish(id, r);
  if (mode == 4) std::this_thread::yield();
}

TEST(MpmcUnboundedStress, ThreadsSendReceiveCancelAndCloseDeliverOrHandBackEveryValueExactlyOnce) {
  run_thread_stress("mpmc unbounded",
                    [](int round, const std::vector<std::atomic<int>>& finals, thread_stress_totals& totals) {
                      return stress_round<unbounded_kind>(
                          round, finals, 5, stress_send_one, [](int mode) { return mode == 2; }, totals);
                    });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Batch receives (issue 17): recv_many, try_recv_many and their blocking twins
// (support/recv_many.hpp).

namespace {

using namespace asyncband_test::recv_many_scenarios;

TEST(MpmcUnboundedRecvMany, EveryFormAppendsInOrderUpToTheLimit) {
  every_form_appends_in_order_up_to_the_limit<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, ALimitOfZeroYieldsZeroAtOnce) {
  a_limit_of_zero_yields_zero_at_once<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, AWaitingBatchReceiveTakesTheValuesSentBeforeItRuns) {
  a_waiting_batch_receive_takes_the_values_sent_before_it_runs<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, BatchesDrainAClosedChannelThenEndClosed) {
  batches_drain_a_closed_channel_then_end_closed<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, ACancelledOrDestroyedBatchReceiveTakesNothing) {
  a_cancelled_or_destroyed_batch_receive_takes_nothing<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, ABatchReceiveWokenThenStoppedPassesItsValueOn) {
  EXPECT_EQ(a_batch_receive_woken_then_stopped<unbounded_kind>(), wait_status::cancelled);
}
TEST(MpmcUnboundedRecvMany, BatchAndSingleReceivesKeepTheirFifoOrder) {
  batch_receives_keep_the_fifo_order_of_the_receives<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, ABatchReceiveThatLosesAWhenAnyTakesNothing) {
  a_batch_receive_that_loses_a_when_any_takes_nothing<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, AThrowingMoveKeepsTheValuesAppendedAndLeavesTheRest) {
  a_throwing_move_keeps_the_values_appended_and_leaves_the_rest<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, ABufferThatCannotGrowTakesNothing) {
  a_buffer_that_cannot_grow_takes_nothing<unbounded_kind>();
}
TEST(MpmcUnboundedRecvMany, ProducerAndConsumerThreadsExchangeEveryValueOnceInBatches) {
  threads_receive_every_value_once_in_batches<unbounded_kind>(2, 16);
}

// A receive on an unbounded channel spins with the pause hint, never yielding: its senders never
// block, so one given the receiver's core would keep it for a whole time slice.
TEST(MpmcUnboundedSpin, ABlockingReceiveDoesNotYieldWhileSpinning) {
  using state = asyncband::mpmc::detail::unbounded_state<int>;
  state s;
  asyncband::mpmc::detail::recv_wait<state> receive(&s);
  EXPECT_FALSE(asyncband::detail::spins_by_yielding(receive));
}

}  // namespace
