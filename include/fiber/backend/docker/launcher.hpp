// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/docker/launcher.hpp
/// The docker backend's launcher: one container per job, driven through the
/// Engine API (docker/api.hpp). See backend/docker.hpp for the behaviour.

#include <fiber/backend/detail/net_address.hpp>
#include <fiber/backend/docker/api.hpp>
#include <fiber/backend/docker/options.hpp>
#include <fiber/backend/docker/output.hpp>
#include <fiber/backend/detail/job_table.hpp>
#include <fiber/backend/detail/listen_once.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <cctype>
#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fiber::detail {

/// fiber's Docker launcher (see backend/docker.hpp). Create with
/// std::make_shared, then call start().
class docker_launcher final : public backend::launcher, public std::enable_shared_from_this<docker_launcher> {
public:
  docker_launcher(asio::any_io_executor ex, docker_options opts, docker::endpoint where)
      : ex_(ex),
        opts_(std::move(opts)),
        local_daemon_(!where.unix_socket.empty()),
        api_(ex, std::move(where)),
        me_(docker_impl::master_identity::self()),
        jobs_(ex),
        events_retry_(ex) {
    std::random_device rd;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x", unsigned(rd()));
    run_id_ = buf;
  }

  /// Removes every container of this run still there (force: killed first),
  /// blocking for at most ~10 s. Exit handlers of live jobs are not called.
  ~docker_launcher() override {
    shutting_down_ = true;
    events_retry_.cancel();
    api_.cancel();
    if (auto n = relay_.dropped())
      log(log_level::warning, "docker: ", n, " bytes of worker output were dropped: their reader did not keep up");
    if (!launched_) return; // nothing of this run can exist
    std::set<std::string> names;
    for (auto& [name, r] : jobs_)
      if (!r.destroyed) names.insert(name);
    // Also what a create cut short may have left.
    for (auto& id : api_.list_blocking({run_label()}, std::chrono::seconds(3))) names.insert(id);
    if (!names.empty()) {
      auto left = api_.remove_blocking({names.begin(), names.end()}, std::chrono::seconds(10));
      for (auto& n : left) log(log_level::warning, "docker: could not remove container ", n, " at shutdown");
    }
    for (auto& [name, r] : jobs_) close_outputs(r);
  }

  std::string_view name() const noexcept override { return "docker"; }
  /// Containers never share the master's files or die with it; those of a
  /// daemon on this machine (a unix socket) share its cores.
  backend::launcher_traits traits() const noexcept override { return {false, false, local_daemon_, 0}; }

  /// Negotiates the API version, subscribes to the run's events and sweeps
  /// containers of masters that are gone, all in the background.
  void start() {
    ensure_events();
    sweep();
  }

  /// What may block, done on the calling thread: the network's gateway
  /// (`GET /networks/<name>`, up to 5 s) for listen_url(). Any thread; once
  /// (a failure is tried again by the next call); throws as listen_url().
  /// For launcher::prepare(), which the runtime calls off its own thread.
  void prepare() override { (void)listen_url(); }

  /// "tcp://127.0.0.1:0" on the host network (tls+tcp:// when tls_cert is
  /// set); on another network its gateway's address (inspected once by
  /// prepare(); blocks up to 5 s when that did not run first); `listen_address`
  /// beats both. Throws fiber::backend_error for network "none" or a network
  /// without an IPv4/IPv6 gateway.
  std::string listen_url() override {
    return listen_.get([this] {
      std::string addr = opts_.listen_address;
      if (addr.empty()) {
        if (opts_.network == "host") addr = "127.0.0.1";
        else if (opts_.network == "none")
          throw backend_error("docker: docker.network is 'none': workers could not reach the master; use host or "
                              "a bridge network");
        else addr = network_gateway();
      }
      return fiber::detail::tcp_listen_url(addr, opts_.tls);
    });
  }

