// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/kubernetes/launcher.hpp
/// The kubernetes backend's launcher: one pod per job, its state from one
/// label-selected list+watch. See backend/kubernetes.hpp for the behaviour.

#include <fiber/backend/detail/job_table.hpp>
#include <fiber/backend/detail/listen_once.hpp>
#include <fiber/backend/kubernetes/api.hpp>
#include <fiber/backend/kubernetes/options.hpp>
#include <fiber/backend/kubernetes/pod_watch.hpp>
#include <fiber/backend/kubernetes/reaper.hpp>
#include <fiber/backend/kubernetes/wire.hpp>
#include <fiber/backend/detail/net_address.hpp>
#include <fiber/detail/self_signed_cert.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fiber::detail {

/// fiber's Kubernetes launcher (see backend/kubernetes.hpp). Create with
/// std::make_shared, then call start() on the executor.
class kube_launcher final : public backend::launcher, public std::enable_shared_from_this<kube_launcher> {
  // A handler that runs `f(*this, args...)` while the launcher lives and is not shutting down.
  template <class F>
  auto guarded(F f) {
    return guarded_by(
        weak_from_this(), [](const kube_launcher& s) { return s.shutting_down_; }, std::move(f));
  }

public:
  /// `where`: from kube::resolve(). Throws kube::api_error when libcurl cannot be loaded.
  kube_launcher(asio::any_io_executor ex, kube_options opts, kube::access where)
      : ex_(ex),
        opts_(std::move(opts)),
        api_(ex, std::move(where)),
        run_id_(kube::hex8(std::random_device{}())),
        ns_(!opts_.namespace_.empty()          ? opts_.namespace_
            : !api_.where().namespace_.empty() ? api_.where().namespace_
                                               : "default"),
        jobs_(ex),
        watch_(ex, api_, pods_path(), selector(), opts_.watch_silence, watch_handlers()) {}

  /// Deletes every pod of this run and its Secret (by label, grace period
  /// 0), blocking for at most ~10 s. Exit handlers of live jobs are not
  /// called. Should the API server not answer, the watchdog (if any) tries
  /// again when this process ends.
  ~kube_launcher() override {
    shutting_down_ = true;
    watch_.stop();
    api_.cancel();
    if (!launched_) return;
    const auto sel = "?labelSelector=" + kube::url_encode(selector());
    auto res = api_.blocking({{"DELETE", pods_path() + sel + "&gracePeriodSeconds=0", nullptr},
                              {"DELETE", secrets_path() + "/" + secret_name(), nullptr}},
                             std::chrono::seconds(8));
    bool ok = res[0].first / 100 == 2 && (res[1].first / 100 == 2 || res[1].first == 404);
    if (res[0].first == 403 || res[0].first == 405) { // no deletecollection right: one by one
      auto list = api_.blocking({{"GET", pods_path() + sel, nullptr}}, std::chrono::seconds(3));
      std::vector<kube::blocking_call> dels;
      auto j = nlohmann::json::parse(list[0].second, nullptr, false);
      if (const auto& items = kube::wire_impl::field(j, "items"); items.is_array())
        for (auto& p : items)
          if (auto n = kube::object_name(p); !n.empty())
            dels.push_back({"DELETE", pods_path() + "/" + kube::url_encode(n), {{"gracePeriodSeconds", 0}}});
      ok = list[0].first == 200;
      for (auto& [status, body] : api_.blocking(dels, std::chrono::seconds(5)))
        ok = ok && (status / 100 == 2 || status == 404);
    }
    if (ok) reaper_.disarm();
    else reaper_.leave_armed();
    if (!ok && answered_) // else nothing was ever created (the API server never answered)
      log(log_level::warning, "kubernetes: could not delete every pod of run ", run_id_, " in namespace ", ns_,
          " (HTTP ", res[0].first, "): delete them with `kubectl delete pods,secrets -n ", ns_, " -l ", selector(),
          "`");
  }

  std::string_view name() const noexcept override { return "kubernetes"; }
  /// Pods run on the cluster's nodes: nothing shared with the master.
  backend::launcher_traits traits() const noexcept override { return {false, false, false, 0}; }
  /// The ephemeral certificate start() made (k8s.tls without tls_cert), which workers pin.
  std::optional<backend::tls_identity> listener_identity() const override { return identity_; }

