// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes/api.hpp
/// fiber's Kubernetes API client: JSON calls and watch streams over
/// http::client (libcurl) on one executor, authenticated as kubernetes/access.hpp
/// resolved (bearer token, rotating token file, client certificate, exec
/// plugin re-run when its credential expires or is rejected). Internal to
/// fiber (namespace fiber::detail::kube).
///
/// Operations complete with `void(std::exception_ptr e, nlohmann::json j)`:
/// `e` is null on success; otherwise an api_error (a fiber::backend_error
/// whose message starts with "kubernetes: " and carries the API server's
/// Status message, or says that it cannot be reached and where it was
/// looked for), or std::system_error(operation_aborted) when cancelled. `j`
/// is the response document. Handlers run on their associated executor
/// (default: the client's), never inside the initiating call. A 401 is
/// answered by fetching a fresh credential (re-reading the token file,
/// re-running the exec plugin) and trying once more; 429, 500, 502, 503 and
/// 504 are retried up to 4 times, after the server's Retry-After (at most 10 s)
/// or 0.1 s doubling. Cancellation: cancel() or destroying the client aborts
/// every outstanding operation; watches also honour their handler's
/// associated cancellation slot.
///
/// Thread-safety: as http::client (one single-threaded executor).

#include <fiber/backend/detail/async_command.hpp>
#include <fiber/backend/detail/async_util.hpp>
#include <fiber/backend/docker/wire.hpp> // docker::line_splitter, docker::url_encode
#include <fiber/backend/detail/environment.hpp>
#include <fiber/backend/detail/http_client.hpp>
#include <fiber/backend/kubernetes/access.hpp>
#include <fiber/backend/kubernetes/wire.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/error.hpp>
#include <asio/steady_timer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace fiber::detail::kube {

using docker::url_encode;
using json_handler = unique_function<void(std::exception_ptr, nlohmann::json)>;

/// Callbacks of async_watch; both run on the client's executor.
struct watch_handlers {
  unique_function<void()> on_established;        ///< the stream is up (optional)
  unique_function<void(watch_event&&)> on_event; ///< each event, in order
};

/// One call of api::blocking.
struct blocking_call {
  std::string method, path;
  nlohmann::json body; ///< null: none
};

/// A Kubernetes API client (see the file comment).
class api {
public:
  /// Throws api_error when libcurl cannot be loaded.
  api(asio::any_io_executor ex, access where) : s_(std::make_shared<state>(std::move(ex), std::move(where))) {}
  api(const api&) = delete;
  api& operator=(const api&) = delete;
  /// Outstanding operations complete with operation_aborted.
  ~api() { s_->shutdown(); }

  asio::any_io_executor get_executor() const { return s_->ex; }
  const access& where() const noexcept { return s_->where; }
  /// Times a fresh credential was fetched after a 401 (tests).
  unsigned reauthentications() const noexcept { return s_->reauths; }

  /// `method path` with `body` (null: none); `what` names the call in messages
  /// ("create pod x"). Completes with the answer's JSON.
  template <class Token>
  auto async_call(std::string method, std::string path, nlohmann::json body, std::string what, Token&& token) {
    return asio::async_initiate<Token, void(std::exception_ptr, nlohmann::json)>(
        [s = s_](auto handler, std::string method, std::string path, nlohmann::json body, std::string what) {
          auto done = bind_completion<std::exception_ptr, nlohmann::json>(std::move(handler), s->ex);
          s->call(std::move(method), std::move(path), body.is_null() ? std::string() : body.dump(), std::move(what),
                  std::move(done), 0, false);
        },
        token, std::move(method), std::move(path), std::move(body), std::move(what));
  }

  /// `GET path` (which asks for `watch=1`) as a stream: each event to
  /// h.on_event until the server ends it (completes with e null), it is cut
  /// (an api_error of status 0), refused (the Status as api_error), or cancelled.
  template <class Token>
  auto async_watch(std::string path, watch_handlers h, Token&& token) {
    return asio::async_initiate<Token, void(std::exception_ptr, nlohmann::json)>(
        [s = s_](auto handler, std::string path, watch_handlers h) {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto done = bind_completion<std::exception_ptr, nlohmann::json>(std::move(handler), s->ex);
          s->watch(std::move(path), std::move(h), std::move(done), slot);
        },
        token, std::move(path), std::move(h));
  }

