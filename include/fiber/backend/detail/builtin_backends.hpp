// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/builtin_backends.hpp
/// fiber's own backends, the one list that names them (as nng's transport.c):
/// local and slurm whole; docker and kubernetes by name and keys, their
/// launchers where a source file includes their header. backend::from_env includes it.

#include <fiber/backend/docker/keys.hpp>
#include <fiber/backend/kubernetes/keys.hpp>
#include <fiber/backend/local.hpp>
#include <fiber/backend/slurm.hpp>
