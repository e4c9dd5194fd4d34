# SPDX-License-Identifier: BSL-1.0
# Transport faults: local backend only, no rig. The 512 MiB case holds about
# 2 GiB at its peak: run alone.
set_tests_properties(${name} PROPERTIES TIMEOUT 240 RUN_SERIAL TRUE)
