// SPDX-License-Identifier: Apache-2.0
// asyncband/testing/detail/execution.hpp: one run of an explored body. Its model threads are real
// threads that pass a baton: exactly one of them runs at a time, and at each scheduling point
// (every operation of a model primitive) the strategy picks which one runs next. Also failure
// detection (deadlock, step bound, checks, exceptions) and the teardown of a failed run.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/testing/result.hpp"

namespace asyncband::testing::detail {

/// No thread (a mutex without holder, a decision without choice).
inline constexpr std::size_t no_thread = static_cast<std::size_t>(-1);

/// `u` as a T, without a cast where it is a T already (g++'s -Wuseless-cast): the result of
/// arithmetic on a small integer (promoted to int), a std::uint64_t as a std::size_t.
template <class T, class U>
constexpr T as(U u) noexcept {
  if constexpr (std::is_same_v<T, U>) {
    return u;
  } else {
    return static_cast<T>(u);
  }
}

/// Thrown into a model thread to end a failed run: it unwinds the thread's stack. Deliberately
/// not a std::exception, so that `catch (const std::exception&)` lets it pass; a model thread
/// must not swallow it with `catch (...)` (the explorer notes it when one does).
struct abort_run {};

/// A scheduling decision as a strategy sees it.
struct decision {
  std::size_t current = 0;               ///< the thread at the scheduling point
  bool current_enabled = false;          ///< it can go on (it is not blocked nor finished)
  bool yielding = false;                 ///< it yields: switching away is no preemption
  std::span<const std::size_t> enabled;  ///< the threads that can run, ascending, never empty
  std::size_t step = 0;                  ///< the number of this scheduling point in the run, from 1
};

/// A scheduling strategy for one run: picks the next thread at each decision.
class chooser {
 public:
  chooser() = default;
  chooser(const chooser&) = delete;
  chooser& operator=(const chooser&) = delete;
  virtual ~chooser() = default;
  /// A model thread was created (ids count up from 0, the body's thread).
  virtual void thread_created(std::size_t id) { static_cast<void>(id); }
  /// The thread to run next: one of d.enabled, or no_thread when the strategy cannot follow
  /// this run (a replayed schedule that does not fit it).
  virtual std::size_t choose(const decision& d) = 0;
  /// Weak memory: for how many of its own later operations a relaxed or release store stays in
  /// the storing thread's store buffer, invisible to the others (0: visible at once, always
  /// without weak memory).
  virtual std::size_t store_delay() { return 0; }
};

/// Writes a buffered store's bytes into its atomic object.
using store_fn = void (*)(void* object, const unsigned char* bytes) noexcept;

/// A store in a model thread's store buffer (weak memory), not yet visible to other threads.
struct buffered_store {
  static constexpr std::size_t max_size = 16;   ///< larger values are stored at once
  void* object = nullptr;                       ///< the atomic stored to
  store_fn apply = nullptr;                     ///< writes `bytes` into it
  std::array<unsigned char, max_size> bytes{};  ///< the value
  std::size_t delay = 0;                        ///< its thread's operations until it drains
};

/// A model thread's function, type-erased (std::function would need a copyable callable).
class thread_body {
 public:
  thread_body() = default;
  thread_body(const thread_body&) = delete;
  thread_body& operator=(const thread_body&) = delete;
  virtual ~thread_body() = default;
  /// Runs the function once.
  virtual void run() = 0;
};

/// thread_body for a callable F.
template <class F>
class thread_body_of final : public thread_body {
 public:
  explicit thread_body_of(F f) : f_(std::move(f)) {}
  void run() override { f_(); }

 private:
  F f_;
};

/// A thread_body calling `f()`.
template <class F>
std::unique_ptr<thread_body> make_body(F&& f) {
  return std::make_unique<thread_body_of<std::decay_t<F>>>(std::forward<F>(f));
}

/// One model thread of a run.
struct model_thread {
  /// Where the thread is.
  enum class state : std::uint8_t {
    runnable,   ///< may be chosen (running, or waiting for the baton)
    blocked,    ///< not runnable until another thread wakes it (mutex, join, atomic wait)
    finished,   ///< its function returned or unwound
    abandoned,  ///< parked for good during a failed run's teardown (it could not unwind)
  };

  model_thread(std::size_t n, std::unique_ptr<thread_body> b) : id(n), body(std::move(b)) {}

