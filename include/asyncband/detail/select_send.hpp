// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/select_send.hpp: a bounded channel's send awaiter as a when_any branch (the
// MPSC and the broadcast channels' send_awaiter share it).
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

#include "../result.hpp"
#include "wait_operation.hpp"
#include "waiter.hpp"

namespace asyncband::detail {

/// A send as a when_any branch: its capacity wait (`acquire_`, itself selectable) is the branch;
/// a losing send hands its value back in the result (send_status::cancelled), and a unit it was
/// granted goes back. The awaiter befriends this and has `spent()`, `suspended_`, `acquire_`
/// and `value_`.
template <class Awaiter>
struct send_select_access {
  using awaiter = Awaiter;
  using outcome = decltype(std::declval<Awaiter&>().await_resume());
  using acquire = select_access<std::remove_cvref_t<decltype(std::declval<Awaiter&>().acquire_)>>;

  static bool spent(const awaiter& a) noexcept { return a.spent(); }
  static bool poll(awaiter& a) { return a.await_ready(); }
  static bool publish(awaiter& a, resume_target target, commit_point& commit) noexcept {
    a.suspended_ = true;
    return acquire::publish(a.acquire_, target, commit);
  }
  static waiter& node(awaiter& a) noexcept { return acquire::node(a.acquire_); }
  static void cancel(awaiter& a) noexcept { acquire::cancel(a.acquire_); }
  static outcome win(awaiter& a) { return a.await_resume(); }
  static void pass_on(awaiter& a, bool started) noexcept { acquire::pass_on(a.acquire_, started); }
  static std::optional<outcome> handed_back(awaiter& a) {
    return outcome(send_status::cancelled, std::move(a.value_));
  }
};

}  // namespace asyncband::detail
