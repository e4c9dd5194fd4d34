#pragma once
/// @file fiber.hpp
/// Everything fiber offers: Python multiprocessing's model — Process, Queue,
/// Pipe, Pool, Manager — as job-backed processes on a laptop or a cluster.
/// See SPEC.md for the contract; each concept has its own header.

#include <fiber/backend/docker.hpp>
#include <fiber/backend/from_env.hpp>
#include <fiber/backend/kubernetes.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/backend/local.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>
#include <fiber/init.hpp>
#include <fiber/log.hpp>
#include <fiber/pool.hpp>
#include <fiber/process.hpp>
#include <fiber/serialize.hpp>
#include <fiber/target.hpp>

#if __has_include(<fiber/queue.hpp>)
#include <fiber/queue.hpp>
#endif
#if __has_include(<fiber/pipe.hpp>)
#include <fiber/pipe.hpp>
#endif
#if __has_include(<fiber/manager.hpp>)
#include <fiber/manager.hpp>
#endif
#if __has_include(<fiber/backend/slurm.hpp>)
#include <fiber/backend/slurm.hpp>
#endif
