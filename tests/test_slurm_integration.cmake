# SPDX-License-Identifier: BSL-1.0
# Included by tests/CMakeLists.txt after test_slurm_integration is defined.
# The [netns] cases are hidden from the default run: they need the three-host
# rig (slurm-up.sh --nodes 3 --netns). They are their own CTest test, label
# "netns" only, so `ctest -L slurm` (1-node rig) does not select them.
add_test(NAME ${name}_netns COMMAND ${target} "-#" "[#${name}][netns]" WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
set_tests_properties(${name}_netns PROPERTIES TIMEOUT 300 LABELS netns RESOURCE_LOCK slurm_rig)
# Both use the whole rig (8 CPUs): never in parallel with each other.
set_tests_properties(${name} PROPERTIES RESOURCE_LOCK slurm_rig)