  /// Makes the TLS certificate if one is needed (blocking, ~5 ms), finds the
  /// master's own pod when in a pod, arms the watchdog when outside, and
  /// starts the list+watch of the run's pods. Executor only.
  void start() {
    if (opts_.tls && opts_.tls_cert.empty()) make_certificate();
    if (api_.where().in_cluster) find_own_pod();
    else owner_state_ = step::done;
    if (auto how = kube::reaper_connection(api_.where(), opts_.context); opts_.reaper && how)
      if (!reaper_.arm(opts_.kubectl, *how, ns_, selector()))
        log(log_level::warning,
            "kubernetes: cannot start the watchdog that deletes this run's pods should the master be killed");
    watch_.start(weak_from_this());
  }

  /// What may block, done on the calling thread: the API server's address
  /// (a DNS lookup) and the route to it, for listen_url(). Any thread; once
  /// (a failure is tried again by the next call); throws as listen_url().
  void prepare() override { (void)listen_url(); }

  /// `tls+tcp://<addr>:0` (`tcp://` with k8s.tls false), addr = the
  /// `listen_address` key, else the local address on the route to the API
  /// server (in a pod: the pod's IP), found by prepare(). Throws
  /// backend_error when there is none.
  std::string listen_url() override {
    return listen_.get([this] {
      std::string addr = opts_.listen_address;
      if (addr.empty()) {
        auto [host, port] = kube::split_server(api_.where().server);
        addr = route_source(host, port);
      }
      if (addr.empty())
        throw backend_error("kubernetes: no local address routes to the API server at " + api_.where().server +
                            ": set listen_address to an address the pods can reach");
      return fiber::detail::tcp_listen_url(addr, opts_.tls);
    });
  }

  /// One pod per spec, created in the background once the run's Secret
  /// exists; the job id is the pod's name. A pod the API server refuses, or
  /// that cannot start (image pull, container config), ends its job at once
  /// as lost with start_failed and Kubernetes' message. Throws
  /// fiber::backend_error when no image can be known (k8s.image unset outside a pod).
  std::vector<backend::job> launch(const std::vector<backend::job_spec>& specs,
                                   std::vector<backend::exit_handler> on_exit) override {
    check_handlers("kubernetes", specs.size(), on_exit.size());
    if (opts_.image.empty() && !api_.where().in_cluster)
      throw backend_error("kubernetes: no image for the worker pods: set k8s.image (FIBER_K8S_IMAGE) to an image "
                          "holding " +
                          program_of(specs) +
                          " at that path (the default, the master pod's own image, needs a master in a pod)");
    if (weak_from_this().expired()) throw std::logic_error("kubernetes: the launcher must be owned by a shared_ptr");
    std::vector<backend::job> jobs;
    launched_ = launched_ || !specs.empty();
    for (std::size_t i = 0; i < specs.size(); ++i) {
      auto& s = specs[i];
      auto name = kube::pod_name(run_id_, s.name);
      if (jobs_.contains(name)) name = kube::pod_name(run_id_, s.name + "-" + std::to_string(++dup_));
      auto& r = jobs_.add(name, std::move(on_exit[i]));
      r.memory_mb = s.resources.memory_mb;
      r.in = pod_input_for(name, s);
      for (auto& [k, v] : s.env)
        if (k == "FIBER_INTERNAL_SECRET" && secret_data_.find(std::string(kube::secret_key)) == secret_data_.end())
          secret_data_[std::string(kube::secret_key)] = v;
      if ((s.stdout_path || s.stderr_path) && !output_note_) {
        output_note_ = true;
        log(log_level::info, "kubernetes: worker output stays in the pods' logs (kubectl logs), not worker_output_dir");
      }
      jobs.push_back(backend::job{name, -1, ""});
    }
    for (auto& j : jobs) waiting_.push_back(j.id);
    create_waiting();
    return jobs;
  }

