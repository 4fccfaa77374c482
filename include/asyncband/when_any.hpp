// SPDX-License-Identifier: Apache-2.0
// asyncband/when_any.hpp: waiting for the first of several asyncband operations, losing nothing.
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <array>
#include <coroutine>
#include <cstddef>
#include <memory>
#include <new>
#include <optional>
#include <ranges>
#include <span>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "detail/any_engine.hpp"
#include "detail/wait_operation.hpp"
#include "scheduler.hpp"
#include "stop_token.hpp"

namespace asyncband {
namespace detail {

/// An awaiter when_any can drive: select_access<A> is specialized for it.
template <class A>
concept selectable = requires { typename select_access<std::remove_cvref_t<A>>::outcome; };

template <class A>
using select_access_of = select_access<std::remove_cvref_t<A>>;

template <class A>
using branch_outcome_t = stored_outcome_t<typename select_access_of<A>::outcome>;

/// Settles a branch into its stored outcome (a wait that yields nothing stores std::monostate).
template <class A>
branch_outcome_t<A> win_branch(A& op) {
  if constexpr (std::is_void_v<typename select_access_of<A>::outcome>) {
    select_access_of<A>::win(op);
    return {};
  } else {
    return select_access_of<A>::win(op);
  }
}

}  // namespace detail

/// What `co_await when_any(op0, op1, ...)` yields: which operation won, its outcome, and what the
/// others handed back.
///
/// - index(): the winning operation, or npos if the when_any's own stop token ended it first
///   (cancelled()).
/// - get<I>(): the outcome of operation I: for the winner, exactly what `co_await op_I` would
///   have yielded; for a loser, its cancelled outcome when its type can say so (result<T>,
///   send_result<T>: a losing send's value is in it), else nothing (has<I>() is false).
template <class... Outcomes>
class [[nodiscard]] any_result {
 public:
  /// index() when no operation won (the when_any's stop token did).
  static constexpr std::size_t npos = detail::no_branch;

  /// The winning operation's position in the argument list, or npos.
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  /// The when_any's own stop token ended it: no operation won, none took anything.
  [[nodiscard]] bool cancelled() const noexcept { return index_ == npos; }

  /// Whether operation I has an outcome here (the winner always has, unless it yields nothing).
  template <std::size_t I>
  [[nodiscard]] bool has() const noexcept {
    return std::get<I>(outcomes_).has_value();
  }
  /// The outcome of operation I. Throws std::bad_optional_access if has<I>() is false.
  template <std::size_t I>
  [[nodiscard]] auto& get() & {
    return std::get<I>(outcomes_).value();
  }
  /// As above, moved out.
  template <std::size_t I>
  [[nodiscard]] auto&& get() && {
    return std::move(std::get<I>(outcomes_).value());
  }

 private:
  template <class... Ops>
  friend class any_awaiter;

  explicit any_result(std::size_t index) noexcept : index_(index) {}

  std::size_t index_;
  std::tuple<std::optional<Outcomes>...> outcomes_;
};

/// The awaiter of when_any(op...): lives in the awaiting frame and refers to the operations,
/// which must live until it completes (temporaries of the same co_await expression do).
template <class... Ops>
class [[nodiscard("co_await it: nothing waits until it is awaited")]] any_awaiter {
  static constexpr std::size_t count = sizeof...(Ops);

 public:
  /// The result type.
  using result_type = any_result<detail::branch_outcome_t<Ops>...>;

  /// Built by when_any.
  any_awaiter(asyncband::stop_token stop, Ops&... ops) noexcept
      : ops_(ops...), stop_(std::move(stop)), engine_(table, this, branches_.data(), count) {}
  any_awaiter(const any_awaiter&) = delete;
  any_awaiter& operator=(const any_awaiter&) = delete;
  /// A coroutine destroyed while suspended here cancels every operation and passes on what any
  /// of them had been granted.
  ~any_awaiter() {
    if (suspended_ && !finished_) [[unlikely]]
      abandon();
  }

  /// Polls the operations in order, without publishing any: the first ready one wins. Throws
  /// std::logic_error if an operation was awaited (or selected) before.
  bool await_ready() {
    std::apply([](auto&... op) { (check_fresh(op), ...); }, ops_);
    if (stop_.stop_requested()) return true;  // cancelled: no operation is touched
    polled_ = poll(std::make_index_sequence<count>{});
    return polled_ != detail::no_branch;
  }

