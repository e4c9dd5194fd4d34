// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/docker/api.hpp
/// fiber's Docker Engine API client: the calls the docker backend makes,
/// asynchronous on one executor, over http::client (libcurl), JSON through
/// nlohmann::json. Internal to fiber (namespace fiber::detail::docker).
///
/// Every operation first negotiates the API version once per client with an
/// unversioned `GET /version` (the older of the daemon's ApiVersion and
/// newest_api_version; refused below the daemon's MinAPIVersion), then calls
/// `/v<version>/...`. Operations complete with `void(std::exception_ptr e,
/// nlohmann::json j)`: `e` is null on success; otherwise it holds an
/// api_error (a fiber::backend_error whose message starts with "docker: " and
/// carries Docker's own `message`, or says that the daemon cannot be reached
/// at DOCKER_HOST and how to start one; raised as soon as the daemon answers
/// or the connection fails), or std::system_error(operation_aborted) when
/// cancelled. `j` is the response document (null when it has none).
/// Handlers run on their associated executor (default: the client's), never
/// inside the initiating call. Cancellation: cancel() or destroying the
/// client aborts every outstanding operation; streams (events, attach) also
/// honour their handler's associated cancellation slot.
///
/// Thread-safety: as http::client (one single-threaded executor).

#include <fiber/backend/detail/async_util.hpp>
#include <fiber/backend/docker/wire.hpp>
#include <fiber/backend/detail/http_client.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/error.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

namespace fiber::detail::docker {

/// Callbacks of async_events; both run on the client's executor.
struct event_handlers {
  unique_function<void()> on_subscribed;        ///< the stream is established (optional)
  unique_function<void(const event&)> on_event; ///< each event, in order
};

/// Callbacks of async_attach; both run on the client's executor.
struct attach_handlers {
  unique_function<void()> on_attached;                           ///< output from now on is seen (optional)
  unique_function<void(int stream, std::string_view)> on_output; ///< 1 stdout, 2 stderr
};

using json_handler = unique_function<void(std::exception_ptr, nlohmann::json)>;

/// A Docker Engine API client (see the file comment).
class api {
public:
  /// `where`: from endpoint_from_env() or parse_host(). Throws api_error when
  /// libcurl cannot be loaded.
  api(asio::any_io_executor ex, endpoint where) : s_(std::make_shared<state>(std::move(ex), std::move(where))) {}
  api(const api&) = delete;
  api& operator=(const api&) = delete;
  /// Outstanding operations complete with operation_aborted.
  ~api() { s_->http.cancel(); }

  asio::any_io_executor get_executor() const { return s_->ex; }
  const endpoint& where() const noexcept { return s_->where; }
  /// The negotiated API version ("1.41"); "" before the first answer.
  const std::string& version() const noexcept { return s_->version; }

  /// `GET /version` (unversioned): the daemon's version document. Negotiates.
  template <class Token>
  auto async_version(Token&& token) {
    return initiate(token, [](state& s, json_handler done) {
      s.negotiate([done = std::move(done), &s](std::exception_ptr e) mutable {
        done(e, e ? nlohmann::json() : s.version_doc);
      });
    });
  }

  /// `POST /containers/create?name=`: j = {"Id": ..., "Warnings": [...]}.
  template <class Token>
  auto async_create(container_spec spec, Token&& token) {
    return initiate(token, [spec = std::move(spec)](state& s, json_handler done) mutable {
      s.call("POST", "/containers/create?name=" + url_encode(spec.name), create_body(spec).dump(),
             "create container " + spec.name + " (image " + spec.image + ")", std::move(done));
    });
  }

  /// `POST /containers/{id}/start`.
  template <class Token>
  auto async_start(std::string id, Token&& token) {
    return initiate(token, [id = std::move(id)](state& s, json_handler done) {
      s.call("POST", "/containers/" + url_encode(id) + "/start", "", "start container " + id, std::move(done));
    });
  }

  /// `POST /containers/{id}/kill?signal=N`. A container that does not exist
  /// (status 404) or does not run (409) is an api_error with that status.
  template <class Token>
  auto async_kill(std::string id, int signal, Token&& token) {
    return initiate(token, [id = std::move(id), signal](state& s, json_handler done) {
      s.call("POST", "/containers/" + url_encode(id) + "/kill?signal=" + std::to_string(signal), "",
             "kill container " + id, std::move(done));
    });
  }

  /// `DELETE /containers/{id}?force=`: force kills it first if it runs.
  template <class Token>
  auto async_remove(std::string id, bool force, Token&& token) {
    return initiate(token, [id = std::move(id), force](state& s, json_handler done) {
      s.call("DELETE", "/containers/" + url_encode(id) + (force ? "?force=1" : ""), "", "remove container " + id,
             std::move(done));
    });
  }

