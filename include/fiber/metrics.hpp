// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file metrics.hpp
/// Watching a running job: the master serves Prometheus metrics at /metrics,
/// a live status page at / and its data at /status.json, with the user's own
/// metrics beside fiber's. Opt-in: link the CMake target fiber::metrics
/// (prometheus-cpp, civetweb); docs/observability.md is the reference.

#if !__has_include(<prometheus/registry.h>) || !__has_include(<CivetServer.h>)
#error                                                                                                                 \
    "fiber/metrics.hpp needs prometheus-cpp and civetweb: install the Debian packages prometheus-cpp-dev and libcivetweb-dev (scripts/setup.sh) and link the CMake target fiber::metrics"
#endif

#include <fiber/config.hpp>
#include <fiber/detail/metrics_hook.hpp>
#include <fiber/detail/metrics_server.hpp>
#include <fiber/detail/runtime.hpp>

#include <prometheus/registry.h>

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace fiber {

namespace detail {

struct metrics_state {
  std::mutex mutex;
  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<metrics_server> server;
};

/// Made after the runtime, so destroyed before it (the server's handlers use it).
inline metrics_state& metrics() {
  (void)runtime::instance();
  static metrics_state s;
  return s;
}

} // namespace detail

/// The registry for the program's own metrics, exposed at /metrics next to
/// fiber's and drawn on the status page (counters, gauges and untyped as a
/// plot of their last 300 values). prometheus-cpp's families are
/// thread-safe: update them from any thread. Owned by fiber, lives until
/// exit.
///
/// Example:
/// @code
/// auto& ret = prometheus::BuildGauge().Name("es_mean_return").Help("Mean episode return")
///                 .Register(fiber::metrics_registry()).Add({});
/// ret.Set(412.5);
/// @endcode
inline prometheus::Registry& metrics_registry() { return *detail::metrics().registry; }

/// Serves /metrics, /status.json and / on `address` from now on, and returns
/// its URL ("http://127.0.0.1:40123"). `address` is HOST:PORT, or "auto"
/// (127.0.0.1, a free port); an address off loopback needs the key
/// metrics_public. fiber::init does this in the master when the key
/// metrics_address is set. Once serving, later calls return the URL and
/// change nothing. The endpoint runs on two civetweb threads of its own,
/// never on fiber's runtime thread. Thread-safe. Throws fiber::config_error
/// for a malformed or refused address, or one it cannot bind.
///
/// Example: `std::string url = fiber::serve_metrics("auto");`
inline std::string serve_metrics(std::string_view address = "auto") {
  auto& m = detail::metrics();
  std::lock_guard lk(m.mutex);
  if (!m.server)
    m.server = std::make_unique<detail::metrics_server>(
        detail::metrics_listen_spec(address, detail::config_bool("metrics_public")), m.registry);
  return m.server->url();
}

/// The URL the endpoint serves at, or "" when it does not.
/// Example: `std::printf("status page: %s/\n", fiber::metrics_url().c_str());`
inline std::string metrics_url() {
  auto& m = detail::metrics();
  std::lock_guard lk(m.mutex);
  return m.server ? m.server->url() : std::string();
}

namespace detail {
inline void start_metrics_from_config() { (void)serve_metrics(config_string("metrics_address")); }
inline const bool metrics_starter_registered = (metrics_starter().store(&start_metrics_from_config), true);
} // namespace detail

} // namespace fiber
