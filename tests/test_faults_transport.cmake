# SPDX-License-Identifier: BSL-1.0
# Transport faults: local backend only, no rig. The 512 MiB case holds about
# 2 GiB at its peak: run alone.
set_tests_properties(${name} PROPERTIES TIMEOUT 240 RUN_SERIAL TRUE)
# The hidden [netns] case: root, and the Slurm rig's three-host shape
# (slurm-up.sh --nodes 3 --netns), as in CI's faults stage.
add_test(NAME ${name}_netns COMMAND ${target} "-#" "[#${name}][netns]" WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
set_tests_properties(${name}_netns PROPERTIES TIMEOUT 240 LABELS faults RESOURCE_LOCK slurm_rig RUN_SERIAL TRUE)
