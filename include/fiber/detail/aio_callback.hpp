// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/aio_callback.hpp
/// The body of every nng aio callback (nng_acceptor's, nng_byte_stream's):
/// read the result on nng's thread, finish on the owner's executor.

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <nng/nng.h>

#include <cstddef>
#include <memory>
#include <utility>

namespace fiber::detail {

/// Reads `aio`'s result and `output(aio, rv)` on nng's thread and runs
/// `then(keep, rv, output)` on `ex`. `keep` (what holds the owner for the
/// operation: its shared_ptr, or an io_done) moves into the posted
/// function, so nng's thread never drops the last reference: the owner's
/// destructor stops aios, which must not run on nng's threads. `ex` is
/// taken by value for the same reason.
template <class Keep, class Output, class Then>
void finish_on_executor(nng_aio* aio, asio::any_io_executor ex, Keep& keep, Output output, Then then) {
  const int rv = nng_aio_result(aio);
  auto out = output(aio, rv);
  asio::post(ex, [keep = std::move(keep), rv, out, then]() mutable { then(keep, rv, out); });
}

/// finish_on_executor's `output` for a send or receive: the bytes moved.
inline std::size_t aio_count(nng_aio* aio, int) { return nng_aio_count(aio); }

/// finish_on_executor's `output` for an accept: the new stream.
inline nng_stream* aio_stream(nng_aio* aio, int rv) {
  return rv == 0 ? static_cast<nng_stream*>(nng_aio_get_output(aio, 0)) : nullptr;
}

} // namespace fiber::detail
