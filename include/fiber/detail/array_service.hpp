// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/array_service.hpp
/// The service behind fiber::Value and fiber::Array: a fixed number of
/// fixed-size elements kept as bytes in the creating process.

#include <fiber/detail/service.hpp>
#include <fiber/detail/sync_wire.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace fiber::detail {

/// `count` elements of `size` bytes each, read and written one at a time
/// (each request is atomic: it runs alone on the runtime thread). Runtime
/// thread only.
class array_service final : public service {
public:
  /// `init`: count * size bytes, the elements' initial values.
  array_service(std::size_t size, std::vector<std::byte> init) : size_(size), data_(std::move(init)) {}

  void handle(std::uint64_t, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    reader r(payload);
    (void)sync_header::read_from(r);
    const auto i = r.read<std::uint64_t>();
    if (size_ == 0 || i >= data_.size() / size_)
      return reply_text(reply, wire_status::error, "fiber::Array: index " + std::to_string(i) + " out of range");
    auto at = data_.begin() + std::ptrdiff_t(i * size_);
    if (op == sync_op::read) {
      std::vector<std::byte> out;
      out.reserve(size_ + 1);
      out.push_back(std::byte(wait_tag::done));
      out.insert(out.end(), at, at + std::ptrdiff_t(size_));
      return reply(wire_status::ok, std::move(out));
    }
    if (op == sync_op::write) {
      auto bytes = r.read_span(r.remaining());
      if (bytes.size() != size_)
        return reply_text(reply, wire_status::error,
                          "fiber::Array: element of " + std::to_string(bytes.size()) + " bytes, expected " +
                              std::to_string(size_));
      std::copy(bytes.begin(), bytes.end(), at);
      return reply_wait(reply, wait_tag::done);
    }
    reply_text(reply, wire_status::error, "fiber::Array: unknown operation " + std::to_string(op));
  }

private:
  std::size_t size_;
  std::vector<std::byte> data_;
};

} // namespace fiber::detail
