// SPDX-License-Identifier: Apache-2.0
// tests/support/free_capacity.hpp: the part of the bounded channels' free_capacity() tests
// that MPSC and MPMC share: units held by permits, values, a waiting reserve and a waiting send.
#pragma once

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "channel_probes.hpp"

namespace asyncband_test {

/// On an empty channel of capacity 3: max_capacity() is the bound, and free_capacity() counts
/// the units free now through values sent and received, permits reserved and dropped, a
/// reserve of 2 that sends one value, a reserve of 2 that waits
/// holding the one free unit (`reserve_two()` starts it on the test scheduler and returns its
/// probe), and a send that waits on a full channel (`send(v)`, likewise); `run()` runs the
/// scheduler. Leaves the channel empty.
template <class Tx, class Rx, class ReserveTwo, class Send, class Run>
void expect_free_capacity_through_reserves_and_sends(Tx& tx, Rx& rx, ReserveTwo reserve_two, Send send,
                                                     Run run) {
  EXPECT_EQ(tx.max_capacity(), 3U);
  EXPECT_EQ(tx.capacity(), 3U);
  EXPECT_EQ(rx.max_capacity(), 3U);
  EXPECT_EQ(tx.free_capacity(), 3U);
  EXPECT_TRUE(tx.try_send(1).ok());
  EXPECT_EQ(tx.free_capacity(), 2U);  // a value sent holds its unit
  auto permit = tx.try_reserve();
  ASSERT_TRUE(permit.ok());
  EXPECT_EQ(tx.free_capacity(), 1U);  // and so does a permit
  EXPECT_TRUE(tx.try_send(2).ok());
  EXPECT_EQ(tx.free_capacity(), 0U);  // full: two values and the permit
  EXPECT_EQ(take(rx), 1);
  EXPECT_EQ(tx.free_capacity(), 1U);  // a receive gives its unit back
  drop(*permit);
  EXPECT_EQ(tx.free_capacity(), 2U);  // and so does a permit dropped unused

  auto many = tx.try_reserve(2);
  ASSERT_TRUE(many.ok());
  EXPECT_EQ(tx.free_capacity(), 0U);
  EXPECT_TRUE(many->send(3).ok());  // the unit passes to the value
  EXPECT_EQ(tx.free_capacity(), 0U);
  drop(*many);
  EXPECT_EQ(tx.free_capacity(), 1U);

  auto& r = reserve_two();  // one unit free: it waits, holding it
  expect_waiting(r);
  EXPECT_EQ(rx.len(), 2U);
  EXPECT_EQ(tx.free_capacity(), 0U) << "not full, but the free unit is the waiting reserve's";
  EXPECT_EQ(take(rx), 2);  // completes the reserve
  EXPECT_EQ(tx.free_capacity(), 0U);
  run();
  EXPECT_EQ(r.status, wait_status::ok);
  ASSERT_TRUE(r.permit.has_value());
  EXPECT_EQ(r.permit->size(), 2U);
  r.permit.reset();
  EXPECT_EQ(tx.free_capacity(), 2U);

  EXPECT_TRUE(tx.try_send(4).ok());
  EXPECT_TRUE(tx.try_send(5).ok());
  EXPECT_EQ(tx.free_capacity(), 0U);  // full
  auto& blocked = send(6);
  expect_waiting(blocked);
  EXPECT_EQ(tx.free_capacity(), 0U);
  EXPECT_EQ(take(rx), 3);  // the unit goes to the waiting send
  EXPECT_EQ(tx.free_capacity(), 0U);
  run();
  expect_sent(blocked);
  EXPECT_EQ(take_all(rx), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(tx.free_capacity(), 3U);
}

/// A moved-from sender and receiver report 0 for both; the handles they moved into report the
/// channel's: `fresh` is a new channel of capacity 2 (its tx and rx halves).
template <class Sender, class Receiver, class Channel>
void expect_moved_from_handles_report_no_capacity(Channel fresh) {
  const Sender tx = std::move(fresh.tx);
  const Receiver rx = std::move(fresh.rx);
  // NOLINTBEGIN(bugprone-use-after-move): the moved-from handles are what is tested
  EXPECT_EQ(fresh.tx.max_capacity(), 0U);
  EXPECT_EQ(fresh.tx.free_capacity(), 0U);
  EXPECT_EQ(fresh.rx.max_capacity(), 0U);
  // NOLINTEND(bugprone-use-after-move)
  EXPECT_EQ(tx.max_capacity(), 2U);
  EXPECT_EQ(tx.free_capacity(), 2U);
  EXPECT_EQ(rx.max_capacity(), 2U);
}

}  // namespace asyncband_test
