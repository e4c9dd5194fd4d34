# SPDX-License-Identifier: BSL-1.0
# The metrics endpoint: fiber::metrics (prometheus-cpp, civetweb); a real
# Prometheus and headless Chromium (Debian packages prometheus, chromium).
target_link_libraries(${target} PRIVATE fiber::metrics)
set_tests_properties(${name} PROPERTIES TIMEOUT 400)
