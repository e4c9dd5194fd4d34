# SPDX-License-Identifier: BSL-1.0
# Rogue peers, hung/crashing workers, limits, TLS (labels runtime and asan:
# tests/CMakeLists.txt).
# The hidden [netns] cases (men in the middle placed by DNAT on the rig):
# root and the rig's hosts, as in CI's faults stage.
if(FIBER_TEST_FAULTS)
  add_test(NAME ${name}_netns COMMAND ${target} "-#" "[#${name}][netns]" WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(${name}_netns PROPERTIES TIMEOUT 240 LABELS faults RESOURCE_LOCK slurm_rig RUN_SERIAL TRUE)
endif()
