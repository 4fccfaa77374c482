// SPDX-License-Identifier: Apache-2.0
// Tests for asyncband's stop token: the public names (std::'s where the standard library has
// them), and asyncband's own implementation (detail/fallback_stop.hpp), which is compiled and
// tested on every build, whichever the public names are. The contract tests are typed: they run
// on the standard library's stop token too where it exists, which checks the tests themselves.
#include "asyncband/stop_token.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "asyncband/detail/fallback_stop.hpp"
#include "asyncband/detail/spin_lock.hpp"
#include "support/stress.hpp"

namespace {

namespace fb = asyncband::detail::fallback_stop;
using asyncband::detail::spin_until;
using namespace std::chrono_literals;
// The standard library's names, spelt so that a sed of std::stop_token to asyncband's spares them.
namespace stdlib = std;

// ---------------------------------------------------------------------------------------------
// The public names

#if ASYNCBAND_STD_STOP_TOKEN
static_assert(std::is_same_v<asyncband::stop_token, stdlib::stop_token>);
static_assert(std::is_same_v<asyncband::stop_source, stdlib::stop_source>);
static_assert(std::is_same_v<asyncband::stop_callback<void (*)()>, stdlib::stop_callback<void (*)()>>);
static_assert(std::is_same_v<asyncband::nostopstate_t, stdlib::nostopstate_t>);
#else
static_assert(std::is_same_v<asyncband::stop_token, fb::stop_token>);
static_assert(std::is_same_v<asyncband::stop_source, fb::stop_source>);
static_assert(std::is_same_v<asyncband::stop_callback<void (*)()>, fb::stop_callback<void (*)()>>);
static_assert(std::is_same_v<asyncband::nostopstate_t, fb::nostopstate_t>);
#endif

TEST(StopTokenNames, DeduceTheCallbackTypeAndRunIt) {
  asyncband::stop_source src;
  int ran = 0;
  const asyncband::stop_callback cb(src.get_token(), [&ran] { ++ran; });
  static_assert(std::is_class_v<std::remove_const_t<decltype(cb)>::callback_type>);  // the closure type
  EXPECT_TRUE(src.request_stop());
  EXPECT_EQ(ran, 1);
  const asyncband::stop_source none(asyncband::nostopstate);
  EXPECT_FALSE(none.stop_possible());
}

TEST(StopTokenFallback, DeducesTheCallbackType) {
  fb::stop_source src;
  int ran = 0;
  const fb::stop_callback cb(src.get_token(), [&ran] { ++ran; });
  static_assert(std::is_class_v<std::remove_const_t<decltype(cb)>::callback_type>);
  src.request_stop();
  EXPECT_EQ(ran, 1);
}

// ---------------------------------------------------------------------------------------------
// The contract, on asyncband's implementation and on the standard library's

/// One implementation's names, for the typed tests.
template <class Source, template <class> class Callback, const auto& NoState>
struct impl {
  using source = Source;
  using token = decltype(Source().get_token());
  template <class F>
  using callback = Callback<F>;
  static constexpr const auto& nostopstate = NoState;
};

using fallback_impl = impl<fb::stop_source, fb::stop_callback, fb::nostopstate>;
#if defined(__cpp_lib_jthread)
using impls =
    ::testing::Types<fallback_impl, impl<stdlib::stop_source, stdlib::stop_callback, stdlib::nostopstate>>;
#else
using impls = ::testing::Types<fallback_impl>;
#endif

struct impl_names {
  template <class T>
  static std::string GetName(int /*unused*/) {
    return std::is_same_v<T, fallback_impl> ? "asyncband" : "std";
  }
};

template <class Impl>
class StopToken : public ::testing::Test {
 protected:
  using source = typename Impl::source;
  using token = typename Impl::token;
  template <class F>
  using callback = typename Impl::template callback<F>;
  using fn_callback = callback<std::function<void()>>;
};
TYPED_TEST_SUITE(StopToken, impls, impl_names);

TYPED_TEST(StopToken, ADefaultTokenHasNoState) {
  const typename TestFixture::token t;
  EXPECT_FALSE(t.stop_possible());
  EXPECT_FALSE(t.stop_requested());
  EXPECT_TRUE(t == typename TestFixture::token());
  bool ran = false;
  const typename TestFixture::fn_callback cb(t, [&ran] { ran = true; });
  EXPECT_FALSE(ran);
}

TYPED_TEST(StopToken, ASourceWithoutStateCannotRequest) {
  typename TestFixture::source s(TypeParam::nostopstate);
  EXPECT_FALSE(s.stop_possible());
  EXPECT_FALSE(s.stop_requested());
  EXPECT_FALSE(s.request_stop());
  EXPECT_FALSE(s.get_token().stop_possible());
  EXPECT_TRUE(s.get_token() == typename TestFixture::token());
}

TYPED_TEST(StopToken, OnlyTheFirstRequestCountsAndEveryCopySeesIt) {
  typename TestFixture::source s;
  const typename TestFixture::source copy = s;
  const typename TestFixture::token t = s.get_token();
  EXPECT_TRUE(s.stop_possible());
  EXPECT_TRUE(t.stop_possible());
  EXPECT_FALSE(t.stop_requested());
  EXPECT_TRUE(copy == s);
  EXPECT_TRUE(t == copy.get_token());
  EXPECT_FALSE(s == typename TestFixture::source());

  EXPECT_TRUE(copy.request_stop());
  EXPECT_FALSE(s.request_stop());
  EXPECT_FALSE(copy.request_stop());
  EXPECT_TRUE(s.stop_requested());
  EXPECT_TRUE(t.stop_requested());
  EXPECT_TRUE(t.stop_possible());
}

TYPED_TEST(StopToken, ATokenOutlivesItsSourcesAndKnowsWhetherAStopCanCome) {
  typename TestFixture::token never;
  typename TestFixture::token stopped;
  {
    typename TestFixture::source a;
    const typename TestFixture::source b = a;
    never = a.get_token();
    typename TestFixture::source c;
    stopped = c.get_token();
    c.request_stop();
    EXPECT_TRUE(never.stop_possible());
  }
  EXPECT_FALSE(never.stop_possible());  // every source is gone, none requested
  EXPECT_FALSE(never.stop_requested());
  EXPECT_TRUE(stopped.stop_possible());  // requested before the source went
  EXPECT_TRUE(stopped.stop_requested());
}

TYPED_TEST(StopToken, MovesAssignmentsAndSwapsCarryTheState) {
  typename TestFixture::source a;
  typename TestFixture::source b(TypeParam::nostopstate);
  const typename TestFixture::token ta = a.get_token();

  typename TestFixture::source moved(std::move(a));
  EXPECT_FALSE(a.stop_possible());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_TRUE(moved.get_token() == ta);

  b = moved;  // copy assignment: a second source of the state
  EXPECT_TRUE(b == moved);
  moved = typename TestFixture::source(TypeParam::nostopstate);  // move assignment: moved has none
  EXPECT_FALSE(moved.stop_possible());
  EXPECT_TRUE(b.get_token() == ta);
  moved = std::move(b);
  EXPECT_FALSE(b.stop_possible());  // NOLINT(bugprone-use-after-move)
  EXPECT_TRUE(moved.get_token() == ta);

  typename TestFixture::source c;
  typename TestFixture::source d(TypeParam::nostopstate);
  typename TestFixture::token tc = c.get_token();
  typename TestFixture::token td;
  swap(c, d);
  EXPECT_FALSE(c.stop_possible());
  EXPECT_TRUE(d.get_token() == tc);
  swap(tc, td);
  EXPECT_FALSE(tc.stop_possible());
  EXPECT_TRUE(td == d.get_token());
  c = d;
  const typename TestFixture::source& same = c;
  c = same;  // self-assignment keeps the state and the count
  { const typename TestFixture::source gone = std::move(d); }
  EXPECT_TRUE(td.stop_possible());  // c is left
  EXPECT_TRUE(c.request_stop());
  EXPECT_TRUE(td.stop_requested());
}

TYPED_TEST(StopToken, CallbacksRunOnceOnTheRequestingThread) {
  typename TestFixture::source s;
  const std::thread::id here = std::this_thread::get_id();
  int first = 0;
  int second = 0;
  bool on_this_thread = true;
  const typename TestFixture::fn_callback a(s.get_token(), [&] {
    ++first;
    on_this_thread = on_this_thread && std::this_thread::get_id() == here;
  });
  typename TestFixture::token t = s.get_token();
  const typename TestFixture::fn_callback b(std::move(t), [&] { ++second; });  // from an rvalue token
  EXPECT_EQ(first + second, 0);
  EXPECT_TRUE(s.request_stop());
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
  EXPECT_TRUE(on_this_thread);
  EXPECT_FALSE(s.request_stop());
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 1);
}

