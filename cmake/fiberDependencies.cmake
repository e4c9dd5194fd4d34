# SPDX-License-Identifier: BSL-1.0
# fiberDependencies.cmake - finds what fiber's headers need.
#
# Included by the source tree's CMakeLists.txt and by the installed
# fiberConfig.cmake, so the two find the same things the same way. fiber is
# header-only, so dependencies are looked up again on the consumer's machine.
#
# Defines (or reuses) these imported targets:
#   Threads::Threads, nng::nng, Boost::headers
#   fiber::mbedcrypto      mbedTLS's libmbedcrypto (HMAC-SHA256) and libmbedx509
#                          (the kubernetes backend's ephemeral TLS certificate)
#   fiber::nng             nng::nng, or with FIBER_STATIC_DEPS its static archive
#                          (and mbedTLS's, which nng's TLS needs)
#   fiber::asio            standalone Asio include directory + ASIO_STANDALONE
#   fiber::tomlplusplus    toml++ and FIBER_HAS_TOMLPLUSPLUS=1 when toml++ is
#                          found (set FIBER_USE_TOMLPLUSPLUS=OFF to skip it);
#                          an empty target otherwise
#   fiber::curl            libcurl's headers, the dl library and FIBER_HAS_CURL=1
#                          when libcurl's development files are found (Debian:
#                          libcurl4-openssl-dev); libcurl itself is dlopen()ed
#                          by the docker backend on first use, never linked
#                          (see include/fiber/backend/detail/curl_loader.hpp);
#                          an empty target otherwise
#   fiber::json            nlohmann-json (Debian: nlohmann-json3-dev) and
#                          FIBER_HAS_JSON=1 when found; an empty target otherwise
#   The docker backend is compiled only with both (FIBER_HAS_DOCKER ON).
#   fiber::metrics_deps    prometheus-cpp's core and civetweb's C++ library
#                          (Debian: prometheus-cpp-dev, libcivetweb-dev) with
#                          nlohmann-json and FIBER_HAS_METRICS=1, when all are
#                          found (FIBER_HAS_METRICS ON); an empty target
#                          otherwise. fiber::metrics (fiber/metrics.hpp) links it.
#
# It never stops the configure step itself. On the first missing dependency it
# sets fiber_DEPENDENCY_ERROR to a message naming the Debian package to install
# and returns; the includer turns that into a fatal error (source tree) or into
# fiber_FOUND=FALSE (find_package(fiber)).
#
# CMake's find_dependency() is not used for the packages below on purpose: with
# find_package(fiber REQUIRED) it would fail with CMake's generic "could not
# find nngConfig.cmake" before we get to name the package that provides it.

set(fiber_DEPENDENCY_ERROR "")

set(_fiber_debian_hint
  "On Debian bookworm run `bash scripts/setup.sh` from fiber's source tree, \
or: apt-get install --no-install-recommends libnng-dev libasio-dev \
libboost1.81-dev libmbedtls-dev")

# --- threads -----------------------------------------------------------------
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads QUIET)
if(NOT TARGET Threads::Threads)
  set(fiber_DEPENDENCY_ERROR "fiber: no threads library found (Threads::Threads).")
  return()
endif()

# --- nng 1.x -------------------------------------------------------------------
find_package(nng 1.5 CONFIG QUIET)
if(NOT TARGET nng::nng)
  set(fiber_DEPENDENCY_ERROR
    "fiber: nng >= 1.5 (CMake package `nng`, target nng::nng) not found. \
Install the Debian package libnng-dev, or point nng_DIR at nng's CMake config. \
${_fiber_debian_hint}")
  return()
endif()

