// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/runtime.hpp
/// The per-process runtime: one thread running the io_context that owns every
/// socket, the listeners and their handshakes, the workers the master expects
/// and the launchers; its identity, service_host and service_client are parts.

#include <fiber/backend/detail/async_util.hpp>
#include <fiber/backend/detail/environment.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/detail/accept_loop.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/dialer.hpp>
#include <fiber/detail/dir_watch.hpp>
#include <fiber/detail/frame_limit.hpp>
#include <fiber/detail/handshake_session.hpp>
#include <fiber/detail/libcrypto_loader.hpp>
#include <fiber/detail/libssl_loader.hpp>
#include <fiber/detail/local_transport.hpp>
#include <fiber/detail/run_dir.hpp>
#include <fiber/detail/run_identity.hpp>
#include <fiber/detail/log_limit.hpp>
#include <fiber/detail/host_name.hpp>
#include <fiber/detail/inherited_link.hpp>
#include <fiber/detail/liveness.hpp>
#include <fiber/detail/pending_count.hpp>
#include <fiber/detail/peer_fate.hpp>
#include <fiber/detail/peer_link.hpp>
#include <fiber/detail/protocol.hpp>
#include <fiber/detail/relay_mux.hpp>
#include <fiber/detail/sched.hpp>
#include <fiber/detail/self_signed_cert.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/detail/service_client.hpp>
#include <fiber/detail/service_host.hpp>
#include <fiber/detail/stream_address.hpp>
#include <fiber/detail/stats_sources.hpp>
#include <fiber/detail/transport.hpp>
#include <fiber/detail/worker_nonces.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>
#include <fiber/target.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <type_traits>
#include <typeindex>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace fiber::detail {

class runtime {
public:
  /// The process's runtime; started on first use (fiber::init starts it).
  static runtime& instance() {
    static runtime rt;
    return rt;
  }

  runtime(const runtime&) = delete;
  ~runtime() {
    stop();
    dir_.remove_own();
  }

  asio::any_io_executor executor() { return ctx_.get_executor(); }
  bool on_runtime_thread() const { return std::this_thread::get_id() == thread_id_; }

  /// Run f on the runtime thread and return its result (rethrows).
  template <class F>
  auto sync(F&& f) -> decltype(f()) {
    if (on_runtime_thread()) return f();
    using R = decltype(f());
    blocking_result<std::conditional_t<std::is_void_v<R>, std::monostate, R>> out;
    asio::post(ctx_, [&] {
      std::exception_ptr e;
      try {
        if constexpr (std::is_void_v<R>) {
          f();
          out.set_value({});
        } else {
          out.set_value(f());
        }
        return;
      } catch (...) {
        e = std::current_exception();
      }
      // Set once the catch block has released the exception in flight: the
      // waiter may read and drop it at once (see blocking_result).
      out.set_exception(std::move(e));
    });
    if constexpr (std::is_void_v<R>) out.take();
    else return out.take();
  }

  void stop() {
    if (!thread_.joinable()) return;
    guard_.reset();
    asio::post(ctx_, [this] {
      for (auto& [u, l] : listeners_) l->close();
      client_.close_links("runtime stopping");
      host_.close_links("runtime stopping");
      launchers_.clear();
      if (run_dir_watch_) run_dir_watch_->stop();
      ctx_.stop();
    });
    if (on_runtime_thread()) thread_.detach();
    else thread_.join();
  }

  // ---- identity --------------------------------------------------------

  const std::string& secret() const { return id_.secret(); }
  /// Where workers on this machine read the secret: "/proc/PID/fd/N", a
  /// memfd of the process that made the run directory (secret_fd.hpp).
  const std::string& secret_file() const { return dir_.secret_file(); }
  /// This executable's path (/proc/self/exe resolved at start).
  const std::string& executable() const { return id_.executable(); }
  const std::string& run_dir() const { return dir_.path(); }
  bool is_worker() const { return id_.is_worker(); }
  const std::string& process_name() const { return id_.name(); }
  std::uint64_t registry_hash() const { return id_.registry_hash(); }
  const std::string& own_build_id() const { return id_.build_id(); }
  std::vector<std::string>& argv() { return id_.argv(); }