  std::size_t id;                      ///< 0 for the body's thread, then in creation order
  std::unique_ptr<thread_body> body;   ///< its function; empty once it ran
  state st = state::runnable;          ///< where it is
  const char* waits = nullptr;         ///< blocked: what on ("to lock", "to join")
  const void* waits_on = nullptr;      ///< blocked: the object it waits on (the key of wake())
  std::size_t holder = no_thread;      ///< blocked on a mutex: the thread holding it
  std::uint64_t blocked_order = 0;     ///< blocked: when it blocked (notify_one wakes the first)
  bool fresh = true;                   ///< it has not reached its first operation yet
  bool abort_thrown = false;           ///< abort_run was thrown into it
  std::vector<buffered_store> buffer;  ///< weak memory: its stores not yet visible, oldest first
  std::condition_variable turn;        ///< signalled when it gets the baton
  std::thread real;                    ///< the real thread (joined or detached by the run)
};

/// One executed operation, for the trace of a failure.
struct event {
  std::size_t thread;             ///< who
  const char* op;                 ///< what ("load", "lock", "spawns")
  const void* object;             ///< on what (registered in the run's object names), or null
  std::size_t other = no_thread;  ///< a thread it names (spawns, joins)
  std::string value;              ///< the value an atomic operation left, if printable
};

/// What a run did.
struct run_outcome {
  std::optional<failure> failed;     ///< kind, message and trace; the explorer adds the rest
  std::size_t steps = 0;             ///< scheduling points
  std::vector<std::size_t> choices;  ///< the thread chosen at each decision with a choice
};

class execution;

/// The model thread running on this real thread, and its run; empty on any other thread.
struct context {
  execution* exec = nullptr;     ///< the run
  model_thread* self = nullptr;  ///< the model thread
};

/// This real thread's context: set while it runs a model thread's function.
inline thread_local context current_context{};

/// The run this thread is a model thread of, or null (then model primitives act plainly).
[[nodiscard]] inline execution* current() noexcept {
  return current_context.exec;
}

/// One run of a body under one strategy. Every member but run() is called by the model thread
/// holding the baton; the state is guarded by one mutex, which the baton passing goes through,
/// so whatever a model thread did happens-before what the next one does (no data race for the
/// sanitizers, whatever memory orders the modelled code uses).
///
/// A failure (recorded once: the first) starts the teardown: no model thread executes another
/// operation. The baton goes to each unfinished thread in turn, which either unwinds (abort_run
/// thrown from a scheduling point that may throw) or, at a point that must not throw (atomic
/// operations are noexcept, as std::atomic's are), is abandoned: parked for good, its real
/// thread detached and the run's state kept alive by it (a leak per abandoned thread, in
/// failing runs only). Code that runs while its thread unwinds (destructors) still executes its
/// operations, without switching, within a bound of max_steps.
class execution : public std::enable_shared_from_this<execution> {
  struct private_tag {};

 public:
  /// Use run().
  execution(private_tag /*unused*/, chooser& strategy, std::size_t max_steps)
      : strategy_(&strategy), max_steps_(max_steps) {}

  /// Runs `body` as model thread 0 under `strategy` until every model thread finished (or was
  /// abandoned in a failed run's teardown).
  static run_outcome run(chooser& strategy, std::size_t max_steps, std::unique_ptr<thread_body> body) {
    auto exec = std::make_shared<execution>(private_tag{}, strategy, max_steps);
    return exec->run_body(std::move(body));
  }

  /// A scheduling point before operation `op` on `object` (of kind `kind`: "atomic", "mutex").
  /// `may_throw`: the caller may be unwound by abort_run (false for noexcept operations).
  void point(const char* op, const char* kind, const void* object, bool may_throw) {
    std::unique_lock lk(mutex_);
    model_thread& self = *current_context.self;
    if (aborting_) return teardown(self, lk, may_throw, true);
    switch_from(self, lk, false, may_throw);
    record(self.id, op, kind, object);
    age_buffer(self);
  }

  /// A scheduling point where the current thread yields: strategies prefer another thread.
  /// `may_throw`: as for point() (false in the library's noexcept spin loops).
  void yield_point(bool may_throw = true) {
    std::unique_lock lk(mutex_);
    model_thread& self = *current_context.self;
    if (aborting_) return teardown(self, lk, may_throw, true);
    drain_locked(self);  // a spinning thread's stores become visible (no livelock on its own buffer)
    switch_from(self, lk, true, may_throw);
    record(self.id, "yields", nullptr, nullptr);
  }

