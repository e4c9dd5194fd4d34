// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/broker_wire.hpp
/// The request protocol of Queue and Pipe brokers. Every item operation
/// starts with the header [u64 wait id][i64 timeout ms: -1 forever, 0 now]
/// [u8 end]; `wait id` is unique in the calling process, so (link, wait id)
/// names one waiting request at the broker (for cancel and ack).
///  - put:    header, item bytes → [u8 give_tag]   (eof: the reader is gone)
///  - get:    header             → [u8 take_tag] (item: then [u8 ack?][item bytes...]; eof: end of pipe)
///  - poll:   header             → [u8 0/1]
///  - cancel: header             → empty; the waiter (if still waiting) is answered `cancelled`
///  - ack:    header             → empty; a remote getter confirms it received the item
///  - abandon: header            → empty; a remote getter's get failed with its link: the
///                                 item handed to it, if any, was never received
///  - size:   —                  → [u64]
///  - task_done: header          → [u8 wait_tag] (done; misuse: more calls than items put, then a message)
///  - join:   header             → [u8 wait_tag] (done: every item put was marked done; timeout; cancelled)
///  - attach / detach / transfer (pipes): [u8 end][u64 token] → empty
///
/// Exactly once: an item leaves the broker in the reply to one get. A reply
/// to another process may be lost with its link, so the broker keeps a copy,
/// reserved for the getter process (runtime::process_of: the same across
/// its reconnects), until the getter acks it — or abandons it (its get
/// failed: the reply never arrived), or is known dead (runtime::when_dead):
/// then the item goes back to the front of the queue. A getter sends its
/// ack or abandon again after a lost link until the broker answers.
/// Timeouts are the broker's (a timer on the runtime thread that answers
/// "empty"), so an item is never taken and then dropped.

#include <fiber/detail/service.hpp>
#include <fiber/serialize.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fiber::detail {

namespace queue_op {
inline constexpr std::uint32_t put = 1, get = 2, poll = 3, cancel = 4, ack = 5, size = 6, task_done = 7, join = 8,
                               abandon = 9;
inline constexpr std::uint32_t attach = 10, detach = 11, transfer = 12;
} // namespace queue_op

/// First byte of a get reply.
enum class take_tag : std::uint8_t { item = 0, empty = 1, cancelled = 2 };
/// The byte of a put reply.
enum class give_tag : std::uint8_t { stored = 0, full = 1, cancelled = 2 };
/// First byte of the reply to a request that may wait (JoinableQueue's
/// task_done and join, every synchronization primitive: sync_wire.hpp).
/// `misuse` and `broken` are followed by a message (std::string).
enum class wait_tag : std::uint8_t {
  done = 0,      ///< granted / happened; the operation's result (if any) follows
  timeout = 1,   ///< the request's timeout expired first
  cancelled = 2, ///< withdrawn by a cancel request
  misuse = 3,    ///< refused as Python would with ValueError / RuntimeError → std::logic_error
  broken = 4,    ///< a Barrier is broken → fiber::broken_barrier_error
  revoked = 5,   ///< the caller's hold was taken back while it was unreachable → fiber::hold_revoked_error
};

/// Answers `reply` with `tag` followed by `args` (each serialized).
template <class... A>
void reply_wait(const reply_fn& reply, wait_tag tag, const A&... args) {
  writer w;
  w.write(std::uint8_t(tag));
  (w.write(args), ...);
  reply(wire_status::ok, w.release());
}

inline void reply_text(const reply_fn& reply, wire_status status, const std::string& msg) {
  reply(status, failure_payload(msg));
}

inline void reply_byte(const reply_fn& reply, std::uint8_t b) { reply(wire_status::ok, {std::byte{b}}); }

/// Header of an item operation.
struct op_header {
  std::uint64_t wait = 0;
  std::int64_t timeout_ms = -1;
  std::uint8_t end = 0;

  void write_to(writer& w) const {
    w.write(wait);
    w.write(timeout_ms);
    w.write(end);
  }
  static op_header read_from(reader& r) {
    op_header h;
    h.wait = r.read<std::uint64_t>();
    h.timeout_ms = r.read<std::int64_t>();
    h.end = r.read<std::uint8_t>();
    return h;
  }
  std::vector<std::byte> bytes() const {
    writer w;
    write_to(w);
    return w.release();
  }
};

} // namespace fiber::detail
