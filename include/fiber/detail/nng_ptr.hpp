// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/nng_ptr.hpp
/// Owning handles of nng objects (aio, stream, listener, dialer, TLS config)
/// and the two ways fiber allocates an aio.

#include <fiber/detail/nng_error.hpp>

#include <nng/nng.h>

#include <memory>
#include <system_error>

namespace fiber::detail {

struct nng_free {
  void operator()(nng_aio* p) const noexcept { nng_aio_free(p); }
  void operator()(nng_stream* p) const noexcept { nng_stream_free(p); }
  void operator()(nng_stream_listener* p) const noexcept { nng_stream_listener_free(p); }
  void operator()(nng_stream_dialer* p) const noexcept { nng_stream_dialer_free(p); }
};
using aio_ptr = std::unique_ptr<nng_aio, nng_free>;
using stream_ptr = std::unique_ptr<nng_stream, nng_free>;
using listener_ptr = std::unique_ptr<nng_stream_listener, nng_free>;
using dialer_ptr = std::unique_ptr<nng_stream_dialer, nng_free>;

/// Allocates an aio whose callback is `cb(arg)`, with no timeout (fiber
/// times out through Asio cancellation, not nng timeouts).
inline aio_ptr make_aio(void (*cb)(void*), void* arg) {
  nng_aio* a = nullptr;
  if (int rv = nng_aio_alloc(&a, cb, arg)) throw std::system_error(make_nng_error(rv), "nng_aio_alloc");
  nng_aio_set_timeout(a, NNG_DURATION_INFINITE);
  return aio_ptr(a);
}

/// Allocates `a` on first use: an aio without a callback, which nng
/// completes on its own thread and nng_aio_wait() then returns — no hop
/// through nng's callback thread. Returns nng's error, 0 once allocated.
inline int lazy_sync_aio(aio_ptr& a) {
  if (a) return 0;
  nng_aio* p = nullptr;
  if (int rv = nng_aio_alloc(&p, nullptr, nullptr)) return rv;
  nng_aio_set_timeout(p, NNG_DURATION_INFINITE);
  a.reset(p);
  return 0;
}

} // namespace fiber::detail
