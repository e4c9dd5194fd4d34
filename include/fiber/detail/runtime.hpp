#pragma once
/// @file detail/runtime.hpp
/// The per-process runtime: one background thread running an asio::io_context
/// that owns every socket, the listener peers dial, authenticated links with
/// heartbeats, the table of workers the master expects, and the services
/// (queue brokers, pipe relays, object hosts) other processes send requests to.
/// User-facing blocking calls wait on it; async calls complete on the caller's
/// executor.

#include <fiber/backend/launcher.hpp>
#include <fiber/config.hpp>
#include <fiber/detail/protocol.hpp>
#include <fiber/detail/sched.hpp>
#include <fiber/detail/transport.hpp>
#include <fiber/error.hpp>
#include <fiber/log.hpp>
#include <fiber/target.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/dispatch.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <elf.h>
#include <filesystem>
#include <fcntl.h>
#include <functional>
#include <future>
#include <link.h>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <thread>
#include <typeindex>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace fiber::detail {

using clock = std::chrono::steady_clock;

/// GNU build id of the main executable (hex), or a fallback naming the file.
inline std::string build_id() {
  std::string id;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) -> int {
        auto& s = *static_cast<std::string*>(out);
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          auto* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
          auto* end = p + ph.p_memsz;
          while (p + sizeof(ElfW(Nhdr)) <= end) {
            auto* n = reinterpret_cast<const ElfW(Nhdr)*>(p);
            auto* name = p + sizeof(ElfW(Nhdr));
            auto* desc = name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
              s = to_hex({reinterpret_cast<const std::uint8_t*>(desc), n->n_descsz});
              return 1;
            }
            p = desc + ((n->n_descsz + 3) & ~3u);
          }
        }
        return 1; // the first object is the main program
      },
      &id);
  if (id.empty()) {
    struct stat st{};
    ::stat("/proc/self/exe", &st);
    id = "size-" + std::to_string(st.st_size) + "-mtime-" + std::to_string(st.st_mtime);
  }
  return id;
}

/// Who is on the other end of a link.
struct peer_identity {
  role r = role::client;
  std::uint64_t worker_id = 0;
  std::int64_t pid = 0;
  std::string host, name;
};

/// An authenticated connection. Runtime thread only. Sends are queued by the
/// transport (and coalesced into one write while one is in flight); receives
/// loop until close. A peer silent for heartbeat_timeout_ms is closed.
class peer_link : public std::enable_shared_from_this<peer_link> {
public:
  /// (kind, body, frame): `body` lies in `frame`, which the handler may move
  /// out to keep the bytes without a copy (a vector's move keeps its buffer).
  using message_handler = std::function<void(frame_kind, std::span<const std::byte>, message&)>;
  using close_handler = std::function<void(const std::string& reason)>;

  peer_link(stream s, peer_identity peer) : stream_(std::move(s)), timer_(stream_.get_executor()), peer_(std::move(peer)) {
    static std::atomic<std::uint64_t> next{1};
    id_ = next++;
  }

  void start(message_handler on_message, close_handler on_close) {
    on_message_ = std::move(on_message);
    on_close_ = std::move(on_close);
    interval_ = std::chrono::milliseconds(config_int("heartbeat_interval_ms"));
    timeout_ = std::chrono::milliseconds(config_int("heartbeat_timeout_ms"));
    last_recv_ = last_send_ = clock::now();
    read();
    tick();
  }

  /// `on_sent` (optional) runs once the frame is written to the connection
  /// or could not be (link closed).
  void send(std::vector<std::byte> f, std::function<void()> on_sent = {}) {
    send(std::move(f), shared_bytes{}, std::move(on_sent));
  }
  /// The frame `f` followed by `tail` (not copied).
  void send(std::vector<std::byte> f, shared_bytes tail, std::function<void()> on_sent = {}) {
    if (closed_) {
      if (on_sent) on_sent();
      return;
    }
    last_send_ = clock::now();
    stream_.async_send(std::move(f), std::move(tail), [self = shared_from_this(), on_sent = std::move(on_sent)](std::error_code ec) {
      if (ec) self->close("send failed: " + ec.message());
      if (on_sent) on_sent();
    });
  }

  /// Idempotent. The close handler runs once, after this returns.
  void close(const std::string& reason) {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    stream_.close();
    if (auto h = std::move(on_close_)) asio::post(stream_.get_executor(), [h, reason] { h(reason); });
    on_message_ = nullptr;
  }