  /// `masters_dir`: the master's run directory (and the secret's file) is
  /// on this machine; otherwise this worker makes its own when it needs one
  /// (ensure_run_dir), for ipc:// and for workers of its own.
  void become_worker(std::string name, std::string secret, bool masters_dir) {
    const auto& env = worker_environment();
    id_.become_worker(std::move(name), std::move(secret));
    if (masters_dir && !env.run_dir.empty()) dir_.adopt(env.run_dir, env.secret_file);
    // A job-backed worker (another machine, maybe) reaches the services its
    // master named by another of its URLs (ipc://, loopback TCP) through the
    // URL it dialled (worker_spec).
    master_url_ = env.master;
    for (std::size_t at = 0; at < env.master_aliases.size();) {
      auto end = std::min(env.master_aliases.find(' ', at), env.master_aliases.size());
      if (end > at) master_aliases_.push_back(env.master_aliases.substr(at, end - at));
      at = end + 1;
    }
    if (!env.master.empty())
      host_.fates().set_master([this, url = env.master](std::vector<std::byte> req, request_done done) {
        request(url, liveness_service_id, liveness_op::watch, std::move(req), std::move(done));
      });
    logger::instance().set_process(id_.name());
  }

  /// The run directory, its secret file and this process's ipc:// socket
  /// exist on this machine: made if this worker has none here yet, made
  /// again at the same path if a tmp cleaner removed them. Runtime thread.
  /// Throws backend_error.
  void ensure_run_dir() {
    if (dir_.empty()) return make_run_dir();
    if (dir_.restore(id_.secret())) {
      log(log_level::warning, "the run directory ", dir_.path(), " was removed (by a tmp cleaner?): made it again");
      if (dir_.owned()) watch_run_dir();
    }
    if (auto it = listeners_.find("ipc://"); it != listeners_.end()) {
      const auto url = it->second->url();
      if (struct stat st{};
          ::lstat(url.substr(6).c_str(), &st) != 0) { // its socket is gone: listen again at the same path
        it->second->close();
        it->second = std::make_shared<listener>(executor(), url, transport());
        accept(it->second);
      }
    }
  }

  /// Removes the run directory this process made (a master's, or a
  /// worker's own on another machine). At exit.
  void remove_own_run_dir() noexcept { dir_.remove_own(); }

  transport_options transport() const {
    transport_options o;
    o.max_message_size = std::size_t(config_int("max_message_size_mb")) << 20;
    o.tls_cert_file = config_string("tls_cert");
    o.tls_key_file = config_string("tls_key");
    o.tls_ca_file = config_string("tls_ca");
    o.tls_server_name = config_string("tls_server_name");
    o.tls_client = tls_client_;
    return o;
  }

  /// Makes the TLS context this process dials with (it reads files), so
  /// that dials on the runtime thread need not; a context that fails here
  /// fails each dial instead. Any thread but the runtime's.
  void prepare_tls_client() {
    auto o = sync([&] { return transport(); });
    std::shared_ptr<const tls_context> c;
    try {
      c = std::make_shared<const tls_context>(tls_context::role::client, o);
    } catch (const std::system_error&) {
    }
    sync([&] { tls_client_ = std::move(c); });
  }

  // ---- listening -------------------------------------------------------