  /// One container per spec, created and started in the background; the
  /// job id is the container's name. A container that cannot be created or
  /// started ends its job at once as lost with start_failed and Docker's
  /// message (never after a timeout). Throws fiber::backend_error at once
  /// when docker.image is not set, std::invalid_argument for mismatched sizes.
  std::vector<backend::job> launch(const std::vector<backend::job_spec>& specs,
                                   std::vector<backend::exit_handler> on_exit) override {
    check_handlers("docker", specs.size(), on_exit.size());
    if (opts_.image.empty())
      throw backend_error("docker: no image to run workers in: set docker.image (FIBER_DOCKER_IMAGE), e.g. an image "
                          "holding the shared libraries of " +
                          program_of(specs));
    if (weak_from_this().expired()) throw std::logic_error("docker: the launcher must be owned by a shared_ptr");
    std::vector<backend::job> jobs;
    launched_ = launched_ || !specs.empty();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      auto name = docker_impl::container_name(run_id_, specs[i].name);
      if (jobs_.contains(name)) name += "-" + std::to_string(++dup_);
      auto& r = jobs_.add(name, std::move(on_exit[i]));
      r.memory_mb = specs[i].resources.memory_mb;
      open_outputs(r, specs[i]);
      jobs.push_back(backend::job{name, -1, me_.host});
      r.spec = container_for(r.id, specs[i]);
      r.give_up = std::chrono::steady_clock::now() +
                  std::chrono::seconds(std::max<long long>(1, config_int("start_timeout_s")));
      create(r);
    }
    ensure_events();
    return jobs;
  }

  /// SIGTERM/SIGKILL (or signal n) to the container (`POST /kill`); its end
  /// is reported as signalled(signal). Before it started, it is removed
  /// instead. Unknown or ended jobs are ignored. Never blocks.
  void cancel(const backend::job& j, int signal) override {
    auto* r = jobs_.find(j.id);
    if (!r || r->reported) return;
    r->ask(signal);
    if (r->ph == phase::running) kill(r->id, signal);
  }

  // ---- for tests and tools ------------------------------------------------

  /// This run's id: label fiber.run=<id> on each of its containers.
  const std::string& run_id() const noexcept { return run_id_; }
  /// Jobs not yet reported ended.
  std::size_t live_jobs() const noexcept { return jobs_.live(); }
  /// The client (its negotiated version, ...).
  const docker::api& api() const noexcept { return api_; }
  const docker_options& options() const noexcept { return opts_; }

  /// Each container's phase: "creating" (created, attached, waiting for the
  /// event stream), "starting", "running"; "failed" until reported.
  std::map<std::string, unsigned> job_states() const override {
    return jobs_.states([](const record& r) {
      switch (r.ph) {
      case phase::starting: return "starting";
      case phase::running: return "running";
      case phase::ended: return "ended";
      case phase::failed: return "failed";
      default: return "creating";
      }
    });
  }

