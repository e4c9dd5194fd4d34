// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/builtin_backends.hpp
/// fiber's own backends, the one list that names them (as nng's transport.c):
/// local and slurm registered here (slurm in fiber/impl/src.hpp under
/// FIBER_SEPARATE_COMPILATION); docker and kubernetes by name and keys, their
/// launchers where a source file includes their header. backend::from_env includes it.

#include <fiber/backend/detail/named_backends.hpp>
#include <fiber/backend/docker/keys.hpp>
#include <fiber/backend/kubernetes/keys.hpp>
#include <fiber/backend/local.hpp>
#include <fiber/backend/slurm.hpp>

namespace fiber::detail {

/// FIBER_BACKEND=local (and unset) and FIBER_BACKEND=slurm reach their
/// policies through these (slurm's keys: slurm/keys.hpp).
inline const bool local_backend_registered = register_policy<backend::local>();
#if !defined(FIBER_SEPARATE_COMPILATION)
inline const bool slurm_backend_registered = register_policy<backend::slurm>();
#endif // else fiber/impl/src.hpp registers it (its keys: slurm/keys.hpp)

} // namespace fiber::detail
