// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file fiber.hpp
/// Everything fiber offers: Python multiprocessing's model — Process, Queue,
/// Pipe, Pool, Manager, the synchronization primitives and shared values —
/// as job-backed processes on a laptop or a cluster. docs/reference/ is the
/// user's reference; each concept has its own header. Under
/// FIBER_SEPARATE_COMPILATION (fiber/impl/src.hpp) it leaves out the docker
/// and kubernetes backends' headers: include them to name their types.

#if !defined(FIBER_SEPARATE_COMPILATION)
#include <fiber/backend/docker.hpp>
#include <fiber/backend/kubernetes.hpp>
#endif
#include <fiber/backend/from_env.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/backend/local.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>
#include <fiber/init.hpp>
#include <fiber/log.hpp>
#include <fiber/object_store.hpp>
#include <fiber/pool.hpp>
#include <fiber/process.hpp>
#include <fiber/serialize.hpp>
#include <fiber/sharedctypes.hpp>
#include <fiber/stats.hpp>
#include <fiber/synchronize.hpp>
#include <fiber/target.hpp>
#include <fiber/version.hpp>
#include <fiber/wait.hpp>
#include <fiber/queue.hpp>
#include <fiber/pipe.hpp>
#include <fiber/manager.hpp>
#include <fiber/backend/slurm.hpp>
