// SPDX-License-Identifier: Apache-2.0
// asyncband/asyncband.hpp: every core primitive. The runtime headers (asyncband/runtime/*) and
// the Asio bridge (asyncband/asio.hpp) are separate: the core depends on the standard library alone.
#pragma once

#include "version.hpp"  // first: a build below C++20 stops there, with one message

#include "auto_reset_event.hpp"
#include "barrier.hpp"
#include "block_on.hpp"
#include "broadcast.hpp"
#include "condvar.hpp"
#include "latch.hpp"
#include "manual_reset_event.hpp"
#include "mpmc/bounded.hpp"
#include "mpmc/unbounded.hpp"
#include "mpsc/bounded.hpp"
#include "mpsc/unbounded.hpp"
#include "mutex.hpp"
#include "once.hpp"
#include "once_cell.hpp"
#include "once_map.hpp"
#include "oneshot.hpp"
#include "phaser.hpp"
#include "result.hpp"
#include "resume_on.hpp"
#include "rwlock.hpp"
#include "scheduler.hpp"
#include "semaphore.hpp"
#include "shutdown.hpp"
#include "singleflight.hpp"
#include "stop_token.hpp"
#include "wait_group.hpp"
#include "watch.hpp"
#include "when_any.hpp"
