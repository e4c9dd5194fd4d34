# SPDX-License-Identifier: BSL-1.0
# Included by tests/CMakeLists.txt after test_faults_slurm is defined. Three
# of its cases use the Slurm rig (slurm-up.sh --nodes 3 --netns) and time a
# Pool on it: never in parallel with the other tests that use the whole rig.
set_tests_properties(${name} PROPERTIES RESOURCE_LOCK slurm_rig TIMEOUT 400)
