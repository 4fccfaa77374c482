# SPDX-License-Identifier: Apache-2.0
# cmake -DCXX_COMPILER=... -DCXX_COMPILER_ID=GNU|Clang [-DCXX_FLAGS=...] -DINCLUDE_DIR=... -DWORK_DIR=...
#       -P run_nodiscard_test.cmake
#
# A co_await forgotten on a call that returns an awaiter (`m.lock();`, `tx.send(v);`) starts
# nothing: the awaiter types are [[nodiscard("co_await it: ...")]]. Compiles one coroutine that
# awaits every such call, to show the snippets are otherwise valid, and one that drops every call,
# each on its own line, and expects an error with that reason at each of those lines.
foreach(var CXX_COMPILER CXX_COMPILER_ID INCLUDE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(prologue [=[
#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/stop_token.hpp>
#include <utility>

inline int one() { return 1; }  // initialisers (the case list cannot hold a ';')
inline void nothing() {}
inline bool positive(int v) { return v > 0; }

asyncband::runtime::task<void> body(asyncband::manual_reset_event& e, asyncband::latch& l,
                                    asyncband::semaphore& s, asyncband::mutex<int>& m,
                                    asyncband::rwlock<int>& rw, asyncband::condvar& cv,
                                    asyncband::mpsc::sender<int>& tx, asyncband::once& o,
                                    asyncband::once_cell<int>& c, asyncband::singleflight::group<int, int>& g,
                                    asyncband::watch::sender<int>& wtx, asyncband::watch::receiver<int>& wrx,
                                    asyncband::stop_token stop) {
  (void)e; (void)l; (void)s; (void)m; (void)rw; (void)cv; (void)tx; (void)o; (void)c; (void)g; (void)stop;
  (void)wtx; (void)wrx;
]=])
set(epilogue "  co_return;\n}\n")

# name|statement|whether the message must be the awaiter type's reason
set(cases
  "event_wait|e.wait()|1"
  "event_wait_stop|e.wait(stop)|1"
  "latch_wait|l.wait()|1"
  "semaphore_acquire|s.acquire()|1"
  "mutex_lock|m.lock()|1"
  "mutex_lock_stop|m.lock(stop)|1"
  "rwlock_write|rw.write()|1"
  "condvar_wait|cv.wait(co_await m.lock())|1"
  "channel_send|tx.send(1)|1"
  "channel_reserve|tx.reserve()|1"
  "once_call_once|o.call_once(nothing, stop)|1"
  "once_cell_get_or_init|c.get_or_init(one)|1"
  "singleflight_work|g.work(1, one)|1"
  "watch_changed|wrx.changed()|1"
  "watch_changed_stop|wrx.changed(stop)|1"
  "watch_wait_for|wrx.wait_for(positive)|1"
  "watch_closed_stop|wtx.closed(stop)|1")

separate_arguments(flags UNIX_COMMAND "${CXX_FLAGS}")  # the build's CMAKE_CXX_FLAGS (-stdlib=libc++)
list(APPEND flags -std=c++20 -fsyntax-only -Wall -Wextra -Werror "-I${INCLUDE_DIR}")
if(CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND flags -ferror-limit=0)  # every case reports (clang stops at 20 errors otherwise)
endif()

function(compile name source out_rc out_log)
  set(file "${WORK_DIR}/${name}.cpp")
  file(WRITE "${file}" "${source}")
  execute_process(COMMAND "${CXX_COMPILER}" ${flags} "${file}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_log} "${out}" PARENT_SCOPE)
endfunction()

# The control: every call awaited compiles cleanly.
set(awaited "${prologue}")
foreach(c IN LISTS cases)
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 1 statement)
  string(APPEND awaited "  { auto r = co_await ${statement}; (void)r; }\n")
endforeach()
string(REPLACE "auto r = co_await e.wait(); (void)r;" "co_await e.wait();" awaited "${awaited}")
string(REPLACE "auto r = co_await l.wait(); (void)r;" "co_await l.wait();" awaited "${awaited}")
string(APPEND awaited "${epilogue}")
compile(all_awaited "${awaited}" rc log)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nodiscard test: the control (every call awaited) does not compile:\n${log}")
endif()

# Every dropped call in one translation unit (one compile instead of one per case: the test runs
# in each test build), each on a line of its own; each line must have its own diagnostic.
set(dropped "${prologue}")
string(REGEX MATCHALL "\n" prologue_lines "${prologue}")
list(LENGTH prologue_lines line)
set(case_lines "")
foreach(c IN LISTS cases)
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 1 statement)
  math(EXPR line "${line} + 1")
  list(APPEND case_lines ${line})
  string(APPEND dropped "  { ${statement}; }\n")
endforeach()
string(APPEND dropped "${epilogue}")
compile(all_dropped "${dropped}" rc log)
if(rc EQUAL 0)
  message(FATAL_ERROR "nodiscard test: every call dropped, and it compiled")
endif()

set(failures "")
foreach(c line IN ZIP_LISTS cases case_lines)
  string(REPLACE "|" ";" parts "${c}")
  list(GET parts 0 name)
  list(GET parts 1 statement)
  list(GET parts 2 wants_reason)
  # The diagnostic's first line: "<file>:<line>:<column>: error: ... nodiscard ... [reason]".
  string(REGEX MATCH "all_dropped\\.cpp:${line}:[0-9]+: error: [^\n]*" diagnostic "${log}")
  if(NOT diagnostic)
    string(APPEND failures "  ${name}: `${statement};` (line ${line}) compiled\n")
  elseif(NOT diagnostic MATCHES "nodiscard")
    string(APPEND failures "  ${name}: failed, but not for nodiscard: ${diagnostic}\n")
  elseif(wants_reason AND NOT diagnostic MATCHES "co_await it: ")
    string(APPEND failures "  ${name}: no 'co_await it: ...' reason in: ${diagnostic}\n")
  else()
    message(STATUS "nodiscard test: ${name}: rejected as expected")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "nodiscard test: a dropped awaiter was not diagnosed:\n${failures}\n${log}")
endif()
message(STATUS "nodiscard test: OK")
