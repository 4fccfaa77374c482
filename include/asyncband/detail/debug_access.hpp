// SPDX-License-Identifier: Apache-2.0
// asyncband/detail/debug_access.hpp: the one name through which asyncband/debug.hpp reads the
// private state a primitive's debug output shows. Only declared here: a class grants it with
// `friend struct asyncband::detail::debug_access;`, and asyncband/debug.hpp defines it, so
// that a program that never prints a primitive compiles none of it.
#pragma once

namespace asyncband::detail {
struct debug_access;
}  // namespace asyncband::detail
