# SPDX-License-Identifier: BSL-1.0
# Included by tests/CMakeLists.txt after test_faults_edges is defined: the
# fiber program its workers run (faults_edges_nested.cpp), built with it and
# named in REQUIRED_FILES so that CI builds it for the test.
add_executable(faults_edges_nested ${CMAKE_CURRENT_SOURCE_DIR}/faults_edges_nested.cpp)
target_link_libraries(faults_edges_nested PRIVATE fiber::fiber fiber_dev_options)
set_target_properties(faults_edges_nested PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
add_dependencies(${target} faults_edges_nested)
target_compile_definitions(${target} PRIVATE "FIBER_EDGES_NESTED=\"$<TARGET_FILE:faults_edges_nested>\"")
set_tests_properties(${name} PROPERTIES REQUIRED_FILES $<TARGET_FILE:faults_edges_nested>)