  /// Publishes the operations in order until one wins; the others are then cancelled.
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    suspended_ = true;
    return engine_.start(detail::resume_target(h, scheduler_of(h)), stop_);
  }

  /// The winner's outcome, and the losers' handed-back values; the losers' grants are passed on.
  result_type await_resume() {
    finished_ = true;
    engine_.disarm_stop();
    const std::size_t winner = suspended_ ? engine_.winner() : polled_;
    const std::size_t started = suspended_ ? engine_.published() : 0;
    result_type r(winner);
    settle(r, winner, started, std::make_index_sequence<count>{});
    return r;
  }

 private:
  template <class Op>
  static void check_fresh(const Op& op) {
    if (detail::select_access_of<Op>::spent(op)) detail::throw_awaited_again();
  }

  template <std::size_t... I>
  std::size_t poll(std::index_sequence<I...> /*unused*/) noexcept {
    std::size_t ready = detail::no_branch;
    // In order, stopping at the first ready one: the later ones are not touched.
    static_cast<void>(
        ((detail::select_access_of<Ops>::poll(std::get<I>(ops_)) ? (ready = I, true) : false) || ...));
    return ready;
  }

  /// The losers' grants go back first (noexcept), then the winner's outcome is built, then what
  /// the losers hand back: an exception from a user type on the way leaves no grant behind.
  template <std::size_t... I>
  void settle(result_type& r, std::size_t winner, std::size_t started, std::index_sequence<I...> /*unused*/) {
    pass_on_losers(winner, started, std::index_sequence<I...>{});
    ((I == winner ? static_cast<void>(std::get<I>(r.outcomes_).emplace(detail::win_branch(std::get<I>(ops_))))
                  : static_cast<void>(0)),
     ...);
    ((I != winner ? static_cast<void>(std::get<I>(r.outcomes_) =
                                          detail::select_access_of<Ops>::handed_back(std::get<I>(ops_)))
                  : static_cast<void>(0)),
     ...);
  }
  template <std::size_t... I>
  void pass_on_losers(std::size_t winner, std::size_t started,
                      std::index_sequence<I...> /*unused*/) noexcept {
    ((I != winner ? detail::select_access_of<Ops>::pass_on(std::get<I>(ops_), I < started) : void()), ...);
  }

  void abandon() noexcept {
    engine_.abandon();
    // Nothing is delivered: a granted permit, lock or unit passes on; values stay where they are.
    pass_on_losers(detail::no_branch, engine_.published(), std::make_index_sequence<count>{});
  }

  // The branch table: index -> the operation of that position.
  template <std::size_t... I>
  static bool publish_at(void* self, std::size_t i, detail::resume_target t, detail::commit_point& c,
                         std::index_sequence<I...> /*unused*/) noexcept {
    auto& ops = static_cast<any_awaiter*>(self)->ops_;
    bool pending = false;
    static_cast<void>((
        (i == I ? (pending = detail::select_access_of<Ops>::publish(std::get<I>(ops), t, c), true) : false) ||
        ...));
    return pending;
  }
  template <std::size_t... I>
  static detail::waiter& node_at(void* self, std::size_t i, std::index_sequence<I...> /*unused*/) noexcept {
    auto& ops = static_cast<any_awaiter*>(self)->ops_;
    detail::waiter* node = nullptr;
    static_cast<void>(
        ((i == I ? (node = &detail::select_access_of<Ops>::node(std::get<I>(ops)), true) : false) || ...));
    return *node;
  }
  template <std::size_t... I>
  static void cancel_at(void* self, std::size_t i, std::index_sequence<I...> /*unused*/) noexcept {
    auto& ops = static_cast<any_awaiter*>(self)->ops_;
    static_cast<void>(
        ((i == I ? (detail::select_access_of<Ops>::cancel(std::get<I>(ops)), true) : false) || ...));
  }
  static constexpr detail::any_branch_table table{
      [](void* self, std::size_t i, detail::resume_target t, detail::commit_point& c) noexcept {
        return publish_at(self, i, t, c, std::make_index_sequence<count>{});
      },
      [](void* self, std::size_t i) noexcept -> detail::waiter& {
        return node_at(self, i, std::make_index_sequence<count>{});
      },
      [](void* self, std::size_t i) noexcept { cancel_at(self, i, std::make_index_sequence<count>{}); },
  };

