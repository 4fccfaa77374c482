// SPDX-License-Identifier: Apache-2.0
// asyncband/version.hpp: the library's version, and the check that the compiler is in C++20
// mode. Every public header includes it first, so a build without C++20 stops here with one
// message instead of hundreds of lines about coroutines.
/// \file
/// The library's version, as macros for `#if` and as asyncband::version.
#pragma once

/// The major version: a change of it may break source compatibility.
#define ASYNCBAND_VERSION_MAJOR 0
/// The minor version: additions; within 0.x, also changes that break.
#define ASYNCBAND_VERSION_MINOR 2
/// The patch version: fixes only.
#define ASYNCBAND_VERSION_PATCH 0
/// The version as one number, MAJOR * 10000 + MINOR * 100 + PATCH, for `#if` comparisons.
#define ASYNCBAND_VERSION \
  (ASYNCBAND_VERSION_MAJOR * 10000 + ASYNCBAND_VERSION_MINOR * 100 + ASYNCBAND_VERSION_PATCH)

// MSVC reports the language level in _MSVC_LANG (__cplusplus only with /Zc:__cplusplus).
#if defined(_MSVC_LANG)
#define ASYNCBAND_DETAIL_CPLUSPLUS _MSVC_LANG
#else
#define ASYNCBAND_DETAIL_CPLUSPLUS __cplusplus
#endif

#if ASYNCBAND_DETAIL_CPLUSPLUS < 202002L
#error "asyncband needs C++20: compile with -std=c++20 (g++ 11+, clang 14+) or /std:c++20 (MSVC)"
// #error lets the compiler go on, into hundreds of errors about coroutines; a missing include
// is fatal, so the build stops right after the message above.
#include <asyncband_stops_here_it_needs_cpp20>  // IWYU pragma: keep
#elif !defined(__cpp_impl_coroutine)
#error "asyncband needs a compiler with C++20 coroutines (g++ 11+ or clang 14+, with -std=c++20)"
#include <asyncband_stops_here_it_needs_coroutines>  // IWYU pragma: keep
#endif

#undef ASYNCBAND_DETAIL_CPLUSPLUS

/// asyncband: async coordination primitives for C++20 coroutines, each in its header
/// (asyncband/asyncband.hpp includes them all), with their result types. The Boost.Asio bridge
/// (asyncband::asio) and the optional runtime (asyncband::runtime) have namespaces of their own.
namespace asyncband {

/// The version this header declares, as the three numbers of ASYNCBAND_VERSION_*.
struct version_info {
  int major;  ///< ASYNCBAND_VERSION_MAJOR
  int minor;  ///< ASYNCBAND_VERSION_MINOR
  int patch;  ///< ASYNCBAND_VERSION_PATCH
};

/// The version of the headers in use (the same at compile time and at run time: header only).
inline constexpr version_info version{ASYNCBAND_VERSION_MAJOR, ASYNCBAND_VERSION_MINOR,
                                      ASYNCBAND_VERSION_PATCH};

}  // namespace asyncband
