// SPDX-License-Identifier: Apache-2.0
// asyncband/testing/detail/strategies.hpp: the explorer's scheduling strategies (random, PCT,
// bounded exhaustive, replay of a choice list) and their replay strings.
#pragma once

#include "asyncband/version.hpp"  // first: a build below C++20 stops there, with one message

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "asyncband/testing/detail/execution.hpp"

namespace asyncband::testing::detail {

/// splitmix64: small, and the same numbers on every platform (unlike the distributions of
/// <random>), so a replay string works with any standard library.
class rng {
 public:
  /// A generator from `seed`.
  explicit rng(std::uint64_t seed) noexcept : state_(seed) {}
  /// The next number.
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31U);
  }
  /// A number in [0, n), n > 0.
  std::size_t below(std::size_t n) noexcept { return as<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

/// The seed of schedule `i` of an exploration seeded with `base`.
[[nodiscard]] inline std::uint64_t schedule_seed(std::uint64_t base, std::size_t i) noexcept {
  rng r(base ^ (0xd1b54a32d192ed03ULL * (as<std::uint64_t>(i) + 1)));
  return r.next();
}

/// The alternatives at a decision in the exhaustive strategy's order, the first being the
/// default: the current thread first when it can go on (every other choice is a preemption);
/// at a yield, the others only, round robin from the next one; otherwise ascending.
inline void ordered_options(const decision& d, std::vector<std::size_t>& out) {
  out.clear();
  if (d.yielding && d.enabled.size() > 1) {
    const auto after = std::upper_bound(d.enabled.begin(), d.enabled.end(), d.current);
    out.insert(out.end(), after, d.enabled.end());
    for (auto it = d.enabled.begin(); it != after; ++it) {
      if (*it != d.current) out.push_back(*it);
    }
    return;
  }
  if (d.current_enabled) out.push_back(d.current);
  for (const std::size_t t : d.enabled) {
    if (t != d.current) out.push_back(t);
  }
}

/// Weak memory's store delays: a uniformly random 0..3 of the storing thread's own operations
/// (from a generator of their own, so that the scheduling decisions are those without weak
/// memory), or always 0 without it.
class store_delays {
 public:
  /// Delays for a run seeded with `seed`; all 0 unless `weak`.
  store_delays(std::uint64_t seed, bool weak) noexcept : rng_(seed ^ 0x5bd1e9955bd1e995ULL), weak_(weak) {}
  /// The next store's delay.
  std::size_t next() noexcept { return weak_ ? rng_.below(4) : 0; }

 private:
  rng rng_;
  bool weak_;
};

/// Uniformly random among the runnable threads at every decision.
class random_chooser final : public chooser {
 public:
  /// A run seeded with `seed`; `weak`: with weak memory (store delays).
  explicit random_chooser(std::uint64_t seed, bool weak = false) noexcept : rng_(seed), delays_(seed, weak) {}
  std::size_t choose(const decision& d) override { return d.enabled[rng_.below(d.enabled.size())]; }
  std::size_t store_delay() override { return delays_.next(); }

 private:
  rng rng_;
  store_delays delays_;
};

/// PCT (Burckhardt, Kothari, Musuvathi, Nagarakatte: "A randomized scheduler with
/// probabilistic guarantees of finding bugs", ASPLOS 2010). Each thread gets a random priority
/// at its creation (all at least `depth`, so a random order of the threads); d-1 change points
/// are drawn uniformly among the first `steps` steps; the runnable thread of highest priority
/// runs, and at the i-th change point the running thread's priority drops to i, below every
/// initial one. A bug of depth d among n threads and k steps is found with probability at
/// least 1/(n k^(d-1)) per schedule. A yield drops the yielding thread below every other (so a
/// spin loop lets the others run instead of spinning until the step bound).
class pct_chooser final : public chooser {
 public:
  /// A run seeded with `seed`, of depth `depth` (>= 1), with change points among the first
  /// `steps` steps (none if 0); `weak`: with weak memory (store delays).
  pct_chooser(std::uint64_t seed, std::size_t depth, std::size_t steps, bool weak = false)
      : rng_(seed), delays_(seed, weak), depth_(depth) {
    for (std::size_t i = 1; i < depth && steps != 0; ++i) change_at_.push_back(1 + rng_.below(steps));
  }
  void thread_created(std::size_t id) override {
    if (priority_.size() <= id) priority_.resize(id + 1);
    priority_[id] = static_cast<std::int64_t>(depth_) + static_cast<std::int64_t>(rng_.next() >> 33U);
  }
  std::size_t choose(const decision& d) override {
    for (std::size_t i = 0; i != change_at_.size(); ++i) {
      if (change_at_[i] == d.step) priority_[d.current] = static_cast<std::int64_t>(i + 1);
    }
    if (d.yielding) priority_[d.current] = *std::min_element(priority_.begin(), priority_.end()) - 1;
    std::size_t best = d.enabled.front();
    for (const std::size_t t : d.enabled) {
      if (priority_[t] > priority_[best]) best = t;
    }
    return best;
  }
  std::size_t store_delay() override { return delays_.next(); }

 private:
  rng rng_;
  store_delays delays_;
  std::size_t depth_;
  std::vector<std::size_t> change_at_;
  std::vector<std::int64_t> priority_;
};

/// Bounded exhaustive exploration: a depth-first search of the tree of scheduling choices,
/// with at most `bound` preemptions per schedule (a switch away from a thread that could go
/// on, not at a yield). Stateless: each run replays the path to the next untried choice, then
/// takes default choices (ordered_options). Decisions with one runnable thread are no nodes.
class exhaustive_chooser final : public chooser {
 public:
  /// A search with at most `bound` preemptions per schedule.
  explicit exhaustive_chooser(std::size_t bound) noexcept : bound_(bound) {}

  /// Starts a run.
  void begin_run() noexcept {
    depth_ = 0;
    preemptions_ = 0;
  }
  /// Ends a run (a run shorter than the replayed path keeps only what it went through).
  void end_run() { nodes_.resize(std::min(nodes_.size(), depth_)); }

  std::size_t choose(const decision& d) override {
    if (d.enabled.size() == 1) return d.enabled.front();
    ordered_options(d, options_);
    if (depth_ < nodes_.size()) {
      const node& n = nodes_[depth_++];
      if (n.options != options_) return no_thread;  // not the run the path was taken in
      if (n.preemptive && n.index != 0) ++preemptions_;
      return n.options[n.index];
    }
    nodes_.push_back(node{options_, 0, d.current_enabled && !d.yielding, preemptions_});
    ++depth_;
    return options_.front();
  }

  /// Moves to the next schedule: the deepest choice with an untried alternative within the
  /// bound. False when there is none (the tree is exhausted).
  bool advance() {
    while (!nodes_.empty()) {
      node& n = nodes_.back();
      if (!n.preemptive || n.preemptions_before < bound_) {
        if (++n.index < n.options.size()) return true;
      }
      nodes_.pop_back();
    }
    return false;
  }

 private:
  struct node {
    std::vector<std::size_t> options;  // ordered_options at this decision
    std::size_t index;                 // the one taken
    bool preemptive;                   // every option but the first is a preemption
    std::size_t preemptions_before;    // on the path to this decision
  };

  std::size_t bound_;
  std::vector<node> nodes_;
  std::vector<std::size_t> options_;
  std::size_t depth_ = 0;
  std::size_t preemptions_ = 0;
};

/// Replays a choice list ("s:" strings): the listed thread at each decision with more than one
/// runnable thread, then default choices (ordered_options) if the list ends first.
class list_chooser final : public chooser {
 public:
  /// Replays `choices`.
  explicit list_chooser(std::vector<std::size_t> choices) noexcept : choices_(std::move(choices)) {}
  std::size_t choose(const decision& d) override {
    if (d.enabled.size() == 1) return d.enabled.front();
    if (next_ < choices_.size()) return choices_[next_++];
    ordered_options(d, options_);
    return options_.front();
  }

 private:
  std::vector<std::size_t> choices_;
  std::vector<std::size_t> options_;
  std::size_t next_ = 0;
};

/// "random:seed=S", and ":w=1" with weak memory.
[[nodiscard]] inline std::string random_schedule(std::uint64_t seed, bool weak) {
  return "random:seed=" + std::to_string(seed) + (weak ? ":w=1" : "");
}

/// "pct:seed=S:d=D:k=K", and ":w=1" with weak memory.
[[nodiscard]] inline std::string pct_schedule(std::uint64_t seed, std::size_t depth, std::size_t steps,
                                              bool weak) {
  return "pct:seed=" + std::to_string(seed) + ":d=" + std::to_string(depth) + ":k=" + std::to_string(steps) +
         (weak ? ":w=1" : "");
}

/// "s:0.1.1.0" (the thread chosen at each decision that had a choice; "0*5" repeats 0 five
/// times).
[[nodiscard]] inline std::string list_schedule(const std::vector<std::size_t>& choices) {
  std::string out = "s:";
  for (std::size_t i = 0; i != choices.size();) {
    std::size_t n = 1;
    while (i + n != choices.size() && choices[i + n] == choices[i]) ++n;
    if (i != 0) out += '.';
    out += std::to_string(choices[i]);
    if (n >= 3) {
      out += '*' + std::to_string(n);
    } else if (n == 2) {
      out += '.' + std::to_string(choices[i]);
    }
    i += n;
  }
  return out;
}

/// A number of a replay string.
[[nodiscard]] inline std::uint64_t schedule_number(std::string_view text, std::string_view whole) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) {
    throw std::invalid_argument("asyncband::testing: bad replay string \"" + std::string(whole) + "\"");
  }
  return value;
}

