// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes/pod_watch.hpp
/// The kubernetes launcher's view of its pods: a label-selected list, then a
/// watch from that list's resourceVersion, listed again whenever the watch is lost.

#include <fiber/backend/detail/async_util.hpp>
#include <fiber/backend/kubernetes/api.hpp>
#include <fiber/backend/kubernetes/wire.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/steady_timer.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>

namespace fiber::detail::kube {

/// The name of a Kubernetes object (`metadata.name`); "" when it has none.
inline std::string object_name(const nlohmann::json& obj) {
  return wire_impl::text(wire_impl::field(obj, "metadata"), "name");
}

/// The message of a failed call, for logs and job ends.
inline std::string error_text(std::exception_ptr e) { return exception_text(e, "kubernetes: unknown error"); }

/// What a pod_watch reports; each runs on the executor.
struct pod_watch_handlers {
  /// Each pod of a list, and each ADDED, MODIFIED or DELETED event's pod (`deleted` for the last).
  std::function<void(const nlohmann::json& pod, bool deleted)> pod;
  /// After the pods of list number `epoch` (from 1): `present` holds their names.
  std::function<void(unsigned epoch, const std::set<std::string>& present)> listed;
  /// Lists fail: for good (401, 403, 404: `fatal`, and no list is tried
  /// again), or for 30 s (lists go on being tried). `why` names the cause.
  std::function<void(const std::string& why, bool fatal)> failing;
};

/// The pods under `path` (`/api/v1/namespaces/<ns>/pods`) that match
/// `selector`, listed, then watched from the list's resourceVersion with
/// bookmarks. The watch is resumed from the last version seen when the
/// server ends it (its timeoutSeconds, 240–360 s), and the pods are listed
/// again when it expires (410), fails, or says nothing for `silence` (a
/// black-holed connection). A list that fails is tried again after 0.1 s
/// doubling to 5 s. Executor only; the handlers are called only while the
/// owner given to start() lives and stop() has not been called.
class pod_watch {
public:
  /// `api` must outlive this object.
  pod_watch(asio::any_io_executor ex, kube::api& api, std::string path, std::string selector,
            std::chrono::seconds silence, pod_watch_handlers h)
      : api_(api),
        path_(std::move(path)),
        query_("?labelSelector=" + url_encode(selector)),
        silence_(silence),
        h_(std::move(h)),
        relist_timer_(ex),
        silence_timer_(ex) {}

  /// Lists, then watches. `owner` holds this object (its callbacks keep it alive while they run).
  void start(std::weak_ptr<const void> owner) {
    owner_ = std::move(owner);
    relist();
  }

  /// No handler is called after this; pending timers are cancelled.
  void stop() {
    stopped_ = true;
    relist_timer_.cancel();
    silence_timer_.cancel();
  }

  /// Lists made so far (1 + one per watch that had to be re-listed); the epoch of the last.
  unsigned lists() const noexcept { return epoch_; }

private:
  template <class F>
  auto guarded(F f) {
    return [w = owner_, this, f = std::move(f)](auto&&... a) mutable {
      auto keep = w.lock();
      if (!keep || stopped_) return;
      f(std::forward<decltype(a)>(a)...);
    };
  }

  void relist() {
    if (stopped_) return;
    const unsigned epoch = ++epoch_;
    api_.async_call("GET", path_ + query_, nullptr, "list pods",
                    guarded([this, epoch](std::exception_ptr e, nlohmann::json list) { listed(epoch, e, list); }));
  }

  void listed(unsigned epoch, std::exception_ptr e, const nlohmann::json& list) {
    if (e) return list_failed(e);
    failures_ = 0;
    std::set<std::string> present;
    if (const auto& items = wire_impl::field(list, "items"); items.is_array())
      for (auto& p : items)
        skip_on_error("kubernetes: list pods: a pod fiber cannot read", [&] {
          present.insert(object_name(p));
          h_.pod(p, false);
        });
    h_.listed(epoch, present);
    if (!stopped_) watch(resource_version(list));
  }

