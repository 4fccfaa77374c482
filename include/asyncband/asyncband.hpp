// asyncband/asyncband.hpp: every core primitive. The runtime headers (asyncband/runtime/*) and
// the Asio bridge (asyncband/asio.hpp) are separate: the core depends on the standard library alone.
#pragma once

#include "auto_reset_event.hpp"
#include "barrier.hpp"
#include "block_on.hpp"
#include "condvar.hpp"
#include "latch.hpp"
#include "manual_reset_event.hpp"
#include "mpsc/bounded.hpp"
#include "mpsc/unbounded.hpp"
#include "mutex.hpp"
#include "oneshot.hpp"
#include "phaser.hpp"
#include "result.hpp"
#include "rwlock.hpp"
#include "scheduler.hpp"
#include "semaphore.hpp"
#include "shutdown.hpp"
#include "wait_group.hpp"
