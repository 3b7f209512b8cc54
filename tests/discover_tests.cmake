# Turns the cases of dist_tests into ctest tests (run after each link by tests/CMakeLists.txt):
#
#   - a suite listed in tests/parallel_suites.txt or tests/one_process_suites.txt is ONE ctest
#     test named after the suite: its cases run in one process, so LibTorch's start-up (about
#     0.6 s) is paid once per suite instead of once per case. A crash or hang still names its
#     case (tests/test_main.cc). Label "parallel" marks the suites scripts/test.sh runs two at a
#     time;
#   - every other suite (the ones whose cases start processes) gives one ctest test per case,
#     so each case keeps a process of its own;
#   - suites named Long* are left to the "long_multi_worker" test.
#
# Inputs (-D): TEST_BINARY, PARALLEL_LIST, ONE_PROCESS_LIST, OUTPUT.
cmake_minimum_required(VERSION 3.18)

function(read_suite_list path out)
  file(STRINGS "${path}" lines)
  set(names "")
  foreach(line IN LISTS lines)
    string(STRIP "${line}" line)
    if(line STREQUAL "" OR line MATCHES "^#")
      continue()
    endif()
    list(APPEND names "${line}")
  endforeach()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

read_suite_list("${PARALLEL_LIST}" parallel_suites)
read_suite_list("${ONE_PROCESS_LIST}" one_process_suites)

execute_process(COMMAND "${TEST_BINARY}" --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST_BINARY} --gtest_list_tests failed (${status}):\n${listing}")
endif()

set(script "# Written by tests/discover_tests.cmake from ${TEST_BINARY} --gtest_list_tests.\n")
set(listed_suites "")
# Brackets and semicolons occur only in the "# GetParam() = ..." comments; CMake's lists would
# misread them.
string(REGEX REPLACE "[][;]" "_" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(suite "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.( .*)?$")
    set(suite "${CMAKE_MATCH_1}")
    string(REGEX REPLACE "^.*/" "" base "${suite}")  # "Checkpoint/CheckpointTest" -> base
    set(grouped "")
    if(base IN_LIST parallel_suites)
      set(grouped "unit;parallel")
    elseif(base IN_LIST one_process_suites)
      set(grouped "unit")
    endif()
    if(base MATCHES "^Long")
      set(suite "")
    elseif(grouped)
      list(APPEND listed_suites "${base}")
      string(APPEND script
        "add_test([=[${suite}]=] [=[${TEST_BINARY}]=] [=[--gtest_filter=${suite}.*]=])\n"
        "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT 1200 LABELS [=[${grouped}]=])\n")
      set(suite "")  # its cases need no tests of their own
    endif()
  elseif(line MATCHES "^  ([A-Za-z0-9_/]+)" AND NOT suite STREQUAL "")
    set(name "${suite}.${CMAKE_MATCH_1}")
    # A case that cannot run here (GTEST_SKIP, with its reason) shows as skipped, not passed.
    string(APPEND script
      "add_test([=[${name}]=] [=[${TEST_BINARY}]=] [=[--gtest_filter=${name}]=])\n"
      "set_tests_properties([=[${name}]=] PROPERTIES TIMEOUT 300 LABELS unit "
      "SKIP_REGULAR_EXPRESSION [=[\\[  SKIPPED \\]]=])\n")
  endif()
endforeach()

# A name in a list that matches no suite is a typo or a renamed suite: say so rather than let
# the list rot.
foreach(name IN LISTS parallel_suites one_process_suites)
  if(NOT name IN_LIST listed_suites)
    message(FATAL_ERROR "tests: the suite list names ${name}, which dist_tests does not have; "
                        "remove or rename it in tests/parallel_suites.txt or "
                        "tests/one_process_suites.txt")
  endif()
endforeach()

file(WRITE "${OUTPUT}" "${script}")
