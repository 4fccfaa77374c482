# SPDX-License-Identifier: Apache-2.0
# cmake -DSOURCE_DIR=... -DWORK_DIR=... [-DGENERATOR=...] [-DCXX_COMPILER=...] -P run_install_test.cmake
#
# 1. configures asyncband (tests/bench/examples off) with an install prefix under WORK_DIR,
# 2. installs it,
# 3. configures + builds the consumer in tests/install against that prefix,
# 4. runs the consumer.
foreach(var SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(lib_build "${WORK_DIR}/lib-build")
set(consumer_build "${WORK_DIR}/consumer-build")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(common_args "")
if(GENERATOR)
  list(APPEND common_args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()

function(run_step what)
  message(STATUS "install test: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: '${what}' failed (${rc})")
  endif()
endfunction()

run_step("configure asyncband"
  "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${lib_build}" ${common_args}
  "-DCMAKE_INSTALL_PREFIX=${prefix}"
  -DASYNCBAND_BUILD_TESTS=OFF -DASYNCBAND_BUILD_BENCH=OFF -DASYNCBAND_BUILD_EXAMPLES=OFF)
run_step("install asyncband" "${CMAKE_COMMAND}" --install "${lib_build}")
run_step("configure consumer"
  "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/install" -B "${consumer_build}" ${common_args}
  "-DCMAKE_PREFIX_PATH=${prefix}")
run_step("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}")

find_program(consumer_exe NAMES consumer PATHS "${consumer_build}" "${consumer_build}/Debug" NO_DEFAULT_PATH REQUIRED)
run_step("run consumer" "${consumer_exe}")
message(STATUS "install test: OK")
