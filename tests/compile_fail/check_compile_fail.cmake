# SPDX-License-Identifier: BSL-1.0
# Compiles one source file that must NOT compile, and checks why it fails.
#
#   cmake -DCXX=<compiler> -DSRC=<file.cpp> [-DINCLUDES=a|b] [-DDEFINES=X|Y=1]
#         [-DIMPLICIT=<compiler's own include dirs, a|b>] -P check_compile_fail.cmake
#
# The source states its expectations in comments:
#   // expect-error: <regex>        must match the compiler output (all must)
#   // expect-first-error: <regex>  must match the first line that says "error:"
#   // forbid-output: <regex>       must not match it
#   // expect-error-count: <n>      exact number of "error:" diagnostics (default 1)
#   // expect-compile: success      a control case that must compile cleanly
#
# CTest's WILL_FAIL cannot be combined with PASS_REGULAR_EXPRESSION (WILL_FAIL
# inverts the regex verdict), so the checks live here: a non-zero compiler
# exit AND the expected message, so that failing for an unrelated reason
# (a typo, a missing include) does not count as a pass.
cmake_minimum_required(VERSION 3.20)

foreach(var CXX SRC)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_compile_fail: -D${var}=... is required")
  endif()
endforeach()

# FIBER_SEPARATE_COMPILATION: the backends' launchers are left out, as in
# fiber's own programs (nothing here links; 12 % of a Pool case's time).
set(args -std=c++20 -fsyntax-only -DFIBER_SEPARATE_COMPILATION)
# The compiler's own search directories (e.g. /usr/include, which Boost's
# imported target may list) are skipped, as CMake does for real targets:
# -I/usr/include breaks libstdc++'s #include_next.
set(_implicit "")
if(DEFINED IMPLICIT)
  string(REPLACE "|" ";" _implicit "${IMPLICIT}")
endif()
if(DEFINED INCLUDES)
  string(REPLACE "|" ";" _incs "${INCLUDES}")
  list(REMOVE_DUPLICATES _incs)
  foreach(dir IN LISTS _incs)
    if(NOT dir STREQUAL "" AND NOT dir IN_LIST _implicit)
      list(APPEND args "-I${dir}")
    endif()
  endforeach()
endif()
if(DEFINED DEFINES)
  string(REPLACE "|" ";" _defs "${DEFINES}")
  foreach(def IN LISTS _defs)
    if(NOT def STREQUAL "")
      list(APPEND args "-D${def}")
    endif()
  endforeach()
endif()

file(STRINGS "${SRC}" expect_lines REGEX "^// expect-error: ")
file(STRINGS "${SRC}" forbid_lines REGEX "^// forbid-output: ")
file(STRINGS "${SRC}" first_lines REGEX "^// expect-first-error: ")
file(STRINGS "${SRC}" count_lines REGEX "^// expect-error-count: ")
file(STRINGS "${SRC}" success_lines REGEX "^// expect-compile: success")

execute_process(
  COMMAND "${CXX}" ${args} "${SRC}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)

get_filename_component(name "${SRC}" NAME)
if(success_lines)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: control case failed to compile:\n${out}")
  endif()
  message(STATUS "${name}: compiles, as expected")
  return()
endif()

if(rc EQUAL 0)
  message(FATAL_ERROR "${name}: compiled, but it must not")
endif()
if(NOT expect_lines AND NOT first_lines)
  message(FATAL_ERROR "${name}: no '// expect-error: <regex>' line; refusing to pass blindly")
endif()

set(failures "")
foreach(line IN LISTS expect_lines)
  string(REGEX REPLACE "^// expect-error: " "" re "${line}")
  if(NOT out MATCHES "${re}")
    string(APPEND failures "  expected output matching: ${re}\n")
  endif()
endforeach()
foreach(line IN LISTS first_lines)
  string(REGEX REPLACE "^// expect-first-error: " "" re "${line}")
  string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${out}")
  if(NOT first_error MATCHES "${re}")
    string(APPEND failures "  first error line must match: ${re}\n  it is: ${first_error}\n")
  endif()
endforeach()
foreach(line IN LISTS forbid_lines)
  string(REGEX REPLACE "^// forbid-output: " "" re "${line}")
  if(out MATCHES "${re}")
    string(APPEND failures "  output must not match: ${re}\n")
  endif()
endforeach()

set(want_errors 1)
if(count_lines)
  list(GET count_lines 0 line)
  string(REGEX REPLACE "^// expect-error-count: *" "" want_errors "${line}")
endif()
string(REGEX MATCHALL "error:" errors "${out}")
list(LENGTH errors n_errors)
if(NOT n_errors EQUAL want_errors)
  string(APPEND failures "  expected ${want_errors} error diagnostic(s), got ${n_errors}\n")
endif()

if(failures)
  message(FATAL_ERROR "${name}: failed to compile, but not as expected:\n${failures}"
                      "--- compiler output ---\n${out}")
endif()
message(STATUS "${name}: rejected with the expected diagnostic")