  bool closed() const noexcept { return closed_; }

  /// Lends the link's read side to a thread that blocks on it (a worker's
  /// main thread waiting for work; see transport's lent_reader). `granted`
  /// runs on the executor. The borrower calls note_received() for every
  /// frame, hands the frames it does not handle to deliver(), and gives the
  /// reader back before it blocks elsewhere for long; while it is busy (not
  /// in recv), the heartbeat tick takes the read side back. Executor only.
  void lend_reader(std::function<void(lent_reader)> granted) {
    if (!closed_) stream_.lend_reader(std::move(granted));
  }
  /// Any thread: a frame arrived (for the heartbeat timeout).
  void note_received() noexcept { last_recv_.store(clock::now(), std::memory_order_relaxed); }
  /// Any thread: handle `m` (a whole frame) on the executor as if read there.
  void deliver(message m) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), m = std::move(m)]() mutable {
      if (!self->closed_) self->handle(m);
    });
  }

  /// For synchronous sends from other threads while the link has nothing
  /// queued (see transport's direct_writer); heartbeats go on as before.
  direct_writer direct() const noexcept { return stream_.direct(); }
  const peer_identity& peer() const noexcept { return peer_; }
  std::uint64_t id() const noexcept { return id_; }
  asio::any_io_executor get_executor() { return stream_.get_executor(); }

private:
  void read() {
    stream_.async_recv([self = shared_from_this()](std::error_code ec, message m) {
      if (self->closed_) return;
      if (ec) return self->close(ec == asio::error::eof ? "connection closed" : "receive failed: " + ec.message());
      self->note_received();
      self->handle(m);
      if (!self->closed_) self->read();
    });
  }

  void handle(message& m) {
    try {
      auto [k, body] = unframe(m);
      if (k != frame_kind::heartbeat && on_message_) on_message_(k, body, m);
    } catch (const std::exception& e) {
      log(log_level::warning, "dropping malformed frame from ", peer_.name, ": ", e.what());
    }
    buffer_cache::instance().give(std::move(m)); // unless the handler kept it
  }

  void tick() {
    timer_.expires_after(interval_);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->closed_) return;
      auto now = clock::now();
      // A borrower busy elsewhere reads nothing: read here again, and count
      // silence from now on.
      if (self->stream_.take_back_reader()) self->note_received();
      if (now - self->last_recv_.load(std::memory_order_relaxed) > self->timeout_)
        return self->close("heartbeat missed");
      if (now - self->last_send_ >= self->interval_) self->send(frame(frame_kind::heartbeat));
      self->tick();
    });
  }

  stream stream_;
  asio::steady_timer timer_;
  peer_identity peer_;
  std::uint64_t id_ = 0;
  message_handler on_message_;
  close_handler on_close_;
  clock::duration interval_{}, timeout_{};
  std::atomic<clock::time_point> last_recv_;
  clock::time_point last_send_;
  bool closed_ = false;
};

using reply_fn = std::function<void(std::uint8_t status, std::vector<std::byte> payload)>;

/// Something in this process that other processes send requests to: a
/// Queue broker, a Pipe relay, an object host. Runtime thread only.
class service {
public:
  virtual ~service() = default;
  /// Handle one request; call `reply` exactly once, now or later. `peer` is
  /// the link id of the caller (0: this process).
  virtual void handle(std::uint64_t peer, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) = 0;
  /// A client link closed: drop whatever it held.
  virtual void peer_gone(std::uint64_t /*peer*/) {}
};

/// Completion of a request: exception (remote_error, worker_lost, ...) or payload.
using request_done = std::function<void(std::exception_ptr, std::vector<std::byte>)>;

inline std::exception_ptr reply_error(std::uint8_t status, std::span<const std::byte> payload) {
  try {
    reader r(payload);
    if (status == 1) {
      auto type = r.read<std::string>();
      auto msg = r.read<std::string>();
      return std::make_exception_ptr(remote_error(type, msg));
    }
    auto msg = r.read<std::string>();
    if (status == 3) return std::make_exception_ptr(eof_error(msg));
    if (status == 4) return std::make_exception_ptr(worker_lost(msg));
    return std::make_exception_ptr(error(msg));
  } catch (const serialization_error& e) {
    return std::make_exception_ptr(e);
  }
}

