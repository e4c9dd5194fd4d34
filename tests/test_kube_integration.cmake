# SPDX-License-Identifier: BSL-1.0
# test_kube_integration: against tests/fake_kube (started by the test itself,
# one fake per test process); its pods run this executable.
set_tests_properties(${name} PROPERTIES TIMEOUT 300 ENVIRONMENT "FIBER_FAKE_KUBE_PYTHON=${FIBER_FAKE_KUBE_PYTHON};PYTHONDONTWRITEBYTECODE=1")
