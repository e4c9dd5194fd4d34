// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file impl/src.hpp
/// Separate compilation, as Asio's asio/impl/src.hpp: the backend
/// registrations that fiber/backend/docker.hpp, kubernetes.hpp and
/// detail/builtin_backends.hpp (slurm) leave out under
/// FIBER_SEPARATE_COMPILATION, for exactly one source file to compile.
///
/// By default every source file that includes fiber/fiber.hpp compiles the
/// docker, kubernetes and slurm backends whole (their registration takes the
/// address of their launcher's factory): about 12 s of GCC -O1 per file for
/// docker and kubernetes, 9 s of -O0 for slurm. A program with several
/// such files may instead define FIBER_SEPARATE_COMPILATION in all of them
/// and compile this header into one (not into a static library, whose linker
/// would drop the unreferenced object). Without the macro it is harmless
/// (the headers register; this registers again). Under the macro
/// fiber/fiber.hpp leaves out docker.hpp and kubernetes.hpp: a file that
/// names their types includes them itself.
///
/// Example (CMake):
/// @code
/// add_compile_definitions(FIBER_SEPARATE_COMPILATION)
/// add_executable(app main.cpp learner.cpp fiber_src.cpp) # fiber_src.cpp: #include <fiber/impl/src.hpp>
/// @endcode

#include <fiber/backend/detail/named_backends.hpp>
#include <fiber/backend/docker.hpp>
#include <fiber/backend/kubernetes.hpp>
#include <fiber/backend/slurm.hpp>

namespace fiber::detail {
namespace {
[[maybe_unused]] const bool src_registered_docker = register_backend(backend::docker::name, &backend::docker::make);
[[maybe_unused]] const bool src_registered_kubernetes = register_backend(backend::kubernetes::name,
                                                                         &backend::kubernetes::make);
[[maybe_unused]] const bool src_registered_slurm = register_backend(backend::slurm::name,
                                                                    policy_factory<backend::slurm>());
} // namespace
} // namespace fiber::detail
