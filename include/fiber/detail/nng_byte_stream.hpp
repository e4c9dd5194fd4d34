// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/nng_byte_stream.hpp
/// byte_stream over an nng stream (what a listener accepts on ipc://): nng completes
/// its aios on its own threads, which only post the result to the executor.

#include <fiber/detail/aio_callback.hpp>
#include <fiber/detail/byte_stream.hpp>
#include <fiber/detail/nng_error.hpp>
#include <fiber/detail/nng_ptr.hpp>
#include <fiber/detail/stream_address.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/error.hpp>
#include <asio/post.hpp>

#include <nng/nng.h>

#include <utility>

namespace fiber::detail {

/// Owns `s`. Blocking calls use callback-less aios, which nng completes on
/// its poller thread and nng_aio_wait() then returns: no hop through nng's
/// callback thread.
class nng_byte_stream final : public byte_stream {
public:
  nng_byte_stream(asio::any_io_executor ex, nng_stream* s)
      : ex_(std::move(ex)),
        s_(s),
        saio_(make_aio(&on_done<&nng_byte_stream::sdone_, &nng_byte_stream::saio_>, this)),
        raio_(make_aio(&on_done<&nng_byte_stream::rdone_, &nng_byte_stream::raio_>, this)) {}
  ~nng_byte_stream() override { stop(); }

  void async_write_some(std::span<const nng_iov> iov, io_done done) override {
    start(saio_, sdone_, iov, std::move(done), &nng_stream_send);
  }
  void async_read_some(nng_iov iov, io_done done) override {
    start(raio_, rdone_, {&iov, 1}, std::move(done), &nng_stream_recv);
  }
  void cancel_read() override { nng_aio_cancel(raio_.get()); }
  void cancel_write() override { nng_aio_cancel(saio_.get()); }

  // nng's ipc and tcp streams write at once when the socket has room (a send
  // completes once some bytes are written). If there is no room at all the
  // send is still pending when nng_stream_send returns: it is cancelled
  // (nothing was written, or the poller wrote some bytes first and
  // completed it: both under nng's lock). No timeout: one would wake nng's
  // expire thread on every write.
  std::error_code try_write_some(std::span<const nng_iov> iov, std::size_t& n) override {
    n = 0;
    if (int rv = lazy_sync_aio(xaio_)) return make_nng_error(rv);
    if (int rv = nng_aio_set_iov(xaio_.get(), unsigned(iov.size()), iov.data())) return make_nng_error(rv);
    nng_stream_send(s_.get(), xaio_.get());
    nng_aio_cancel(xaio_.get());
    nng_aio_wait(xaio_.get());
    const int rv = nng_aio_result(xaio_.get());
    n = nng_aio_count(xaio_.get());
    if (rv == NNG_ECANCELED && n == 0) return asio::error::would_block;
    return make_nng_error(rv);
  }
  std::error_code write_some(std::span<const nng_iov> iov, std::size_t& n) override {
    return run_sync(daio_, iov, n, &nng_stream_send);
  }
  std::error_code read_some(nng_iov iov, std::size_t& n) override {
    return run_sync(draio_, {&iov, 1}, n, &nng_stream_recv);
  }

  void close() noexcept override { nng_stream_close(s_.get()); }
  void stop() noexcept override {
    nng_aio_stop(saio_.get());
    nng_aio_stop(raio_.get());
  }
  std::string peer_address() const override { return stream_peer_address(s_.get()); }
  bool is_ipc() const override {
    auto sa = stream_remote_addr(s_.get());
    return sa && sa->s_family == NNG_AF_IPC;
  }

private:
  using op_fn = void (*)(nng_stream*, nng_aio*);

  void start(aio_ptr& aio, io_done& slot, std::span<const nng_iov> iov, io_done done, op_fn op) {
    if (int rv = nng_aio_set_iov(aio.get(), unsigned(iov.size()), iov.data()))
      return asio::post(ex_, [d = std::move(done), ec = make_nng_error(rv)]() mutable { d(ec, 0); });
    slot = std::move(done);
    op(s_.get(), aio.get());
  }

  template <io_done nng_byte_stream::*Done, aio_ptr nng_byte_stream::*Aio>
  static void on_done(void* arg) {
    auto* self = static_cast<nng_byte_stream*>(arg);
    finish_on_executor((self->*Aio).get(), self->ex_, self->*Done, aio_count,
                       [](io_done& d, int rv, std::size_t n) { d(make_nng_error(rv), n); });
  }

  std::error_code run_sync(aio_ptr& aio, std::span<const nng_iov> iov, std::size_t& n, op_fn op) {
    n = 0;
    if (int rv = lazy_sync_aio(aio)) return make_nng_error(rv);
    if (int rv = nng_aio_set_iov(aio.get(), unsigned(iov.size()), iov.data())) return make_nng_error(rv);
    op(s_.get(), aio.get());
    nng_aio_wait(aio.get());
    n = nng_aio_count(aio.get());
    return make_nng_error(nng_aio_result(aio.get()));
  }

  asio::any_io_executor ex_;
  stream_ptr s_; // declared before the aios: freed after they are stopped
  aio_ptr saio_, raio_;
  io_done sdone_, rdone_;
  aio_ptr xaio_;  // try_write_some (executor)
  aio_ptr daio_;  // write_some (the direct writer)
  aio_ptr draio_; // read_some (the borrower)
};

} // namespace fiber::detail
