// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/http_client.hpp
/// fiber's HTTP/1.1 client for backends driven by a REST API (Docker's Engine
/// API, Kubernetes' API server): libcurl's multi_socket interface
/// run on an Asio executor. Internal to fiber (namespace fiber::detail::http).
///
/// ## Why libcurl
/// * nng's HTTP client (nng/supplemental/http) cannot dial a unix socket, and
///   a chunked response body (Docker's `/events`, Kubernetes' `watch`) is only
///   reachable through private API: it reads whole bodies.
/// * A hand-written HTTP/1.1 client over Asio sockets would have to parse
///   responses, chunked encoding, TLS with client certificates, proxies and
///   redirects correctly: none of that is what fiber exists for, and each is
///   a source of bugs a well-kept library has already fixed.
/// * libcurl does all of it, talks to unix sockets (CURLOPT_UNIX_SOCKET_PATH),
///   streams bodies through a callback, reuses kept-alive connections, and its
///   multi_socket API lets the caller own the event loop: curl says which
///   sockets to watch and when its timer is due; fiber waits on them with
///   Asio (`stream_descriptor::async_wait`, `steady_timer`) on the runtime's
///   executor, so the runtime thread never blocks on HTTP. libcurl is opened
///   with dlopen on first use (see curl_loader.hpp: linking it would slow the
///   start of every fiber process, workers included).
///
/// ## Integration details
/// * curl's sockets are watched through asio::posix::stream_descriptor,
///   which is `release()`d, never closed, when curl stops watching them; curl
///   closes its sockets itself, through CURLOPT_CLOSESOCKETFUNCTION, which
///   first deregisters the descriptor from Asio's reactor (so a reused fd
///   number never meets a stale registration).
/// * No user code runs inside a libcurl call: body pieces and completions are
///   posted, so handlers may start or cancel requests freely.
/// * HTTP statuses are not errors here: a request that got a response
///   completes with a default error_code and `response::status`; the
///   error_code is set when no (complete) response arrived (libcurl's
///   CURLcode in curl_category(), or asio::error::operation_aborted).
///
/// Thread-safety: a client and its operations belong to its executor, which
/// must be single-threaded (an io_context run by one thread, or a strand):
/// call every member from it. perform_blocking() is free-standing and may be
/// called from any thread.

#include <fiber/backend/detail/async_util.hpp>
#include <fiber/backend/detail/curl_loader.hpp>
#include <fiber/backend/detail/http_transfer.hpp>
#include <fiber/backend/detail/http_types.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/error.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail::http {

/// An asynchronous HTTP client on an Asio executor (see the file comment).
/// Requests run concurrently; kept-alive connections are reused across
/// requests to the same host or unix socket.
class client {
public:
  using executor_type = asio::any_io_executor;

  /// Throws std::runtime_error when libcurl cannot be loaded.
  explicit client(executor_type ex) : impl_(std::make_shared<impl>(std::move(ex))) {}
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  /// Outstanding operations complete with asio::error::operation_aborted
  /// (their handlers are posted, not called from here).
  ~client() { impl_->shutdown(); }

  executor_type get_executor() const noexcept { return impl_->ex_; }

  /// Performs `r` and completes with the whole response.
  ///
  /// Completion signature: `void(std::error_code ec, response r)`. `ec` is
  /// set only when no complete response arrived (libcurl's code in
  /// curl_category(), with details in `r.error`; operation_aborted when
  /// cancelled); an HTTP error status is `r.status`, not `ec`.
  /// The handler runs on its associated executor (default: the client's),
  /// never inside this call. `r` is moved into the operation.
  /// Cancellation: the handler's associated cancellation slot (any type)
  /// aborts the transfer; so does cancel() or destroying the client.
  template <class CompletionToken>
  auto async_request(request r, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(std::error_code, response)>(
        [this](auto handler, request r) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          impl_->start(std::move(r), false, {},
                       bind_completion<std::error_code, response>(std::move(handler), impl_->ex_), slot);
        },
        token, std::move(r));
  }

  /// Performs `r` and hands a 2xx body to `h.on_data` as it arrives (Docker
  /// `/events`, Kubernetes `?watch=1`, container output); runs until the
  /// server ends the body, the transfer fails, or it is cancelled.
  ///
  /// Completion signature: `void(std::error_code ec, response r)`, as for
  /// async_request; `r.body` holds the body only when the status is not 2xx.
  /// Set `r.timeout` to 0 (the default) for a stream of unbounded length.
  /// `h`'s callbacks run on the client's executor, before the completion.
  /// Cancellation: as for async_request (the usual way to end a stream).
  template <class CompletionToken>
  auto async_stream(request r, stream_handlers h, CompletionToken&& token) {
    return asio::async_initiate<CompletionToken, void(std::error_code, response)>(
        [this](auto handler, request r, stream_handlers h) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          impl_->start(std::move(r), true, std::move(h),
                       bind_completion<std::error_code, response>(std::move(handler), impl_->ex_), slot);
        },
        token, std::move(r), std::move(h));
  }

  /// Aborts every outstanding operation (operation_aborted).
  void cancel() { impl_->cancel_all(); }

  /// Operations started and not yet completed.
  std::size_t outstanding() const noexcept { return impl_->transfers_.size(); }