  std::tuple<Ops&...> ops_;
  asyncband::stop_token stop_;
  std::array<detail::any_branch, count> branches_{};
  detail::any_engine_base engine_;
  std::size_t polled_ = detail::no_branch;
  bool suspended_ = false;
  bool finished_ = false;
};

/// Waits for the first of several asyncband operations and cancels the others, losing nothing.
///
/// `auto r = co_await asyncband::when_any(rx1.recv(), rx2.recv(), mtx.lock());`
///
/// Contract
/// - Exactly one operation wins: the first to be committed at the when_any's one atomic commit
///   point. A primitive commits a waiting operation before it grants it anything (a permit, a
///   lock, a capacity unit, an auto-reset permit), under its own lock; an operation that is
///   granted nothing (a broadcast, a value that stays in its channel until taken, a close)
///   commits when it completes. Two completions at the same instant on two threads: one wins.
/// - Every other operation is cancelled and gives back what it had: a primitive never grants a
///   losing operation anything (its waker serves the next waiter instead); a value a losing
///   receive was woken for stays in the channel, at its head; a losing send's value comes back
///   in the result (get<I>(), send_status::cancelled); an operation that completed at once
///   during publication but lost passes its grant on as a cancelled wait does.
/// - Order: the operations are first polled in argument order without waiting (the first ready
///   one wins and the later ones are not touched), then published in order.
/// - The awaiting coroutine resumes once every operation is settled (nothing of it is left in a
///   primitive), on its own scheduler when its task type has one, else inline on the thread that
///   settled the last operation.
/// - `when_any(stop, ops...)`: a stop request that comes first ends it with no winner
///   (cancelled()), every operation losing; a stop already requested touches nothing.
/// - An operation with its own stop token that ends cancelled has completed: it wins, with its
///   cancelled outcome. A barrier's or phaser's arrival is not a grant: it is kept.
/// - The operations are awaiters returned by the primitives (any wait, acquire, lock, recv or
///   send); each is used once, and must outlive the co_await (temporaries of the same
///   expression do). Destroying the coroutine while it waits here cancels everything and passes
///   on what any operation had been granted.
template <class... Ops>
  requires(sizeof...(Ops) > 0 && (detail::selectable<Ops> && ...))
any_awaiter<std::remove_reference_t<Ops>...> when_any(Ops&&... ops) {
  return any_awaiter<std::remove_reference_t<Ops>...>(asyncband::stop_token{}, ops...);
}

/// As above; a stop request on `stop` that comes before any operation completes ends it with no
/// winner, every operation cancelled.
template <class... Ops>
  requires(sizeof...(Ops) > 0 && (detail::selectable<Ops> && ...))
any_awaiter<std::remove_reference_t<Ops>...> when_any(asyncband::stop_token stop, Ops&&... ops) {
  return any_awaiter<std::remove_reference_t<Ops>...>(std::move(stop), ops...);
}

/// What a when_any over a range of operations yields (when_any_of, select_loop::next): which
/// operation won, its outcome, and what the others handed back.
template <class Outcome>
class [[nodiscard]] selection {
 public:
  /// index() when no operation won (the stop token did).
  static constexpr std::size_t npos = detail::no_branch;

  /// The winning operation's position in the range, or npos.
  [[nodiscard]] std::size_t index() const noexcept { return index_; }
  /// The stop token ended it: no operation won, none took anything.
  [[nodiscard]] bool cancelled() const noexcept { return index_ == npos; }
  /// How many operations took part.
  [[nodiscard]] std::size_t size() const noexcept { return outcomes_.size(); }

  /// Whether operation i has an outcome here (the winner; a loser whose outcome carries
  /// something back, such as a send's value, or can say cancelled).
  [[nodiscard]] bool has(std::size_t i) const noexcept {
    return i < outcomes_.size() && outcomes_[i].has_value();
  }
  /// The outcome of operation i. Throws std::bad_optional_access if has(i) is false.
  [[nodiscard]] Outcome& get(std::size_t i) { return outcomes_.at(i).value(); }
  /// The winner's outcome. Throws std::bad_optional_access if nothing won or it yields nothing.
  [[nodiscard]] Outcome& get() { return cancelled() ? no_outcome() : get(index_); }