  /// Aborts every outstanding operation.
  void cancel() { s_->http.cancel(); }

  /// Performs `calls` concurrently on the calling thread, blocking at most
  /// `limit` (credentials as the client has them; an expired exec
  /// credential is fetched again, blocking): for destructors that must clean
  /// up once the event loop is gone. Returns each call's HTTP status (0: no
  /// answer) and body. Never throws.
  std::vector<std::pair<long, std::string>> blocking(const std::vector<blocking_call>& calls,
                                                     std::chrono::milliseconds limit) const {
    std::vector<std::pair<long, std::string>> out(calls.size(), {0L, std::string()});
    try {
      s_->blocking_credentials(limit);
      std::vector<http::request> reqs;
      for (auto& c : calls) {
        auto r = s_->make_request(c.method, c.path, c.body.is_null() ? std::string() : c.body.dump());
        r.timeout = limit;
        reqs.push_back(std::move(r));
      }
      auto res = http::perform_blocking(std::move(reqs), limit);
      for (std::size_t i = 0; i < res.size(); ++i)
        out[i] = {res[i].first ? 0L : res[i].second.status, res[i].second.body};
    } catch (...) {
    }
    return out;
  }

private:
  struct state : std::enable_shared_from_this<state> {
    asio::any_io_executor ex;
    access where;
    http::client http;
    bool shut = false;
    unsigned reauths = 0;
    // Credentials that change: the token file's content, the exec plugin's answer.
    std::string file_token;
    std::chrono::steady_clock::time_point file_read{};
    bool file_stale = true;
    std::optional<exec_credential> exec_cred;
    std::shared_ptr<async_command> exec_cmd;
    std::vector<unique_function<void(std::exception_ptr)>> exec_waiting;

    state(asio::any_io_executor e, access w) : ex(e), where(std::move(w)), http(make_client(e)) {}

    static http::client make_client(asio::any_io_executor e) {
      try {
        return http::client(std::move(e));
      } catch (const std::exception& x) {
        throw api_error(std::string("kubernetes: ") + x.what(), 0);
      }
    }

    void shutdown() {
      shut = true;
      if (exec_cmd) exec_cmd->abort();
      auto aborted = std::make_exception_ptr(std::system_error(asio::error::operation_aborted));
      auto ws = std::move(exec_waiting);
      exec_waiting.clear();
      for (auto& f : ws) f(aborted);
      http.cancel();
    }

    // ---- credentials --------------------------------------------------------

    const std::string& current_token() {
      if (!where.token_file.empty()) {
        auto now = std::chrono::steady_clock::now();
        if (file_stale || now - file_read > std::chrono::seconds(1)) {
          file_token = trim_text(read_file_text(where.token_file));
          file_read = now;
          file_stale = false;
        }
        return file_token;
      }
      if (exec_cred && !exec_cred->token.empty()) return exec_cred->token;
      return where.token;
    }

    bool exec_valid() const {
      return exec_cred &&
             (!exec_cred->expiry || std::chrono::system_clock::now() + std::chrono::seconds(5) < *exec_cred->expiry);
    }

    spawn_request exec_request() const {
      const auto& x = *where.exec;
      spawn_request r;
      r.argv = {x.command};
      r.argv.insert(r.argv.end(), x.args.begin(), x.args.end());
      nlohmann::json info = {
          {"kind", "ExecCredential"}, {"apiVersion", x.api_version}, {"spec", {{"interactive", false}}}};
      if (x.provide_cluster_info) info["spec"]["cluster"] = x.cluster;
      auto env = x.env;
      env.emplace_back("KUBERNETES_EXEC_INFO", info.dump());
      r.env = merged_environment(env);
      r.new_process_group = true;
      return r;
    }

    std::string exec_failure(const std::string& why) const {
      const auto& x = *where.exec;
      return "kubernetes: exec credential plugin `" + x.command + "` (" + where.source + ") failed: " + why +
             (x.install_hint.empty() ? "" : "; " + trim_text(x.install_hint));
    }