  /// URL this process accepts connections on for `base` ("ipc://" → a
  /// socket in the 0700 run dir; "tcp://addr:0" → that address, ephemeral
  /// port; a host name is resolved and the URL is numeric). Binds on first
  /// call. Any thread; the first call for a TLS or named base blocks, so not
  /// the runtime thread's.
  std::string listen_url(const std::string& base = "ipc://") {
    // TLS files, a new key and a DNS lookup block: here, not on the runtime thread
    std::shared_ptr<const tls_context> tls;
    std::string resolved = base;
    if ((is_tls_url(base) || !listen_host_name(base).empty()) && !sync([&] { return listeners_.contains(base); })) {
      if (is_tls_url(base)) tls = server_tls_context();
      resolved = numeric_listen_url(base);
    }
    return sync([&] {
      if (base == "ipc://") ensure_run_dir();
      if (auto it = listeners_.find(base); it != listeners_.end()) return it->second->url();
      std::string url = resolved;
      if (base == "ipc://") url = ipc_url();
      auto o = transport();
      o.tls_server = tls;
      auto l = std::make_shared<listener>(executor(), url, o);
      listeners_.emplace(base, l);
      accept(l);
      return l->url();
    });
  }

  /// The context this process's TLS listeners serve with. A worker that
  /// pins its master's certificate (kubernetes) has none to serve with: an
  /// ephemeral one, which its master does not verify. A generated
  /// certificate's listener asks no client for one: its tls_ca, if any, is
  /// what it verifies its master with. Any thread but the runtime's.
  std::shared_ptr<const tls_context> server_tls_context() {
    transport_options o;
    bool make_key = false;
    sync([&] {
      o = transport();
      make_key = !tls_identity_ && id_.is_worker() && o.tls_cert_file.empty();
    });
    if (make_key) {
      auto id = make_self_signed("fiber-worker");
      sync([&] { tls_identity_ = tls_identity_.value_or(std::move(id)); });
    }
    sync([&] {
      if (!tls_identity_) return;
      o.tls_cert_pem = tls_identity_->cert_pem;
      o.tls_key_pem = tls_identity_->key_pem;
      o.tls_ca_file.clear();
    });
    return std::make_shared<const tls_context>(tls_context::role::server, o);
  }

  /// The certificate and key (PEM) this process's TLS listeners made from
  /// now on serve with, instead of the files tls_cert/tls_key name: a key
  /// made for the run never touches the disk. Runtime thread.
  void set_tls_identity(pem_identity id) { tls_identity_ = std::move(id); }

  /// This process's ipc:// URL (its socket in the run dir).
  std::string ipc_url() const { return "ipc://" + dir_.socket_path(::getpid()); }
  /// Removes the ipc socket a child process `pid` left (it was SIGKILLed). Runtime thread.
  void remove_socket_of(std::int64_t pid) const {
    if (!dir_.empty()) ::unlink(dir_.socket_path(pid).c_str());
  }

  /// Every URL this process listens on. Any thread.
  std::vector<std::string> listener_urls() {
    return sync([&] {
      std::vector<std::string> v;
      for (auto& [b, l] : listeners_) v.push_back(l->url());
      return v;
    });
  }

  /// Accepted connections whose handshake has not finished yet.
  std::size_t pending_handshakes() const noexcept { return pending_handshakes_; }

  /// The URL this process's services are reached at (its first listener).
  /// Any thread but the runtime's (it may bind, as listen_url).
  std::string service_url() {
    std::string url, base;
    sync([&] {
      if (listeners_.empty()) base = default_base_;
      else url = listeners_.begin()->second->url();
    });
    return url.empty() ? listen_url(base) : url;
  }
  void set_default_listen_base(std::string base) { default_base_ = std::move(base); }

  // ---- workers ---------------------------------------------------------

  using connect_handler = std::function<void(std::shared_ptr<worker_link>)>;
  using refuse_handler = std::function<void(const std::string& reason)>;

  std::uint64_t new_worker_id() { return next_worker_id_++; }