  /// terminate (15): delete the pod with its grace period (SIGTERM, then
  /// SIGKILL after terminationGracePeriodSeconds); kill (9, or any other):
  /// grace period 0, which removes the pod object at once — so for a running
  /// pod with a memory limit that deletion waits up to 1 s for the kubelet
  /// to report an end (a Pool kills a worker whose link broke, and an
  /// OOMKilled reported then beats the kill). The end is reported as
  /// signalled(signal). Unknown or ended jobs are ignored. Never blocks.
  void cancel(const backend::job& j, int signal) override {
    auto* r = find(j.id);
    if (!r || r->reported) return;
    r->ask(signal);
    if (!r->created) {
      if (!r->creating) report(*r, {backend::job_exit::kind::signalled, signal, "cancelled before it was created"});
      return;
    }
    if (signal == 15) return delete_pod(r->id, -1);
    const bool running = kube::wire_impl::text(kube::wire_impl::field(r->last, "status"), "phase") == "Running";
    if (r->memory_mb <= 0 || !running || r->kill_hold) return delete_pod(r->id, 0);
    r->kill_hold = std::make_unique<asio::steady_timer>(ex_, std::chrono::seconds(1));
    r->kill_hold->async_wait(guarded([name = r->id](kube_launcher& self, std::error_code ec) {
      if (auto* r = self.find(name); r && !ec && !r->reported) self.delete_pod(name, 0);
    }));
  }

  // ---- for tests and tools ------------------------------------------------

  const std::string& run_id() const noexcept { return run_id_; }
  const std::string& namespace_name() const noexcept { return ns_; }
  /// Label selector of this run's pods and Secret.
  std::string selector() const { return std::string(kube::label_run) + "=" + run_id_; }
  std::string secret_name() const { return "fiber-" + run_id_; }
  std::size_t live_jobs() const noexcept { return jobs_.live(); }
  const kube::api& api() const noexcept { return api_; }
  const kube_options& options() const noexcept { return opts_; }

  /// Each pod's phase as last seen ("Pending", "Running", ...); "Creating"
  /// before the API server answered its create or the watch reported it.
  std::map<std::string, unsigned> job_states() const override {
    return jobs_.states([](const record& r) {
      const bool seen = r.created || r.last.is_object();
      auto p = seen ? kube::wire_impl::text(kube::wire_impl::field(r.last, "status"), "phase") : std::string();
      return p.empty() ? std::string(seen ? "Pending" : "Creating") : p;
    });
  }
  /// Pods whose create the API server has not answered yet (retries included).
  std::size_t creates_in_flight() const {
    return jobs_.ids([](const record& r) { return r.creating; }).size();
  }
  /// Lists of the run's pods made so far (1 + one per watch that had to be re-listed).
  unsigned lists() const noexcept { return watch_.lists(); }

private:
  enum class step { idle, running, done, failed };
  static constexpr int no_delete = std::numeric_limits<int>::max();

  struct record : job_record {
    kube::pod_input in;
    bool creating = false, created = false;
    unsigned created_epoch = 0; // watch_.lists() when its creation was confirmed
    int memory_mb = 0;
    std::string pending_logged;
    bool node_warned = false;
    nlohmann::json last;                           // the pod as last seen
    std::unique_ptr<asio::steady_timer> kill_hold; // a kill waiting for the kubelet's word (see cancel)
    int delete_sent = no_delete;                   // the shortest grace period asked for so far
    std::chrono::steady_clock::time_point give_up; // transient create failures are retried until then
    int attempts = 0;
    std::unique_ptr<asio::steady_timer> retry; // a create waiting to be retried
  };

  record* find(const std::string& name) { return jobs_.find(name); }

  std::string pods_path() const { return "/api/v1/namespaces/" + kube::url_encode(ns_) + "/pods"; }
  std::string secrets_path() const { return "/api/v1/namespaces/" + kube::url_encode(ns_) + "/secrets"; }

  std::map<std::string, std::string> run_labels() const {
    auto l = opts_.labels;
    l[std::string(kube::managed_by_label)] = "fiber";
    l[std::string(kube::label_run)] = run_id_;
    return l;
  }

  // ---- TLS, the master's pod, the Secret ---------------------------------------

  // An ephemeral certificate for the master's listener, which serves with
  // it from memory (its key never touches the disk; the runtime takes it
  // from listener_identity()). The certificate, which workers pin, is
  // written (0600) where the Secret is made from.
  void make_certificate() {
    try {
      auto id = make_self_signed(secret_name());
      opts_.tls_cert = write_private_file(private_dir(opts_.state_dir) + "/k8s-" + run_id_ + ".crt", id.cert_pem);
      identity_ = backend::tls_identity{std::move(id.cert_pem), std::move(id.key_pem)};
    } catch (const std::exception& e) {
      throw backend_error(std::string("kubernetes: TLS: ") + e.what());
    }
    own_cert_ = true;
  }

