// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/transport.hpp
/// fiber's transport: 1:1, full-duplex, message-framed connections over byte
/// streams (`ipc://`, `tcp://`, `tls+tcp://`), bridged into Asio. A listener
/// accepts ipc:// through nng's stream listener and tcp:// on the executor's
/// own reactor (so a link from another host is read by the executor's thread,
/// not by nng's poller and task threads: docs/RATIONALE.md, "Environments as
/// actors"); a dial makes an Asio socket on the executor's own reactor, so a
/// process that only dials (an idle worker) runs no thread of nng's
/// (docs/RATIONALE.md, "Scale"); a local job's link to its master is a
/// socketpair made at launch, an Asio socket at both ends (inherited_link.hpp).
/// All are a `byte_stream`.
///
/// Why byte streams and not nng's SP sockets: fiber needs one addressable
/// connection per peer (master<->worker, broker<->client). SP protocols only
/// give that through PAIR1's deprecated polyamorous mode, so fiber frames
/// messages itself on nng streams.
///
/// Wire format: every message is a frame `u32 little-endian payload length`
/// followed by the payload. A frame longer than `max_message_size` fails the
/// receive with `asio::error::message_size` and closes the stream before any
/// payload buffer is allocated.
///
/// Asio bridge: every async operation uses `asio::async_initiate`, so any
/// completion token works (callbacks, use_awaitable, use_future, deferred,
/// parallel groups). nng completes its aios on its own threads; those
/// callbacks never touch stream state: they post the result to the stream's
/// executor, where all state lives (no mutex); a socket completes there. From there the user's handler
/// is dispatched to its associated executor, with outstanding work tracked on
/// both executors while an operation is pending (as Asio's own sockets do).
/// nng's file descriptors are never polled.
///
/// Threading: like asio::ip::tcp::socket, a stream/listener is not
/// thread-safe. Call its member functions (and destroy it) on its executor,
/// i.e. from one thread at a time or through a strand. One exception:
/// `stream::direct()` hands out a `direct_writer`, which any thread may use to
/// write a whole frame synchronously while the stream has nothing else to
/// write (a worker's main thread sends its results without waking the
/// executor's thread, nng's callback thread and then itself again).
///
/// Lifetime: close()/destruction waits for nng's callbacks of that object
/// (nng_aio_stop) and releases a socket from its reactor, so an io_context
/// may be destroyed right after its streams and listeners. A dialled
/// stream's read in flight is work of its io_context, as any Asio socket's
/// (run() returns once it is closed), and so is a stream accepted on tcp://;
/// one accepted on ipc:// is nng's. Destroy it only once no async_connect is pending (as with
/// any Asio operation, a pending connect keeps io_context::run() busy).
///
/// Batching and buffering: messages queued while a write is in flight leave
/// together in the next write (headers and small payloads copied into one
/// buffer, large payloads gathered in place); a lone message is written at
/// once. Reads fill a 64 KiB buffer, so many small frames cost one read and
/// a buffered frame completes async_recv without touching the byte stream.
/// See stream_state for the details.
///
/// Per-operation cancellation (the handler's associated cancellation slot):
///  - async_recv / async_accept: a pending operation completes with
///    operation_aborted; no side effect (all cancellation types). The read
///    or accept underneath is deliberately NOT cancelled: it keeps filling the
///    stream's buffer (bounded) for the next async_recv.
///  - async_send still queued: completes with operation_aborted, no side
///    effect. Already being written: only `terminal` cancellation acts; it
///    cancels the write and, since a partial frame may be on the wire,
///    closes the stream (the batch it was part of fails too).
///  - async_connect: ends the resolve or the connect.
///
/// Files: stream.hpp (stream, direct_writer, lent_reader) over stream_state.hpp
/// (frame_buffer.hpp reads, write_batch.hpp writes) over byte_stream.hpp
/// (nng_byte_stream.hpp, socket_byte_stream.hpp), listener.hpp over
/// byte_acceptor.hpp (nng_acceptor.hpp, socket_acceptor.hpp), connect.hpp;
/// nng_error.hpp, nng_ptr.hpp, tls_config.hpp, completion.hpp,
/// buffer_cache.hpp underneath.

#include <fiber/detail/buffer_cache.hpp>
#include <fiber/detail/connect.hpp>
#include <fiber/detail/listener.hpp>
#include <fiber/detail/nng_error.hpp>
#include <fiber/detail/stream.hpp>
#include <fiber/detail/tls_config.hpp>
