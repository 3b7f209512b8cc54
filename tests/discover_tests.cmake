# Turns the cases of dist_tests into ctest tests (run after each link by tests/CMakeLists.txt):
#
#   - a suite listed in tests/parallel_suites.txt or tests/one_process_suites.txt is ONE ctest
#     test named after the suite: its cases run in one process, so LibTorch's start-up (about
#     0.6 s) is paid once per suite instead of once per case. A crash or hang still names its
#     case (tests/test_main.cc). Label "parallel" marks the suites scripts/test.sh runs two at a
#     time;
#   - every other suite (the ones whose cases start processes) gives one ctest test per case,
#     so each case keeps a process of its own, except its cases named in tests/paired_cases.txt
#     (by their suite or by themselves): those are ONE ctest test named after the suite,
#     labelled "paired", whose cases run one after another in one process (each case's own
#     process cost 0.65 s of CPU in LibTorch's start-up on the Xeon, 193 of them a fifth of the
#     pass). scripts/test.sh runs the paired tests two at a time, each with a DIST_PORT_BASE of
#     its own (below) and DIST_COLLECTIVE_POLL_MS=0;
#   - a suite or case named in tests/waiting_cases.txt (one that spends its time waiting out
#     timeouts and checks deadlines) is labelled "waiting", with a DIST_PORT_BASE of its own and
#     the resource locks its line names (what it takes machine-wide): scripts/test.sh runs them
#     four at a time beside the fuzzing, which runs at the lowest priority;
#   - suites named Long* are left to the "long_multi_worker" test.
#
# Inputs (-D): TEST_BINARY, PARALLEL_LIST, ONE_PROCESS_LIST, PAIRED_LIST, WAITING_LIST, OUTPUT.
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
read_suite_list("${PAIRED_LIST}" paired_entries)  # "Suite" or "Suite.Case"
# "Suite" or "Suite.Case", then the resource locks it holds, if any: "Suite.Case netns mpirun".
read_suite_list("${WAITING_LIST}" waiting_lines)
set(waiting_entries "")
foreach(line IN LISTS waiting_lines)
  separate_arguments(words UNIX_COMMAND "${line}")
  list(POP_FRONT words entry)
  list(APPEND waiting_entries "${entry}")
  set("locks_of_${entry}" "${words}")
endforeach()

# dist-launch takes DIST_PORT_BASE, else 8888, for its workers' ports: two paired cases that
# launch a job without --port-base would both take 8888. Each paired case gets 16 ports of its
# own from 61000 up: above the ports free_loopback_ports() picks (10000 up to the kernel's
# ephemeral ports, 32768..60999 by default) and above any service's, so no other test's port
# falls among them (a job of the tests has a few tasks a host).
set(port_base 61000)
set(ports_per_case 16)

execute_process(COMMAND "${TEST_BINARY}" --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE status TIMEOUT 60)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${TEST_BINARY} --gtest_list_tests failed (${status}):\n${listing}")
endif()

set(script "# Written by tests/discover_tests.cmake from ${TEST_BINARY} --gtest_list_tests.\n")
set(listed_suites "")
set(listed_paired "")
set(listed_waiting "")
set(paired_suites "")

# The ctest properties of the waiting entry `entry`, appended to `out`: its own ports and locks.
macro(append_waiting_properties out entry)
  string(APPEND ${out} " ENVIRONMENT DIST_PORT_BASE=${port_base}")
  math(EXPR port_base "${port_base} + ${ports_per_case}")
  if(NOT "${locks_of_${entry}}" STREQUAL "")
    string(APPEND ${out} " RESOURCE_LOCK [=[${locks_of_${entry}}]=]")
  endif()