  // How workers verify the master: mutual TLS with tls_ca (they present the
  // same certificate); else they pin the master's certificate, under
  // fiber-<run> when fiber made it.
  bool mutual_tls() const { return opts_.tls && !opts_.tls_ca.empty(); }
  void worker_tls_env(std::vector<std::pair<std::string, std::string>>& env) const {
    if (!opts_.tls || mutual_tls()) return;
    auto var = [](const char* key) { return std::string(find_config_key(key)->env); };
    std::erase_if(env, [&](auto& kv) {
      return kv.first == var("tls_cert") || kv.first == var("tls_key") ||
             (own_cert_ && kv.first == var("tls_server_name"));
    });
    env.emplace_back(var("tls_ca"), opts_.tls_cert);
    if (own_cert_) env.emplace_back(var("tls_server_name"), secret_name());
  }

  // In a pod: its name, uid (workers' ownerReference), image (their default) and pull secrets.
  void find_own_pod() {
    const char* n = std::getenv("POD_NAME");
    if (!n || !*n) n = std::getenv("HOSTNAME");
    if (!n || !*n) {
      owner_state_ = step::done;
      return;
    }
    owner_state_ = step::running;
    api_.async_call("GET", pods_path() + "/" + kube::url_encode(n), nullptr,
                    "get the master's own pod " + std::string(n),
                    guarded([](kube_launcher& self, std::exception_ptr e, nlohmann::json pod) {
                      self.owner_state_ = step::done;
                      if (e) {
                        log(log_level::warning, kube::error_text(e),
                            ": workers get no ownerReference to the master's pod");
                      } else {
                        using namespace kube::wire_impl;
                        self.owner_ = kube::owner_ref{kube::object_name(pod), text(field(pod, "metadata"), "uid")};
                        const auto& cs = field(field(pod, "spec"), "containers");
                        if (cs.is_array() && !cs.empty()) self.master_image_ = text(cs[0], "image");
                        if (const auto& ps = field(field(pod, "spec"), "imagePullSecrets"); !ps.is_null())
                          self.pull_secrets_ = ps;
                        self.sweep_earlier_runs();
                      }
                      self.create_waiting();
                    }));
  }

  // A master whose container restarted in the same pod: the pods and Secret
  // its earlier runs owned through this pod are not the garbage collector's
  // (the owner lives on). Background, best effort.
  void sweep_earlier_runs() {
    if (!owner_ || owner_->uid.empty()) return;
    const auto sel = "?labelSelector=" + kube::url_encode(std::string(kube::managed_by_label) + "=fiber," +
                                                          std::string(kube::label_run) + "!=" + run_id_);
    for (const auto& path : {pods_path(), secrets_path()})
      api_.async_call("GET", path + sel, nullptr, "list what earlier runs left",
                      guarded([path](kube_launcher& self, std::exception_ptr e, nlohmann::json list) {
                        if (e) return;
                        const auto& items = kube::wire_impl::field(list, "items");
                        if (!items.is_array()) return;
                        for (auto& o : items) {
                          const auto& refs = kube::wire_impl::field(kube::wire_impl::field(o, "metadata"),
                                                                    "ownerReferences");
                          if (!refs.is_array()) continue;
                          for (auto& ref : refs)
                            if (kube::wire_impl::text(ref, "uid") == self.owner_->uid) {
                              log(log_level::info, "kubernetes: deleting ", kube::object_name(o),
                                  ", left by an earlier master in this pod");
                              self.api_.async_call("DELETE", path + "/" + kube::url_encode(kube::object_name(o)),
                                                   {{"gracePeriodSeconds", 0}}, "delete " + kube::object_name(o),
                                                   [](std::exception_ptr, nlohmann::json) {});
                              break;
                            }
                        }
                      }));
  }

  // Pods are created once the Secret their env and files refer to exists
  // (else the kubelet reports CreateContainerConfigError) and the owner is known.
  void create_waiting() {
    if (waiting_.empty() || owner_state_ == step::running || secret_state_ == step::running) return;
    if (!fatal_.empty()) return fail_waiting(fatal_);
    if (secret_state_ == step::idle) return create_secret();
    if (secret_state_ == step::failed) return fail_waiting(secret_error_);
    auto names = std::move(waiting_);
    waiting_.clear();
    for (auto& n : names)
      if (auto* r = find(n); r && !r->reported) create(*r);
  }