    /// Runs `next` once the credentials are usable (or with why they are not).
    void authorize(unique_function<void(std::exception_ptr)> next) {
      if (!where.exec || exec_valid()) return next(nullptr);
      exec_waiting.push_back(std::move(next));
      if (exec_cmd) return; // running already
      auto finish = [w = weak_from_this()](std::exception_ptr e) {
        auto s = w.lock();
        if (!s) return;
        s->exec_cmd.reset();
        auto ws = std::move(s->exec_waiting);
        s->exec_waiting.clear();
        for (auto& f : ws) f(e);
      };
      try {
        exec_cmd = async_command::start(
            ex, exec_request(), std::chrono::seconds(60), [w = weak_from_this(), finish](command_result res) mutable {
              auto s = w.lock();
              if (!s) return;
              std::exception_ptr e;
              if (!res.ok()) {
                e = std::make_exception_ptr(api_error(s->exec_failure(res.describe() + ": " + res.message()), 401));
              } else {
                try {
                  s->exec_cred = parse_exec_credential(res.out, s->where.exec->command, s->where.exec->api_version);
                } catch (const std::exception& x) {
                  e = std::make_exception_ptr(api_error(x.what(), 401));
                }
              }
              finish(e);
            });
      } catch (const std::system_error& x) {
        asio::post(ex, [finish, e = std::make_exception_ptr(api_error(exec_failure(x.what()), 401))]() mutable {
          finish(e);
        });
      }
    }

    /// A 401: the credential is stale (a rotated token, an expired plugin
    /// credential). Whether a fresh one may help.
    bool invalidate() {
      if (where.exec) {
        exec_cred.reset();
        return true;
      }
      if (!where.token_file.empty()) {
        file_stale = true;
        return true;
      }
      return false;
    }

    void blocking_credentials(std::chrono::milliseconds limit) {
      if (!where.exec || exec_valid()) return;
      auto res = run(exec_request(), limit);
      if (res.ok()) exec_cred = parse_exec_credential(res.out, where.exec->command, where.exec->api_version);
    }

    // ---- requests --------------------------------------------------------------

    http::request make_request(std::string method, const std::string& path, std::string body) {
      http::request r;
      r.method = std::move(method);
      r.url = where.server + path;
      r.tls = where.tls;
      if (exec_cred && !exec_cred->cert_pem.empty()) {
        r.tls.cert_pem = exec_cred->cert_pem;
        r.tls.key_pem = exec_cred->key_pem;
      }
      r.bearer_token = current_token();
      r.proxy = where.proxy;
      r.use_env_proxy = !loopback_server();
      r.body = std::move(body);
      r.headers.emplace_back("Accept", "application/json");
      if (!r.body.empty()) r.headers.emplace_back("Content-Type", "application/json");
      r.timeout = std::chrono::seconds(60);
      r.connect_timeout = std::chrono::seconds(10);
      return r;
    }

    bool loopback_server() const {
      auto h = where.server.substr(where.server.find("://") + 3);
      return h.starts_with("127.") || h.starts_with("localhost") || h.starts_with("[::1]");
    }

    std::exception_ptr transport_error(const std::string& what, std::error_code ec, const http::response& r) const {
      if (ec == asio::error::operation_aborted)
        return std::make_exception_ptr(std::system_error(ec, "kubernetes: " + what + ": cancelled"));
      std::string why = r.error.empty() ? ec.message() : r.error;
      return std::make_exception_ptr(api_error("kubernetes: " + what + ": cannot reach the API server at " +
                                                   where.server + " (" + why + "; credentials: " + where.source + ")",
                                               0));
    }

    std::exception_ptr status_error(const std::string& what, const http::response& r) const {
      std::string msg = "kubernetes: " + what + ": " + status_message(r.status, r.body);
      if (r.status == 401) msg += " (credentials: " + where.source + ")";
      return std::make_exception_ptr(api_error(msg, r.status, status_reason(r.body)));
    }

    static bool retriable(long status) {
      return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
    }