 private:
  template <class, class>
  friend class select_loop;

  [[noreturn]] static Outcome& no_outcome() { throw std::bad_optional_access(); }

  /// For a new round: every outcome empty, the storage kept.
  void reset(std::size_t count) {
    outcomes_.clear();
    outcomes_.resize(count);
    index_ = npos;
  }

  std::size_t index_ = npos;
  std::vector<std::optional<Outcome>> outcomes_;
};

/// A when_any over the operations `make(source)` for every source of a range, repeated: the
/// select-in-a-loop form. Its storage (the operations, their outcomes) is reused from one round
/// to the next, so a loop allocates nothing after its first round, unless the range grows.
///
/// `asyncband::select_loop loop(receivers, [](auto& rx) { return rx.recv(); });`
/// `for (;;) { auto& round = co_await loop.next(); ... round.index() ... round.get() ... }`
///
/// The contract is when_any's: one winner decided at one commit point, the other operations
/// cancelled losing nothing (a value a losing receive was woken for stays at its channel's head,
/// a losing send's value comes back in the selection). next() builds the round's operations
/// when it is awaited; the range must outlive the loop, and may change between rounds (not
/// during one). The selection a round yields is valid until the next round starts.
template <class Range, class Make>
class select_loop {
 public:
  /// The operation built for each source.
  using operation_type = std::invoke_result_t<Make&, std::ranges::range_reference_t<Range>>;
  /// What each operation's outcome is kept as.
  using outcome_type = detail::branch_outcome_t<operation_type>;
  static_assert(detail::selectable<operation_type>, "make(source) must return an asyncband awaiter");

  /// Refers to `sources` (which must outlive the loop) and keeps `make`.
  select_loop(Range& sources, Make make) : sources_(&sources), make_(std::move(make)) {}
  select_loop(const select_loop&) = delete;
  select_loop& operator=(const select_loop&) = delete;
  ~select_loop() = default;

  class round;

  /// One round: `co_await loop.next()` yields selection<outcome_type>& (valid until the next
  /// round). With `stop`: a stop request that comes first ends the round with no winner.
  round next(asyncband::stop_token stop = {}) { return round(*this, std::move(stop)); }

  /// The awaiter of one round; lives in the awaiting frame.
  class [[nodiscard("co_await it: nothing waits until it is awaited")]] round {
   public:
    /// A round of `loop` (next() makes it).
    round(select_loop& loop, asyncband::stop_token stop) noexcept : loop_(&loop), stop_(std::move(stop)) {}
    round(const round&) = delete;
    round& operator=(const round&) = delete;
    /// Destroying the coroutine while it waits cancels every operation, passing on their grants.
    ~round() {
      if (suspended_ && !finished_) [[unlikely]]
        abandon();
      loop_->destroy_operations();
    }

    /// Builds the operations and polls them in order: the first ready one wins.
    bool await_ready() {
      loop_->build_operations();
      engine_.emplace(table, this, loop_->branches_.get(), loop_->count_);
      if (stop_.stop_requested()) return true;
      for (std::size_t i = 0; i < loop_->count_; ++i) {
        if (access::poll(loop_->op(i))) {
          polled_ = i;
          return true;
        }
      }
      return false;
    }
    /// Publishes the operations in order until one wins; the others are then cancelled.
    template <class Promise>
    bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
      suspended_ = true;
      return engine_->start(detail::resume_target(h, scheduler_of(h)), stop_);
    }
    /// The round's selection; the losers' grants are passed on.
    selection<outcome_type>& await_resume() {
      finished_ = true;
      engine_->disarm_stop();
      const std::size_t winner = suspended_ ? engine_->winner() : polled_;
      const std::size_t started = suspended_ ? engine_->published() : 0;
      // As any_awaiter::settle: grants back first, then the winner, then what the losers hand back.
      for (std::size_t i = 0; i < loop_->count_; ++i) {
        if (i != winner) access::pass_on(loop_->op(i), i < started);
      }
      selection<outcome_type>& r = loop_->selection_;
      r.reset(loop_->count_);  // within the capacity reserved when the operations were built
      r.index_ = winner;
      if (winner != detail::no_branch) r.outcomes_[winner].emplace(detail::win_branch(loop_->op(winner)));
      for (std::size_t i = 0; i < loop_->count_; ++i) {
        if (i != winner) r.outcomes_[i] = access::handed_back(loop_->op(i));
      }
      loop_->destroy_operations();
      return r;
    }