  void create_secret() {
    std::map<std::string, std::string> data = secret_data_;
    for (std::size_t i = 0; i < tls_files().size(); ++i) {
      auto text = kube::read_file_text(tls_files()[i]);
      if (text.empty()) {
        secret_state_ = step::failed;
        secret_error_ = "kubernetes: cannot read the TLS file " + tls_files()[i] + " the workers need";
        return create_waiting();
      }
      data["tls-" + std::to_string(i)] = text;
    }
    if (data.empty()) {
      secret_state_ = step::done;
      return create_waiting();
    }
    secret_state_ = step::running;
    has_secret_ = true;
    post_secret(std::move(data), start_deadline(), 0);
  }

  void post_secret(std::map<std::string, std::string> data, std::chrono::steady_clock::time_point give_up,
                   int attempt) {
    api_.async_call("POST", secrets_path(), kube::secret_manifest(secret_name(), run_labels(), data, owner_),
                    "create secret " + secret_name(),
                    guarded([data, give_up, attempt](kube_launcher& self, std::exception_ptr e,
                                                     nlohmann::json) mutable {
                      self.answered_ = self.answered_ || !e || answered(e);
                      self.reached_ = self.reached_ || !e || answered(e);
                      if (e && attempt > 0 && already_exists(e)) e = nullptr; // a retried create that had succeeded
                      if (e && self.retry_later(e, give_up)) {
                        auto t = std::make_shared<asio::steady_timer>(self.ex_, self.retry_delay(attempt));
                        t->async_wait(self.guarded([t, data = std::move(data), give_up,
                                                    attempt](kube_launcher& self, std::error_code ec) mutable {
                          if (!ec) self.post_secret(std::move(data), give_up, attempt + 1);
                        }));
                        return;
                      }
                      self.secret_state_ = e ? step::failed : step::done;
                      if (e) self.secret_error_ = kube::error_text(e);
                      self.create_waiting();
                    }));
  }

  static std::chrono::steady_clock::time_point start_deadline() {
    return std::chrono::steady_clock::now() +
           std::chrono::seconds(std::max<long long>(1, config_int("start_timeout_s")));
  }

  static std::chrono::milliseconds retry_delay(int attempt) {
    return backoff_delay(attempt, std::chrono::milliseconds(200), std::chrono::seconds(5));
  }

  // A call that failed for a reason that passes (no answer: refused, reset,
  // timed out; 429, 5xx) once the API server has been reached, before `give_up`.
  bool retry_later(std::exception_ptr e, std::chrono::steady_clock::time_point give_up) const {
    const long status = error_status<kube::api_error>(e);
    const bool transient = status == 0 || status == 429 || (status >= 500 && status <= 504);
    if (!transient || !reached_ || shutting_down_ || std::chrono::steady_clock::now() >= give_up) return false;
    log(log_level::debug, kube::error_text(e), "; trying again");
    return true;
  }

  // The TLS files the workers read (at the same paths as the master's): no
  // private key unless they present it (mutual TLS).
  std::vector<std::string> tls_files() const {
    std::vector<std::string> v;
    if (!opts_.tls) return v;
    if (!mutual_tls()) return {opts_.tls_cert};
    for (auto* f : {&opts_.tls_cert, &opts_.tls_key, &opts_.tls_ca})
      if (!f->empty() && std::find(v.begin(), v.end(), *f) == v.end()) v.push_back(*f);
    return v;
  }

  kube::pod_input pod_input_for(const std::string& name, const backend::job_spec& s) const {
    kube::pod_input in;
    in.name = name;
    in.image_pull_policy = opts_.image_pull_policy;
    in.service_account = opts_.service_account;
    in.automount_token = opts_.automount_token;
    in.argv = s.argv;
    in.env = s.env;
    worker_tls_env(in.env);
    in.secret_env["FIBER_INTERNAL_SECRET"] = std::string(kube::secret_key);
    auto files = tls_files();
    for (std::size_t i = 0; i < files.size(); ++i) in.files.push_back({"tls-" + std::to_string(i), files[i]});
    in.labels = run_labels();
    in.labels[std::string(kube::label_worker)] = kube::label_value(s.name);
    in.resources = s.resources;
    in.gpu_resource = opts_.gpu_resource;
    in.pod_patch = opts_.pod_patch;
    in.container_patch = opts_.container_patch;
    return in;
  }