    static std::chrono::milliseconds backoff(const http::response& r, int attempt) {
      auto ra = std::string(r.header("retry-after"));
      if (!ra.empty() && std::all_of(ra.begin(), ra.end(), ::isdigit))
        return std::chrono::milliseconds(std::min(10'000L, std::atol(ra.c_str()) * 1000L));
      return std::chrono::milliseconds(100 << std::min(attempt, 6));
    }

    void call(std::string method, std::string path, std::string body, std::string what, json_handler done, int attempt,
              bool reauthed) {
      authorize([w = weak_from_this(), method = std::move(method), path = std::move(path), body = std::move(body),
                 what = std::move(what), done = std::move(done), attempt, reauthed](std::exception_ptr e) mutable {
        auto s = w.lock();
        if (!s || s->shut) return done(std::make_exception_ptr(std::system_error(asio::error::operation_aborted)), {});
        if (e) return done(e, {});
        auto req = s->make_request(method, path, body);
        s->http.async_request(std::move(req), [w, method = std::move(method), path = std::move(path),
                                               body = std::move(body), what = std::move(what), done = std::move(done),
                                               attempt, reauthed](std::error_code ec, http::response r) mutable {
          auto s = w.lock();
          if (!s || s->shut)
            return done(std::make_exception_ptr(std::system_error(asio::error::operation_aborted)), {});
          if (ec) return done(s->transport_error(what, ec, r), {});
          if (r.status == 401 && !reauthed && s->invalidate()) {
            ++s->reauths;
            return s->call(std::move(method), std::move(path), std::move(body), std::move(what), std::move(done),
                           attempt, true);
          }
          if (retriable(r.status) && attempt < 4) {
            auto t = std::make_shared<asio::steady_timer>(s->ex, backoff(r, attempt));
            return t->async_wait([w, t, method = std::move(method), path = std::move(path), body = std::move(body),
                                  what = std::move(what), done = std::move(done), attempt,
                                  reauthed](std::error_code) mutable {
              auto s = w.lock();
              if (!s || s->shut)
                return done(std::make_exception_ptr(std::system_error(asio::error::operation_aborted)), {});
              s->call(std::move(method), std::move(path), std::move(body), std::move(what), std::move(done),
                      attempt + 1, reauthed);
            });
          }
          if (r.status < 200 || r.status >= 300) return done(s->status_error(what, r), {});
          auto j = r.body.empty() ? nlohmann::json() : nlohmann::json::parse(r.body, nullptr, false);
          if (j.is_discarded())
            return done(
                std::make_exception_ptr(api_error("kubernetes: " + what + ": the answer is not JSON", r.status)), {});
          done(nullptr, std::move(j));
        });
      });
    }

    void watch(std::string path, watch_handlers h, json_handler done, asio::cancellation_slot slot) {
      authorize([w = weak_from_this(), path = std::move(path), h = std::move(h), done = std::move(done),
                 slot](std::exception_ptr e) mutable {
        auto s = w.lock();
        if (!s || s->shut) return done(std::make_exception_ptr(std::system_error(asio::error::operation_aborted)), {});
        if (e) return done(e, {});
        auto req = s->make_request("GET", path, "");
        req.timeout = std::chrono::milliseconds(0);
        auto shared = std::make_shared<watch_handlers>(std::move(h));
        auto lines = std::make_shared<docker::line_splitter>();
        http::stream_handlers sh;
        sh.on_head = [shared](const http::response&) {
          if (shared->on_established) shared->on_established();
        };
        sh.on_data = [shared, lines](std::string_view d) {
          lines->feed(d, [&](std::string_view line) {
            skip_on_error("kubernetes: watch pods: an event fiber cannot read", [&] {
              if (auto ev = parse_watch_event(line); ev && shared->on_event) shared->on_event(std::move(*ev));
            });
          });
        };
        auto complete = [w, done = std::move(done)](std::error_code ec, http::response r) mutable {
          auto s = w.lock();
          if (!s || s->shut)
            return done(std::make_exception_ptr(std::system_error(asio::error::operation_aborted)), {});
          if (ec) return done(s->transport_error("watch pods", ec, r), {});
          if (r.status == 401) s->invalidate();
          if (r.status < 200 || r.status >= 300) return done(s->status_error("watch pods", r), {});
          done(nullptr, {});
        };
        if (slot.is_connected())
          s->http.async_stream(std::move(req), std::move(sh), asio::bind_cancellation_slot(slot, std::move(complete)));
        else s->http.async_stream(std::move(req), std::move(sh), std::move(complete));
      });
    }
  };

  std::shared_ptr<state> s_;
};

} // namespace fiber::detail::kube