private:
  struct socket_state {
    std::optional<asio::posix::stream_descriptor> sd;
    int want = 0;
    bool reading = false, writing = false, gone = false;
    ~socket_state() {
      if (sd && sd->is_open()) sd->release(); // curl owns the fd
    }
  };

  struct impl final : impl_::sink, std::enable_shared_from_this<impl> {
    executor_type ex_;
    asio::steady_timer timer_;
    const curl_api* api_;
    CURLM* multi_ = nullptr;
    std::unordered_map<curl_socket_t, std::shared_ptr<socket_state>> sockets_;
    std::unordered_map<std::uint64_t, std::shared_ptr<impl_::transfer>> transfers_;
    std::uint64_t next_id_ = 1;
    bool shut_ = false;

    explicit impl(executor_type ex) : ex_(std::move(ex)), timer_(ex_), api_(&curl_api::get()) {
      multi_ = api_->multi_init();
      if (!multi_) throw std::runtime_error("curl_multi_init failed");
      api_->multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &impl::on_socket);
      api_->multi_setopt(multi_, CURLMOPT_SOCKETDATA, static_cast<void*>(this));
      api_->multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &impl::on_timer);
      api_->multi_setopt(multi_, CURLMOPT_TIMERDATA, static_cast<void*>(this));
    }
    ~impl() override { shutdown(); }

    void shutdown() {
      if (shut_) return;
      cancel_all();
      shut_ = true;
      timer_.cancel();
      api_->multi_cleanup(multi_); // closes cached connections (forget() runs for each)
      multi_ = nullptr;
      for (auto& [fd, s] : sockets_) forget_state(*s);
      sockets_.clear();
    }

    void start(request r, bool streaming, stream_handlers h, unique_function<void(std::error_code, response)> done,
               asio::cancellation_slot slot) {
      auto t = std::make_shared<impl_::transfer>();
      t->id = next_id_++;
      t->req = std::move(r);
      t->streaming = streaming;
      t->handlers = std::move(h);
      t->complete = std::move(done);
      if (shut_) return fail(*t, asio::error::operation_aborted);
      try {
        impl_::setup_easy(*api_, *t, this);
      } catch (const std::exception& e) {
        t->resp.error = e.what();
        impl_::cleanup_easy(*api_, *t);
        return fail(*t, make_error(CURLE_FAILED_INIT));
      }
      transfers_.emplace(t->id, t);
      if (auto rc = api_->multi_add_handle(multi_, t->easy); rc != CURLM_OK) {
        transfers_.erase(t->id);
        t->resp.error = api_->multi_strerror(rc);
        impl_::cleanup_easy(*api_, *t);
        return fail(*t, make_error(CURLE_FAILED_INIT));
      }
      if (slot.is_connected()) {
        t->slot = slot;
        slot.assign([w = weak_from_this(), id = t->id](asio::cancellation_type) {
          if (auto self = w.lock()) self->cancel_one(id, asio::error::operation_aborted);
        });
      }
    }

    void fail(impl_::transfer& t, std::error_code ec) {
      t.done = true;
      if (t.complete) std::exchange(t.complete, nullptr)(ec, std::move(t.resp));
    }

    void cancel_one(std::uint64_t id, std::error_code ec) {
      auto it = transfers_.find(id);
      if (it == transfers_.end()) return;
      auto t = it->second;
      transfers_.erase(it);
      api_->multi_remove_handle(multi_, t->easy);
      impl_::cleanup_easy(*api_, *t);
      if (t->slot.is_connected()) t->slot.clear();
      fail(*t, ec);
    }

    void cancel_all() {
      std::vector<std::uint64_t> ids;
      for (auto& [id, t] : transfers_) ids.push_back(id);
      for (auto id : ids) cancel_one(id, asio::error::operation_aborted);
    }

    // ---- libcurl -> Asio -------------------------------------------------

    static int on_socket(CURL*, curl_socket_t fd, int what, void* userp, void*) {
      auto* self = static_cast<impl*>(userp);
      if (what == CURL_POLL_REMOVE) {
        self->forget(fd);
        return 0;
      }
      auto& s = self->sockets_[fd];
      if (!s) {
        s = std::make_shared<socket_state>();
        try {
          s->sd.emplace(self->ex_, fd);
        } catch (const std::exception&) {
          self->sockets_.erase(fd);
          return -1; // curl fails the transfer
        }
      }
      s->want = what;
      self->arm(fd, s);
      return 0;
    }

    static int on_timer(CURLM*, long timeout_ms, void* userp) {
      auto* self = static_cast<impl*>(userp);
      if (timeout_ms < 0) {
        self->timer_.cancel();
        return 0;
      }
      self->timer_.expires_after(std::chrono::milliseconds(timeout_ms));
      self->timer_.async_wait([w = self->weak_from_this()](std::error_code ec) {
        auto self = w.lock();
        if (ec || !self || self->shut_) return;
        int running = 0;
        self->api_->multi_socket_action(self->multi_, CURL_SOCKET_TIMEOUT, 0, &running);
        self->reap();
      });
      return 0;
    }

    void forget(curl_socket_t fd) override {
      auto it = sockets_.find(fd);
      if (it == sockets_.end()) return;
      forget_state(*it->second);
      sockets_.erase(it);
    }

    static void forget_state(socket_state& s) {
      s.gone = true;
      if (s.sd && s.sd->is_open()) s.sd->release(); // deregisters; pending waits end with operation_aborted
    }

    void arm(curl_socket_t fd, const std::shared_ptr<socket_state>& s) {
      arm(fd, s, CURL_POLL_IN, &socket_state::reading, asio::posix::stream_descriptor::wait_read, CURL_CSELECT_IN);
      arm(fd, s, CURL_POLL_OUT, &socket_state::writing, asio::posix::stream_descriptor::wait_write, CURL_CSELECT_OUT);
    }

    // One direction: wait until `fd` is ready for it (unless curl does not
    // want it or a wait is under way), then tell curl `select`.
    void arm(curl_socket_t fd, const std::shared_ptr<socket_state>& s, int poll, bool socket_state::*waiting,
             asio::posix::stream_descriptor::wait_type direction, int select) {
      if (!(s->want & poll) || (*s).*waiting) return;
      (*s).*waiting = true;
      s->sd->async_wait(direction, [w = weak_from_this(), s, fd, waiting, select](std::error_code ec) {
        (*s).*waiting = false;
        if (auto self = w.lock(); self && !ec && !s->gone) self->ready(fd, s, select);
      });
    }

    void ready(curl_socket_t fd, std::shared_ptr<socket_state> s, int what) {
      if (shut_) return;
      int running = 0;
      api_->multi_socket_action(multi_, fd, what, &running);
      reap();
      // Still watched (and by the same registration)? Wait again for what curl wants.
      if (auto it = sockets_.find(fd); it != sockets_.end() && it->second == s && !s->gone) arm(fd, s);
    }

    /// Completed transfers: hand them to their handlers.
    void reap() {
      std::vector<std::pair<std::shared_ptr<impl_::transfer>, CURLcode>> done;
      int left = 0;
      while (CURLMsg* m = api_->multi_info_read(multi_, &left)) {
        if (m->msg != CURLMSG_DONE) continue;
        impl_::transfer* raw = nullptr;
        api_->easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &raw);
        if (!raw) continue;
        auto it = transfers_.find(raw->id);
        if (it == transfers_.end()) continue;
        done.emplace_back(it->second, m->data.result);
        transfers_.erase(it);
      }
      for (auto& d : done) {
        auto& t = d.first; // not a structured binding: clang 14 cannot capture those
        auto ec = impl_::finish_code(*api_, *t, d.second);
        api_->multi_remove_handle(multi_, t->easy);
        impl_::cleanup_easy(*api_, *t);
        if (t->slot.is_connected()) t->slot.clear();
        // After any body pieces already posted: the completion is posted too.
        asio::post(ex_, [t, ec]() mutable {
          deliver(*t);
          if (t->complete) std::exchange(t->complete, nullptr)(ec, std::move(t->resp));
        });
        t->done = true;
      }
    }

    static void deliver(impl_::transfer& t) {
      t.flush_posted = false;
      if (t.pending.empty() || !t.handlers.on_data) return;
      std::string data = std::move(t.pending);
      t.pending.clear();
      t.handlers.on_data(data);
    }

    void data(impl_::transfer& raw) override {
      if (raw.flush_posted) return;
      auto it = transfers_.find(raw.id);
      if (it == transfers_.end()) return;
      raw.flush_posted = true;
      asio::post(ex_, [t = it->second] {
        if (t->complete) deliver(*t); // not once the completion ran (cancelled)
      });
    }

    void head(impl_::transfer& raw) override {
      auto it = transfers_.find(raw.id);
      if (it == transfers_.end()) return;
      asio::post(ex_, [t = it->second] {
        if (t->complete && t->handlers.on_head) t->handlers.on_head(t->resp);
      });
    }
  };

  std::shared_ptr<impl> impl_;
};