  // ---- pods -------------------------------------------------------------------

  void create(record& r) {
    r.in.image = !opts_.image.empty() ? opts_.image : master_image_;
    if (r.in.image.empty())
      return fail_start(r,
                        "kubernetes: no image for the worker pods: set k8s.image (the master's pod could not be read)");
    if (r.asked) return report(r, {backend::job_exit::kind::signalled, r.asked, "cancelled before it was created"});
    r.in.owner = owner_;
    r.in.image_pull_secrets = pull_secrets_;
    if (!has_secret_) r.in.secret_name.clear();
    else r.in.secret_name = secret_name();
    r.creating = true;
    r.give_up = start_deadline();
    post_pod(r);
  }

  void post_pod(record& r) {
    api_.async_call(
        "POST", pods_path(), kube::pod_manifest(r.in), "create pod " + r.id + " (image " + r.in.image + ")",
        guarded([name = r.id](kube_launcher& self, std::exception_ptr e, nlohmann::json pod) {
          auto* r = self.find(name);
          if (!r) { // ended meanwhile (the API server was lost): do not leave the pod
            if (!e) self.delete_pod(name, 0);
            return;
          }
          self.answered_ = self.answered_ || !e || answered(e);
          self.reached_ = self.reached_ || !e || answered(e);
          if (e && !already_exists(e) && self.retry_later(e, r->give_up)) {
            if (r->asked) {
              r->creating = false;
              return self.report(*r, {backend::job_exit::kind::signalled, r->asked, "cancelled before it was created"});
            }
            r->retry = std::make_unique<asio::steady_timer>(self.ex_, retry_delay(r->attempts++));
            r->retry->async_wait(self.guarded([name](kube_launcher& self, std::error_code ec) {
              auto* r = self.find(name);
              if (!r || ec || r->reported) return;
              if (!r->asked) return self.post_pod(*r);
              r->creating = false;
              self.report(*r, {backend::job_exit::kind::signalled, r->asked, "cancelled before it was created"});
            }));
            return;
          }
          r->creating = false;
          if (e && !already_exists(e)) return self.fail_start(*r, kube::error_text(e));
          r->created = true;
          r->created_epoch = self.watch_.lists();
          if (r->asked) return self.delete_pod(name, r->asked == 15 ? -1 : 0);
          // The pod as created; the watch may have reported a later state already.
          if (pod.is_object() && !r->last.is_object()) self.on_pod(pod, false);
        }));
  }

  // The API server answered (so the object may exist), or the call got no answer.
  static bool answered(std::exception_ptr e) { return error_status<kube::api_error>(e) != 0; }