  /// Runtime thread. `on_connect` runs when worker `id` has authenticated;
  /// `on_refused` when it presented a different binary.
  void expect_worker(std::uint64_t id, connect_handler on_connect, refuse_handler on_refused) {
    expected_[id] = {std::move(on_connect), std::move(on_refused)};
  }
  using worker_route = std::function<void(std::shared_ptr<peer_link>)>;
  /// Listens at `url` (a host relay's name: relay.hpp); the workers that
  /// authenticate there go to `h`. Throws what binding throws. Runtime thread.
  void listen_for_workers(const std::string& url, worker_route h) {
    accept(listeners_.emplace(url, std::make_shared<listener>(executor(), url, transport())).first->second,
           std::move(h));
  }

  /// What takes a reply line (role::reply_line) that authenticated for a
  /// worker: true if it took the stream; false to refuse it (the worker's
  /// identity is not its link's).
  using line_taker = std::function<bool(const peer_identity&, stream&)>;
  /// A reply line that authenticates at this process's listeners for worker
  /// `id` goes to `take`, once; lines nobody expects are refused. Runtime thread.
  void expect_reply_line(std::uint64_t id, line_taker take) { line_takers_[id] = std::move(take); }
  void forget_reply_line(std::uint64_t id) { line_takers_.erase(id); }

  /// Workers launched and not connected yet. Runtime thread.
  std::size_t expected_workers() const noexcept { return expected_.size(); }
  void forget_worker(std::uint64_t id) {
    expected_.erase(id);
    worker_nonces_.forget(id);
  }

  /// A one-time nonce for local worker `id`'s proof (hex), so that it need
  /// not wait for the challenge (worker_nonces.hpp). Runtime thread.
  std::string issue_worker_nonce(std::uint64_t id) { return worker_nonces_.issue(id); }

  /// One launcher per backend policy per process, made from launch_context();
  /// a certificate it made becomes the one TLS listeners serve with. Runtime thread.
  template <class Policy>
  std::shared_ptr<backend::launcher> launcher() {
    auto& l = launchers_[std::type_index(typeid(Policy))];
    if (!l) {
      l = backend::make_launcher<Policy>(launch_context());
      if (auto id = l->listener_identity()) set_tls_identity({std::move(id->cert_pem), std::move(id->key_pem)});
    }
    return l;
  }
  /// What a backend's make() gets of this process: the executor, the run
  /// directory, this process's name. Runtime thread.
  backend::launch_context launch_context() {
    backend::launch_context c(executor());
    c.run_dir = dir_.path();
    c.process_name = id_.name();
    return c;
  }
  /// launcher<Policy>(), prepared (launcher::prepare: it may block) on the
  /// calling thread. Any thread; call it off the runtime thread.
  template <class Policy>
  std::shared_ptr<backend::launcher> prepared_launcher() {
    auto l = sync([&] { return launcher<Policy>(); });
    l->prepare();
    if (!l->traits().shares_filesystem || local_listen_base() != "ipc://")
      libcrypto_api::get(); // its links carry frame MACs: read the library here, not on the runtime thread
    if (is_tls_url(local_listen_base())) prepare_tls_client();
    return l;
  }

  // ---- services --------------------------------------------------------

  std::uint64_t add_service(std::shared_ptr<service> s) {
    return sync([&] { return host_.add(std::move(s)); });
  }
  void remove_service(std::uint64_t id) {
    asio::post(ctx_, [this, id] { host_.remove(id); });
  }

