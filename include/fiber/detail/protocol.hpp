// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/protocol.hpp
/// fiber's wire protocol: one frame = [u8 kind][fiber::serialize'd body]
/// (frame.hpp). A connection starts with a mutual HMAC-SHA256
/// challenge–response over the run's secret (handshake.hpp); then master and
/// workers exchange Pool chunks and results (pool_wire.hpp), and clients send
/// services requests (service_wire.hpp). Outcomes use one vocabulary,
/// wire_status (wire_status.hpp).

#include <fiber/detail/frame.hpp>
#include <fiber/detail/handshake.hpp>
#include <fiber/detail/pool_wire.hpp>
#include <fiber/detail/service_wire.hpp>
#include <fiber/detail/wire_status.hpp>