/// Serialized (type, message) of the exception being handled.
inline std::vector<std::byte> current_exception_payload() {
  std::string type = "unknown exception", msg;
  try {
    throw;
  } catch (const std::exception& e) {
    type = demangle(typeid(e).name());
    msg = e.what();
  } catch (...) {
    if (auto* t = abi::__cxa_current_exception_type()) type = demangle(t->name());
  }
  writer w;
  w.write(type);
  w.write(msg);
  return w.release();
}

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
    if (!is_worker_ && !run_dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(run_dir_, ec);
    }
  }

  asio::any_io_executor executor() { return ctx_.get_executor(); }
  bool on_runtime_thread() const { return std::this_thread::get_id() == thread_id_; }

  /// Run f on the runtime thread and return its result (rethrows).
  template <class F>
  auto sync(F&& f) -> decltype(f()) {
    if (on_runtime_thread()) return f();
    std::packaged_task<decltype(f())()> task(std::forward<F>(f));
    auto fut = task.get_future();
    asio::post(ctx_, [&task] { task(); });
    return fut.get();
  }

  void stop() {
    if (!thread_.joinable()) return;
    guard_.reset();
    asio::post(ctx_, [this] {
      for (auto& [u, l] : listeners_) l->close();
      for (auto& [u, c] : clients_)
        if (c.link) c.link->close("runtime stopping");
      launchers_.clear();
      ctx_.stop();
    });
    if (on_runtime_thread()) thread_.detach();
    else thread_.join();
  }

  // ---- identity --------------------------------------------------------

  const std::string& secret() const { return secret_; }
  const std::string& run_dir() const { return run_dir_; }
  bool is_worker() const { return is_worker_; }
  const std::string& process_name() const { return name_; }
  std::uint64_t registry_hash() const {
    auto h = registry::instance().hash();
    if (is_worker_)
      if (const char* salt = std::getenv("FIBER_INTERNAL_REGISTRY_SALT")) h = fnv1a(salt, h);
    return h;
  }
  const std::string& own_build_id() const { return build_id_; }
  std::vector<std::string>& argv() { return argv_; }

  void become_worker(std::string name, std::string secret, std::string run_dir) {
    is_worker_ = true;
    name_ = std::move(name);
    secret_ = std::move(secret);
    if (const char* f = std::getenv("FIBER_INTERNAL_SECRET_FILE")) secret_file_ = f; // for workers of our own
    if (!run_dir.empty()) run_dir_ = std::move(run_dir);
    // A job-backed worker (another machine, maybe) reaches the services its
    // master named by its ipc:// URL through the URL it dialled (worker_spec).
    if (const char* a = std::getenv("FIBER_INTERNAL_MASTER_IPC"))
      if (const char* m = std::getenv("FIBER_INTERNAL_MASTER")) master_alias_ = {a, m};
    logger::instance().set_process(name_);
  }

  transport_options transport() const {
    transport_options o;
    o.max_message_size = std::size_t(config_int("max_message_size_mb")) << 20;
    o.tls_cert_file = config_string("tls_cert");
    o.tls_key_file = config_string("tls_key");
    o.tls_ca_file = config_string("tls_ca");
    return o;
  }

  // ---- listening -------------------------------------------------------

  /// URL this process accepts connections on for `base` ("ipc://" → a
  /// socket in the 0700 run dir; "tcp://addr:0" → that address, ephemeral
  /// port). Binds on first call. Any thread.
  std::string listen_url(const std::string& base = "ipc://") {
    return sync([&] {
      if (auto it = listeners_.find(base); it != listeners_.end()) return it->second->url();
      std::string url = base;
      if (base == "ipc://") url = ipc_url();
      auto l = std::make_shared<listener>(executor(), url, transport());
      listeners_.emplace(base, l);
      accept(l);
      return l->url();
    });
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
  std::string service_url() {
    return sync([&] {
      if (!listeners_.empty()) return listeners_.begin()->second->url();
      return listen_url(default_base_);
    });
  }
  void set_default_listen_base(std::string base) { default_base_ = std::move(base); }

  // ---- workers ---------------------------------------------------------

  using connect_handler = std::function<void(std::shared_ptr<peer_link>)>;
  using refuse_handler = std::function<void(const std::string& reason)>;

  std::uint64_t new_worker_id() { return next_worker_id_++; }

  /// Runtime thread. `on_connect` runs when worker `id` has authenticated;
  /// `on_refused` when it presented a different binary.
  void expect_worker(std::uint64_t id, connect_handler on_connect, refuse_handler on_refused) {
    expected_[id] = {std::move(on_connect), std::move(on_refused)};
  }
  void forget_worker(std::uint64_t id) { expected_.erase(id); }

  /// Environment a job-backed worker needs to dial back (never argv).
  std::vector<std::pair<std::string, std::string>> worker_env(std::uint64_t id, const std::string& name,
                                                              const std::string& url) {
    return {{"FIBER_INTERNAL_MASTER", url},
            {"FIBER_INTERNAL_SECRET_FILE", secret_file_},
            {"FIBER_INTERNAL_WORKER_ID", std::to_string(id)},
            {"FIBER_INTERNAL_WORKER_NAME", name},
            {"FIBER_INTERNAL_RUN_DIR", run_dir_}};
  }

  /// A job spec running this executable as worker `id`.
  backend::job_spec worker_spec(backend::launcher& l, std::uint64_t id, const std::string& name,
                                const fiber::resources& res = {}) {
    backend::job_spec s;
    s.name = name;
    s.argv = argv_;
    s.argv.at(0) = exe_;
    s.resources = res;
    const bool local = l.name() == "local";
    const auto url = listen_url(local ? local_listen_base() : l.listen_url());
    s.env = worker_env(id, name, url);
    if (local) s.env.emplace_back("FIBER_INTERNAL_PDEATHSIG", "1");
    // Cluster nodes rarely share the master's /tmp: hand the secret over in
    // the job's environment (the Slurm backend keeps it out of argv and
    // scontrol's output).
    else s.env.emplace_back("FIBER_INTERNAL_SECRET", secret_);
    // Services (a Queue, a Pipe, an object) made before this process listened
    // on TCP carry its ipc:// URL, which a cluster node cannot reach: tell the
    // worker to use `url` for it (see request()).
    if (!local) s.env.emplace_back("FIBER_INTERNAL_MASTER_IPC", ipc_url());
    // A worker reads these before the handshake that would bring it the
    // master's configuration (io_threads_batch when its runtime starts, TLS
    // material to dial): pass the master's values, also ones set in code,
    // the way users would.
    std::vector<const char*> early_keys{"io_threads_batch"};
    if (is_tls_url(url)) early_keys.insert(early_keys.end(), {"tls_cert", "tls_key", "tls_ca"});
    for (const char* key : early_keys)
      if (auto v = config_string(key); !v.empty()) s.env.emplace_back(std::string(find_config_key(key)->env), v);
    if (auto dir = config_string("worker_output_dir"); !dir.empty()) {
      ::mkdir(dir.c_str(), 0700);
      s.stdout_path = dir + "/" + name + ".out";
      s.stderr_path = dir + "/" + name + ".err";
    }
    return s;
  }

  /// Where local workers dial back (config key local_transport): ipc in the
  /// 0700 run dir by default; tcp/tls listen on the loopback interface only.
  static std::string local_listen_base() {
    auto t = config_string("local_transport");
    if (t == "ipc" || t.empty()) return "ipc://";
    if (t == "tcp") return "tcp://127.0.0.1:0";
    if (t == "tls") return "tls+tcp://127.0.0.1:0";
    throw config_error("fiber: configuration key 'local_transport' must be ipc, tcp or tls, got '" + t + "'");
  }

  /// Before starting jobs that cost about `fds` more file descriptors in this
  /// process: if RLIMIT_NOFILE's soft limit is too low, raise it (up to the
  /// hard limit); if even that is too low, throw backend_error naming `who`
  /// — before anything has started.
  static void reserve_fds(std::size_t fds, const std::string& who) {
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
    std::size_t open = 0;
    if (DIR* d = ::opendir("/proc/self/fd")) {
      while (auto* e = ::readdir(d)) open += e->d_name[0] != '.';
      ::closedir(d);
    }
    const std::size_t need = open + fds + 32; // headroom: logs, files, transient pipes
    if (lim.rlim_cur == RLIM_INFINITY || need <= lim.rlim_cur) return;
    if (lim.rlim_max == RLIM_INFINITY || need <= lim.rlim_max) {
      rlimit raised = lim;
      raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? rlim_t(need) : lim.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
        log(log_level::info, "raised RLIMIT_NOFILE from ", lim.rlim_cur, " to ", raised.rlim_cur, " for ", who);
        return;
      }
    }
    throw backend_error(who + ": needs about " + std::to_string(need) + " file descriptors in this process (" +
                        std::to_string(open) + " open), but RLIMIT_NOFILE is " + std::to_string(lim.rlim_cur) +
                        " (hard limit " +
                        (lim.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_max)) +
                        "); raise it (ulimit -n) or start fewer workers");
  }

  /// One launcher per backend policy per process. Runtime thread.
  template <class Policy>
  std::shared_ptr<backend::launcher> launcher() {
    auto& l = launchers_[std::type_index(typeid(Policy))];
    if (!l) l = Policy::make(executor());
    return l;
  }

  // ---- services --------------------------------------------------------

  std::uint64_t add_service(std::shared_ptr<service> s) {
    return sync([&] {
      auto id = next_service_id_++;
      services_[id] = std::move(s);
      return id;
    });
  }
  void remove_service(std::uint64_t id) {
    asio::post(ctx_, [this, id] { services_.erase(id); });
  }

  /// Send a request to service `service_id` in the process listening at
  /// `url` (this process: called directly). `done` runs on the runtime
  /// thread. Any thread.
  void request(const std::string& to, std::uint64_t service_id, std::uint32_t op, std::vector<std::byte> payload,
               request_done done) {
    const std::string& url = !master_alias_.first.empty() && to == master_alias_.first ? master_alias_.second : to;
    asio::dispatch(ctx_, [this, url, service_id, op, payload = std::move(payload), done = std::move(done)]() mutable {
      if (is_local(url)) return local_request(service_id, op, std::move(payload), std::move(done));
      auto& c = clients_[url];
      auto id = next_request_id_++;
      c.pending[id] = std::move(done);
      auto f = frame(frame_kind::request, request_msg{id, service_id, op, std::move(payload)});
      if (c.link) return c.link->send(std::move(f));
      c.queued.push_back(std::move(f));
      if (!c.connecting) connect_client(url);
    });
  }

  bool is_local(const std::string& url) {
    for (auto& [b, l] : listeners_)
      if (l->url() == url) return true;
    return false;
  }

  // ---- worker side -----------------------------------------------------

  using connect_done =
      std::function<void(std::exception_ptr, std::shared_ptr<peer_link>, std::map<std::string, std::string>)>;

  /// Dial `url`, authenticate as `r`, and hand back the link (runtime thread).
  /// A listener whose backlog is full (NNG_EAGAIN: hundreds of workers
  /// dialling at once) is dialled again after a short, growing, jittered
  /// pause, for up to start_timeout_s.
  void connect(const std::string& url, role r, std::uint64_t worker_id, connect_done done) {
    auto give_up = clock::now() + std::chrono::seconds(config_int("start_timeout_s"));
    dial(url, r, worker_id, std::move(done), give_up, std::chrono::milliseconds(2));
  }