  /// Blocks the current thread on `object` (`waits`: "to lock", `kind`: "mutex"; `holder`:
  /// the thread holding it, if known) until wake(object) and the strategy chooses it again.
  /// The caller re-checks its condition: a woken thread may find it false again.
  void block(const char* waits, const char* kind, const void* object, std::size_t holder, bool may_throw) {
    std::unique_lock lk(mutex_);
    model_thread& self = *current_context.self;
    if (aborting_) return teardown(self, lk, may_throw, false);
    drain_locked(self);  // blocking is a system call: a full barrier
    name_of(object, kind);
    self.st = model_thread::state::blocked;
    self.waits = waits;
    self.waits_on = object;
    self.holder = holder;
    self.blocked_order = ++blocked_count_;
    record(self.id, "blocks on", kind, object);
    switch_from(self, lk, false, may_throw);
  }

  /// Makes the threads blocked on `object` runnable: all of them, or the one that blocked first.
  void wake(const void* object, bool all) {
    const std::lock_guard lk(mutex_);
    wake_locked(object, all);
  }

  /// Creates a model thread running `body` (after a scheduling point, as every operation).
  std::size_t spawn(std::unique_ptr<thread_body> body) {
    std::unique_lock lk(mutex_);
    model_thread& self = *current_context.self;
    if (aborting_) teardown(self, lk, true, false);
    switch_from(self, lk, false, true);
    drain_locked(self);  // what the creator did happens-before the new thread
    const std::size_t id = create_thread(std::move(body));
    record(self.id, "spawned", nullptr, nullptr, id);
    return id;
  }

  /// Waits until model thread `id` has finished (a scheduling point; blocks while it runs).
  void join(std::size_t id) {
    std::unique_lock lk(mutex_);
    model_thread& self = *current_context.self;
    if (aborting_) return teardown(self, lk, true, true);
    switch_from(self, lk, false, true);
    drain_locked(self);
    while (threads_.at(id)->st != model_thread::state::finished) {
      if (aborting_) return teardown(self, lk, true, false);
      model_thread& target = *threads_[id];
      self.st = model_thread::state::blocked;
      self.waits = "to join";
      self.waits_on = &target;
      self.holder = id;
      self.blocked_order = ++blocked_count_;
      record(self.id, "blocks joining", nullptr, nullptr, id);
      switch_from(self, lk, false, true);
    }
    record(self.id, "joined", nullptr, nullptr, id);
  }

  /// Shows `value` in the trace, as what the current thread's last operation left.
  void show_value(std::string value) {
    const std::lock_guard lk(mutex_);
    // Not after a failure: operations run while unwinding are not recorded.
    if (!aborting_ && !events_.empty() && events_.back().thread == current_context.self->id) {
      events_.back().value = std::move(value);
    }
  }

  /// Records a failure of the current thread without ending it (for noexcept callers): the
  /// run's teardown starts at its next scheduling point.
  void fail(failure_kind kind, const std::string& message) {
    const std::lock_guard lk(mutex_);
    fail_locked(kind, "thread " + std::to_string(current_context.self->id) + ": " + message);
  }

  /// Records a failed check of the current thread and ends it (abort_run), unless it is
  /// unwinding already.
  void check_failed(const std::string& message) {
    std::unique_lock lk(mutex_);
    model_thread& self = *current_context.self;
    fail_locked(failure_kind::check, "thread " + std::to_string(self.id) + ": check failed: " + message);
    teardown(self, lk, true, true);
  }

  /// Weak memory: buffers the current thread's store of `size` bytes to `object` when the
  /// strategy delays it, or when earlier stores are still buffered (its stores become visible
  /// in program order, as with x86-TSO's store buffer). False: store it now.
  bool buffer_store(void* object, store_fn apply, const void* bytes, std::size_t size) {
    const std::lock_guard lk(mutex_);
    model_thread& self = *current_context.self;
    if (aborting_ || size > buffered_store::max_size) {
      drain_locked(self);
      return false;
    }
    const std::size_t delay = strategy_->store_delay();
    if (delay == 0 && self.buffer.empty()) return false;
    buffered_store st;
    st.object = object;
    st.apply = apply;
    std::memcpy(st.bytes.data(), bytes, size);
    st.delay = delay;
    self.buffer.push_back(st);
    return true;
  }

