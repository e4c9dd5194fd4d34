// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/object_source.hpp
/// The owner's side of one put object: a service that serves its bytes in
/// pieces and, when the owner drops it, tells every process holding a copy.

#include <fiber/detail/service.hpp>
#include <fiber/detail/shared_segment.hpp>
#include <fiber/serialize.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Operations of an object's source, and of every process's drop listener.
enum store_op : std::uint32_t {
  store_attach = 1, ///< [listener url][listener id]: tell it when the object goes
  store_read = 2,   ///< [offset u64][length u64] → those bytes
  store_drop = 3,   ///< (to a listener) [nonce u64]: the owner dropped it
};

/// Serves one object's segment. Runtime thread only (a service).
class object_source final : public service {
public:
  /// `on_shutdown(listeners)` runs once, when the owner's last handle goes.
  object_source(shared_segment seg, std::shared_ptr<const segment_view> view,
                std::function<void(std::vector<service_ref>)> on_shutdown)
      : seg_(std::move(seg)), view_(std::move(view)), on_shutdown_(std::move(on_shutdown)) {}

  void handle(std::uint64_t, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    if (op == store_attach) {
      listeners_.insert(deserialize<std::pair<std::string, std::uint64_t>>(payload));
      return reply(wire_status::ok, {});
    }
    if (op == store_read && view_) {
      const auto [at, n] = deserialize<std::pair<std::uint64_t, std::uint64_t>>(payload);
      auto data = view_->data();
      if (at > data.size() || n > data.size() - at)
        return reply(wire_status::error, failure_payload("fiber: object read past its end"));
      return reply(wire_status::ok,
                   std::vector<std::byte>(data.begin() + std::ptrdiff_t(at), data.begin() + std::ptrdiff_t(at + n)));
    }
    reply(wire_status::error, failure_payload("fiber: unknown object store operation"));
  }

  void shutdown(const std::string&) override {
    if (!on_shutdown_) return;
    std::vector<service_ref> ls;
    for (auto& [url, id] : listeners_) ls.push_back({url, id});
    std::exchange(on_shutdown_, nullptr)(std::move(ls));
    view_.reset();
    seg_ = shared_segment();
  }

private:
  shared_segment seg_;
  std::shared_ptr<const segment_view> view_;
  std::function<void(std::vector<service_ref>)> on_shutdown_;
  std::set<std::pair<std::string, std::uint64_t>> listeners_;
};

} // namespace fiber::detail