endmacro()
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
    set(extra "")
    if(grouped STREQUAL "unit" AND base IN_LIST waiting_entries)
      list(APPEND listed_waiting "${base}")
      set(grouped "unit;waiting")
      append_waiting_properties(extra "${base}")
    endif()
    if(base MATCHES "^Long")
      set(suite "")
    elseif(grouped)
      list(APPEND listed_suites "${base}")
      string(APPEND script
        "add_test([=[${suite}]=] [=[${TEST_BINARY}]=] [=[--gtest_filter=${suite}.*]=])\n"
        "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT 1200 LABELS [=[${grouped}]=]"
        "${extra})\n")
      set(suite "")  # its cases need no tests of their own
    endif()
  elseif(line MATCHES "^  ([A-Za-z0-9_/]+)" AND NOT suite STREQUAL "")
    set(name "${suite}.${CMAKE_MATCH_1}")
    # "Strategies/StrategyConformanceTest.TwentySgd/OneDevice" -> "StrategyConformanceTest" and
    # "StrategyConformanceTest.TwentySgd", as tests/paired_cases.txt names them.
    string(REGEX REPLACE "/.*$" "" test_case "${CMAKE_MATCH_1}")
    string(REGEX REPLACE "^.*/" "" base "${suite}")
    set(labels "unit")
    set(properties "")
    foreach(entry IN ITEMS "${base}" "${base}.${test_case}")
      if(entry IN_LIST paired_entries)
        list(APPEND listed_paired "${entry}")
        set(labels "unit;paired")
      endif()
      if(entry IN_LIST waiting_entries)
        list(APPEND listed_waiting "${entry}")
        if(labels MATCHES "paired")
          message(FATAL_ERROR "tests: ${name} is both paired and waiting; list it in one of "
                              "tests/paired_cases.txt and tests/waiting_cases.txt")
        endif()
        set(labels "unit;waiting")
        append_waiting_properties(properties "${entry}")
      endif()
    endforeach()
    if(labels MATCHES "paired")
      if(NOT "${suite}" IN_LIST paired_suites)
        list(APPEND paired_suites "${suite}")
        set("paired_cases_of_${suite}" "")
      endif()
      string(APPEND "paired_cases_of_${suite}" ":${name}")
      continue()
    endif()
    # A case that cannot run here (GTEST_SKIP, with its reason) shows as skipped, not passed.
    string(APPEND script
      "add_test([=[${name}]=] [=[${TEST_BINARY}]=] [=[--gtest_filter=${name}]=])\n"
      "set_tests_properties([=[${name}]=] PROPERTIES TIMEOUT 300 LABELS [=[${labels}]=]"
      "${properties} SKIP_REGULAR_EXPRESSION [=[\\[  SKIPPED \\]]=])\n")
  endif()
endforeach()

# The paired cases of each suite, as one test. Two paired jobs share the machine's cores, which
# their waits cannot see: a collective's wait polling for its peers would take the core the
# other job needs, so they block at once (DIST_COLLECTIVE_POLL_MS,
# src/collective/gloo/gloo_transport.cc). No SKIP_REGULAR_EXPRESSION: one skipped case must
# not hide its neighbours' results (gtest prints the skip and its reason).
foreach(suite IN LISTS paired_suites)
  string(SUBSTRING "${paired_cases_of_${suite}}" 1 -1 filter)
  string(APPEND script
    "add_test([=[${suite}]=] [=[${TEST_BINARY}]=] [=[--gtest_filter=${filter}]=])\n"
    "set_tests_properties([=[${suite}]=] PROPERTIES TIMEOUT 1200 LABELS [=[unit;paired]=]"
    " ENVIRONMENT [=[DIST_PORT_BASE=${port_base};DIST_COLLECTIVE_POLL_MS=0]=])\n")
  math(EXPR port_base "${port_base} + ${ports_per_case}")
endforeach()

if(port_base GREATER 65536)
  message(FATAL_ERROR "tests: too many paired and waiting cases for the ports 61000..65535 "
                      "(tests/discover_tests.cmake)")
endif()

# A name in a list that matches no suite is a typo or a renamed suite: say so rather than let
# the list rot.
foreach(name IN LISTS parallel_suites one_process_suites)
  if(NOT name IN_LIST listed_suites)
    message(FATAL_ERROR "tests: the suite list names ${name}, which dist_tests does not have; "
                        "remove or rename it in tests/parallel_suites.txt or "
                        "tests/one_process_suites.txt")
  endif()
endforeach()

foreach(entry IN LISTS paired_entries)
  if(NOT entry IN_LIST listed_paired)
    message(FATAL_ERROR "tests: tests/paired_cases.txt names ${entry}, which is no suite or case "
                        "of dist_tests that starts processes; remove or rename it")
  endif()
endforeach()
foreach(entry IN LISTS waiting_entries)
  if(NOT entry IN_LIST listed_waiting)
    message(FATAL_ERROR "tests: tests/waiting_cases.txt names ${entry}, which is no suite or case "
                        "of dist_tests outside tests/parallel_suites.txt; remove or rename it")
  endif()
endforeach()

file(WRITE "${OUTPUT}" "${script}")