  /// `GET /containers/{id}/json`.
  template <class Token>
  auto async_inspect(std::string id, Token&& token) {
    return initiate(token, [id = std::move(id)](state& s, json_handler done) {
      s.call("GET", "/containers/" + url_encode(id) + "/json", "", "inspect container " + id, std::move(done));
    });
  }

  /// `GET /containers/json?filters={"label":[...]}` (all=1: stopped ones
  /// too): j is an array of summaries (Id, Names, State, Labels, ...).
  template <class Token>
  auto async_list(std::vector<std::string> labels, bool all, Token&& token) {
    return initiate(token, [labels = std::move(labels), all](state& s, json_handler done) {
      s.call("GET", std::string("/containers/json?all=") + (all ? "1" : "0") + "&filters=" + label_filter(labels), "",
             "list containers", std::move(done));
    });
  }

  /// `GET /networks/{name}`.
  template <class Token>
  auto async_inspect_network(std::string name, Token&& token) {
    return initiate(token, [name = std::move(name)](state& s, json_handler done) {
      s.call("GET", "/networks/" + url_encode(name), "", "inspect network " + name, std::move(done));
    });
  }

  /// `GET /events?filters={"type":["container"],"label":[...]}` (since:
  /// "seconds.nanoseconds" replays what the daemon still holds from then):
  /// each event to h.on_event until the stream ends (the daemon stopped) or
  /// is cancelled. Completes with j null.
  template <class Token>
  auto async_events(std::vector<std::string> labels, std::string since, event_handlers h, Token&& token) {
    return initiate(token, [labels = std::move(labels), since = std::move(since),
                            h = std::move(h)](state& s, json_handler done, asio::cancellation_slot slot) mutable {
      s.events(std::move(labels), std::move(since), std::move(h), std::move(done), slot);
    });
  }

  /// `POST /containers/{id}/attach?stream=1&stdout=1&stderr=1` before the
  /// container starts: its output to h.on_output until it ends. Completes
  /// with j null when the container's output ends.
  template <class Token>
  auto async_attach(std::string id, attach_handlers h, Token&& token) {
    return initiate(token, [id = std::move(id), h = std::move(h)](state& s, json_handler done,
                                                                  asio::cancellation_slot slot) mutable {
      s.attach(std::move(id), std::move(h), std::move(done), slot);
    });
  }

  /// Aborts every outstanding operation.
  void cancel() { s_->http.cancel(); }

  /// Force-removes `ids` concurrently on the calling thread, blocking at most
  /// `limit`: for destructors that must not leave containers behind once the
  /// event loop is gone. Needs a negotiated version (else uses the oldest
  /// fiber speaks). Returns the ids that could not be removed (gone already:
  /// removed). Never throws.
  std::vector<std::string> remove_blocking(const std::vector<std::string>& ids, std::chrono::milliseconds limit) const {
    std::vector<http::request> reqs;
    for (auto& id : ids) reqs.push_back(s_->make_request("DELETE", "/containers/" + url_encode(id) + "?force=1", ""));
    std::vector<std::string> failed;
    try {
      auto res = http::perform_blocking(std::move(reqs), limit);
      for (std::size_t i = 0; i < res.size(); ++i) {
        auto& [ec, r] = res[i];
        // 404: already gone; 409: removal already in progress (AutoRemove).
        if (ec || (r.status >= 300 && r.status != 404 && r.status != 409)) failed.push_back(ids[i]);
      }
    } catch (...) {
      return ids;
    }
    return failed;
  }

  /// Lists (blocking, at most `limit`) the ids of containers carrying every
  /// label in `labels`, stopped ones included. Empty on any error.
  std::vector<std::string> list_blocking(const std::vector<std::string>& labels,
                                         std::chrono::milliseconds limit) const {
    std::vector<std::string> ids;
    try {
      auto res = http::perform_blocking(
          {s_->make_request("GET", "/containers/json?all=1&filters=" + label_filter(labels), "")}, limit);
      auto j = nlohmann::json::parse(res.at(0).second.body, nullptr, false);
      if (!res.at(0).first && j.is_array())
        for (auto& c : j) ids.push_back(c.value("Id", ""));
    } catch (...) {
    }
    return ids;
  }

  /// The GET /version document of the last negotiation (null before).
  const nlohmann::json& version_document() const noexcept { return s_->version_doc; }

private:
  struct state : std::enable_shared_from_this<state> {
    asio::any_io_executor ex;
    endpoint where;
    http::client http;
    std::string version;
    nlohmann::json version_doc;
    bool negotiating = false;
    std::vector<unique_function<void(std::exception_ptr)>> waiting;
    std::chrono::seconds call_timeout{60};

