// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/nng_acceptor.hpp
/// byte_acceptor over nng's stream listener (ipc://): nng accepts on its
/// own threads, which only post the new stream to the executor.

#include <fiber/detail/aio_callback.hpp>
#include <fiber/detail/byte_acceptor.hpp>
#include <fiber/detail/nng_byte_stream.hpp>
#include <fiber/detail/nng_error.hpp>
#include <fiber/detail/nng_ptr.hpp>

#include <asio/any_io_executor.hpp>

#include <nng/nng.h>

#include <string>
#include <system_error>
#include <utility>

namespace fiber::detail {

/// Listens on `url` (any URL nng's stream listener takes) from construction;
/// throws std::system_error whose message names the URL.
class nng_acceptor final : public byte_acceptor {
public:
  nng_acceptor(asio::any_io_executor ex, const std::string& url) : ex_(std::move(ex)) {
    auto fail = [&](int rv) { throw std::system_error(make_nng_error(rv), "fiber: cannot listen on " + url); };
    nng_stream_listener* l = nullptr;
    if (int rv = nng_stream_listener_alloc(&l, url.c_str())) fail(rv);
    l_.reset(l);
    nng_stream_listener_set_bool(l, NNG_OPT_TCP_NODELAY, true); // ENOTSUP on ipc: fine
    nng_stream_listener_set_bool(l, NNG_OPT_TCP_KEEPALIVE, true);
    if (int rv = nng_stream_listener_listen(l)) fail(rv);
    if (nng_stream_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port_) != 0) port_ = 0;
    aio_ = make_aio(&nng_acceptor::on_accept_cb, this);
  }
  ~nng_acceptor() override { close(); }

  int bound_port() const override { return port_; }
  void async_accept(accept_done done) override {
    done_ = std::move(done);
    nng_stream_listener_accept(l_.get(), aio_.get());
  }
  // Not withdrawn: nng could accept a connection as it cancels.
  void cancel() noexcept override {}
  void close() noexcept override {
    nng_stream_listener_close(l_.get());
    nng_aio_stop(aio_.get()); // its callback has run: nothing posts after this
  }

private:
  static void on_accept_cb(void* arg) {
    auto* self = static_cast<nng_acceptor*>(arg);
    finish_on_executor(self->aio_.get(), self->ex_, self->done_, aio_stream,
                       [ex = self->ex_](accept_done& d, int rv, nng_stream* s) {
                         d(make_nng_error(rv), s ? std::make_unique<nng_byte_stream>(ex, s) : byte_stream_ptr{});
                       });
  }

  asio::any_io_executor ex_;
  listener_ptr l_; // declared before the aio: freed after it is stopped
  aio_ptr aio_;
  accept_done done_;
  int port_ = 0;
};

} // namespace fiber::detail