  /// Send a request to service `service_id` in the process listening at
  /// `url` (this process: called directly). `done` runs on the runtime
  /// thread. A payload that does not fit in a frame fails `done` with
  /// fiber::error (frame_limit.hpp) and nothing is sent. `expiry` bounds a
  /// timed request while the link to `url` is being set up (request_expiry).
  /// Any thread.
  void request(const std::string& to, std::uint64_t service_id, std::uint32_t op, std::vector<std::byte> payload,
               request_done done, request_expiry expiry = {}) {
    const std::string& url = std::find(master_aliases_.begin(), master_aliases_.end(), to) != master_aliases_.end()
                                 ? master_url_
                                 : to;
    if (!fits_in_frame(payload.size())) {
      auto e = std::make_exception_ptr(error(oversize_message("a request", payload.size())));
      return asio::post(ctx_, [e, done = std::move(done)] { done(e, {}); });
    }
    asio::dispatch(ctx_, [this, url, service_id, op, payload = std::move(payload), done = std::move(done),
                          expiry = std::move(expiry)]() mutable {
      if (is_local(url)) return host_.request(service_id, op, std::move(payload), std::move(done));
      client_.send(url, service_id, op, std::move(payload), std::move(done), std::move(expiry));
    });
  }

  /// Who is at the other end of the client link `peer` that services see
  /// (service::handle, service::peer_gone): "name (pid N on host)"; "this
  /// process" for 0. Runtime thread only.
  std::string peer_description(std::uint64_t peer) const { return host_.peer_description(peer); }
  /// Runtime thread. Its services and its launchers' jobs, for fiber::stats().
  void add_to(runtime_stats& out) const {
    host_.add_to(out);
    for (auto& [type, l] : launchers_) out.backends.push_back({std::string(l->name()), l->job_states()});
  }

  /// The process behind client link `peer` as services see it (0: this
  /// process): the same number for every link that process opens here, so
  /// a holder keeps its identity across reconnects. Runtime thread only.
  std::uint64_t process_of(std::uint64_t peer) const { return host_.fates().process_of(peer); }
  /// Client link `link` is `peer`'s from now on (the service host does this
  /// for every client link it serves); returns its process_of(). Runtime thread.
  std::uint64_t attach_link(std::uint64_t link, const peer_identity& peer) { return host_.fates().attach(link, peer); }
  /// Link `link` is closed and its services were told (service::peer_gone).
  void detach_link(std::uint64_t link) { host_.fates().detach(link); }
  /// "name (pid N on host)" for a process_of() number.
  std::string process_description(std::uint64_t proc) const { return host_.fates().describe(proc); }

  /// This process's workers, as far as their liveness goes (supervisor.hpp
  /// reports to it). Runtime thread only.
  liveness& workers_liveness() { return host_.workers_liveness(); }

  /// Calls `dead(why)` on the runtime thread once process `proc`
  /// (process_of()) is known dead: its backend reported its end, or its
  /// master link was lost (see liveness). Asked of the liveness registry
  /// here when `proc` is a worker of this process, else of this process's
  /// master; when neither knows it, it counts as dead once it has had no
  /// link here for liveness::grace(). Never for this process or its master.
  /// Runtime thread only.
  void when_dead(std::uint64_t proc, liveness::dead_fn dead) { host_.fates().when_dead(proc, std::move(dead)); }

  /// Requests whose effect must reach another process (Queue acks, abandoned
  /// grants: broker_client's deliver_request) count themselves here while
  /// they are being sent; a worker whose target returns waits for them
  /// (deliveries().wait_for) so that, e.g., an item it received is not handed
  /// out again once it has ended. Any thread.
  pending_count& deliveries() { return deliveries_; }

  bool is_local(const std::string& url) {
    for (auto& [b, l] : listeners_)
      if (l->url() == url) return true;
    return false;
  }

  // ---- worker side -----------------------------------------------------