    state(asio::any_io_executor e, endpoint w) : ex(e), where(std::move(w)), http(make_client(e)) {}
    ~state() {
      auto aborted = std::make_exception_ptr(std::system_error(asio::error::operation_aborted));
      for (auto& f : waiting) f(aborted);
    }

    static http::client make_client(asio::any_io_executor e) {
      try {
        return http::client(std::move(e));
      } catch (const std::exception& x) {
        throw api_error(std::string("docker: ") + x.what(), 0);
      }
    }

    http::request make_request(std::string method, const std::string& path, std::string body,
                               bool versioned = true) const {
      http::request r;
      r.method = std::move(method);
      const std::string& v = version.empty() ? std::string(oldest_api_version) : version;
      r.url = where.base_url + (versioned ? "/v" + v : std::string()) + path;
      r.unix_socket = where.unix_socket;
      r.tls = where.tls;
      r.body = std::move(body);
      if (!r.body.empty()) r.headers.emplace_back("Content-Type", "application/json");
      r.timeout = call_timeout;
      r.connect_timeout = std::chrono::seconds(10);
      return r;
    }

    /// The message for a call that got no response.
    std::string transport_message(const std::string& what, std::error_code ec, const http::response& r) const {
      if (ec == asio::error::operation_aborted) return "docker: " + what + ": cancelled";
      std::string why = r.error.empty() ? ec.message() : r.error;
      if (ec == http::make_error(CURLE_OPERATION_TIMEDOUT))
        return "docker: " + what + ": no answer from the daemon at " + where.host + " (" + why + ")";
      std::string hint = "is dockerd running? Start it (`sudo systemctl start docker`, or `sudo dockerd &`), or point "
                         "DOCKER_HOST at a running daemon";
      if (!where.unix_socket.empty()) {
        struct stat st {};
        if (::stat(where.unix_socket.c_str(), &st) != 0) why = "no socket " + where.unix_socket;
        else if (::access(where.unix_socket.c_str(), R_OK | W_OK) != 0)
          hint = "permission denied on " + where.unix_socket + ": run as root or as a member of its group (docker)";
      }
      return "docker: cannot reach the Docker daemon at " + where.host + " (" + why + "); " + hint;
    }

    std::exception_ptr transport_error(const std::string& what, std::error_code ec, const http::response& r) const {
      if (ec == asio::error::operation_aborted)
        return std::make_exception_ptr(std::system_error(ec, "docker: " + what + ": cancelled"));
      return std::make_exception_ptr(api_error(transport_message(what, ec, r), 0));
    }

    /// Runs `next` once the version is known (or with the error that kept it unknown).
    void negotiate(unique_function<void(std::exception_ptr)> next) {
      if (!version.empty()) return next(nullptr);
      waiting.push_back(std::move(next));
      if (negotiating) return;
      negotiating = true;
      auto req = make_request("GET", "/version", "", false);
      req.timeout = std::chrono::seconds(30);
      http.async_request(std::move(req), [w = weak_from_this()](std::error_code ec, http::response r) {
        auto s = w.lock();
        if (!s) return;
        std::exception_ptr e;
        if (ec) {
          e = s->transport_error("GET /version", ec, r);
        } else if (r.status != 200) {
          e = std::make_exception_ptr(api_error("docker: GET /version: " + error_message(r), r.status));
        } else {
          try {
            auto j = nlohmann::json::parse(r.body);
            s->version = choose_api_version(j.value("ApiVersion", ""), j.value("MinAPIVersion", ""), s->where.host);
            s->version_doc = std::move(j);
          } catch (const api_error&) {
            e = std::current_exception();
          } catch (const std::exception& x) {
            e = std::make_exception_ptr(api_error(std::string("docker: GET /version: bad answer: ") + x.what(),
                                                  r.status));
          }
        }
        s->negotiating = false;
        // A failure is not remembered: the next call tries again (the daemon may have started).
        auto ws = std::move(s->waiting);
        s->waiting.clear();
        for (auto& f : ws) f(e);
      });
    }

    void call(std::string method, std::string path, std::string body, std::string what, json_handler done) {
      negotiate([w = weak_from_this(), method = std::move(method), path = std::move(path), body = std::move(body),
                 what = std::move(what), done = std::move(done)](std::exception_ptr e) mutable {
        auto s = w.lock();
        if (!s) return done(std::make_exception_ptr(std::system_error(asio::error::operation_aborted)), {});
        if (e) return done(e, {});
        s->http.async_request(
            s->make_request(method, path, std::move(body)),
            [w, what = std::move(what), done = std::move(done)](std::error_code ec, http::response r) mutable {
              auto s = w.lock();
              if (ec || !s) {
                if (!s) ec = asio::error::operation_aborted;
                return done(s ? s->transport_error(what, ec, r) : std::make_exception_ptr(std::system_error(ec)), {});
              }
              if (r.status < 200 || r.status >= 300)
                return done(std::make_exception_ptr(api_error("docker: " + what + ": " + error_message(r), r.status)),
                            {});
              auto j = r.body.empty() ? nlohmann::json() : nlohmann::json::parse(r.body, nullptr, false);
              if (j.is_discarded())
                return done(std::make_exception_ptr(api_error("docker: " + what + ": the daemon's answer is not JSON",
                                                              r.status)),
                            {});
              done(nullptr, std::move(j));
            });
      });
    }

