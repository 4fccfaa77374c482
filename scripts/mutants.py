#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""./x mutants: does the schedule explorer find realistic concurrency bugs?

Each mutant is a copy of include/ with one realistic bug injected (a read-modify-write split
into a load and a store, a missing sleep announcement, a grant not passed on, a wake-up before
its store, a missing fence...). For each, this builds the primitive's model tests
(tests/model/, ASYNCBAND_MODEL) and its ordinary tests (tests/test_<primitive>.cpp: unit, race
and stress tests, with real threads) against the mutated headers, and reports whether each
found the bug, and after how many schedules the explorer did (PCT, depth 3, at most
--schedules, default 1000). A mutant whose text no longer matches the headers is an error: the
list is kept in step with the code.

    scripts/mutants.py [--schedules N] [--only NAME[,NAME]] [--no-unit] [--out FILE]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutants"
CXX = os.environ.get("CXX", "g++-12")
FLAGS = ["-std=c++20", "-pthread", "-g0"]
LIBS = ["-lgtest", "-lgtest_main", "-pthread"]


@dataclasses.dataclass
class Mutant:
    name: str
    bug: str                      # the bug, in words
    file: str                     # under include/asyncband/
    edits: list[tuple[str, str]]  # (original text, mutated text); each original occurs once
    model: str                    # gtest filter of the model tests that should find it
    unit: str                     # tests/test_<unit>.cpp: the ordinary tests of the primitive