  /// Dial `url`, authenticate as `r`, and hand back the link (runtime
  /// thread), each try bounded by connect_timeout_ms. Transient failures
  /// are dialled again after a growing, jittered pause: a worker's or relay's within
  /// start_timeout_s (not a Unix socket nobody listens on: its process
  /// ended), a client's within connect_timeout_ms (a full backlog, a link
  /// closed before the challenge). A refusal (handshake_error) is final.
  void connect(const std::string& url, role r, std::uint64_t worker_id, connect_done done) {
    std::chrono::milliseconds per_try;
    try {
      per_try = std::chrono::milliseconds(config_int("connect_timeout_ms")); // its range is checked
    } catch (...) {
      return done(std::current_exception(), nullptr, {});
    }
    const auto budget = dials_patiently(r) ? std::chrono::milliseconds(config_int("start_timeout_s") * 1000) : per_try;
    dialer_.dial(std::make_shared<dial_job>(dial_job{url, r, worker_id, r == role::worker && url == master_url_,
                                                     std::move(done), clock::now() + budget, per_try,
                                                     std::chrono::milliseconds(2)}));
  }

private:
  runtime()
      : guard_(asio::make_work_guard(ctx_)),
        host_(executor(), process_ref{host_name(), ::getpid(), process_incarnation()}),
        client_(executor(), [this](const std::string& url, auto done) {
          connect(url, role::client, 0,
                  [done = std::move(done)](std::exception_ptr e, std::shared_ptr<peer_link> l,
                                           std::map<std::string, std::string>) { done(std::move(e), std::move(l)); });
        }) {
    if (!worker_environment().is_worker()) make_run_dir();
    batch_policy_scope batch{config_bool("io_threads_batch")}; // the runtime thread's policy
    thread_ = std::thread([this] {
      thread_id_ = std::this_thread::get_id();
      for (;;) {
        try {
          ctx_.run();
          break;
        } catch (const std::exception& e) {
          log(log_level::error, "runtime: unhandled exception: ", e.what());
        }
      }
    });
    // Nothing reaches the thread before this constructor returns: no need
    // to wait (spin) until it has stored its id itself.
    thread_id_ = thread_.get_id();
  }

  void make_run_dir() {
    dir_.make(id_.secret());
    watch_run_dir();
  }

  // Made again as soon as it is removed, not only when the next worker starts.
  void watch_run_dir() {
    if (run_dir_watch_) return run_dir_watch_->rewatch();
    run_dir_watch_ = dir_watch::start(executor(), dir_.path(), [this] {
      try {
        ensure_run_dir();
      } catch (const std::exception& e) {
        log(log_level::error, e.what());
      }
    });
  }

public:
  /// Serves the master's end `fd` of a worker's inherited link
  /// (inherited_link.hpp) as an accepted connection. The handshake starts
  /// when the worker first writes: its start-up is bounded by
  /// start_timeout_s, not by the handshake's silence limit. Takes `fd`.
  /// Runtime thread.
  void adopt_link(int fd) {
    when_link_speaks(executor(), fd, [this](socket_byte_stream::socket_type s) {
      ++adopted_links_;
      server_handshake(std::make_shared<stream>(socket_stream(executor(), std::move(s), transport())), {});
    });
  }

private:
  void accept(const std::shared_ptr<listener>& l, worker_route route = {}) {
    start_accept_loop(l, [this, route = std::move(route)](stream s) {
      if (pending_handshakes_ >= max_pending_handshakes) {
        ++refused_peers_;
        refusal_log()(log_level::warning, "refused a peer: ", max_pending_handshakes, " handshakes already pending");
        s.close();
      } else {
        server_handshake(std::make_shared<stream>(std::move(s)), route);
      }
    });
  }

