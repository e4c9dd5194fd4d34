// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/metrics_server.hpp
/// The master's HTTP endpoint (civetweb's CivetServer, its own threads):
/// /metrics in Prometheus' text format, /status.json and the status page.

#include <fiber/config.hpp>
#include <fiber/detail/host_name.hpp>
#include <fiber/detail/metrics_families.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/stats_sources.hpp>
#include <fiber/detail/status_json.hpp>
#include <fiber/detail/status_page.hpp>
#include <fiber/error.hpp>
#include <fiber/stats.hpp>

#include <CivetServer.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

namespace fiber::detail {

/// What civetweb binds for a metrics_address value: "auto" is 127.0.0.1 on
/// a free port, "localhost:P" is 127.0.0.1:P; anything else is passed on
/// ("A.B.C.D:P", "[V6]:P"; a bare port binds every interface). Throws
/// fiber::config_error for an address off loopback unless `allow_public`.
/// Example: `metrics_listen_spec("auto", false) == "127.0.0.1:0"`.
inline std::string metrics_listen_spec(std::string_view address, bool allow_public) {
  std::string spec(address);
  if (spec == "auto") return "127.0.0.1:0";
  if (spec.starts_with("localhost:")) spec = "127.0.0.1:" + spec.substr(10);
  auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon + 1 == spec.size() ||
      spec.find_first_not_of("0123456789", colon + 1) != std::string::npos)
    throw config_error("fiber: metrics_address '" + std::string(address) +
                       "' is not HOST:PORT (e.g. 127.0.0.1:9464) or auto");
  const bool loopback = spec.starts_with("127.") || spec.starts_with("[::1]:");
  if (!loopback && !allow_public)
    throw config_error("fiber: metrics_address '" + std::string(address) +
                       "' is not a loopback address: set metrics_public = true to serve the metrics and status "
                       "page there (docs/observability.md says what they show)");
  return spec;
}

/// The endpoint. Its handlers run on civetweb's threads (two), never on the
/// runtime's; each takes a snapshot (fiber::stats()) at most every 200 ms.
class metrics_server {
public:
  /// Binds `listen` (metrics_listen_spec's form) and serves at once. Throws
  /// fiber::config_error when it cannot bind.
  metrics_server(const std::string& listen, std::shared_ptr<prometheus::Registry> user)
      : user_(std::move(user)), metrics_(*this, kind::metrics), json_(*this, kind::json), page_(*this, kind::page) {
    try {
      server_ = std::make_unique<CivetServer>(std::vector<std::string>{
          "listening_ports", listen, "num_threads", "2", "enable_keep_alive", "yes", "request_timeout_ms", "10000"});
    } catch (const CivetException& e) {
      throw config_error("fiber: metrics_address: cannot serve on '" + listen + "': " + e.what());
    }
    server_->addHandler("/metrics", metrics_);
    server_->addHandler("/status.json", json_);
    server_->addHandler("/$", page_);
    auto ports = server_->getListeningPortsFull();
    std::string host = listen.substr(0, listen.rfind(':'));
    if (host.empty() || listen.find(':') == std::string::npos) host = "127.0.0.1";
    url_ = "http://" + host + ":" + std::to_string(ports.empty() ? 0 : ports.front().port);
  }

  metrics_server(const metrics_server&) = delete;
  metrics_server& operator=(const metrics_server&) = delete;
  ~metrics_server() { server_.reset(); } // joins civetweb's threads before the handlers go

  /// "http://HOST:PORT", the port the one bound.
  const std::string& url() const noexcept { return url_; }

private:
  enum class kind { metrics, json, page };

  class handler : public CivetHandler {
  public:
    handler(metrics_server& s, kind k) : s_(s), k_(k) {}
    bool handleGet(CivetServer*, mg_connection* c) override {
      try {
        if (k_ == kind::page) return reply(c, "text/html; charset=utf-8", status_page_html);
        auto [stats, time_ms] = s_.snapshot();
        auto user = s_.user_->Collect();
        if (k_ == kind::json)
          return reply(c, "application/json",
                       status_json(stats, user, s_.origin(), time_ms)
                           .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        auto families = metrics_families(stats);
        families.insert(families.end(), std::make_move_iterator(user.begin()), std::make_move_iterator(user.end()));
        std::ostringstream out;
        prometheus::TextSerializer{}.Serialize(out, families);
        return reply(c, "text/plain; version=0.0.4; charset=utf-8", out.str());
      } catch (const std::exception& e) {
        mg_send_http_error(c, 500, "%s", e.what());
        return true;
      }
    }

  private:
    static bool reply(mg_connection* c, const char* type, std::string_view body) {
      mg_printf(c,
                "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
                "X-Content-Type-Options: nosniff\r\n\r\n",
                type, body.size());
      mg_write(c, body.data(), body.size());
      return true;
    }
    metrics_server& s_;
    kind k_;
  };

  std::pair<runtime_stats, std::int64_t> snapshot() {
    std::lock_guard lk(mutex_);
    auto now = std::chrono::steady_clock::now();
    if (!taken_ || now - taken_at_ >= std::chrono::milliseconds(200)) {
      last_ = fiber::stats();
      taken_at_ = now;
      taken_ = true;
      last_ms_ =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count();
    }
    return {last_, last_ms_};
  }

  status_origin origin() const { return {runtime::instance().process_name(), host_name(), std::int64_t(::getpid())}; }

  std::shared_ptr<prometheus::Registry> user_;
  handler metrics_, json_, page_;
  std::mutex mutex_;
  runtime_stats last_;
  std::chrono::steady_clock::time_point taken_at_{};
  std::int64_t last_ms_ = 0;
  bool taken_ = false;
  std::unique_ptr<CivetServer> server_;
  std::string url_;
};

} // namespace fiber::detail
