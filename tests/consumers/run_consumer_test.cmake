# SPDX-License-Identifier: Apache-2.0
# cmake -DMODE=... -DSOURCE_DIR=... -DWORK_DIR=... [-DGENERATOR=...] [-DCXX_COMPILER=...]
#       -P run_consumer_test.cmake
#
# Builds and runs tests/consumers/main.cpp the way a downstream project would get asyncband:
#   find_package          install asyncband (no tests, benchmarks, examples), then a project
#                         using find_package(asyncband CONFIG), with the asio component when
#                         Boost is installed; and the same program built with the flags of the
#                         installed pkg-config file
#   subdirectory          a project that add_subdirectory()s the sources; installing it must
#                         install no asyncband file
#   fetchcontent          a project that FetchContent()s a release-style archive of the sources
#   include_path          the compiler alone, with -I include (no CMake)
#   without_dependencies  the top-level project with GoogleTest, Google Benchmark, oneTBB and
#                         Boost hidden: it must configure, build and install, skipping what
#                         needs them
cmake_minimum_required(VERSION 3.21)  # the policies of a script: IN_LIST, ...

foreach(var MODE SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "${var} is required")
  endif()
endforeach()

set(consumers "${SOURCE_DIR}/tests/consumers")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(common_args "")
if(GENERATOR)
  list(APPEND common_args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
else()
  set(CXX_COMPILER c++)
endif()

# run_step(what [OUTPUT_VARIABLE var] COMMAND...): runs it, fails the test if it fails.
function(run_step what)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT_VARIABLE" "")
  message(STATUS "consumer test (${MODE}): ${what}")
  execute_process(COMMAND ${arg_UNPARSED_ARGUMENTS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test (${MODE}): '${what}' failed (${rc}):\n${out}")
  endif()
  if(arg_OUTPUT_VARIABLE)
    set(${arg_OUTPUT_VARIABLE} "${out}" PARENT_SCOPE)
  endif()
endfunction()

function(run_program what dir name)
  find_program(exe_${name} NAMES ${name} PATHS "${dir}" "${dir}/Debug" "${dir}/bin" NO_DEFAULT_PATH NO_CACHE REQUIRED)
  run_step("${what}" "${exe_${name}}")
endfunction()

# The library alone, installed under `prefix`, configured with `args`.
function(install_library prefix)
  run_step("configure asyncband" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/lib-build" ${common_args}
    "-DCMAKE_INSTALL_PREFIX=${prefix}" -DASYNCBAND_BUILD_TESTS=OFF -DASYNCBAND_BUILD_BENCH=OFF
    -DASYNCBAND_BUILD_EXAMPLES=OFF ${ARGN})
  run_step("install asyncband" "${CMAKE_COMMAND}" --install "${WORK_DIR}/lib-build")
endfunction()

# The consumer project in `source`, built in WORK_DIR/consumer-build and run.
function(build_and_run_consumer source)
  set(build "${WORK_DIR}/consumer-build")
  run_step("configure the consumer" "${CMAKE_COMMAND}" -S "${source}" -B "${build}" ${common_args} ${ARGN})
  run_step("build the consumer" "${CMAKE_COMMAND}" --build "${build}")
  run_program("run the consumer" "${build}" consumer)
endfunction()

if(MODE STREQUAL "find_package")
  set(prefix "${WORK_DIR}/prefix")
  install_library("${prefix}")
  # The asio component must be found wherever Boost is (the library's configure looked too).
  file(STRINGS "${WORK_DIR}/lib-build/CMakeCache.txt" boost_dir REGEX "^Boost_DIR:")
  set(expect_asio OFF)
  if(boost_dir AND NOT boost_dir MATCHES "NOTFOUND")
    set(expect_asio ON)
  endif()
  file(GLOB_RECURSE installed_license "${prefix}/*/LICENSE")
  if(NOT installed_license)
    message(FATAL_ERROR "consumer test (find_package): LICENSE was not installed")
  endif()
  build_and_run_consumer("${consumers}/find_package" "-DCMAKE_PREFIX_PATH=${prefix}" "-DEXPECT_ASIO=${expect_asio}")
  if(expect_asio)
    run_program("run the asio consumer" "${WORK_DIR}/consumer-build" asio_consumer)
  endif()

  # pkg-config: the installed asyncband.pc gives the flags.
  find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
  file(GLOB_RECURSE pc_file "${prefix}/*/asyncband.pc")
  get_filename_component(pc_dir "${pc_file}" DIRECTORY)
  run_step("pkg-config --cflags --libs asyncband" "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${pc_dir}"
    "${PKG_CONFIG}" --cflags --libs asyncband OUTPUT_VARIABLE pc_flags)
  string(STRIP "${pc_flags}" pc_flags)
  separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
  # The .pc file is relocatable (${pcfiledir}/../..): its -I must resolve to the installed headers.
  set(pc_include "")
  foreach(flag IN LISTS pc_flags)
    if(flag MATCHES "^-I(.*)$")
      file(REAL_PATH "${CMAKE_MATCH_1}" pc_include)
    endif()
  endforeach()
  file(REAL_PATH "${prefix}/include" installed_include)
  if(NOT pc_include STREQUAL installed_include)
    message(FATAL_ERROR "consumer test (find_package): pkg-config gave '${pc_flags}', not -I${installed_include}")
  endif()
  run_step("compile with the pkg-config flags" "${CXX_COMPILER}" -std=c++20 "${consumers}/main.cpp"
    -o "${WORK_DIR}/pkg_config_consumer" ${pc_flags})
  run_program("run the pkg-config consumer" "${WORK_DIR}" pkg_config_consumer)

elseif(MODE STREQUAL "subdirectory")
  set(prefix "${WORK_DIR}/prefix")
  build_and_run_consumer("${consumers}/subdirectory" "-DASYNCBAND_SOURCE_DIR=${SOURCE_DIR}"
    "-DCMAKE_INSTALL_PREFIX=${prefix}")
  run_step("install the consumer" "${CMAKE_COMMAND}" --install "${WORK_DIR}/consumer-build")
  file(GLOB_RECURSE leaked "${prefix}/*asyncband*")
  if(leaked)
    message(FATAL_ERROR "consumer test (subdirectory): installing the parent installed asyncband files: ${leaked}")
  endif()

elseif(MODE STREQUAL "fetchcontent")
  set(archive "${WORK_DIR}/asyncband-src.tar.gz")
  file(MAKE_DIRECTORY "${WORK_DIR}/stage/asyncband")
  foreach(part CMakeLists.txt cmake include LICENSE NOTICE)
    file(COPY "${SOURCE_DIR}/${part}" DESTINATION "${WORK_DIR}/stage/asyncband")
  endforeach()
  execute_process(COMMAND "${CMAKE_COMMAND}" -E tar czf "${archive}" asyncband
    WORKING_DIRECTORY "${WORK_DIR}/stage" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test (fetchcontent): packing the archive failed")
  endif()
  build_and_run_consumer("${consumers}/fetchcontent" "-DASYNCBAND_ARCHIVE=${archive}")

elseif(MODE STREQUAL "include_path")
  # With the strict warnings a user's -Werror build may have (-Wuseless-cast is g++'s only).
  set(strict -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Werror)
  execute_process(COMMAND "${CXX_COMPILER}" --version OUTPUT_VARIABLE version_text ERROR_QUIET)
  if(NOT version_text MATCHES "clang")
    list(APPEND strict -Wuseless-cast)
  endif()
  run_step("compile with -I include" "${CXX_COMPILER}" -std=c++20 ${strict}
    "-I${SOURCE_DIR}/include" "${consumers}/main.cpp" -o "${WORK_DIR}/include_path_consumer" -pthread)
  run_program("run it" "${WORK_DIR}" include_path_consumer)

elseif(MODE STREQUAL "without_dependencies")
  set(build "${WORK_DIR}/top-level-build")
  run_step("configure the top-level project without its dependencies" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}"
    -B "${build}" ${common_args} "-DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix"
    -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_TBB=ON -DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON
    OUTPUT_VARIABLE configured)
  foreach(said "GoogleTest not found: the tests are not built" "the benchmarks are not built"
               "no asyncband::asio target")
    string(FIND "${configured}" "${said}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "consumer test (without_dependencies): configure did not say '${said}':\n${configured}")
    endif()
  endforeach()
  run_step("build an example (they need nothing more)" "${CMAKE_COMMAND}" --build "${build}" --target example_readme)
  run_step("install it" "${CMAKE_COMMAND}" --install "${build}")
  if(NOT EXISTS "${WORK_DIR}/prefix/include/asyncband/asyncband.hpp")
    message(FATAL_ERROR "consumer test (without_dependencies): the headers were not installed")
  endif()

else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()
message(STATUS "consumer test (${MODE}): OK")