  void watch(std::string rv) {
    rv_ = std::move(rv);
    expired_ = false;
    std::uniform_int_distribution<int> jitter(0, 120);
    std::random_device rd;
    watch_handlers h;
    h.on_event = guarded([this](watch_event&& ev) {
      hear();
      on_event(std::move(ev));
    });
    // A new cancellation signal per watch: silence cancels this one.
    cancel_ = std::make_unique<asio::cancellation_signal>();
    hear();
    api_.async_watch(path_ + query_ + "&watch=1&allowWatchBookmarks=true&resourceVersion=" + url_encode(rv_) +
                         "&timeoutSeconds=" + std::to_string(240 + jitter(rd)),
                     std::move(h),
                     asio::bind_cancellation_slot(cancel_->slot(),
                                                  guarded([this](std::exception_ptr e, nlohmann::json) {
                                                    silence_timer_.cancel();
                                                    if (!e && !expired_)
                                                      return watch(rv_); // the server's timeout: resume
                                                    log(log_level::debug, "kubernetes: the watch ended (",
                                                        e ? error_text(e) : std::string("410 Gone"),
                                                        "): listing the run's pods again");
                                                    relist();
                                                  })));
  }

  // The watch said something (an event, a bookmark): it is not black-holed.
  void hear() {
    silence_timer_.expires_after(silence_);
    silence_timer_.async_wait(guarded([this](std::error_code ec) {
      if (ec || !cancel_) return;
      log(log_level::warning, "kubernetes: the watch said nothing for ", silence_.count(),
          " s: listing the run's pods again");
      cancel_->emit(asio::cancellation_type::terminal);
    }));
  }

  void on_event(watch_event&& ev) {
    using namespace wire_impl;
    if (ev.type == "ERROR") { // 410 Expired ("too old resource version"), or worse: list again when it ends
      if (const auto& code = field(ev.object, "code"); !(code.is_number() && code.get<int>() == 410))
        log(log_level::warning,
            "kubernetes: watch: ", text(ev.object, "message").empty() ? ev.object.dump() : text(ev.object, "message"));
      expired_ = true;
      return;
    }
    if (auto rv = resource_version(ev.object); !rv.empty()) rv_ = rv;
    if (ev.type != "ADDED" && ev.type != "MODIFIED" && ev.type != "DELETED") return;
    if (object_name(ev.object).empty())
      return log(log_level::warning, "kubernetes: watch: skipped an event (", ev.type,
                 ") without a pod name: ", ev.object.dump().substr(0, 200));
    h_.pod(ev.object, ev.type == "DELETED");
  }

  void list_failed(std::exception_ptr e) {
    const long status = error_status<api_error>(e);
    const auto now = std::chrono::steady_clock::now();
    if (failures_++ == 0) failing_since_ = now;
    const bool fatal = status == 401 || status == 403 || status == 404;
    if (fatal || now - failing_since_ > std::chrono::seconds(30)) {
      h_.failing(error_text(e) + (fatal ? "" : " (for 30 s)"), fatal);
      if (fatal || stopped_) return;
    }
    relist_timer_.expires_after(std::chrono::milliseconds(std::min(5000, 100 << std::min(failures_, 6))));
    relist_timer_.async_wait(guarded([this](std::error_code ec) {
      if (!ec) relist();
    }));
  }

  kube::api& api_;
  std::string path_, query_;
  std::chrono::seconds silence_;
  pod_watch_handlers h_;
  std::weak_ptr<const void> owner_;
  asio::steady_timer relist_timer_, silence_timer_;
  std::unique_ptr<asio::cancellation_signal> cancel_;
  unsigned epoch_ = 0;
  int failures_ = 0;
  std::chrono::steady_clock::time_point failing_since_{};
  std::string rv_;
  bool expired_ = false, stopped_ = false;
};

} // namespace fiber::detail::kube