TYPED_TEST(StopToken, ACallbackRegisteredAfterTheRequestRunsInItsConstructor) {
  typename TestFixture::source s;
  s.request_stop();
  int ran = 0;
  const typename TestFixture::fn_callback cb(s.get_token(), [&ran] { ++ran; });
  EXPECT_EQ(ran, 1);
  s.request_stop();
  EXPECT_EQ(ran, 1);
}

TYPED_TEST(StopToken, ADeregisteredCallbackNeverRuns) {
  typename TestFixture::source s;
  int ran = 0;
  {
    const typename TestFixture::fn_callback cb(s.get_token(), [&ran] { ++ran; });
  }
  std::optional<typename TestFixture::fn_callback> kept;
  kept.emplace(s.get_token(), [&ran] { ran += 10; });
  s.request_stop();
  EXPECT_EQ(ran, 10);
}

TYPED_TEST(StopToken, ACallbackOnATokenThatCanNeverStopNeverRuns) {
  typename TestFixture::token t;
  {
    const typename TestFixture::source s;
    t = s.get_token();
  }
  bool ran = false;
  const typename TestFixture::fn_callback cb(t, [&ran] { ran = true; });
  EXPECT_FALSE(ran);
}

TYPED_TEST(StopToken, TheCallbackIsInvokedAsAnRvalue) {
  struct rvalue_only {
    int* ran;
    void operator()() && { ++*ran; }
  };
  typename TestFixture::source s;
  int ran = 0;
  const typename TestFixture::template callback<rvalue_only> cb(s.get_token(), rvalue_only{&ran});
  s.request_stop();
  EXPECT_EQ(ran, 1);
}