  /// Weak memory: the current thread's latest buffered store to `object`, copied into `out`
  /// (`size` bytes): what its own loads see. False if it has none.
  bool forward(const void* object, void* out, std::size_t size) {
    const std::lock_guard lk(mutex_);
    const auto& buffer = current_context.self->buffer;
    for (auto it = buffer.rbegin(); it != buffer.rend(); ++it) {
      if (it->object == object) {
        std::memcpy(out, it->bytes.data(), size);
        return true;
      }
    }
    return false;
  }

  /// Weak memory: makes every buffered store of the current thread visible, oldest first (as
  /// a read-modify-write, a seq_cst store or fence, and a system call do).
  void drain() {
    const std::lock_guard lk(mutex_);
    drain_locked(*current_context.self);
  }

  /// Weak memory: `object` is being destroyed; stores still buffered to it are dropped.
  void forget(const void* object) {
    const std::lock_guard lk(mutex_);
    for (auto& t : threads_) {
      std::erase_if(t->buffer, [object](const buffered_store& st) { return st.object == object; });
    }
  }

  /// Whether a failure was recorded (the run is being torn down).
  [[nodiscard]] bool failed() {
    const std::lock_guard lk(mutex_);
    return aborting_;
  }

  /// The current model thread's id.
  [[nodiscard]] static std::size_t self_id() noexcept { return current_context.self->id; }

 private:
  using lock = std::unique_lock<std::mutex>;

  run_outcome run_body(std::unique_ptr<thread_body> body) {
    {
      lock lk(mutex_);
      create_thread(std::move(body));
      running_ = 0;
      threads_[0]->turn.notify_one();
      done_.wait(lk, [&] { return live_ == 0; });
      strategy_ = nullptr;
    }
    // Every thread is finished or parked for good: no lock needed to join or detach them.
    for (auto& t : threads_) {
      if (t->st == model_thread::state::finished) {
        t->real.join();
      } else {
        t->real.detach();  // abandoned: it holds a reference to this run, which stays alive
      }
    }
    run_outcome out;
    out.failed = std::move(failure_);
    if (out.failed) {
      out.failed->steps = steps_;
      out.failed->trace = trace();
    }
    out.steps = steps_;
    out.choices = std::move(choices_);
    return out;
  }

  std::size_t create_thread(std::unique_ptr<thread_body> body) {
    const std::size_t id = threads_.size();
    threads_.push_back(std::make_unique<model_thread>(id, std::move(body)));
    ++live_;
    strategy_->thread_created(id);
    model_thread* t = threads_.back().get();
    t->real = std::thread([run = shared_from_this(), t] { run->thread_main(*t); });
    return id;
  }

  // The real thread of a model thread.
  void thread_main(model_thread& self) {
    {
      lock lk(mutex_);
      self.turn.wait(lk, [&] { return running_ == self.id; });
      if (aborting_) return end_thread(self, lk, false);
    }
    current_context = {this, &self};
    bool unwound_by_abort = false;
    try {
      const std::unique_ptr<thread_body> body = std::move(self.body);
      body->run();
    } catch (const abort_run&) {
      unwound_by_abort = true;
    } catch (...) {
      const std::string what = describe(std::current_exception());
      const std::lock_guard lk(mutex_);
      if (!aborting_) {
        fail_locked(failure_kind::exception,
                    "thread " + std::to_string(self.id) + ": exception escaped the thread: " + what);
      }
    }
    if (!unwound_by_abort) before_end(self);
    current_context = {};
    lock lk(mutex_);
    end_thread(self, lk, self.abort_thrown && !unwound_by_abort);
  }

  // Weak memory: a thread that ends with stores still buffered reaches one more scheduling
  // point first, so that others may run before its end drains them (its last loads may have
  // passed them). Without buffered stores, no point: the schedules are those without weak memory.
  void before_end(model_thread& self) {
    lock lk(mutex_);
    if (aborting_ || self.buffer.empty()) return;
    switch_from(self, lk, false, false);
    record(self.id, "ends", nullptr, nullptr);
  }

  static std::string describe(const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return x.what();
    } catch (...) {
      return "an exception not derived from std::exception";
    }
  }

  void end_thread(model_thread& self, lock& lk, bool swallowed_abort) {
    drain_locked(self);  // what the thread did happens-before its join
    self.st = model_thread::state::finished;
    --live_;
    if (swallowed_abort) note_swallowed(self);
    wake_locked(&self, true);
    if (!aborting_) {
      if (live_ == 0) return done_.notify_all();
      if (auto next = next_thread(self, false)) return hand_over(*next);
    }
    pass_teardown_baton(lk);
  }