# --- FIBER_STATIC_DEPS: a worker's start-up without most of ld.so's work --------
# Every job-backed process re-executes the program (a fresh process image),
# and dynamic linking is most of what that costs: spawn+exec+exit of a fiber
# program that exits as soon as ld.so is done took 1.45 ms with Debian's
# shared libstdc++, nng and mbedTLS, 0.65 ms with them linked statically
# (/bin/true: 0.59 ms); a Process start+join 2.9 -> 2.1 ms, 1024 Pool
# workers all up 1.6-1.9 -> 1.0-1.3 s (2 vCPUs). Opt-in: it links libstdc++
# and libgcc statically into the consumer's executable (-static-libstdc++,
# -static-libgcc): do not use it in a program that also loads C++ shared
# libraries of its own, which would bring a second libstdc++. toml++ is then
# used header-only (its shared library would bring libstdc++.so back).
option(FIBER_STATIC_DEPS "Link nng, mbedTLS, libstdc++ and libgcc statically into programs using fiber (faster worker start-up)" OFF)
if(NOT TARGET fiber::nng)
  add_library(fiber::nng INTERFACE IMPORTED)
  if(FIBER_STATIC_DEPS)
    find_library(FIBER_NNG_STATIC_LIBRARY NAMES libnng.a)
    find_library(FIBER_MBEDTLS_STATIC_LIBRARY NAMES libmbedtls.a)
    find_library(FIBER_MBEDX509_STATIC_LIBRARY NAMES libmbedx509.a)
    find_library(FIBER_MBEDCRYPTO_STATIC_LIBRARY NAMES libmbedcrypto.a)
    if(NOT FIBER_NNG_STATIC_LIBRARY OR NOT FIBER_MBEDTLS_STATIC_LIBRARY OR NOT FIBER_MBEDX509_STATIC_LIBRARY
       OR NOT FIBER_MBEDCRYPTO_STATIC_LIBRARY)
      set(fiber_DEPENDENCY_ERROR
        "fiber: FIBER_STATIC_DEPS needs the static archives libnng.a, libmbedtls.a, libmbedx509.a and \
libmbedcrypto.a (Debian: libnng-dev, libmbedtls-dev).")
      return()
    endif()
    get_target_property(_fiber_nng_inc nng::nng INTERFACE_INCLUDE_DIRECTORIES)
    set_target_properties(fiber::nng PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${_fiber_nng_inc}"
      INTERFACE_LINK_LIBRARIES "${FIBER_NNG_STATIC_LIBRARY};${FIBER_MBEDTLS_STATIC_LIBRARY};${FIBER_MBEDX509_STATIC_LIBRARY};${FIBER_MBEDCRYPTO_STATIC_LIBRARY};Threads::Threads"
      INTERFACE_LINK_OPTIONS "-static-libstdc++;-static-libgcc")
    unset(_fiber_nng_inc)
  else()
    set_target_properties(fiber::nng PROPERTIES INTERFACE_LINK_LIBRARIES nng::nng)
  endif()
endif()