/// Performs `requests` concurrently on the calling thread and blocks until
/// all have completed or `limit` has passed; those still running then fail
/// with CURLE_OPERATION_TIMEDOUT. Results are in the order of `requests`,
/// with the meaning async_request gives them. For destructors that must
/// finish their work before the event loop is gone (e.g. removing a run's
/// containers): never call it on a thread whose event loop others wait on.
/// Any thread. Throws std::runtime_error when libcurl cannot be loaded.
inline std::vector<std::pair<std::error_code, response>> perform_blocking(std::vector<request> requests,
                                                                          std::chrono::milliseconds limit) {
  const auto& api = curl_api::get();
  std::vector<std::pair<std::error_code, response>> results(requests.size());
  std::vector<std::unique_ptr<impl_::transfer>> ts;
  CURLM* multi = api.multi_init();
  if (!multi) throw std::runtime_error("curl_multi_init failed");
  for (std::size_t i = 0; i < requests.size(); ++i) {
    auto t = std::make_unique<impl_::transfer>();
    t->id = i;
    t->req = std::move(requests[i]);
    if (t->req.timeout.count() == 0 || t->req.timeout > limit) t->req.timeout = limit;
    try {
      impl_::setup_easy(api, *t, nullptr);
    } catch (const std::exception& e) {
      impl_::cleanup_easy(api, *t);
      results[i] = {make_error(CURLE_FAILED_INIT), response{0, {}, {}, e.what()}};
      continue;
    }
    api.multi_add_handle(multi, t->easy);
    ts.push_back(std::move(t));
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int running = 0;
    api.multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* m = api.multi_info_read(multi, &left)) {
      if (m->msg != CURLMSG_DONE) continue;
      impl_::transfer* t = nullptr;
      api.easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &t);
      auto ec = impl_::finish_code(api, *t, m->data.result);
      results[t->id] = {ec, std::move(t->resp)};
      api.multi_remove_handle(multi, t->easy);
      impl_::cleanup_easy(api, *t);
      t->done = true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (running == 0 || now >= deadline) break;
    auto wait = std::min<std::chrono::milliseconds>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now), std::chrono::milliseconds(100));
    api.multi_poll(multi, nullptr, 0, int(wait.count()) + 1, nullptr);
  }
  for (auto& t : ts)
    if (!t->done) {
      results[t->id] = {make_error(CURLE_OPERATION_TIMEDOUT),
                        response{0, {}, {}, "gave up after " + std::to_string(limit.count()) + " ms"}};
      api.multi_remove_handle(multi, t->easy);
      impl_::cleanup_easy(api, *t);
    }
  api.multi_cleanup(multi);
  return results;
}

} // namespace fiber::detail::http