/// The strategy that replays `schedule` (a string of failure::schedule); std::invalid_argument
/// if it is none.
[[nodiscard]] inline std::unique_ptr<chooser> replay_chooser(std::string_view schedule) {
  const auto bad = [&] {
    return std::invalid_argument("asyncband::testing: bad replay string \"" + std::string(schedule) + "\"");
  };
  if (schedule.starts_with("s:")) {
    std::vector<std::size_t> choices;
    std::string_view rest = schedule.substr(2);
    while (!rest.empty()) {
      const std::size_t dot = rest.find('.');
      const std::string_view item = rest.substr(0, dot);
      const std::size_t star = item.find('*');
      const auto thread = as<std::size_t>(schedule_number(item.substr(0, star), schedule));
      const std::uint64_t times =
          star == std::string_view::npos ? 1 : schedule_number(item.substr(star + 1), schedule);
      if (times > 1'000'000) throw bad();
      choices.insert(choices.end(), as<std::size_t>(times), thread);
      rest = dot == std::string_view::npos ? std::string_view{} : rest.substr(dot + 1);
    }
    return std::make_unique<list_chooser>(std::move(choices));
  }
  // "random:seed=S" or "pct:seed=S:d=D:k=K": key=value fields after the name.
  const std::size_t colon = schedule.find(':');
  const std::string_view name = schedule.substr(0, colon);
  std::uint64_t seed = 0;
  std::uint64_t depth = 0;
  std::uint64_t steps = 0;
  bool has_seed = false;
  bool has_depth = false;
  bool has_steps = false;
  bool weak = false;
  std::string_view rest = colon == std::string_view::npos ? std::string_view{} : schedule.substr(colon + 1);
  while (!rest.empty()) {
    const std::size_t next = rest.find(':');
    const std::string_view field = rest.substr(0, next);
    const std::size_t eq = field.find('=');
    if (eq == std::string_view::npos) throw bad();
    const std::string_view key = field.substr(0, eq);
    const std::uint64_t value = schedule_number(field.substr(eq + 1), schedule);
    if (key == "seed") {
      seed = value;
      has_seed = true;
    } else if (key == "d") {
      depth = value;
      has_depth = true;
    } else if (key == "k") {
      steps = value;
      has_steps = true;
    } else if (key == "w" && value <= 1) {
      weak = value == 1;
    } else {
      throw bad();
    }
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
  }
  if (name == "random" && has_seed && !has_depth && !has_steps)
    return std::make_unique<random_chooser>(seed, weak);
  if (name == "pct" && has_seed && has_depth && has_steps && depth >= 1 && depth <= 1000) {
    return std::make_unique<pct_chooser>(seed, as<std::size_t>(depth), as<std::size_t>(steps), weak);
  }
  throw bad();
}

}  // namespace asyncband::testing::detail
