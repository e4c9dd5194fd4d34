# SPDX-License-Identifier: BSL-1.0
# test_faults_backends: tests/fake_kube (python3; kubectl for the SIGKILLed
# master) and, for its [docker] tests, a Docker daemon with the test image,
# built here (fixture faults_docker_image: tests/rigs/docker-image.sh with this
# executable's shared libraries; the executable itself is bind-mounted) and
# removed afterwards. One image name per build tree, as docker_fixtures.cmake.
string(MD5 _faults_tree_hash "${PROJECT_BINARY_DIR}")
string(SUBSTRING "${_faults_tree_hash}" 0 10 _faults_tree_hash)
set(_faults_image "fiber-test-faults:${_faults_tree_hash}")
# Without a daemon it builds nothing and passes: the [kube] tests still run (the [docker] ones fail, saying why).
add_test(NAME faults_docker_image
  COMMAND bash -c "docker version >/dev/null 2>&1 || { echo 'no Docker daemon: no image'; exit 0; }; exec bash \"$0\" \"$@\""
    ${CMAKE_CURRENT_SOURCE_DIR}/rigs/docker-image.sh ${_faults_image} --libs $<TARGET_FILE:${target}>)
set_tests_properties(faults_docker_image PROPERTIES FIXTURES_SETUP faults_docker_image LABELS faults TIMEOUT 120)
add_test(NAME faults_docker_image_remove COMMAND bash -c "docker rmi -f $0 >/dev/null 2>&1 || true" ${_faults_image})
set_tests_properties(faults_docker_image_remove PROPERTIES FIXTURES_CLEANUP faults_docker_image LABELS faults TIMEOUT 60)
# With -DFIBER_TEST_DOCKER=ON (CI's faults stage) docker_fixtures.cmake's
# docker_daemon fixture starts the daemon first and stops it afterwards.
if(FIBER_TEST_DOCKER)
  set_tests_properties(faults_docker_image faults_docker_image_remove PROPERTIES FIXTURES_REQUIRED docker_daemon)
endif()
set_tests_properties(${name} PROPERTIES
  TIMEOUT 300
  FIXTURES_REQUIRED faults_docker_image
  RESOURCE_LOCK docker_daemon
  ENVIRONMENT "FIBER_DOCKER_IMAGE=${_faults_image};FIBER_FAKE_KUBE_PYTHON=${FIBER_FAKE_KUBE_PYTHON};PYTHONDONTWRITEBYTECODE=1")
unset(_faults_image)
unset(_faults_tree_hash)