TYPED_TEST(StopToken, ACallbackMayDeregisterItselfFromInside) {
  typename TestFixture::source s;
  std::optional<typename TestFixture::fn_callback> self;
  int ran = 0;
  self.emplace(s.get_token(), [&self, &ran] {
    ++ran;
    self.reset();  // on the requesting thread: must not wait for itself
  });
  EXPECT_TRUE(s.request_stop());
  EXPECT_EQ(ran, 1);
  EXPECT_FALSE(self.has_value());
}

TYPED_TEST(StopToken, ACallbackMayDeregisterAnotherThatHasNotRun) {
  typename TestFixture::source s;
  std::optional<typename TestFixture::fn_callback> a;
  std::optional<typename TestFixture::fn_callback> b;
  int ran = 0;
  // The order is unspecified: whichever runs first deregisters the other, so exactly one runs.
  a.emplace(s.get_token(), [&b, &ran] {
    ++ran;
    b.reset();
  });
  b.emplace(s.get_token(), [&a, &ran] {
    ++ran;
    a.reset();
  });
  s.request_stop();
  EXPECT_EQ(ran, 1);
  EXPECT_NE(a.has_value(), b.has_value());
}

TYPED_TEST(StopToken, ACallbackMayRegisterAnotherWhichRunsAtOnce) {
  typename TestFixture::source s;
  std::optional<typename TestFixture::fn_callback> late;
  int late_ran = 0;
  bool requested_again = true;
  const typename TestFixture::fn_callback cb(s.get_token(), [&] {
    late.emplace(s.get_token(), [&late_ran] { ++late_ran; });
    EXPECT_EQ(late_ran, 1);  // already stopped: ran inside emplace
    requested_again = s.request_stop();
  });
  EXPECT_TRUE(s.request_stop());
  EXPECT_EQ(late_ran, 1);
  EXPECT_FALSE(requested_again);
}

TYPED_TEST(StopToken, ConcurrentRequestsMakeOneRequestAndRunEachCallbackOnce) {
  asyncband_test::repeat_for(200, 2s, [](int /*unused*/) {
    typename TestFixture::source s;
    std::atomic<int> ran{0};
    std::optional<typename TestFixture::fn_callback> a;
    std::optional<typename TestFixture::fn_callback> b;
    a.emplace(s.get_token(), [&ran] { ran.fetch_add(1); });
    b.emplace(s.get_token(), [&ran] { ran.fetch_add(1); });
    std::atomic<int> won{0};
    std::thread other([&] { won.fetch_add(s.request_stop() ? 1 : 0); });
    won.fetch_add(s.request_stop() ? 1 : 0);
    other.join();
    EXPECT_EQ(won.load(), 1);
    EXPECT_EQ(ran.load(), 2);
  });
}