   private:
    using access = detail::select_access_of<operation_type>;

    void abandon() noexcept {
      engine_->abandon();
      const std::size_t started = engine_->published();
      for (std::size_t i = 0; i < loop_->count_; ++i) access::pass_on(loop_->op(i), i < started);
    }

    static round& self(void* p) noexcept { return *static_cast<round*>(p); }
    static constexpr detail::any_branch_table table{
        [](void* p, std::size_t i, detail::resume_target t, detail::commit_point& c) noexcept {
          return access::publish(self(p).loop_->op(i), t, c);
        },
        [](void* p, std::size_t i) noexcept -> detail::waiter& { return access::node(self(p).loop_->op(i)); },
        [](void* p, std::size_t i) noexcept { access::cancel(self(p).loop_->op(i)); },
    };

    select_loop* loop_;
    asyncband::stop_token stop_;
    std::optional<detail::any_engine_base> engine_;  // built when the round is awaited
    std::size_t polled_ = detail::no_branch;
    bool suspended_ = false;
    bool finished_ = false;
  };

 private:
  struct alignas(operation_type) op_storage {
    unsigned char bytes[sizeof(operation_type)];
  };

  operation_type& op(std::size_t i) noexcept {
    return *std::launder(reinterpret_cast<operation_type*>(ops_[i].bytes));
  }

  /// Builds one operation per source, in place (make's prvalue is never moved), growing the
  /// storage only if the range grew. If make throws, the ones built are destroyed.
  void build_operations() {
    destroy_operations();
    const auto n = static_cast<std::size_t>(std::ranges::distance(*sources_));
    if (n == 0) throw std::invalid_argument("asyncband::select_loop: no operation to wait for");
    if (n > capacity_) {
      selection_.outcomes_.reserve(n);  // settling a round then allocates nothing
      ops_ = std::make_unique<op_storage[]>(n);
      branches_ = std::make_unique<detail::any_branch[]>(n);
      capacity_ = n;
    }
    for (auto&& source : *sources_) {
      ::new (static_cast<void*>(ops_[count_].bytes)) operation_type(make_(source));
      ++count_;
    }
  }
  void destroy_operations() noexcept {
    while (count_ != 0) op(--count_).~operation_type();
  }

  Range* sources_;
  Make make_;
  std::unique_ptr<op_storage[]> ops_;
  std::unique_ptr<detail::any_branch[]> branches_;
  std::size_t capacity_ = 0;
  std::size_t count_ = 0;  // operations built for the current round
  selection<outcome_type> selection_;
};

/// The awaiter of when_any_of: a select_loop of its own, for one round.
template <class Range, class Make>
class [[nodiscard("co_await it: nothing waits until it is awaited")]] any_of_awaiter {
 public:
  /// Built by when_any_of.
  any_of_awaiter(Range& sources, Make make, asyncband::stop_token stop)
      : loop_(sources, std::move(make)), round_(loop_, std::move(stop)) {}
  any_of_awaiter(const any_of_awaiter&) = delete;
  any_of_awaiter& operator=(const any_of_awaiter&) = delete;
  ~any_of_awaiter() = default;

  /// As select_loop::round.
  bool await_ready() { return round_.await_ready(); }
  /// As select_loop::round.
  template <class Promise>
  bool await_suspend(std::coroutine_handle<Promise> h) noexcept {
    return round_.await_suspend(h);
  }
  /// The selection, owned by the caller.
  selection<typename select_loop<Range, Make>::outcome_type> await_resume() {
    return std::move(round_.await_resume());
  }

 private:
  select_loop<Range, Make> loop_;
  typename select_loop<Range, Make>::round round_;
};

/// Waits for the first of the operations `make(source)`, one per source of `sources` (receive
/// from whichever of N channels is ready), with when_any's contract; yields
/// selection<outcome>. Allocates the operations' storage once; for a select in a loop, use
/// select_loop, which reuses it.
template <class Range, class Make>
any_of_awaiter<Range, Make> when_any_of(Range& sources, Make make, asyncband::stop_token stop = {}) {
  return {sources, std::move(make), std::move(stop)};
}

}  // namespace asyncband
