# SPDX-License-Identifier: BSL-1.0
# Included by tests/CMakeLists.txt with -DFIBER_TEST_DOCKER=ON, after the
# test_docker* tests are defined. Their CTest fixtures:
#   docker_daemon  docker_up: tests/rigs/docker-up.sh starts dockerd unless one
#                  answers; docker_down (cleanup): tests/rigs/docker-down.sh
#                  --check fails if a container labelled managed-by=fiber is
#                  left, removes it, and stops the daemon only if docker_up
#                  started it.
#   docker_image   the test image FIBER_DOCKER_TEST_IMAGE (given to the tests as FIBER_DOCKER_IMAGE) (tests/rigs/docker-image.sh:
#                  the shared libraries of the test programs and of es; the
#                  programs themselves are bind-mounted, docker.mount_binary),
#                  and <image>-other: test_docker_api's binary at
#                  test_docker_integration's path (a different build, for the
#                  handshake test); removed again afterwards.
if(NOT FIBER_HAS_DOCKER)
  message(FATAL_ERROR "FIBER_TEST_DOCKER=ON, but the docker backend is not built: install the Debian packages "
                      "libcurl4-openssl-dev and nlohmann-json3-dev (scripts/setup.sh)")
endif()

# One image name per build tree: trees (and people) sharing a daemon do not
# overwrite each other's images.
string(MD5 _fiber_tree_hash "${PROJECT_BINARY_DIR}")
string(SUBSTRING "${_fiber_tree_hash}" 0 10 _fiber_tree_hash)
set(FIBER_DOCKER_TEST_IMAGE "fiber-test:${_fiber_tree_hash}" CACHE INTERNAL "image of the docker tests")
# Every container the tests make carries it (docker.labels): docker_down checks
# and removes this tree's containers only, not those of others on the daemon.
set(FIBER_DOCKER_TEST_LABEL "fiber.test-tree=${_fiber_tree_hash}" CACHE INTERNAL "label of the docker tests' containers")
set(_rigs ${CMAKE_CURRENT_SOURCE_DIR}/rigs)

add_test(NAME docker_up COMMAND bash ${_rigs}/docker-up.sh)
set_tests_properties(docker_up PROPERTIES FIXTURES_SETUP docker_daemon LABELS docker TIMEOUT 180)

add_test(NAME docker_image
  COMMAND bash ${_rigs}/docker-image.sh ${FIBER_DOCKER_TEST_IMAGE}
    --libs $<TARGET_FILE:test_docker_integration>
    --libs $<TARGET_FILE:test_docker_api>
    --libs "$<$<TARGET_EXISTS:es>:$<TARGET_FILE:es>>"
    --libs "$<$<TARGET_EXISTS:bench_docker>:$<TARGET_FILE:bench_docker>>")
add_test(NAME docker_image_other
  COMMAND bash ${_rigs}/docker-image.sh ${FIBER_DOCKER_TEST_IMAGE}-other
    $<TARGET_FILE:test_docker_api>:$<TARGET_FILE:test_docker_integration>)
set_tests_properties(docker_image docker_image_other PROPERTIES
  FIXTURES_SETUP docker_image FIXTURES_REQUIRED docker_daemon LABELS docker TIMEOUT 120)

add_test(NAME docker_image_remove
  COMMAND docker rmi -f ${FIBER_DOCKER_TEST_IMAGE} ${FIBER_DOCKER_TEST_IMAGE}-other)
set_tests_properties(docker_image_remove PROPERTIES
  FIXTURES_CLEANUP docker_image FIXTURES_REQUIRED docker_daemon LABELS docker TIMEOUT 60)

add_test(NAME docker_down COMMAND bash ${_rigs}/docker-down.sh --check --label ${FIBER_DOCKER_TEST_LABEL})
set_tests_properties(docker_down PROPERTIES FIXTURES_CLEANUP docker_daemon LABELS docker TIMEOUT 120)

foreach(_t test_docker_api test_docker_integration)
  if(TEST ${_t})
    set_tests_properties(${_t} PROPERTIES
      FIXTURES_REQUIRED "docker_daemon;docker_image"
      ENVIRONMENT "FIBER_DOCKER_IMAGE=${FIBER_DOCKER_TEST_IMAGE};FIBER_DOCKER_LABELS=${FIBER_DOCKER_TEST_LABEL}"
      RESOURCE_LOCK docker_daemon)
  endif()
endforeach()
unset(_rigs)
unset(_fiber_tree_hash)