// The destructor of a callback running on another thread returns only after the callback has
// returned. The callback watches, for a bounded number of yields after the destroying thread
// announced itself, whether the destructor returned early: a destructor that does not wait is
// caught there (and by TSan/ASan as a use of a freed callback).
TYPED_TEST(StopToken, DestroyingACallbackRunningOnAnotherThreadWaitsForIt) {
  asyncband_test::repeat_for(20, 2s, [](int /*unused*/) {
    typename TestFixture::source s;
    std::atomic<bool> entered{false};
    std::atomic<bool> destroying{false};
    std::atomic<bool> destructor_returned{false};
    std::atomic<bool> returned_early{false};
    std::atomic<bool> callback_done{false};
    // The callback's own heap memory, which it still writes after the destroyer started.
    auto cb = std::make_unique<typename TestFixture::fn_callback>(
        s.get_token(), [&, touched = std::vector<int>()]() mutable {
          entered.store(true);
          spin_until([&] { return destroying.load(); });
          for (int i = 0; i != 1000 && !returned_early.load(); ++i) {
            touched.push_back(i);
            if (destructor_returned.load()) returned_early.store(true);
            std::this_thread::yield();
          }
          callback_done.store(true);
        });
    std::thread requester([&s] { s.request_stop(); });
    spin_until([&] { return entered.load(); });
    destroying.store(true);
    cb.reset();  // must wait for the callback running on `requester`
    destructor_returned.store(true);
    EXPECT_TRUE(callback_done.load());
    requester.join();
    EXPECT_FALSE(returned_early.load());
  });
}

// Callbacks registered and deregistered on several threads while another requests the stop
// (for TSan): each runs at most once, exactly once if its registration saw the stop requested,
// and never after its destructor returned.
TYPED_TEST(StopToken, RegistrationsRaceARequest) {
  constexpr int kThreads = 2;
  asyncband_test::repeat_for(100, 3s, [](int /*unused*/) {
    typename TestFixture::source s;
    std::atomic<bool> go{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t != kThreads; ++t) {
      threads.emplace_back([&] {
        spin_until([&] { return go.load(); });
        for (int i = 0; i != 50; ++i) {
          std::atomic<int> ran{0};
          const bool stopped_before = s.stop_requested();
          {
            const typename TestFixture::fn_callback cb(s.get_token(), [&ran] { ran.fetch_add(1); });
            if (stopped_before && ran.load() != 1) failures.fetch_add(1);
          }
          const int after = ran.load();
          if (after > 1) failures.fetch_add(1);
          std::this_thread::yield();
          if (ran.load() != after) failures.fetch_add(1);
        }
      });
    }
    go.store(true);
    std::this_thread::yield();
    s.request_stop();
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
  });
}

TYPED_TEST(StopToken, CopiesOnManyThreadsCountTheSources) {
  std::optional<typename TestFixture::source> s;
  s.emplace();
  const typename TestFixture::token t = s->get_token();
  {
    std::vector<std::thread> threads;
    for (int i = 0; i != 4; ++i) {
      threads.emplace_back([copy = *s] {
        for (int j = 0; j != 1000; ++j) {
          const typename TestFixture::source again = copy;
          const typename TestFixture::token tok = again.get_token();
          EXPECT_TRUE(tok.stop_possible());
        }
      });
    }
    for (auto& th : threads) th.join();
  }
  EXPECT_TRUE(t.stop_possible());
  s.reset();
  EXPECT_FALSE(t.stop_possible());
}

// ---------------------------------------------------------------------------------------------
// asyncband's implementation only

// Assigning over a source ends its association with its old state, as the standard specifies
// (move assignment is `stop_source(std::move(rhs)).swap(*this)`). Not a typed test: libstdc++ 12
// defaults its move assignment, which leaves the overwritten source counted, so a token of the
// old state goes on reporting stop_possible().
TEST(StopTokenFallback, AssignmentOverASourceDropsItFromItsOldState) {
  fb::stop_source a;
  const fb::stop_token t = a.get_token();
  fb::stop_source b = a;
  a = fb::stop_source(fb::nostopstate);  // move assignment
  EXPECT_TRUE(t.stop_possible());        // b is left
  const fb::stop_source other;
  b = other;  // copy assignment
  EXPECT_FALSE(t.stop_possible());
  EXPECT_FALSE(t.stop_requested());
}

// A callback may destroy everything: its own stop_callback and the last stop_source, whose
// request_stop() is still running. The state must outlive the request (ASan checks).
TEST(StopTokenFallback, ACallbackMayDestroyTheLastSourceAndItself) {
  struct owner {
    fb::stop_source source;
    std::optional<fb::stop_callback<std::function<void()>>> cb;
  };
  auto o = std::make_unique<owner>();
  int ran = 0;
  o->cb.emplace(o->source.get_token(), [&o, &ran] {
    ++ran;
    o.reset();
  });
  const fb::stop_source& source = o->source;
  EXPECT_TRUE(source.request_stop());
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(o, nullptr);
}

// A token or a source is one pointer; a callback carries its list node (nothing allocated).
static_assert(sizeof(fb::stop_token) == sizeof(void*));
static_assert(sizeof(fb::stop_source) == sizeof(void*));

}  // namespace