    // A streaming call; `on_head` when established, `on_data` per piece.
    void stream(std::string method, std::string path, std::string what, http::stream_handlers h, json_handler done,
                asio::cancellation_slot slot) {
      negotiate([w = weak_from_this(), method = std::move(method), path = std::move(path), what = std::move(what),
                 h = std::move(h), done = std::move(done), slot](std::exception_ptr e) mutable {
        auto s = w.lock();
        if (!s) return done(std::make_exception_ptr(std::system_error(asio::error::operation_aborted)), {});
        if (e) return done(e, {});
        auto req = s->make_request(method, path, "");
        req.timeout = std::chrono::milliseconds(0);
        auto complete = [w, what = std::move(what), done = std::move(done)](std::error_code ec,
                                                                            http::response r) mutable {
          auto s = w.lock();
          if (ec || !s) {
            if (!s) ec = asio::error::operation_aborted;
            return done(s ? s->transport_error(what, ec, r) : std::make_exception_ptr(std::system_error(ec)), {});
          }
          if (r.status < 200 || r.status >= 300)
            return done(std::make_exception_ptr(api_error("docker: " + what + ": " + error_message(r), r.status)), {});
          done(nullptr, {});
        };
        if (slot.is_connected())
          s->http.async_stream(std::move(req), std::move(h), asio::bind_cancellation_slot(slot, std::move(complete)));
        else s->http.async_stream(std::move(req), std::move(h), std::move(complete));
      });
    }

    // Handlers of a streamed body: `started` once the response head is in,
    // then each item `Decoder` cuts from the bytes to `on_item`. An item
    // that cannot be read (or whose handler throws) is logged and skipped.
    template <class Decoder, class OnItem>
    static http::stream_handlers decoded(std::string what, std::function<void()> started, OnItem on_item) {
      auto decoder = std::make_shared<Decoder>();
      http::stream_handlers sh;
      sh.on_head = [started = std::move(started)](const http::response&) { started(); };
      sh.on_data = [decoder, what = "docker: " + what, on_item = std::move(on_item)](std::string_view d) {
        decoder->feed(d, [&](auto... item) { skip_on_error(what, [&] { on_item(item...); }); });
      };
      return sh;
    }

    void events(std::vector<std::string> labels, std::string since, event_handlers h, json_handler done,
                asio::cancellation_slot slot) {
      auto filters = url_encode(nlohmann::json{{"type", {"container"}}, {"label", labels}}.dump());
      std::string path = "/events?filters=" + filters + (since.empty() ? "" : "&since=" + url_encode(since));
      auto shared = std::make_shared<event_handlers>(std::move(h));
      auto sh = decoded<line_splitter>(
          "events",
          [shared] {
            if (shared->on_subscribed) shared->on_subscribed();
          },
          [shared](std::string_view line) {
            if (auto e = parse_event(line); e && shared->on_event) shared->on_event(*e);
          });
      stream("GET", path, "events", std::move(sh), std::move(done), slot);
    }

    void attach(std::string id, attach_handlers h, json_handler done, asio::cancellation_slot slot) {
      auto shared = std::make_shared<attach_handlers>(std::move(h));
      auto sh = decoded<output_demux>(
          "output of container " + id,
          [shared] {
            if (shared->on_attached) shared->on_attached();
          },
          [shared](int stream, std::string_view bytes) {
            if (shared->on_output) shared->on_output(stream, bytes);
          });
      stream("POST", "/containers/" + url_encode(id) + "/attach?stream=1&stdout=1&stderr=1",
             "attach to container " + id, std::move(sh), std::move(done), slot);
    }
  };

  // Starts `op(state&, json_handler[, slot])` for `token`.
  template <class Token, class Op>
  auto initiate(Token& token, Op op) {
    return asio::async_initiate<Token, void(std::exception_ptr, nlohmann::json)>(
        [s = s_](auto handler, Op op) mutable {
          auto slot = asio::get_associated_cancellation_slot(handler);
          auto done = bind_completion<std::exception_ptr, nlohmann::json>(std::move(handler), s->ex);
          if constexpr (std::is_invocable_v<Op&, state&, json_handler, asio::cancellation_slot>)
            op(*s, std::move(done), slot);
          else op(*s, std::move(done));
        },
        token, std::move(op));
  }

  std::shared_ptr<state> s_;
};

} // namespace fiber::detail::docker