MUTANTS = [
    Mutant(
        "semaphore_take_split",
        "try_take loads the count, checks it, then stores count - n (a load and a store where "
        "the CAS was: two takers both take the last permit)",
        "detail/semaphore_word.hpp",
        [("    std::uint64_t s = guess_before_take(n);",
          "    std::uint64_t s = state_.load(std::memory_order_acquire);"),
         ("""    while ((s & take_blockers_) == 0 && count_of(s) >= n) {
      if (state_.compare_exchange_weak(s, s - encode(n), std::memory_order_acquire,
                                       std::memory_order_relaxed))
        return true;""",
          """    while ((s & take_blockers_) == 0 && count_of(s) >= n) {
      state_.store(s - encode(n), std::memory_order_relaxed);
      return true;""")],
        "ModelSemaphore.*:ModelMutex*", "semaphore"),
    Mutant(
        "semaphore_give_split",
        "try_add loads the word, then stores count + n instead of a CAS: a queuing waiter's "
        "'contended' mark set in between is overwritten, and the release does not wake it",
        "detail/semaphore_word.hpp",
        [("""    std::uint64_t s = guess_before_give(n);
    while ((s & contended) == 0) {""",
          """    std::uint64_t s = state_.load(std::memory_order_acquire);
    while ((s & contended) == 0) {"""),
         ("""      if (state_.compare_exchange_weak(s, s + encode(n), std::memory_order_release,
                                       std::memory_order_relaxed))
        return add_outcome::added;""",
          """      state_.store(s + encode(n), std::memory_order_release);
      return add_outcome::added;""")],
        "ModelSemaphore.*:ModelMutex*", "semaphore"),
    Mutant(
        "semaphore_no_sleep_announcement",
        "a waiter about to queue re-checks the count but does not mark the word contended: "
        "releases go to the count and nobody wakes it (a lost wake-up in the sleep announcement)",
        "detail/semaphore_wait.hpp",
        [("  if (word_.take_or_mark_contended(w.missing(), partial)) return true;",
          "  if (word_.try_take(w.missing())) return true;")],
        "ModelSemaphore.*:ModelMutex*", "semaphore"),
    Mutant(
        "semaphore_cancel_drops_grant",
        "a cancelled waiter's partial grant is not passed on to the waiters behind it",
        "detail/semaphore_wait.hpp",
        [("          semaphore_->hand_out(std::exchange(granted_, 0), waiters, batch);",
          "          (void)std::exchange(granted_, 0);")],
        "ModelSemaphore.*", "semaphore"),
    Mutant(
        "waiter_arm_split",
        "the waiting side's end of the resume handshake is a load and a store instead of one "
        "fetch_or: a resolver in between sees it not suspended, and nobody resumes it",
        "detail/waiter.hpp",
        [("    return (handshake_.fetch_or(suspended, std::memory_order_acq_rel) & resolved) == 0;",
          "    const auto before = handshake_.load(std::memory_order_acquire);\n"
          "    handshake_.store(before | suspended, std::memory_order_release);\n"
          "    return (before & resolved) == 0;")],
        "ModelSemaphore.*:ModelMutex*:ModelManualResetEvent*", "semaphore"),
    Mutant(
        "parker_notify_before_store",
        "unpark wakes the parked thread before it stores the release flag: the thread wakes, "
        "sees nothing, and sleeps for good",
        "detail/waiter.hpp",
        [("""    released_.store(1, std::memory_order_seq_cst);  // pairs with notify's check for sleepers
    released_.notify_one();""",
          """    released_.notify_one();
    released_.store(1, std::memory_order_seq_cst);""")],
        "ModelSemaphore.*:ModelMutex*", "semaphore"),
    Mutant(
        "event_set_skips_marked_waiter",
        "set() returns when its CAS finds any bit, not only 'set': a waiter that marked itself "
        "queued is never woken",
        "manual_reset_event.hpp",
        [("    if ((s & set_bit) != 0) return;  // set already: no waiter can be queued",
          "    if (s != 0) return;")],
        "ModelManualResetEvent*", "manual_reset_event"),
    Mutant(
        "event_mark_overwrites_set",
        "a waiter marks itself queued with a store instead of a CAS: a set() in between is "
        "overwritten and lost",
        "manual_reset_event.hpp",
        [("""      if (state_.compare_exchange_weak(s, waiting_bit, std::memory_order_acquire, std::memory_order_acquire))
        return false;""",
          """      state_.store(waiting_bit, std::memory_order_release);
      return false;""")],
        "ModelManualResetEvent*", "manual_reset_event"),
    Mutant(
        "latch_flag_overwrites_count",
        "a waiter flags itself with a store of the count it read: an arrival in between is "
        "undone, and the latch never opens",
        "latch.hpp",
        [("""    } while (!state_.compare_exchange_weak(state, state | waiters_flag, std::memory_order_acq_rel));
    return true;""",
          """    } while (false);
    state_.store(state | waiters_flag, std::memory_order_release);
    return true;""")],
        "ModelLatch*", "latch"),
    Mutant(
        "channel_sleep_after_check",
        "the MPSC receiver announces its sleep after looking for a value, not before (the two "
        "halves of the Dekker pair in the wrong order): a value published in between is slept "
        "through",
        "detail/channel_core.hpp",
        [("""        receiver_sleeping_.store(true, std::memory_order_relaxed);
        asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with a departing producer
""", ""),
         ("""          if (!nothing_more) {
            rx_queue_.waiters().push_back(w);""",
          """          if (!nothing_more) {
            receiver_sleeping_.store(true, std::memory_order_relaxed);
            rx_queue_.waiters().push_back(w);""")],
        "ModelMpscBounded*", "mpsc_bounded"),
    Mutant(
        "spin_lock_test_then_set",
        "the wait-list lock tests its flag, then sets it, in two steps: two threads in the "
        "wait list at once",
        "detail/spin_lock.hpp",
        [("""    while (locked_.exchange(true, std::memory_order_acquire)) {
      spin_until([this] { return !locked_.load(std::memory_order_relaxed); });
    }""",
          """    spin_until([this] { return !locked_.load(std::memory_order_relaxed); });
    locked_.store(true, std::memory_order_relaxed);""")],
        "ModelSemaphore.*:ModelMutex*:ModelManualResetEvent*", "semaphore"),
    Mutant(
        "channel_publish_missing_fence",
        "a publisher's seq_cst fence between its publication and its look at the receiver's "
        "sleep flag is gone (a store-load reordering only weak memory shows: x86 allows it)",
        "detail/channel_core.hpp",
        [("""  void after_publish() noexcept {
    asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);""",
          """  void after_publish() noexcept {""")],
        "ModelMpscUnbounded.*", "mpsc_unbounded"),
    Mutant(
        "semaphore_woken_cancel_keeps_grant",
        "a wait granted its permits and then cancelled (stop seen on resumption, a destroyed "
        "frame) does not pass the grant on",
        "detail/semaphore_wait.hpp",
        [("""    } else {
      semaphore_->give<false>(needed_);
    }""",
          """    } else {
    }""")],
        "ModelSemaphore.*:ModelMutex*:ModelMpmcBounded*", "mpmc_bounded"),
    Mutant(
        "event_reset_plain_store",
        "reset() stores 0 instead of a CAS from 'set': racing a waiter that just marked itself "
        "queued, it erases the mark, and the next set() wakes nobody",
        "manual_reset_event.hpp",
        [("    state_.compare_exchange_strong(s, 0U, std::memory_order_release, std::memory_order_relaxed);",
          "    static_cast<void>(s);\n    state_.store(0U, std::memory_order_release);")],
        "ModelManualResetEvent*", "manual_reset_event"),
    Mutant(
        "auto_event_cancel_drops_permit",
        "a waiter handed the permit and then cancelled does not pass it on",
        "auto_reset_event.hpp",
        [("""    void give_back() noexcept {
      if (holds_permit) owner().notify_one();
    }""", """    void give_back() noexcept {}""")],
        "ModelAutoResetEvent*", "auto_reset_event"),
    Mutant(
        "condvar_cancel_drops_notification",
        "a wait that consumed a notify_one and was then cancelled does not pass the notification "
        "on to the next waiter",
        "condvar.hpp",
        [("    if (notify_bound != 0) hand_notify_one(notify_bound);",
          "    static_cast<void>(notify_bound);")],
        "ModelCondvar*", "condvar"),
    Mutant(
        "phaser_close_forgets_parked",
        "close() wakes the queued waits but not the threads parked on the phaser's broadcast "
        "word",
        "phaser.hpp",
        [("""    closed_.store(true, std::memory_order_release);
    s.waiters.claim_all(s.batch, wait_status::closed);
    release_parked(s);""", """    closed_.store(true, std::memory_order_release);
    s.waiters.claim_all(s.batch, wait_status::closed);""")],
        "ModelPhaser*", "phaser"),
    Mutant(
        "phaser_advance_ignores_counted_sleepers",
        "an advance never releases the broadcast word, as if no blocked thread had counted "
        "itself: the threads parked on it sleep through the phase's completion",
        "phaser.hpp",
        [("    const bool release_sleepers = parking_.has_counted_sleepers();",
          "    const bool release_sleepers = false;")],
        "ModelPhaser*", "phaser"),
    Mutant(
        "phaser_quiet_arrival_ignores_waiters",
        "arrive() takes its quiet path (no wake-up) when it completes a phase that coroutines "
        "are queued for: they are never resumed",
        "phaser.hpp",
        [("    return unarrived_ > n || (queue_.waiters().empty() && !parking_.has_counted_sleepers());",
          "    return unarrived_ > n || !parking_.has_counted_sleepers();")],
        "ModelPhaser*", "phaser"),
    Mutant(
        "phaser_quiet_arrival_ignores_sleepers",
        "arrive() takes its quiet path (no wake-up) when it completes a phase that blocked "
        "threads sleep on: they sleep through the completion",
        "phaser.hpp",
        [("    return unarrived_ > n || (queue_.waiters().empty() && !parking_.has_counted_sleepers());",
          "    return unarrived_ > n || queue_.waiters().empty();")],
        "ModelPhaser*", "phaser"),
    Mutant(
        "oneshot_send_forgets_wake",
        "a oneshot send stores its value but does not wake a waiting receiver",
        "oneshot.hpp",
        [("""    s->wake_receiver();
    s->release(st::sender_released, st::receiver_released);
    return {};""", """    s->release(st::sender_released, st::receiver_released);
    return {};""")],
        "ModelOneshot*", "oneshot"),
    Mutant(
        "watch_parking_before_version",
        "a watch send bumps the parking word before it stores the new version: a receiver "
        "that reads the parking key in between sleeps on the new key and misses the change",
        "watch.hpp",
        [("""      version_.store(version_.load(std::memory_order_relaxed) + one_version, std::memory_order_release);
      queue_.waiters().claim_all(batch);
      receivers_parking_.changed();""", """      receivers_parking_.changed();
      version_.store(version_.load(std::memory_order_relaxed) + one_version, std::memory_order_release);
      queue_.waiters().claim_all(batch);""")],
        "ModelWatch*", "watch"),
    Mutant(
        "mpmc_end_on_stale_count",
        "the bug the model tests found (now fixed): a receive that took the last value ends the "
        "closed channel on the count it read before a send added one, losing that value",
        "detail/mpmc_unbounded_state.hpp",
        [("    if (n != 0 && pending_.fetch_sub(n, std::memory_order_seq_cst) == n && drained()) end();",
          "    if (n != 0 && pending_.fetch_sub(n, std::memory_order_seq_cst) == n && closed()) end();")],
        "ModelMpmcUnbounded*", "mpmc_unbounded"),
    Mutant(
        "mpmc_delivery_missing_fence",
        "a bounded MPMC send's seq_cst fence between its publication and its look for queued "
        "receives is gone (a store-load reordering: a receive that queued meanwhile and looked "
        "at the place before it was published sleeps through it)",
        "detail/mpmc_bounded_state.hpp",
        [("""    asyncband::detail::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with after_receive_queued()'s
""", "")],
        "ModelMpmcBounded*", "mpmc_bounded"),
    Mutant(
        "mpmc_queued_receive_no_second_look",
        "a bounded MPMC receive that queued does not look again at the place at the ticket: a "
        "value whose send looked for queued receives just before is slept through",
        "detail/mpmc_bounded_state.hpp",
        [("""    if (ring_.published(items_.next_ticket())) deliver();
""", "")],
        "ModelMpmcBounded*", "mpmc_bounded"),
    Mutant(
        "mpmc_give_back_drops_copied_value",
        "a bounded MPMC receive bound a trivially copyable value (copied out of its cell for it) "
        "that will not take it (stopped after its wake-up, its frame destroyed) does not copy the "
        "value into a record for the next receive: the value and its unit of capacity are lost",
        "detail/mpmc_bounded_state.hpp",
        [("        claimed_.push_front_copy(value_of(c));  // the claim goes with its receive",
          "        static_cast<void>(0);")],
        "ModelMpmcBounded*", "mpmc_bounded"),
    Mutant(
        "mpmc_bound_value_holds_no_cell",
        "a bounded MPMC delivery of a value that stays in its cell (not trivially copyable) does "
        "not count it as holding its cell: the units of places claimed past it come back before "
        "its receive takes it, and a send comes round the ring to its cell",
        "detail/mpmc_bounded_state.hpp",
        [("claimed_.hold_cell();", "static_cast<void>(0);")],
        "ModelMpmcBounded*", "mpmc_bounded"),
    Mutant(
        "mpmc_bound_take_keeps_deferred_capacity",
        "a bounded MPMC receive that takes the value bound to it in its cell hands the cell on "
        "but not the units of capacity held back while the value held it",
        "detail/mpmc_bounded_state.hpp",
        [("      if (c.bound) give_capacity(claimed_.taken_from_cell());",
          "      if (c.bound) static_cast<void>(claimed_.taken_from_cell());")],
        "ModelMpmcBounded*", "mpmc_bounded"),
    Mutant(
        "mpmc_grant_bound_no_commit",
        "a delivery to a queued receive does not commit the receive's when_any before binding "
        "the value to it: every branch queued on a channel is bound a value, and the losers "
        "give theirs back",
        "detail/semaphore_wait.hpp",
        [("  auto* head = static_cast<detail::semaphore_waiter*>(waiters.committed_front(batch));",
          "  auto* head = static_cast<detail::semaphore_waiter*>(waiters.front());")],
        "ModelMpmcBounded*:ModelWhenAny*", "mpmc_bounded"),
    Mutant(
        "when_any_loser_keeps_grant",
        "an acquisition granted its permits after its when_any was won by another branch keeps "
        "them instead of giving them back",
        "detail/semaphore_wait.hpp",
        [("    if (!head.commit()) n += head.ungrant();",
          "    if (!head.commit()) static_cast<void>(head.ungrant());")],
        "ModelWhenAny*", "when_any"),
    Mutant(
        "mutex_unlock_never_serves",
        "a barging mutex's unlock frees the lock even when the head is queued with no retry in "
        "flight, and posts nothing: the queued waiter waits until some other unlock serves it",
        "detail/semaphore_word.hpp",
        [("    while (!must_serve(s)) {", "    for (;;) {")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_no_pass_bound",
        "a barging mutex never hands the lock to its oldest waiter: bargers may pass it forever",
        "semaphore.hpp",
        [("    if (++passes_ >= max_passes) [[unlikely]] {",
          "    if (++passes_ >= max_passes && false) [[unlikely]] {")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_due_unlock_frees_after_resolving",
        "the max_passes-th unlock frees the lock only after it resolved what it claimed: a lost "
        "when_any branch resolved there resumes its coroutine inline with the lock still held",
        "detail/semaphore_wait.hpp",
        [("""  wake([this, n](detail::wait_list& waiters, detail::wake_batch& batch) {
    if (detail::semaphore_word::retrying_in(word_.load())) {
      if (retry_node_->due()) {""",
          """  const bool handed = wake([this, n](detail::wait_list& waiters, detail::wake_batch& batch) {
    if (detail::semaphore_word::retrying_in(word_.load())) {
      if (retry_node_->due()) {"""),
         ("""        word_.give_barging(n);  // a parked thread's retry, not due yet: passed again
      }
      return;
    }""",
          """        word_.give_barging(n);  // a parked thread's retry, not due yet: passed again
      }
      return true;
    }"""),
         ("""      serve_locked(n, waiters, batch);
      return;
    }""",
          """      serve_locked(n, waiters, batch);
      return true;
    }"""),
         ("""    if (!hand_to_front(n, waiters, batch)) word_.give_barging(n);
  });
}

[[gnu::noinline]] inline void semaphore::serve_head""",
          """    return hand_to_front(n, waiters, batch);
  });
  if (!handed) word_.give_barging(n);
}

[[gnu::noinline]] inline void semaphore::serve_head""")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_threads_never_retry",
        "a plain thread's lock_blocking() on a barging mutex is handed the lock in FIFO order "
        "instead of retrying: every hand-off to a parked thread stalls every locker",
        "detail/semaphore_wait.hpp",
        [("    return semaphore_->barging() && (!semaphore_->shared_ || needed_ == semaphore_->retrying_request_);",
          "    return false;")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_thread_bound_by_count",
        "a parked thread's retry is due at every count bound, as a coroutine's is: a hand-off to "
        "a thread every max_passes unlocks",
        "detail/semaphore_wait.hpp",
        [("    if constexpr (model_build) return (++due_checks_ & 1U) == 0;",
          "    return true;")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_passed_thread_left_unserved",
        "the max_passes-th unlock that passes a parked thread not due yet frees the lock without "
        "serving it: it stays queued with nobody to wake it until another unlock",
        "detail/semaphore_wait.hpp",
        [("""    if (head != nullptr && head->retries() && !head->due()) {
      serve_locked(n, waiters, batch);""",
          """    if (head != nullptr && head->retries() && !head->due()) {
      word_.give_barging(n);""")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_serve_hands_past_a_lost_branch",
        "an unlock that serves the head does not look past when_any branches that lost: a "
        "parked thread behind one is handed the lock directly, stalling every locker while it "
        "wakes",
        "detail/semaphore_wait.hpp",
        [("""  detail::semaphore_waiter* const head = front_not_lost(waiters, batch);
  if (head == nullptr) {  // only when_any branches that lost were queued""",
          """  auto* const head = static_cast<detail::semaphore_waiter*>(waiters.front());
  if (head == nullptr) {  // only when_any branches that lost were queued""")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_retry_requeues_at_the_back",
        "a retry that lost the lock queues again behind the waiters that came after it",
        "detail/wait_queue.hpp",
        [("""    if (std::forward<Ready>(ready)()) return true;
    waiters_.push_front(w);""",
          """    if (std::forward<Ready>(ready)()) return true;
    waiters_.push_back(w);""")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_dropped_retry_gives_a_permit",
        "a waiter destroyed after it was claimed to retry gives back a permit it never held, "
        "instead of ending its retry in flight: two holders",
        "detail/semaphore_wait.hpp",
        [("""    if (retry_) {
      semaphore_->drop_retry(*this);
    } else {""",
          """    if (false) {
    } else {""")],
        "ModelMutex*", "mutex"),
    Mutant(
        "mutex_retry_keeps_retrying_flag",
        "a retry that takes the free lock lock-free leaves the word's retrying flag set: no later "
        "unlock serves the queue",
        "detail/semaphore_word.hpp",
        [("      if (state_.compare_exchange_weak(s, (s - encode(n)) & ~(retrying | starving | pass_bits),",
          "      if (state_.compare_exchange_weak(s, (s - encode(n)) & ~(starving | pass_bits),")],
        "ModelMutex*", "mutex"),
]


REUSE = False  # --reuse: keep binaries built from an unchanged copy of the headers


def mutate(m: Mutant) -> Path:
    """A copy of include/ with the mutant's edits; exits if an original text is not unique.
    With --reuse, a copy identical to what the edits would make now is kept (with its binaries)."""
    tree = WORK / m.name / "include"
    if REUSE and tree.exists() and same_as_mutated(m, tree):
        return tree
    for stale in (WORK / m.name).glob("*"):
        if stale.is_file():
            stale.unlink()
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(ROOT / "include", tree)
    target = tree / "asyncband" / m.file
    text = target.read_text()
    for old, new in m.edits:
        if text.count(old) != 1:
            sys.exit(f"mutants: {m.name}: the text to mutate occurs {text.count(old)} times in {m.file}")
        text = text.replace(old, new)
    target.write_text(text)
    return tree


def same_as_mutated(m: Mutant, tree: Path) -> bool:
    """Whether `tree` is include/ with the mutant's edits (every header compared)."""
    for src in (ROOT / "include").rglob("*.hpp"):
        copy = tree / src.relative_to(ROOT / "include")
        expected = src.read_text()
        if src.relative_to(ROOT / "include" / "asyncband").as_posix() == m.file:
            for old, new in m.edits:
                expected = expected.replace(old, new)
        if not copy.exists() or copy.read_text() != expected:
            return False
    return True


def build(out: Path, sources: list[Path], include: Path, defines: list[str], opt: str) -> str | None:
    """Compiles the sources (two at a time: the machine's cores) and links them into `out`
    (with --reuse, not again if `out` exists)."""
    if REUSE and out.exists():
        return None
    objects = [out.parent / f"{out.name}.{src.stem}.o" for src in sources]

    def compile_one(pair: tuple[Path, Path]) -> subprocess.CompletedProcess:
        src, obj = pair
        return subprocess.run([CXX, *FLAGS, opt, *defines, f"-I{include}", f"-I{ROOT / 'tests'}", "-c", str(src),
                               "-o", str(obj)], capture_output=True, text=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for r in pool.map(compile_one, zip(sources, objects)):
            if r.returncode != 0:
                return r.stderr[-2000:]
    r = subprocess.run([CXX, *map(str, objects), "-o", str(out), *LIBS], capture_output=True, text=True)
    return None if r.returncode == 0 else r.stderr[-2000:]


def model_sources(gtest_filter: str) -> list[Path]:
    """The model test files with a test suite the filter names (ModelMutex*, ModelSemaphore.*)."""
    suites = [pattern.split(".")[0].rstrip("*") for pattern in gtest_filter.split(":")]
    files = sorted((ROOT / "tests" / "model").glob("model_*.cpp"))
    return [f for f in files if any(f"TEST({suite}" in f.read_text() for suite in suites)]


def run(cmd: list[str], env: dict[str, str], timeout: int) -> tuple[int | None, str]:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out


def model_verdict(m: Mutant, include: Path, schedules: int) -> str:
    exe = WORK / m.name / "model"
    sources = model_sources(m.model)
    if (err := build(exe, sources, include, ["-DASYNCBAND_MODEL=1"], "-O1")) is not None:
        return "does not compile: " + err.splitlines()[0]
    code, out = run([str(exe), f"--gtest_filter={m.model}"],
                    {"ASYNCBAND_EXPLORE_SCHEDULES": str(schedules)}, 900)
    if code is None:
        return "hung (timeout)"
    found = []
    for block in out.split("[ RUN      ] ")[1:]:
        if hit := re.search(r"failed: (\w+) in schedule (\d+)", block):
            found.append((int(hit.group(2)), hit.group(1), block.split()[0]))
    if found:
        n, kind, test = min(found)
        return f"found: {kind} after {n} schedule{'s' if n != 1 else ''} ({test})"
    if code != 0:
        return "found: the model test binary failed (" + out.strip().splitlines()[-1][:80] + ")"
    return f"not found in {schedules} schedules"


def unit_verdict(m: Mutant, include: Path) -> str:
    exe = WORK / m.name / "unit"
    source = ROOT / "tests" / f"test_{m.unit}.cpp"
    if (err := build(exe, [source], include, ["-DASYNCBAND_TESTING=1"], "-O2")) is not None:
        return "does not compile: " + err.splitlines()[0]
    code, out = run([str(exe), "--gtest_brief=1"], {}, 90)
    if code is None:
        return "found: hung (timeout 90 s)"
    if code != 0:
        failed = re.findall(r"\[  FAILED  \] (\S+)", out)
        return "found: " + (f"{len(set(failed))} failed, e.g. {failed[0]}" if failed else f"exit {code}")
    return "not found"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schedules", type=int, default=1000)
    ap.add_argument("--only", default="")
    ap.add_argument("--no-unit", action="store_true", help="skip the ordinary tests (faster)")
    ap.add_argument("--out", default=str(WORK / "report.md"))
    ap.add_argument("--reuse", action="store_true", help="keep binaries of unchanged mutant copies")
    ap.add_argument("--build-only", action="store_true", help="build the binaries, run nothing")
    ap.add_argument("--jobs", type=int, default=1, help="mutants handled at once")
    args = ap.parse_args()
    global REUSE
    REUSE = args.reuse
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only.split(",")]
    def handle(m: Mutant) -> tuple[Mutant, str, str]:
        start = time.monotonic()
        include = mutate(m)
        if args.build_only:
            build(WORK / m.name / "model", model_sources(m.model), include, ["-DASYNCBAND_MODEL=1"], "-O1")
            if not args.no_unit:
                build(WORK / m.name / "unit", [ROOT / "tests" / f"test_{m.unit}.cpp"], include,
                      ["-DASYNCBAND_TESTING=1"], "-O2")
            print(f"{m.name}: built", flush=True)
            return m, "built", "built"
        model = model_verdict(m, include, args.schedules)
        unit = "not run" if args.no_unit else unit_verdict(m, include)
        print(f"{m.name}: explorer {model}; test_{m.unit}: {unit} ({time.monotonic() - start:.0f} s)", flush=True)
        return m, model, unit

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(handle, chosen))
    if args.build_only:
        return 0
    found = sum(1 for _, model, _ in rows if model.startswith("found"))
    lines = [f"| mutant | bug | explorer ({args.schedules} PCT schedules) | ordinary tests |", "|---|---|---|---|"]
    lines += [f"| `{m.name}` ({m.file}) | {m.bug} | {model} | test_{m.unit}: {unit} |" for m, model, unit in rows]
    lines += ["", f"The explorer found {found} of {len(rows)}."]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