# --- mbedTLS libmbedcrypto (HMAC-SHA256 for the connection handshake) -----------
# The library nng's TLS uses (Debian's libnng-dev depends on libmbedtls-dev),
# so it is in the process already: no library of its own to load at start-up.
# conan: mbedtls
if(NOT TARGET fiber::mbedcrypto)
  find_path(FIBER_MBEDTLS_INCLUDE_DIR NAMES mbedtls/md.h DOC "Directory holding mbedtls/md.h")
  find_library(FIBER_MBEDCRYPTO_LIBRARY NAMES mbedcrypto DOC "mbedTLS's libmbedcrypto")
  find_library(FIBER_MBEDX509_LIBRARY NAMES mbedx509 DOC "mbedTLS's libmbedx509")
  if(NOT FIBER_MBEDTLS_INCLUDE_DIR OR NOT FIBER_MBEDCRYPTO_LIBRARY OR NOT FIBER_MBEDX509_LIBRARY)
    set(fiber_DEPENDENCY_ERROR
      "fiber: mbedTLS's libmbedcrypto or libmbedx509 (mbedtls/md.h) not found; fiber uses them for \
HMAC authentication. Install the Debian package libmbedtls-dev (libnng-dev \
depends on it). ${_fiber_debian_hint}")
    return()
  endif()
  add_library(fiber::mbedcrypto INTERFACE IMPORTED)
  set_target_properties(fiber::mbedcrypto PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${FIBER_MBEDTLS_INCLUDE_DIR}")
  if(NOT FIBER_STATIC_DEPS) # else in fiber::nng's archives (libmbedx509.a among them)
    set_target_properties(fiber::mbedcrypto PROPERTIES
      INTERFACE_LINK_LIBRARIES "${FIBER_MBEDX509_LIBRARY};${FIBER_MBEDCRYPTO_LIBRARY}")
  endif()
endif()

# --- Boost >= 1.81 headers (PFR, Describe) ------------------------------------
# Debian trap: libasio-dev *recommends* libboost-dev (1.74: no Describe, and
# a PFR too old), which conflicts with libboost1.81-dev. Install with
# --no-install-recommends and name libboost1.81-dev explicitly.
set(_fiber_boost_msg
  "Install the Debian package libboost1.81-dev. Note: libasio-dev recommends \
libboost-dev (Boost 1.74, which has neither Boost.Describe nor a usable \
Boost.PFR) and that package conflicts with libboost1.81-dev: install with \
`apt-get install --no-install-recommends libasio-dev libboost1.81-dev` \
(remove libboost-dev / libboost1.74-dev first if present). \
Elsewhere: Boost >= 1.81, set Boost_ROOT.")
find_package(Boost 1.81 CONFIG QUIET)
if(NOT Boost_FOUND AND CMAKE_VERSION VERSION_LESS 3.30)
  find_package(Boost 1.81 MODULE QUIET)   # FindBoost, for Boosts without a CMake config
endif()
if(NOT Boost_FOUND OR NOT TARGET Boost::headers)
  set(fiber_DEPENDENCY_ERROR
    "fiber: Boost >= 1.81 not found (needed for Boost.PFR and Boost.Describe). \
${_fiber_boost_msg}")
  return()
endif()
get_target_property(_fiber_boost_inc Boost::headers INTERFACE_INCLUDE_DIRECTORIES)
if(NOT _fiber_boost_inc)
  set(_fiber_boost_inc "${Boost_INCLUDE_DIRS}")
endif()
set(_fiber_boost_ok FALSE)
foreach(_fiber_dir IN LISTS _fiber_boost_inc)
  if(EXISTS "${_fiber_dir}/boost/describe.hpp" AND EXISTS "${_fiber_dir}/boost/pfr.hpp")
    set(_fiber_boost_ok TRUE)
  endif()
endforeach()
if(NOT _fiber_boost_ok)
  set(fiber_DEPENDENCY_ERROR
    "fiber: the Boost found (${Boost_VERSION}, headers in ${_fiber_boost_inc}) \
lacks boost/describe.hpp or boost/pfr.hpp. ${_fiber_boost_msg}")
  return()
endif()

# --- standalone Asio >= 1.22 ------------------------------------------------
find_path(FIBER_ASIO_INCLUDE_DIR NAMES asio.hpp
  HINTS ${ASIO_ROOT} $ENV{ASIO_ROOT} PATH_SUFFIXES include
  DOC "Directory holding standalone Asio's asio.hpp")
if(NOT FIBER_ASIO_INCLUDE_DIR OR NOT EXISTS "${FIBER_ASIO_INCLUDE_DIR}/asio/version.hpp")
  set(fiber_DEPENDENCY_ERROR
    "fiber: standalone Asio (asio.hpp) not found. Install the Debian package \
libasio-dev WITH --no-install-recommends (its recommended libboost-dev conflicts \
with libboost1.81-dev), or set FIBER_ASIO_INCLUDE_DIR / ASIO_ROOT. \
${_fiber_debian_hint}")
  return()
endif()
file(STRINGS "${FIBER_ASIO_INCLUDE_DIR}/asio/version.hpp" _fiber_asio_line
  REGEX "^#define ASIO_VERSION [0-9]+")
string(REGEX REPLACE "^#define ASIO_VERSION ([0-9]+).*" "\\1" _fiber_asio_num "${_fiber_asio_line}")
if(_fiber_asio_num LESS 102200)
  set(fiber_DEPENDENCY_ERROR
    "fiber: Asio in ${FIBER_ASIO_INCLUDE_DIR} is too old (ASIO_VERSION \
${_fiber_asio_num}); fiber needs >= 1.22 (libasio-dev in Debian bookworm).")
  return()
endif()
if(NOT TARGET fiber::asio)
  add_library(fiber::asio INTERFACE IMPORTED)
  set_target_properties(fiber::asio PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${FIBER_ASIO_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS "ASIO_STANDALONE")
endif()

# --- toml++ (optional: the fiber.toml configuration file) -----------------------
if(NOT TARGET fiber::tomlplusplus)
  add_library(fiber::tomlplusplus INTERFACE IMPORTED)
  set(_fiber_toml_found OFF)
  if(NOT DEFINED FIBER_USE_TOMLPLUSPLUS OR FIBER_USE_TOMLPLUSPLUS)
    # Prefer toml++'s own package (Debian's links the prebuilt libtomlplusplus,
    # which keeps compile times down); fall back to the header-only toml.h.
    if(NOT FIBER_STATIC_DEPS)
      find_package(tomlplusplus 3 CONFIG QUIET)
    endif()
    if(TARGET tomlplusplus::tomlplusplus AND NOT FIBER_STATIC_DEPS)
      set_target_properties(fiber::tomlplusplus PROPERTIES
        INTERFACE_LINK_LIBRARIES tomlplusplus::tomlplusplus)
      set(_fiber_toml_found ON)
    else()
      find_path(FIBER_TOMLPLUSPLUS_INCLUDE_DIR NAMES toml++/toml.h
        DOC "Directory holding toml++'s toml++/toml.h (optional)")
      if(FIBER_TOMLPLUSPLUS_INCLUDE_DIR)
        set_target_properties(fiber::tomlplusplus PROPERTIES
          INTERFACE_INCLUDE_DIRECTORIES "${FIBER_TOMLPLUSPLUS_INCLUDE_DIR}")
        set(_fiber_toml_found ON)
      endif()
    endif()
    if(_fiber_toml_found)
      set_property(TARGET fiber::tomlplusplus APPEND PROPERTY
        INTERFACE_COMPILE_DEFINITIONS FIBER_HAS_TOMLPLUSPLUS=1)
    endif()
  endif()
endif()

# Sets ${var} to ON when the imported target ${target} defines ${definition}, else OFF.
function(_fiber_defines target definition var)
  get_target_property(_defs ${target} INTERFACE_COMPILE_DEFINITIONS)
  if(_defs MATCHES "${definition}")
    set(${var} ON PARENT_SCOPE)
  else()
    set(${var} OFF PARENT_SCOPE)
  endif()
endfunction()
_fiber_defines(fiber::tomlplusplus FIBER_HAS_TOMLPLUSPLUS FIBER_HAS_TOMLPLUSPLUS)
unset(_fiber_toml_found)

# --- libcurl headers + nlohmann-json (optional: the docker backend) --------------
if(NOT TARGET fiber::curl)
  add_library(fiber::curl INTERFACE IMPORTED)
  find_package(CURL QUIET)
  set(_fiber_curl_inc "")
  if(TARGET CURL::libcurl)
    get_target_property(_fiber_curl_inc CURL::libcurl INTERFACE_INCLUDE_DIRECTORIES)
  endif()
  if(NOT _fiber_curl_inc AND CURL_INCLUDE_DIRS)
    set(_fiber_curl_inc "${CURL_INCLUDE_DIRS}")
  endif()
  if(CURL_FOUND AND _fiber_curl_inc)
    set_target_properties(fiber::curl PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${_fiber_curl_inc}"
      INTERFACE_LINK_LIBRARIES "${CMAKE_DL_LIBS}"
      INTERFACE_COMPILE_DEFINITIONS FIBER_HAS_CURL=1)
  endif()
  unset(_fiber_curl_inc)
endif()
if(NOT TARGET fiber::json)
  add_library(fiber::json INTERFACE IMPORTED)
  find_package(nlohmann_json 3 CONFIG QUIET)
  if(TARGET nlohmann_json::nlohmann_json)
    set_target_properties(fiber::json PROPERTIES
      INTERFACE_LINK_LIBRARIES nlohmann_json::nlohmann_json
      INTERFACE_COMPILE_DEFINITIONS FIBER_HAS_JSON=1)
  endif()
endif()
get_target_property(_fiber_curl_defs fiber::curl INTERFACE_COMPILE_DEFINITIONS)
get_target_property(_fiber_json_defs fiber::json INTERFACE_COMPILE_DEFINITIONS)
if(_fiber_curl_defs MATCHES "FIBER_HAS_CURL" AND _fiber_json_defs MATCHES "FIBER_HAS_JSON")
  set(FIBER_HAS_DOCKER ON)
else()
  set(FIBER_HAS_DOCKER OFF)
endif()
unset(_fiber_curl_defs)

# --- prometheus-cpp + civetweb (optional: fiber::metrics, fiber/metrics.hpp) ---
# conan: prometheus-cpp civetweb
if(NOT TARGET fiber::metrics_deps)
  add_library(fiber::metrics_deps INTERFACE IMPORTED)
  find_package(prometheus-cpp CONFIG QUIET)
  find_package(civetweb CONFIG QUIET)
  if(TARGET prometheus-cpp::core AND TARGET civetweb::civetweb-cpp AND _fiber_json_defs MATCHES "FIBER_HAS_JSON")
    set_target_properties(fiber::metrics_deps PROPERTIES
      INTERFACE_LINK_LIBRARIES "prometheus-cpp::core;civetweb::civetweb-cpp;fiber::json"
      INTERFACE_COMPILE_DEFINITIONS FIBER_HAS_METRICS=1)
  endif()
endif()
_fiber_defines(fiber::metrics_deps FIBER_HAS_METRICS FIBER_HAS_METRICS)
unset(_fiber_json_defs)

unset(_fiber_asio_line)
unset(_fiber_asio_num)
unset(_fiber_boost_inc)
unset(_fiber_boost_ok)
unset(_fiber_dir)
unset(_fiber_boost_msg)
unset(_fiber_debian_hint)
