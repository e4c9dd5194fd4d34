// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pool_wire.hpp
/// What a Pool sends its workers and gets back: chunks of tasks, a Process's
/// one run, and results blobs (per item: a wire_status, then the value or the
/// failure), with views that decode received frames without copying.

#include <fiber/detail/frame.hpp>
#include <fiber/detail/wire_status.hpp>
#include <fiber/serialize.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fiber::detail {

/// One chunk of a Pool task: `count` serialized arguments back to back.
struct chunk_msg {
  std::uint64_t chunk_id = 0;
  std::uint64_t target_id = 0;
  std::uint32_t count = 0;
  std::vector<std::byte> args;
};

/// A results blob: per item, a wire_status (ok, remote_error, or
/// worker_lost for a task whose workers died too often; the last is made by
/// the master for a split chunk's lost task, never sent by a worker), then
/// the value or the failure's body.
struct chunk_result_msg {
  std::uint64_t chunk_id = 0;
  std::vector<std::byte> results;
};

struct run_msg {
  std::uint64_t target_id = 0;
  std::vector<std::byte> args;
};

/// A chunk of a received tasks frame; `args` lies in the frame (no copy).
struct chunk_view {
  std::uint64_t chunk_id = 0;
  std::uint64_t target_id = 0;
  std::uint32_t count = 0;
  std::span<const std::byte> args;
};

/// A chunk result of a received results frame; `results` lies in the frame.
struct chunk_result_view {
  std::uint64_t chunk_id = 0;
  std::span<const std::byte> results;
};

static_assert(!needs_pad<chunk_msg> && !needs_pad<chunk_result_msg>, "the views below assume no pad bytes");

/// The body of a tasks frame, decoded as deserialize<std::vector<chunk_msg>>
/// decodes it (same checks, same errors) but without copying arguments.
inline std::vector<chunk_view> decode_tasks_view(std::span<const std::byte> body) {
  reader r(body);
  std::vector<chunk_view> out(r.read_length(min_wire_size<chunk_msg>()));
  for (auto& c : out) {
    r.read(c.chunk_id);
    r.read(c.target_id);
    r.read(c.count);
    c.args = r.read_span(r.read_length());
  }
  if (!r.empty()) r.fail("trailing bytes after a tasks frame");
  return out;
}

/// The body of a results frame, as deserialize<std::vector<chunk_result_msg>>
/// decodes it, without copying the results.
inline std::vector<chunk_result_view> decode_results_view(std::span<const std::byte> body) {
  reader r(body);
  std::vector<chunk_result_view> out(r.read_length(min_wire_size<chunk_result_msg>()));
  for (auto& c : out) {
    r.read(c.chunk_id);
    c.results = r.read_span(r.read_length());
  }
  if (!r.empty()) r.fail("trailing bytes after a results frame");
  return out;
}

/// The bytes of a frame of `kind` holding a vector of one message whose
/// fixed-size `fields` are followed by a byte vector of `tail_size` bytes,
/// up to that vector's contents: sent with the bytes as the frame's tail,
/// they need not be copied.
template <class... Fields>
std::vector<std::byte> one_item_frame_head(frame_kind kind, std::size_t tail_size, const Fields&... fields) {
  writer w;
  w.buffer().reserve(16 + (sizeof(Fields) + ...));
  w.write(static_cast<std::uint8_t>(kind));
  w.write_varint(1);
  (w.write(fields), ...);
  w.write_varint(tail_size);
  return w.release();
}

/// The bytes of frame(tasks, std::vector<chunk_msg>{c}) before c.args.
inline std::vector<std::byte> tasks_frame_head(std::uint64_t chunk_id, std::uint64_t target_id, std::uint32_t count,
                                               std::size_t args_size) {
  return one_item_frame_head(frame_kind::tasks, args_size, chunk_id, target_id, count);
}

/// One tasks frame holding `batch`, serialized straight from the chunks
/// (the encoding of frame(frame_kind::tasks, std::vector<chunk_msg>),
/// without copying each chunk's arguments into a vector first).
inline std::vector<std::byte> tasks_frame(const std::vector<const chunk_msg*>& batch) {
  std::size_t bytes = 16;
  for (auto* c : batch) bytes += c->args.size() + 40;
  writer w;
  w.buffer().reserve(bytes);
  w.write(static_cast<std::uint8_t>(frame_kind::tasks));
  w.write_varint(batch.size());
  for (auto* c : batch) {
    w.write(*c);
    write_pad<chunk_msg>(w);
  }
  return w.release();
}

/// The bytes of frame(results, std::vector<chunk_result_msg>{r}) before r.results.
inline std::vector<std::byte> results_frame_head(std::uint64_t chunk_id, std::size_t results_size) {
  return one_item_frame_head(frame_kind::results, results_size, chunk_id);
}

/// Appends item `status` ok; the value follows.
inline void write_item_ok(writer& w) { w.write(wire_status::ok); }

/// Appends a remote_error item for the exception being handled.
inline void write_item_current_exception(writer& w) {
  w.write(wire_status::remote_error);
  write_current_exception(w);
}

/// Appends a worker_lost item saying why.
inline void write_item_lost(writer& w, std::string_view why) {
  w.write(wire_status::worker_lost);
  write_failure(w, why);
}

/// Reads one item's status; nullptr when it is ok (its value follows, read
/// it next), else the failure's exception (its body is consumed).
inline std::exception_ptr read_item(reader& r) {
  auto s = r.read<wire_status>();
  if (s == wire_status::ok) return nullptr;
  return read_failure(s, r);
}

} // namespace fiber::detail