  // Under the lock, not aborting: the decision at a scheduling point of `self`; returns when
  // `self` holds the baton again (or at once if the strategy keeps it running). A failure
  // found here (deadlock, step bound) starts the teardown with `self`.
  //
  // A thread's first operation needs no decision: the one that chose it to run chose it.
  void switch_from(model_thread& self, lock& lk, bool yielding, bool may_throw) {
    if (std::exchange(self.fresh, false) && self.st == model_thread::state::runnable) return;
    if (auto next = next_thread(self, yielding); next && *next != self.id) {
      hand_over(*next);
      self.turn.wait(lk, [&] { return running_ == self.id; });
    }
    if (aborting_) teardown(self, lk, may_throw, self.st != model_thread::state::blocked);
    self.st = model_thread::state::runnable;
  }

  // The strategy's choice, or nothing after recording a failure.
  std::optional<std::size_t> next_thread(const model_thread& self, bool yielding) {
    if (++steps_ > max_steps_) {
      fail_locked(failure_kind::livelock,
                  "the run did not end within " + std::to_string(max_steps_) +
                      " scheduling points (options.max_steps): a livelock, or a spin loop that "
                      "does not call testing::yield()");
      return std::nullopt;
    }
    enabled_.clear();
    for (const auto& t : threads_) {
      if (t->st == model_thread::state::runnable) enabled_.push_back(t->id);
    }
    if (enabled_.empty()) {
      fail_locked(failure_kind::deadlock, "no model thread can run: " + blocked_threads());
      return std::nullopt;
    }
    const decision d{self.id, self.st == model_thread::state::runnable, yielding, enabled_, steps_};
    const std::size_t next = strategy_->choose(d);
    if (next >= threads_.size() || threads_[next]->st != model_thread::state::runnable) {
      fail_locked(failure_kind::nondeterminism,
                  "the schedule does not fit this run at step " + std::to_string(steps_) +
                      ": the body is not deterministic (it depends on more than the schedule), "
                      "or the replay string is for another body");
      return std::nullopt;
    }
    if (enabled_.size() > 1) choices_.push_back(next);
    return next;
  }

  // Weak memory: one more operation of `self`; its buffered stores whose delay ran out become
  // visible, oldest first (a younger one waits for the older ones).
  void age_buffer(model_thread& self) noexcept {
    if (self.buffer.empty()) return;
    for (auto& st : self.buffer) {
      if (st.delay != 0) --st.delay;
    }
    std::size_t n = 0;
    while (n != self.buffer.size() && self.buffer[n].delay == 0) {
      self.buffer[n].apply(self.buffer[n].object, self.buffer[n].bytes.data());
      ++n;
    }
    self.buffer.erase(self.buffer.begin(), self.buffer.begin() + static_cast<std::ptrdiff_t>(n));
  }

  static void drain_locked(model_thread& self) noexcept {
    for (const auto& st : self.buffer) st.apply(st.object, st.bytes.data());
    self.buffer.clear();
  }

  void hand_over(std::size_t next) {
    running_ = next;
    threads_[next]->turn.notify_one();
  }

  // A failed run at a scheduling point of `self`. `may_continue`: `self` can go on without
  // switching (it is not blocked), which it does while unwinding, within max_steps.
  void teardown(model_thread& self, lock& lk, bool may_throw, bool may_continue) {
    if (may_continue && std::uncaught_exceptions() > 0 && ++teardown_steps_ <= max_steps_) return;
    if (may_throw && !self.abort_thrown && std::uncaught_exceptions() == 0) {
      self.abort_thrown = true;
      lk.unlock();
      throw abort_run{};
    }
    if (self.abort_thrown && std::uncaught_exceptions() == 0) note_swallowed(self);
    abandon(self, lk);
  }

  [[noreturn]] void abandon(model_thread& self, lock& lk) {
    self.st = model_thread::state::abandoned;
    --live_;
    pass_teardown_baton(lk);
    current_context = {};
    for (;;) self.turn.wait(lk);  // for good: nothing sets a condition for it
  }

