# SPDX-License-Identifier: BSL-1.0
"""Conan 2 recipe for fiber, a header-only C++20 library.

    conan create . --build=missing      # package it
    conan install --requires=fiber/0.1.0 -g CMakeDeps -g CMakeToolchain

Consumers then use find_package(fiber) and link fiber::fiber, as with the
CMake install.
"""
import os

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class FiberConan(ConanFile):
    name = "fiber"
    version = "0.1.0"
    license = "BSL-1.0"
    description = ("Python multiprocessing's model (Process, Queue, Pipe, Pool, "
                   "Manager) for C++20, on one machine or a cluster")
    topics = ("multiprocessing", "distributed", "asio", "nng", "header-only")
    package_type = "header-library"
    settings = "os", "arch", "compiler", "build_type"
    exports = "LICENSE"
    exports_sources = "include/*", "LICENSE"
    no_copy_source = True
    # Optional dependencies are options, as they are optional in
    # cmake/fiberDependencies.cmake (tests/packaging/check_recipe.py checks
    # that both list the same, required or optional alike).
    options = {
        "with_tomlplusplus": [True, False],  # fiber.toml configuration files
        "with_http": [True, False],          # the docker and kubernetes backends (libcurl + nlohmann-json)
        "with_metrics": [True, False],       # fiber/metrics.hpp (prometheus-cpp + civetweb; needs with_http)
    }
    default_options = {
        "with_tomlplusplus": True,
        "with_http": True,
        # Opt-in, as the CMake target fiber::metrics: every worker loads what the program links.
        "with_metrics": False,
        # Only Boost's headers are used (PFR, Describe): don't build its libraries.
        "boost/*:header_only": True,
    }

    def layout(self):
        basic_layout(self, src_folder=".")

    def requirements(self):
        # Dependencies of a header-library are transitive: they appear in its
        # public headers, so consumers get their headers and libraries too.
        self.requires("nng/1.5.2")
        self.requires("asio/1.28.0")
        self.requires("boost/1.81.0")
        self.requires("mbedtls/[>=2.28 <4]")
        if self.options.with_tomlplusplus:
            self.requires("tomlplusplus/[>=3.3 <4]")
        if self.options.with_http:
            # libcurl is loaded with dlopen at run time; its headers are needed.
            self.requires("libcurl/[>=7.80 <9]")
            self.requires("nlohmann_json/[>=3.11 <4]")
        if self.options.with_metrics:
            self.requires("prometheus-cpp/[>=1.0 <2]")
            self.requires("civetweb/[>=1.15 <2]")

    def package_id(self):
        # Same headers for every configuration: one package.
        self.info.clear()

    def validate(self):
        check_min_cppstd(self, 20)

    def build(self):
        pass

    def package(self):
        copy(self, "LICENSE", self.source_folder,
             os.path.join(self.package_folder, "licenses"))
        copy(self, "*.hpp", os.path.join(self.source_folder, "include"),
             os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "fiber")
        self.cpp_info.set_property("cmake_target_name", "fiber::fiber")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.requires = ["nng::nng", "asio::asio", "boost::headers", "mbedtls::mbedcrypto",
                                 "mbedtls::mbedx509"]
        if self.options.with_tomlplusplus:
            self.cpp_info.requires.append("tomlplusplus::tomlplusplus")
            self.cpp_info.defines.append("FIBER_HAS_TOMLPLUSPLUS=1")
        if self.options.with_http:
            self.cpp_info.requires += ["libcurl::curl", "nlohmann_json::nlohmann_json"]
            self.cpp_info.defines += ["FIBER_HAS_CURL=1", "FIBER_HAS_JSON=1"]
        if self.options.with_metrics:
            # Here fiber::fiber itself carries them (CMake: the target fiber::metrics).
            self.cpp_info.requires += ["prometheus-cpp::core", "civetweb::civetweb-cpp"]
            self.cpp_info.defines.append("FIBER_HAS_METRICS=1")
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread"]
