# SPDX-License-Identifier: BSL-1.0
# Rogue peers, hung/crashing workers, limits, TLS: part of the runtime suite
# (also run under TSan in CI).
set_tests_properties(${name} PROPERTIES LABELS runtime)
