// SPDX-License-Identifier: Apache-2.0
// asyncband/stop_token.hpp: the stop token every cancellable wait takes. asyncband::stop_token,
// stop_source, stop_callback and nostopstate are the standard library's std:: ones wherever it
// has them (<version> defines __cpp_lib_jthread: libstdc++ 10+, libc++ 17+ with its experimental
// library, MSVC), so code written with std::stop_token (a std::jthread's token, say) passes it
// unchanged. Where the standard library lacks them (libc++ 16 and older), they are asyncband's
// own, with the same contract (asyncband/detail/fallback_stop.hpp).
/// \file
/// asyncband::stop_token, stop_source, stop_callback: std::'s, or asyncband's own where the
/// standard library has none (libc++ 16 and older).
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include <version>

/// Define as 1 (the same in every translation unit of a program) to use asyncband's own stop
/// token even where the standard library has one; for testing. Default 0.
/// A model build (ASYNCBAND_MODEL) uses asyncband's own, whose atomics the explorer sees.
#ifndef ASYNCBAND_OWN_STOP_TOKEN
#if defined(ASYNCBAND_MODEL)
#define ASYNCBAND_OWN_STOP_TOKEN 1
#else
#define ASYNCBAND_OWN_STOP_TOKEN 0
#endif
#endif

#if defined(__cpp_lib_jthread)
#define ASYNCBAND_DETAIL_HAS_STD_STOP_TOKEN 1
#else
#define ASYNCBAND_DETAIL_HAS_STD_STOP_TOKEN 0
#endif

/// 1 if asyncband::stop_token and its family are the standard library's, 0 if asyncband's own.
#define ASYNCBAND_STD_STOP_TOKEN (ASYNCBAND_DETAIL_HAS_STD_STOP_TOKEN && !ASYNCBAND_OWN_STOP_TOKEN)

#if ASYNCBAND_STD_STOP_TOKEN
#include <stop_token>
#else
#include "detail/fallback_stop.hpp"
#endif

namespace asyncband {

namespace detail {
#if ASYNCBAND_STD_STOP_TOKEN
namespace stop_impl = std;
#else
namespace stop_impl = fallback_stop;
#endif
}  // namespace detail

/// Tells whether a stop was requested and lets callbacks be registered; cannot request one.
/// std::stop_token, or a type with its contract where the standard library has none.
using detail::stop_impl::stop_token;
/// Owns a stop state and requests the stop: std::stop_source, or a type with its contract.
using detail::stop_impl::stop_source;
/// Runs a callable on the thread that requests a stop (at once if it was requested already);
/// its destructor waits for the callable if it runs on another thread. std::stop_callback, or a
/// class template with its contract.
using detail::stop_impl::stop_callback;
/// The tag type of nostopstate.
using detail::stop_impl::nostopstate_t;
/// Tag for a stop_source without a stop state.
using detail::stop_impl::nostopstate;

}  // namespace asyncband