  // Teardown: the baton to the next thread still to end, or the run is over. The newest first:
  // a thread's stack may hold what the threads it created use (the body's does), and its
  // unwinding destroys it.
  void pass_teardown_baton(lock& /*held*/) {
    for (auto it = threads_.rbegin(); it != threads_.rend(); ++it) {
      const model_thread& t = **it;
      if (t.st == model_thread::state::runnable || t.st == model_thread::state::blocked)
        return hand_over(t.id);
    }
    running_ = no_thread;
    done_.notify_all();
  }

  void wake_locked(const void* object, bool all) {
    model_thread* first = nullptr;
    for (const auto& t : threads_) {
      if (t->st != model_thread::state::blocked || t->waits_on != object) continue;
      if (all) {
        t->st = model_thread::state::runnable;
      } else if (first == nullptr || t->blocked_order < first->blocked_order) {
        first = t.get();
      }
    }
    if (first != nullptr) first->st = model_thread::state::runnable;
  }

  void fail_locked(failure_kind kind, std::string message) {
    if (!failure_) failure_ = failure{kind, std::move(message), {}, 0, 0, {}};
    aborting_ = true;
  }

  void note_swallowed(const model_thread& self) {
    if (!failure_) return;
    failure_->message += " (and thread " + std::to_string(self.id) +
                         " caught the explorer's abort exception without rethrowing it: a "
                         "catch (...) in a model thread must rethrow)";
  }

  std::string blocked_threads() {
    std::string out;
    for (const auto& t : threads_) {
      if (t->st != model_thread::state::blocked) continue;
      if (!out.empty()) out += "; ";
      out += "thread " + std::to_string(t->id) + " waits " + t->waits + " ";
      if (t->waits_on == nullptr) {
        out += "?";
      } else if (std::string_view(t->waits) == "to join") {
        out += "thread " + std::to_string(t->holder);
      } else {
        out += name_of(t->waits_on, nullptr);
        if (t->holder != no_thread) out += " (held by thread " + std::to_string(t->holder) + ")";
      }
    }
    return out;
  }

  // "atomic#2": objects are numbered in the order the run first meets them (deterministic for
  // a deterministic body, unlike their addresses).
  std::string name_of(const void* object, const char* kind) {
    std::size_t i = 0;
    while (i != objects_.size() && objects_[i].first != object) ++i;
    if (i == objects_.size()) objects_.emplace_back(object, kind != nullptr ? kind : "object");
    return std::string(objects_[i].second) + "#" + std::to_string(i + 1);
  }

  void record(std::size_t thread, const char* op, const char* kind, const void* object,
              std::size_t other = no_thread) {
    if (object != nullptr) name_of(object, kind);
    events_.push_back(event{thread, op, object, other, {}});
  }

  std::string trace() {
    constexpr std::size_t shown = 24;
    std::string out;
    const std::size_t from = events_.size() > shown ? events_.size() - shown : 0;
    if (from != 0) out += "    ... (" + std::to_string(from) + " earlier)\n";
    for (std::size_t i = from; i != events_.size(); ++i) {
      const event& e = events_[i];
      out += "    thread " + std::to_string(e.thread) + ": " + e.op;
      if (e.object != nullptr) out += " " + name_of(e.object, nullptr);
      if (e.other != no_thread) out += " thread " + std::to_string(e.other);
      if (!e.value.empty()) out += ", now " + e.value;
      out += "\n";
    }
    return out;
  }

  std::mutex mutex_;
  std::condition_variable done_;  // the run is over (live_ == 0)
  chooser* strategy_;
  std::size_t max_steps_;
  std::vector<std::unique_ptr<model_thread>> threads_;
  std::size_t running_ = no_thread;  // the baton
  std::size_t live_ = 0;             // threads neither finished nor abandoned
  std::size_t steps_ = 0;
  std::size_t teardown_steps_ = 0;
  std::uint64_t blocked_count_ = 0;
  bool aborting_ = false;
  std::optional<failure> failure_;
  std::vector<std::size_t> enabled_;
  std::vector<std::size_t> choices_;
  std::vector<event> events_;
  std::vector<std::pair<const void*, const char*>> objects_;
};

/// A scheduling point for an operation that must not throw (atomics), if this thread is a
/// model thread.
// NOLINTNEXTLINE(bugprone-exception-escape): point() throws only where its last argument allows.
inline void nothrow_point(const char* op, const char* kind, const void* object) noexcept {
  if (execution* e = current()) e->point(op, kind, object, false);
}

}  // namespace asyncband::testing::detail