private:
  runtime() : guard_(asio::make_work_guard(ctx_)) {
    // libcrypto registers its atexit cleanup on first use. Doing that here,
    // before this static is complete, makes it run after ~runtime (atexit is
    // LIFO), so the runtime thread's OPENSSL_thread_stop() still frees its
    // per-thread state; initialised later (first HMAC on the runtime thread),
    // the cleanup ran first and LeakSanitizer reported 904 bytes.
    OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG, nullptr);
    build_id_ = detail::build_id();
    exe_ = self_exe_path();
    if (argv_.empty()) argv_.push_back(exe_);
    if (!std::getenv("FIBER_INTERNAL_MASTER")) make_run_dir();
    // nng starts its threads (poller, task queues, timers, resolver) on first
    // use: make that happen here, with the runtime thread, under SCHED_BATCH.
    batch_policy_scope batch{config_bool("io_threads_batch")};
    if (nng_aio* a = nullptr; nng_aio_alloc(&a, nullptr, nullptr) == 0) nng_aio_free(a);
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
      OPENSSL_thread_stop(); // HMAC's per-thread state, else LeakSanitizer reports it
    });
    while (thread_id_ == std::thread::id{}) std::this_thread::yield();
  }

  void dial(const std::string& url, role r, std::uint64_t worker_id, connect_done done, clock::time_point give_up,
            std::chrono::milliseconds pause) {
    async_connect(executor(), url, transport(),
                  [this, url, r, worker_id, done = std::move(done), give_up, pause](std::error_code ec,
                                                                                    stream s) mutable {
                    if (ec == std::error_code(NNG_EAGAIN, nng_category()) && clock::now() < give_up) {
                      auto t = std::make_shared<asio::steady_timer>(executor());
                      std::uniform_int_distribution<int> jitter(0, int(pause.count()));
                      t->expires_after(pause + std::chrono::milliseconds(jitter(retry_rng_)));
                      t->async_wait([this, t, url, r, worker_id, done = std::move(done), give_up,
                                     pause](std::error_code) mutable {
                        dial(url, r, worker_id, std::move(done), give_up,
                             std::min(pause * 2, std::chrono::milliseconds(200)));
                      });
                      return;
                    }
                    if (ec)
                      return done(std::make_exception_ptr(worker_lost("fiber: cannot connect to " + url + ": " +
                                                                      ec.message())),
                                  nullptr, {});
                    client_handshake(std::make_shared<stream>(std::move(s)), r, worker_id, std::move(done));
                  });
  }

  /// This process's ipc:// URL (its socket in the run dir).
  std::string ipc_url() const { return "ipc://" + run_dir_ + "/p" + std::to_string(::getpid()) + ".sock"; }

  static std::string self_exe_path() {
    char buf[4096];
    auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, std::size_t(n)) : std::string("/proc/self/exe");
  }

  void make_run_dir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/fiber-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw backend_error("fiber: cannot create run directory " + tmpl);
    run_dir_ = tmpl; // mkdtemp makes it 0700
    auto n = random_nonce();
    secret_ = to_hex(n);
    secret_file_ = run_dir_ + "/secret";
    int fd = ::open(secret_file_.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ::write(fd, secret_.data(), secret_.size()) != ssize_t(secret_.size()))
      throw backend_error("fiber: cannot write " + secret_file_);
    ::close(fd);
  }

  void accept(std::shared_ptr<listener> l) {
    l->async_accept([this, l](std::error_code ec, stream s) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) {
        if (pending_handshakes_ >= max_pending_handshakes) {
          ++refused_peers_;
          log(log_level::warning, "refused a peer: ", max_pending_handshakes, " handshakes already pending");
          s.close();
        } else {
          server_handshake(std::make_shared<stream>(std::move(s)));
        }
      }
      accept(l);
    });
  }

  // Server side of the challenge–response. Nothing but the bounded auth
  // frame is read before the peer proves it knows the secret.
  void server_handshake(std::shared_ptr<stream> s) {
    struct pending_slot {
      std::atomic<std::size_t>& n;
      explicit pending_slot(std::atomic<std::size_t>& c) : n(c) { ++n; }
      ~pending_slot() { --n; }
    };
    auto slot = std::make_shared<pending_slot>(pending_handshakes_);
    s->set_max_message_size(max_auth_frame); // refused before allocating
    auto nonce = random_nonce();
    s->async_send(frame(frame_kind::challenge, challenge_msg{nonce, protocol_version}), [](std::error_code) {});
    auto timer = std::make_shared<asio::steady_timer>(executor(), std::chrono::seconds(5));
    timer->async_wait([s](std::error_code ec) {
      if (!ec) s->close(); // too slow: drop it
    });
    s->async_recv([this, s, nonce, timer, slot](std::error_code ec, message m) {
      timer->cancel();
      if (ec == asio::error::message_size) {
        ++refused_peers_;
        log(log_level::warning, "refused a peer: handshake frame over ", max_auth_frame, " bytes");
      }
      if (ec) return;
      auth_msg a;
      try {
        a = decode_auth_frame(m);
      } catch (const std::exception& e) {
        ++refused_peers_;
        log(log_level::warning, "refused a peer: malformed handshake (", e.what(), ")");
        return s->close();
      }
      if (!mac_equal(a.mac, client_proof(secret_, nonce, a))) {
        ++refused_peers_;
        log(log_level::warning, "refused a peer from pid ", a.pid, ": authentication failed");
        return s->close();
      }
      s->set_max_message_size(transport().max_message_size);
      peer_identity peer{role(a.role), a.worker_id, a.pid, a.host, a.name};
      if (a.registry_hash != registry_hash() || a.build_id != build_id_) {
        std::string reason = "fiber: handshake refused: worker '" + a.name + "' (pid " + std::to_string(a.pid) +
                             " on " + a.host + ") runs build " + a.build_id + " with registry " +
                             std::to_string(a.registry_hash) + ", master runs build " + build_id_ +
                             " with registry " + std::to_string(registry_hash());
        log(log_level::error, reason);
        s->async_send(frame(frame_kind::refused, refused_msg{reason}), [s](std::error_code) { s->close(); });
        if (auto it = expected_.find(a.worker_id); it != expected_.end() && peer.r == role::worker) {
          auto h = std::move(it->second.second);
          expected_.erase(it);
          if (h) h(reason);
        }
        return;
      }
      s->async_send(frame(frame_kind::auth_ok, auth_ok_msg{server_proof(secret_, a.nonce), effective_config()}),
                    [](std::error_code) {});
      auto l = std::make_shared<peer_link>(std::move(*s), peer);
      if (peer.r == role::worker) {
        auto it = expected_.find(a.worker_id);
        if (it == expected_.end()) {
          log(log_level::warning, "unexpected worker ", a.worker_id, " (", a.name, "): told to exit");
          l->start({}, {});
          l->send(frame(frame_kind::shutdown));
          return;
        }
        auto h = std::move(it->second.first);
        expected_.erase(it);
        h(l);
      } else {
        serve_client(l);
      }
    });
  }

  void client_handshake(
      std::shared_ptr<stream> s, role r, std::uint64_t worker_id,
      std::function<void(std::exception_ptr, std::shared_ptr<peer_link>, std::map<std::string, std::string>)> done) {
    s->set_max_message_size(max_handshake_reply); // the server is not authenticated yet
    s->async_recv([this, s, r, worker_id, done = std::move(done)](std::error_code ec, message m) mutable {
      auto fail = [&](std::exception_ptr e) { done(e, nullptr, {}); };
      if (ec) return fail(std::make_exception_ptr(worker_lost("fiber: handshake failed: " + ec.message())));
      challenge_msg c;
      try {
        c = decode_frame<challenge_msg>(frame_kind::challenge, m);
      } catch (const std::exception& e) {
        return fail(std::make_exception_ptr(handshake_error(std::string("fiber: bad challenge: ") + e.what())));
      }
      auth_msg a;
      a.nonce = random_nonce();
      a.role = std::uint8_t(r);
      a.worker_id = worker_id;
      a.registry_hash = registry_hash();
      a.build_id = build_id_;
      a.pid = ::getpid();
      char host[256] = "";
      ::gethostname(host, sizeof host);
      a.host = host;
      a.name = name_;
      a.mac = client_proof(secret_, c.nonce, a);
      s->async_send(frame(frame_kind::auth, a), [](std::error_code) {});
      s->async_recv([this, s, a, done = std::move(done)](std::error_code ec, message m) mutable {
        if (ec)
          return done(std::make_exception_ptr(worker_lost("fiber: handshake failed: " + ec.message())), nullptr, {});
        try {
          auto [k, body] = unframe(m);
          if (k == frame_kind::refused) throw handshake_error(deserialize<refused_msg>(body).reason);
          if (k != frame_kind::auth_ok) throw handshake_error("fiber: unexpected handshake reply");
          auto ok = deserialize<auth_ok_msg>(body);
          if (!mac_equal(ok.mac, server_proof(secret_, a.nonce)))
            throw handshake_error("fiber: the master failed to authenticate");
          s->set_max_message_size(transport().max_message_size);
          done(nullptr, std::make_shared<peer_link>(std::move(*s), peer_identity{}), std::move(ok.config));
        } catch (...) {
          done(std::current_exception(), nullptr, {});
        }
      });
    });
  }

  // ---- services: owner side -----------------------------------------------

  void serve_client(std::shared_ptr<peer_link> l) {
    std::weak_ptr<peer_link> weak = l;
    l->start(
        [this, weak](frame_kind k, std::span<const std::byte> body, message&) {
          auto l = weak.lock();
          if (!l || k != frame_kind::request) return;
          auto req = deserialize<request_msg>(body);
          dispatch_request(l->id(), std::move(req), [weak, id = req.request_id](std::uint8_t st, std::vector<std::byte> p) {
            if (auto l = weak.lock()) l->send(frame(frame_kind::reply, reply_msg{id, st, std::move(p)}));
          });
        },
        [this, id = l->id()](const std::string&) {
          for (auto& [sid, s] : services_) s->peer_gone(id);
        });
  }

  void dispatch_request(std::uint64_t peer, request_msg req, reply_fn reply) {
    auto it = services_.find(req.service_id);
    if (it == services_.end()) {
      writer w;
      w.write(std::string("fiber: no such object or queue (id ") + std::to_string(req.service_id) +
              "); its owner released it");
      return reply(2, w.release());
    }
    auto svc = it->second;
    try {
      svc->handle(peer, req.op, req.payload, reply);
    } catch (...) {
      reply(1, current_exception_payload());
    }
  }

  void local_request(std::uint64_t service_id, std::uint32_t op, std::vector<std::byte> payload, request_done done) {
    dispatch_request(0, request_msg{0, service_id, op, std::move(payload)},
                     [this, done = std::move(done)](std::uint8_t st, std::vector<std::byte> p) mutable {
                       // Replies are delivered asynchronously even in-process, as over a link.
                       asio::post(ctx_, [st, p = std::move(p), done = std::move(done)]() mutable {
                         if (st == 0) done(nullptr, std::move(p));
                         else done(reply_error(st, p), {});
                       });
                     });
  }

  // ---- services: client side ----------------------------------------------

  struct client_conn {
    std::shared_ptr<peer_link> link;
    bool connecting = false;
    std::vector<std::vector<std::byte>> queued;
    std::unordered_map<std::uint64_t, request_done> pending;
  };

  void connect_client(const std::string& url) {
    clients_[url].connecting = true;
    connect(url, role::client, 0,
            [this, url](std::exception_ptr e, std::shared_ptr<peer_link> l, std::map<std::string, std::string>) {
              auto& c = clients_[url];
              c.connecting = false;
              if (e) return fail_client(url, e);
              c.link = l;
              l->start(
                  [this, url](frame_kind k, std::span<const std::byte> body, message&) {
                    if (k != frame_kind::reply) return;
                    auto r = deserialize<reply_msg>(body);
                    auto& c = clients_[url];
                    auto it = c.pending.find(r.request_id);
                    if (it == c.pending.end()) return;
                    auto done = std::move(it->second);
                    c.pending.erase(it);
                    if (r.status == 0) done(nullptr, std::move(r.payload));
                    else done(reply_error(r.status, r.payload), {});
                  },
                  [this, url](const std::string& reason) {
                    fail_client(url, std::make_exception_ptr(worker_lost("fiber: lost the connection to " + url +
                                                                         " (" + reason + ")")));
                  });
              for (auto& f : c.queued) l->send(std::move(f));
              c.queued.clear();
            });
  }

  void fail_client(const std::string& url, std::exception_ptr e) {
    auto c = std::move(clients_[url]);
    clients_.erase(url);
    for (auto& [id, done] : c.pending) done(e, {});
  }

  asio::io_context ctx_{1};
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::string secret_, secret_file_, run_dir_, name_ = "master", build_id_, exe_;
  std::string default_base_ = "ipc://";
  std::pair<std::string, std::string> master_alias_; // worker: master's ipc URL -> the URL it dialled
  std::vector<std::string> argv_;
  bool is_worker_ = false;
  std::map<std::string, std::shared_ptr<listener>> listeners_;
  std::unordered_map<std::uint64_t, std::pair<connect_handler, refuse_handler>> expected_;
  std::atomic<std::uint64_t> next_worker_id_{1};
  std::atomic<std::size_t> pending_handshakes_{0};
  std::uint64_t next_service_id_ = 1, next_request_id_ = 1;
  std::unordered_map<std::uint64_t, std::shared_ptr<service>> services_;
  std::unordered_map<std::string, client_conn> clients_;
  std::unordered_map<std::type_index, std::shared_ptr<backend::launcher>> launchers_;
  std::minstd_rand retry_rng_{static_cast<std::minstd_rand::result_type>(::getpid())}; // runtime thread

public:
  std::atomic<std::uint64_t> refused_peers_{0};
};

/// A job's end reported while its link is still open: the backend's report
/// can overtake the job's last frames, so its owner (Process, Pool) waits
/// for the link to end (every frame read; a dead process's end closes at
/// once) before acting on it, and at most this long (a link that never
/// ends, e.g. a cut-off node).
inline constexpr std::chrono::seconds link_drain_limit{2};

/// Runs `expired` on the runtime thread after link_drain_limit, unless the
/// returned timer is cancelled or destroyed first. Runtime thread.
inline std::unique_ptr<asio::steady_timer> start_link_drain(std::function<void()> expired) {
  auto t = std::make_unique<asio::steady_timer>(runtime::instance().executor(), link_drain_limit);
  t->async_wait([expired = std::move(expired)](std::error_code ec) {
    if (!ec) expired();
  });
  return t;
}

} // namespace fiber::detail