private:
  enum class phase { creating, attaching, waiting_events, starting, running, ended, failed };

  struct record : job_record {
    phase ph = phase::creating;
    bool oom = false, destroyed = false;
    int memory_mb = 0;
    int out = 1, err = 2; // relay sinks: worker_output_dir files, else the master's stdout/stderr
    std::unique_ptr<asio::steady_timer> oom_grace;
    docker::container_spec spec;                   // kept while a create may be retried
    std::chrono::steady_clock::time_point give_up; // transient failures are retried until then
    int attempts = 0;
    std::unique_ptr<asio::steady_timer> retry;
  };

  std::string run_label() const { return std::string(docker_impl::label_run) + "=" + run_id_; }

  template <class F>
  auto guarded(F f) {
    return guarded_by(
        weak_from_this(), [](const docker_launcher& s) { return s.shutting_down_; }, std::move(f));
  }

  record* find(const std::string& name) { return jobs_.find(name); }

  // ---- the pipeline: create -> attach -> (events ready) -> start -----------

  docker::container_spec container_for(const std::string& name, const backend::job_spec& s) const {
    docker::container_spec c;
    c.name = name;
    c.image = opts_.image;
    c.argv = s.argv;
    for (auto& [k, v] : s.env) c.env.push_back(k + "=" + v);
    c.labels = opts_.labels;
    c.labels[std::string(docker_impl::managed_by_label)] = "fiber";
    c.labels[std::string(docker_impl::label_run)] = run_id_;
    c.labels[std::string(docker_impl::label_worker)] = s.name;
    c.labels[std::string(docker_impl::label_host)] = me_.host;
    c.labels[std::string(docker_impl::label_pid)] = me_.pid;
    c.labels[std::string(docker_impl::label_start)] = me_.start;
    c.labels[std::string(docker_impl::label_boot)] = me_.boot;
    c.labels[std::string(docker_impl::label_pidns)] = me_.pidns;
    c.user = opts_.user;
    c.network = opts_.network;
    if (opts_.mount_binary && !s.argv.empty()) {
      auto dir = s.argv[0].substr(0, s.argv[0].rfind('/'));
      if (!dir.empty()) c.binds.push_back(dir + ":" + dir + ":ro");
    }
    if (opts_.tls)
      for (auto& f : opts_.tls_files) c.binds.push_back(f + ":" + f + ":ro");
    for (auto& b : opts_.binds) c.binds.push_back(b);
    // One bind per destination (tls_ca is often tls_cert; Docker refuses duplicates).
    std::set<std::string> seen;
    std::erase_if(c.binds, [&](const std::string& b) {
      auto from = b.find(':');
      auto to = b.find(':', from + 1);
      return !seen.insert(b.substr(from + 1, to == std::string::npos ? std::string::npos : to - from - 1)).second;
    });
    if (s.resources.cpu > 0) c.nano_cpus = std::int64_t(s.resources.cpu) * 1'000'000'000;
    if (s.resources.memory_mb > 0) c.memory_bytes = std::int64_t(s.resources.memory_mb) << 20;
    c.gpus = s.resources.gpu;
    return c;
  }

  void create(record& r) {
    api_.async_create(r.spec, guarded([name = r.id](docker_launcher& self, std::exception_ptr e, nlohmann::json) {
                        auto* r = self.find(name);
                        if (!r) return;
                        if (e && r->attempts > 0 && error_status<docker::api_error>(e) == 409)
                          e = nullptr; // a retried create that had succeeded
                        if (e && self.retry_later(*r, e, [](docker_launcher& self, record& r) { self.create(r); }))
                          return;
                        if (e) return self.fail_start(*r, e, false);
                        r->attempts = 0;
                        r->spec = {};
                        if (r->asked) return self.remove_unstarted(*r);
                        r->ph = phase::attaching;
                        self.attach(*r);
                      }));
  }

  void attach(record& r) {
    docker::attach_handlers h;
    h.on_attached = guarded([name = r.id](docker_launcher& self) {
      if (auto* r = self.find(name); r && r->ph == phase::attaching) self.ready_to_start(*r);
    });
    h.on_output = guarded([name = r.id](docker_launcher& self, int stream, std::string_view bytes) {
      if (auto* r = self.find(name)) self.write_output(*r, stream, bytes);
    });
    api_.async_attach(
        r.id, std::move(h), guarded([name = r.id](docker_launcher& self, std::exception_ptr e, nlohmann::json) {
          auto* r = self.find(name);
          if (!r) return;
          if (r->ph == phase::attaching) { // never attached: start anyway, output goes to docker logs only
            log(log_level::warning, "docker: ", r->id, ": cannot forward its output (", what(e), ")");
            self.ready_to_start(*r);
          }
        }));
  }

  // The run's event stream must be up before a container starts, or its end could be missed.
  void ready_to_start(record& r) {
    if (r.asked) return remove_unstarted(r);
    r.ph = phase::waiting_events;
    if (events_ == events_state::ready) return start_container(r);
    ensure_events();
  }

  void start_container(record& r) {
    if (r.asked) return remove_unstarted(r);
    r.ph = phase::starting;
    api_.async_start(r.id, guarded([name = r.id](docker_launcher& self, std::exception_ptr e, nlohmann::json) {
                       auto* r = self.find(name);
                       if (!r || r->reported) return;
                       if (e && r->attempts > 0 && error_status<docker::api_error>(e) == 304)
                         e = nullptr; // started by an earlier try
                       if (e &&
                           self.retry_later(*r, e, [](docker_launcher& self, record& r) { self.start_container(r); }))
                         return;
                       if (e) return self.fail_start(*r, e, true);
                       r->ph = phase::running;
                       if (r->asked) self.kill(r->id, r->asked);
                     }));
  }

  // A create or start that failed for a reason that passes (no answer from
  // a daemon that answered before: refused, reset; a few 5xx) runs `again`
  // after a capped back-off, until the job's start budget is spent.
  template <class Again>
  bool retry_later(record& r, std::exception_ptr e, Again again) {
    const long status = error_status<docker::api_error>(e);
    const bool transient = (status == 0 && !api_.version().empty()) || (status >= 500 && r.attempts < 4);
    if (!transient || r.asked || std::chrono::steady_clock::now() >= r.give_up) return false;
    log(log_level::debug, what(e), "; trying again");
    r.retry = std::make_unique<asio::steady_timer>(ex_, backoff_delay(r.attempts++, std::chrono::milliseconds(100),
                                                                      std::chrono::seconds(3)));
    r.retry->async_wait(guarded([name = r.id, again](docker_launcher& self, std::error_code ec) {
      auto* r = self.find(name);
      if (ec || !r || r->reported) return;
      if (r->asked) return self.remove_unstarted(*r);
      again(self, *r);
    }));
    return true;
  }

  void fail_start(record& r, std::exception_ptr e, bool created) {
    if (created) api_.async_remove(r.id, true, [](std::exception_ptr, nlohmann::json) {});
    else r.destroyed = true; // nothing to remove
    backend::job_exit x{backend::job_exit::kind::lost, 0, what(e)};
    x.start_failed = true;
    r.ph = phase::failed;
    report(r, std::move(x));
  }

  // Cancelled before it ran: remove it; it ends as the signal asked.
  void remove_unstarted(record& r) {
    api_.async_remove(r.id, true, [](std::exception_ptr, nlohmann::json) {});
    report(r, {backend::job_exit::kind::signalled, r.asked, "cancelled before it started"});
  }

  void kill(const std::string& name, int signal) {
    api_.async_kill(name, signal, guarded([name](docker_launcher&, std::exception_ptr e, nlohmann::json) {
                      if (!e) return;
                      try {
                        std::rethrow_exception(e);
                      } catch (const docker::api_error& x) {
                        if (x.status() == 404 || x.status() == 409)
                          return; // gone or not running: its end is reported anyway
                        log(log_level::warning, x.what());
                      } catch (const std::exception& x) {
                        log(log_level::warning, "docker: kill ", name, ": ", x.what());
                      }
                    }));
  }

  void report(record& r, backend::job_exit x) {
    if (!jobs_.report(r, std::move(x))) return;
    if (r.ph != phase::failed) r.ph = phase::ended;
    r.oom_grace.reset();
    if (r.destroyed) forget(r.id);
  }

  void forget(const std::string& name) {
    auto* r = find(name);
    if (!r) return;
    close_outputs(*r);
    jobs_.forget(name);
  }

  static std::string what(std::exception_ptr e) { return exception_text(e, "docker: unknown error"); }

  // ---- events ----------------------------------------------------------------

  enum class events_state { idle, connecting, ready, retrying };
  static constexpr auto events_give_up = std::chrono::seconds(30); // of failed reconnections: the jobs are lost

  void ensure_events() {
    if (events_ != events_state::idle || shutting_down_) return;
    events_ = events_state::connecting;
    docker::event_handlers h;
    h.on_subscribed = guarded([](docker_launcher& self) { self.events_up(); });
    h.on_event = guarded([](docker_launcher& self, const docker::event& e) { self.on_event(e); });
    std::string since;
    if (last_event_ns_ > 0)
      since = std::to_string(last_event_ns_ / 1'000'000'000) + "." + pad9(last_event_ns_ % 1'000'000'000);
    api_.async_events({run_label()}, since, std::move(h),
                      guarded([](docker_launcher& self, std::exception_ptr e, nlohmann::json) {
                        self.events_down(e);
                      }));
  }

  static std::string pad9(std::int64_t n) {
    auto s = std::to_string(n);
    return std::string(9 - std::min<std::size_t>(9, s.size()), '0') + s;
  }

  void events_up() {
    events_ = events_state::ready;
    events_up_since_ = std::chrono::steady_clock::now();
    if (std::exchange(reconcile_, false)) reconcile(0);
    if (last_event_ns_ == 0)
      last_event_ns_ =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
              .count() -
          1'000'000'000; // replay from a second before, should the stream drop
    for (auto& n : jobs_.ids([](const record& r) { return r.ph == phase::waiting_events; }))
      if (auto* r = find(n)) start_container(*r);
  }

  // The stream ended: the daemon stopped or restarted, or could not be
  // reached. Reconnect with a capped back-off (the `since` replay brings what
  // was missed), then reconcile with a fresh list; only after events_give_up
  // of failures are the jobs lost.
  void events_down(std::exception_ptr e) {
    const bool was_up = events_ == events_state::ready;
    events_ = events_state::idle;
    auto reason = e ? what(e) : std::string("docker: the daemon closed the event stream");
    const auto now = std::chrono::steady_clock::now();
    if (was_up) {
      reconcile_ = true;
      if (now - events_up_since_ > std::chrono::seconds(5)) event_failures_ = 0; // not a flapping stream
      log(log_level::warning, "docker: the event stream ended (", reason, "); reconnecting");
    }
    if (event_failures_++ == 0) events_failing_since_ = now;
    // A daemon never reached: fail now (nothing could have started).
    if (!api_.version().empty() && now - events_failing_since_ < events_give_up) {
      events_ = events_state::retrying;
      events_retry_.expires_after(backoff_delay(event_failures_ - 1, std::chrono::milliseconds(100),
                                                std::chrono::seconds(5)));
      events_retry_.async_wait(guarded([](docker_launcher& self, std::error_code ec) {
        if (ec || self.events_ != events_state::retrying) return;
        self.events_ = events_state::idle;
        self.ensure_events();
      }));
      return;
    }
    if (was_up || reconcile_) reason += " (for " + std::to_string(events_give_up.count()) + " s)";
    lose_all("docker: lost the daemon's event stream: " + reason, reason);
  }

  void lose_all(const std::string& why_running, const std::string& why_waiting) {
    event_failures_ = 0; // a later launch tries afresh
    for (auto& n : jobs_.ids([](const record& r) { return !r.reported; })) {
      auto* r = find(n);
      if (!r) continue;
      if (r->ph == phase::running || r->ph == phase::starting) {
        report(*r, {backend::job_exit::kind::lost, 0, why_running});
      } else if (r->ph == phase::waiting_events) {
        backend::job_exit x{backend::job_exit::kind::lost, 0, why_waiting};
        x.start_failed = true;
        api_.async_remove(r->id, true, [](std::exception_ptr, nlohmann::json) {});
        report(*r, std::move(x));
      }
    }
  }

  // After a reconnection: containers that still run are kept; those that
  // ended while nobody listened end with the status Docker kept (inspect),
  // those gone without a trace as lost. Waits a moment first, for the
  // replayed events that say the same with the exit status.
  void reconcile(int attempt) {
    events_retry_.expires_after(attempt == 0
                                    ? std::chrono::milliseconds(250)
                                    : backoff_delay(attempt, std::chrono::milliseconds(100), std::chrono::seconds(5)));
    events_retry_.async_wait(guarded([attempt](docker_launcher& self, std::error_code ec) {
      if (ec || self.events_ != events_state::ready) return;
      self.api_.async_list({self.run_label()}, true,
                           self.guarded([attempt](docker_launcher& self, std::exception_ptr e, nlohmann::json list) {
                             if (e) {
                               if (self.events_ == events_state::ready) self.reconcile(attempt + 1);
                               return; // else the stream's own end handles it
                             }
                             self.reconciled(list);
                           }));
    }));
  }

  void reconciled(const nlohmann::json& list) {
    std::map<std::string, std::string> state; // container name -> State
    if (list.is_array())
      for (auto& c : list)
        skip_on_error("docker: list containers: an entry fiber cannot read", [&] {
          const auto& names = c.at("Names");
          for (auto& n : names)
            state[n.get<std::string>().substr(n.get<std::string>().starts_with("/") ? 1 : 0)] = c.value("State", "");
        });
    for (auto& n : jobs_.ids([](const record& r) {
           return !r.reported && (r.ph == phase::running || r.ph == phase::starting);
         })) {
      auto* r = find(n);
      auto it = state.find(n);
      if (!r || r->reported) continue;
      if (it == state.end()) {
        report(*r, {backend::job_exit::kind::lost, 0,
                    "docker: container " + n + " is gone (removed while the daemon's event stream was down)"});
      } else if (it->second == "exited" || it->second == "dead") {
        api_.async_inspect(
            n, guarded([n](docker_launcher& self, std::exception_ptr e, nlohmann::json c) {
              auto* r = self.find(n);
              if (!r || r->reported) return;
              const auto st = c.is_object() && c.contains("State") ? c["State"] : nlohmann::json();
              const auto code = st.is_object() && st.contains("ExitCode") ? st["ExitCode"] : nlohmann::json();
              if (e || !code.is_number_integer())
                return self.report(*r, {backend::job_exit::kind::lost, 0,
                                        "docker: container " + n + " ended while the daemon's event stream was down"});
              r->oom = r->oom || (st.contains("OOMKilled") && st["OOMKilled"] == true);
              self.on_die(*r, std::to_string(code.get<int>()));
            }));
      }
    }
  }

  void on_event(const docker::event& e) {
    if (e.time_nano > last_event_ns_) last_event_ns_ = e.time_nano;
    auto* r = find(e.attribute("name"));
    if (!r) return;
    if (e.action == "oom") {
      r->oom = true;
      if (r->oom_grace) { // its die came first: report now
        r->oom_grace.reset();
        report(*r, oom_exit(*r));
      }
    } else if (e.action == "die") {
      on_die(*r, e.attribute("exitCode"));
    } else if (e.action == "destroy") {
      r->destroyed = true;
      if (r->reported) forget(r->id);
    }
  }

  backend::job_exit oom_exit(const record& r) const {
    return {backend::job_exit::kind::lost, 0,
            "out of memory: container " + r.id + " exceeded its memory limit" +
                (r.memory_mb > 0 ? " (" + std::to_string(r.memory_mb) + " MiB)" : std::string()) + " and was killed"};
  }

  void on_die(record& r, const std::string& exit_code) {
    if (r.reported) return;
    int code = std::atoi(exit_code.c_str());
    // Out of memory beats what fiber asked: a Pool kills a worker whose link
    // broke, and the link broke because the kernel killed it.
    if (r.oom) return report(r, oom_exit(r));
    // Killed (137) under a memory limit: Docker's `oom` event may follow its
    // `die`; wait a moment for it before calling it a SIGKILL.
    if (code == 137 && r.memory_mb > 0) {
      r.oom_grace = std::make_unique<asio::steady_timer>(ex_, std::chrono::milliseconds(250));
      r.oom_grace->async_wait(guarded([name = r.id, code](docker_launcher& self, std::error_code ec) {
        auto* r = self.find(name);
        if (ec || !r || r->reported) return;
        self.report(*r, self.exit_of(*r, code));
      }));
      return;
    }
    report(r, exit_of(r, code));
  }

  backend::job_exit exit_of(const record& r, int code) const {
    const bool by_signal = code > 128 && code <= 128 + 64;
    if (r.asked) {
      const int sig = by_signal && r.was_asked(code - 128) ? code - 128 : r.asked;
      return {backend::job_exit::kind::signalled, sig, "docker: container " + r.id + " stopped"};
    }
    // A container's exit status is its init's: 128+n when the worker died of
    // signal n (a worker that exits with such a status says so first, and
    // Process keeps them apart, as for srun).
    if (by_signal) return {backend::job_exit::kind::signalled, code - 128, ""};
    return {backend::job_exit::kind::exited, code, ""};
  }

  // ---- output ----------------------------------------------------------------

  void open_outputs(record& r, const backend::job_spec& s) {
    if (s.stdout_path) r.out = relay_.open(*s.stdout_path);
    if (s.stderr_path) r.err = relay_.open(*s.stderr_path);
  }

  void close_outputs(record& r) {
    relay_.close(r.out);
    relay_.close(r.err);
    r.out = 1;
    r.err = 2;
  }

  // Through the relay's thread: a reader that stalls costs dropped output, never the runtime thread.
  void write_output(record& r, int stream, std::string_view bytes) {
    relay_.write(stream == 2 ? r.err : r.out, bytes);
    if (relay_.dropped() > 0 && !drop_logged_) {
      drop_logged_ = true;
      log(log_level::warning, "docker: worker output is being dropped: its reader does not keep up");
    }
  }

  // ---- sweep and network --------------------------------------------------------

  // Containers of fiber runs whose master is gone (killed before it could
  // remove them; created but never started): removed. Background, best effort.
  void sweep() {
    api_.async_list(
        {std::string(docker_impl::managed_by_label) + "=fiber"}, true,
        guarded([](docker_launcher& self, std::exception_ptr e, nlohmann::json list) {
          if (e || !list.is_array()) return;
          std::size_t n = 0;
          for (auto& c : list) {
            std::map<std::string, std::string> labels;
            if (auto l = c.find("Labels"); l != c.end() && l->is_object())
              for (auto& [k, v] : l->items())
                if (v.is_string()) labels[k] = v.get<std::string>();
            if (labels[std::string(docker_impl::label_run)] == self.run_id_) continue;
            const auto& id = c.is_object() && c.contains("Id") ? c["Id"] : nlohmann::json();
            if (id.is_string() && docker_impl::master_gone(labels, self.me_).value_or(false)) {
              ++n;
              self.api_.async_remove(id.get<std::string>(), true, [](std::exception_ptr, nlohmann::json) {});
            }
          }
          if (n) log(log_level::info, "docker: removing ", n, " container(s) of fiber runs whose master is gone");
        }));
  }

  std::string network_gateway() {
    http::request req;
    // Blocking, once (see prepare()), maybe off the runtime thread: only what never changes is read.
    auto& ep = api_.where();
    req.url = ep.base_url + "/v" + std::string(docker::oldest_api_version) + "/networks/" +
              docker::url_encode(opts_.network);
    req.unix_socket = ep.unix_socket;
    req.tls = ep.tls;
    std::error_code ec;
    http::response r;
    try {
      auto res = http::perform_blocking({req}, std::chrono::seconds(5));
      ec = res.at(0).first;
      r = std::move(res.at(0).second);
    } catch (const std::exception& x) {
      throw backend_error(std::string("docker: ") + x.what());
    }
    if (ec)
      throw backend_error("docker: cannot inspect network " + opts_.network + " at " + ep.host + ": " +
                          (r.error.empty() ? ec.message() : r.error));
    if (r.status != 200)
      throw backend_error("docker: inspect network " + opts_.network + ": " + docker::error_message(r));
    auto j = nlohmann::json::parse(r.body, nullptr, false);
    if (j.is_object())
      if (auto ipam = j.find("IPAM"); ipam != j.end() && ipam->is_object())
        if (auto cfg = ipam->find("Config"); cfg != ipam->end() && cfg->is_array())
          for (auto& c : *cfg)
            if (auto gw = c.is_object() && c.contains("Gateway") ? c["Gateway"] : nlohmann::json();
                gw.is_string() && !gw.get<std::string>().empty())
              return gw.get<std::string>();
    throw backend_error("docker: network " + opts_.network +
                        " has no gateway address for workers to reach the master; set listen_address");
  }

  asio::any_io_executor ex_;
  docker_options opts_;
  bool local_daemon_ = false;
  docker::api api_;
  docker_impl::master_identity me_;
  std::string run_id_;
  job_table<record> jobs_; // by container name
  events_state events_ = events_state::idle;
  asio::steady_timer events_retry_; // the next reconnection, or reconciliation
  int event_failures_ = 0;          // reconnections that failed in a row
  std::chrono::steady_clock::time_point events_failing_since_{}, events_up_since_{};
  bool reconcile_ = false; // reconnected: compare with a fresh list
  docker::output_relay relay_;
  bool drop_logged_ = false;
  std::int64_t last_event_ns_ = 0;
  unsigned dup_ = 0;
  bool shutting_down_ = false;
  bool launched_ = false;
  listen_once listen_;
};

} // namespace fiber::detail