  // Server side: the handshake, then the link goes to whoever expects the
  // worker, or serves requests for a client.
  void server_handshake(std::shared_ptr<stream> s, const worker_route& route) {
    struct pending_slot {
      std::atomic<std::size_t>& n;
      explicit pending_slot(std::atomic<std::size_t>& c) : n(c) { ++n; }
      ~pending_slot() { --n; }
    };
    server_handshake_hooks hooks;
    hooks.dropped = [this] { ++refused_peers_; };
    hooks.verify = [this](const auth_msg& a, const nonce_t& challenge, const channel_binding& tls) {
      return worker_nonces_.verify(id_.secret(), a, challenge, tls);
    };
    hooks.mismatched = [this, relayed = bool(route)](const peer_identity& peer, const std::string& reason) {
      if (relayed) return; // not one of this process's workers
      if (auto it = expected_.find(peer.worker_id); it != expected_.end() && peer.r == role::worker) {
        auto h = std::move(it->second.second);
        expected_.erase(it);
        if (h) h(reason);
      }
    };
    hooks.authenticated = [this, route](peer_identity peer, stream st) {
      if (peer.r == role::reply_line) return take_reply_line(peer, st, bool(route));
      auto l = std::make_shared<peer_link>(std::move(st), peer);
      if (peer.r == role::relay)
        return serve_relay(executor(), std::move(l), [this](std::shared_ptr<worker_link> w) {
          ++relayed_workers_;
          adopt_worker(std::move(w));
        });
      if (peer.r != role::worker) return host_.serve(l);
      if (route) return route(std::move(l));
      adopt_worker(std::move(l));
    };
    detail::server_handshake(executor(), std::move(s), id_.handshake(), effective_config(),
                             transport().max_message_size, config_bool("frame_mac"),
                             std::make_shared<pending_slot>(pending_handshakes_), std::move(hooks));
  }

  // Not at a relay's listener: a line goes straight to the master.
  void take_reply_line(const peer_identity& peer, stream& st, bool relayed) {
    auto it = relayed ? line_takers_.end() : line_takers_.find(peer.worker_id);
    if (it != line_takers_.end() && it->second(peer, st)) return (void)line_takers_.erase(it);
    ++refused_peers_;
    refusal_log()(log_level::warning, "refused a reply line for worker ", peer.worker_id, " from pid ", peer.pid,
                  " on ", peer.host, ": no such manager process here");
    st.close();
  }

  // A worker authenticated (at this listener, or at a relay): to whoever expects it.
  void adopt_worker(std::shared_ptr<worker_link> l) {
    auto it = expected_.find(l->peer().worker_id);
    if (it == expected_.end()) {
      log(log_level::warning, "unexpected worker ", l->peer().worker_id, " (", l->peer().name, "): told to exit");
      l->start({}, {});
      l->send(frame(frame_kind::shutdown));
      return;
    }
    auto h = std::move(it->second.first);
    expected_.erase(it);
    h(std::move(l));
  }

  asio::io_context ctx_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  run_identity id_;
  detail::run_dir dir_;
  std::string default_base_ = "ipc://";
  std::vector<std::string> master_aliases_;       // worker: the master's URLs it reaches through the one it dialled,
  std::string master_url_;                        // this one
  std::optional<pem_identity> tls_identity_;      // runtime thread
  std::shared_ptr<const tls_context> tls_client_; // made by prepare_tls_client(); runtime thread
  std::shared_ptr<dir_watch> run_dir_watch_;
  std::map<std::string, std::shared_ptr<listener>> listeners_;
  std::unordered_map<std::uint64_t, std::pair<connect_handler, refuse_handler>> expected_;
  std::unordered_map<std::uint64_t, line_taker> line_takers_;
  worker_nonces worker_nonces_; // issued to local workers (worker_spec)
  std::atomic<std::uint64_t> next_worker_id_{1};
  std::atomic<std::size_t> pending_handshakes_{0};
  service_host host_;     // this process's services, and the client links they serve
  service_client client_; // requests to other processes' services
  pending_count deliveries_;
  std::unordered_map<std::type_index, std::shared_ptr<backend::launcher>> launchers_;
  dialer dialer_{executor(), id_, [this] { return transport(); }}; // runtime thread

public:
  std::atomic<std::uint64_t> refused_peers_{0};
  std::atomic<std::uint64_t> relayed_workers_{0}; // workers that joined through a relay
  std::atomic<std::uint64_t> adopted_links_{0};   // workers that spoke on an inherited link (adopt_link)
};

} // namespace fiber::detail