  static bool already_exists(std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const kube::api_error& x) {
      return x.status() == 409 && x.reason() == "AlreadyExists"; // a retried create that had succeeded
    } catch (...) {
    }
    return false;
  }

  // grace < 0: the pod's own terminationGracePeriodSeconds. Once per
  // grace period that shortens the last one asked for (a kill after a terminate).
  void delete_pod(const std::string& name, int grace) {
    if (auto* r = find(name)) {
      const int effective = grace < 0 ? std::numeric_limits<int>::max() - 1 : grace;
      if (r->delete_sent <= effective) return;
      r->delete_sent = effective;
    }
    nlohmann::json body = nlohmann::json::object();
    if (grace >= 0) body["gracePeriodSeconds"] = grace;
    api_.async_call("DELETE", pods_path() + "/" + kube::url_encode(name), body, "delete pod " + name,
                    guarded([name](kube_launcher& self, std::exception_ptr e, nlohmann::json) {
                      if (!e) return;
                      try {
                        std::rethrow_exception(e);
                      } catch (const kube::api_error& x) {
                        if (x.status() == 404) { // gone already (the watch says how)
                          if (auto* r = self.find(name); r && !r->reported) self.gone(*r);
                          return;
                        }
                        log(log_level::warning, x.what());
                      } catch (const std::exception& x) {
                        log(log_level::warning, "kubernetes: delete pod ", name, ": ", x.what());
                      }
                    }));
  }

  void fail_start(record& r, const std::string& why) {
    backend::job_exit x{backend::job_exit::kind::lost, 0, why};
    x.start_failed = true;
    report(r, std::move(x));
  }

  void fail_waiting(const std::string& why) {
    auto names = std::move(waiting_);
    waiting_.clear();
    for (auto& n : names)
      if (auto* r = find(n)) fail_start(*r, why);
  }

  // A job ends: its handler (posted), its pod deleted, its record forgotten.
  void report(record& r, backend::job_exit x) {
    if (!jobs_.report(r, std::move(x))) return;
    // Its pod goes too, unless a deletion is under way (the kubelet removes a
    // terminated pod that is being deleted).
    if (r.created && r.delete_sent == no_delete) delete_pod(r.id, 0);
    jobs_.forget(r.id);
  }

  void on_pod(const nlohmann::json& pod, bool deleted) {
    auto* r = find(kube::object_name(pod));
    if (!r || r->reported) return;
    r->last = pod;
    auto v = kube::judge(pod, {r->asked, r->asked_mask, deleted, r->memory_mb});
    if (v.what == kube::verdict::stage::ended) return report(*r, std::move(v.exit));
    if (!v.pending.empty() && v.pending != r->pending_logged) {
      r->pending_logged = v.pending;
      log(v.pending.starts_with("Unschedulable") ? log_level::warning : log_level::debug, "kubernetes: pod ", r->id,
          " is pending: ", v.pending);
    }
    if (v.node_not_ready && !r->node_warned) {
      r->node_warned = true;
      log(log_level::warning, "kubernetes: pod ", r->id, ": its node is not ready (it stopped reporting)");
    }
  }

  // The pod is gone (a 404, or missing from a list): judged by how it was last seen.
  void gone(record& r) { on_pod(r.last.is_object() ? r.last : nlohmann::json{{"metadata", {{"name", r.id}}}}, true); }

  // ---- what the watch reports ------------------------------------------------

  kube::pod_watch_handlers watch_handlers() {
    kube::pod_watch_handlers h;
    h.pod = [this](const nlohmann::json& pod, bool deleted) { on_pod(pod, deleted); };
    h.listed = [this](unsigned epoch, const std::set<std::string>& present) {
      reached_ = true;
      fatal_.clear();
      // Created before this list was asked for, and not in it: deleted while nobody watched.
      auto missing = jobs_.ids([&](const record& r) {
        return r.created && r.created_epoch < epoch && !present.count(r.id);
      });
      for (auto& n : missing)
        if (auto* r = find(n)) gone(*r);
    };
    // Unauthorized, forbidden, no such namespace (fatal: nothing will be
    // seen), or 30 s without a list: the live jobs are lost.
    h.failing = [this](const std::string& why, bool /*fatal*/) {
      fatal_ = why;
      log(log_level::error, fatal_);
      for (auto& n : jobs_.ids([](const record&) { return true; }))
        if (auto* r = find(n))
          r->created ? report(*r, {backend::job_exit::kind::lost, 0, fatal_}) : fail_start(*r, fatal_);
      waiting_.clear();
    };
    return h;
  }

  asio::any_io_executor ex_;
  kube_options opts_;
  kube::api api_;
  std::string run_id_, ns_;
  job_table<record> jobs_;           // by pod name
  std::vector<std::string> waiting_; // to create once prepared
  std::map<std::string, std::string> secret_data_;
  step owner_state_ = step::idle, secret_state_ = step::idle;
  std::string secret_error_, fatal_;
  bool has_secret_ = false;
  bool own_cert_ = false;                         // the certificate is fiber's ephemeral one, named secret_name()
  std::optional<backend::tls_identity> identity_; // that certificate and its key, for the master's listener
  std::optional<kube::owner_ref> owner_;
  std::string master_image_;
  nlohmann::json pull_secrets_;
  kube::reaper reaper_;
  kube::pod_watch watch_;
  unsigned dup_ = 0;
  bool shutting_down_ = false, launched_ = false, output_note_ = false;
  bool answered_ = false; // a create got an answer: something of this run may exist
  bool reached_ = false;  // the API server has answered: a call that gets no answer now may be retried
  listen_once listen_;
};

} // namespace fiber::detail
