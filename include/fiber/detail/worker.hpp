// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/worker.hpp
/// The worker side of fiber::init: dial the master, authenticate, then run
/// what it sends — one `run` (a Process: exit with its code) or `tasks`
/// chunks (a Pool worker) — on the main thread, while the runtime thread keeps
/// the link and its heartbeats alive. An idle main thread reads the link
/// itself (see worker_main). A vanished or silent master ends the
/// process at once (std::_Exit: nothing of the user's must outlive it).

#include <fiber/backend/detail/net_address.hpp>
#include <fiber/detail/blocking_result.hpp>
#include <fiber/detail/heartbeat_wire.hpp>
#include <fiber/detail/libcrypto_loader.hpp>
#include <fiber/detail/libssl_loader.hpp>
#include <fiber/detail/log_writer.hpp>
#include <fiber/detail/relay.hpp>
#include <fiber/detail/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <fcntl.h>
#include <sys/prctl.h>
#include <vector>

namespace fiber::detail {

inline constexpr int exit_master_lost = 70;
inline constexpr int exit_refused = 71;
inline constexpr int exit_initializer_failed = 72;
/// How long an exiting worker waits for its exit report to be written.
inline constexpr std::chrono::milliseconds exit_report_limit{1000};

/// The master link's synchronous writer (set once connected), for the exit report.
inline direct_writer& master_writer() {
  static direct_writer w;
  return w;
}

/// Set by Process::start in a worker that starts Processes of its own: ends
/// them (joins non-daemon ones, terminates daemon ones) when its target
/// returns or calls std::exit, as a master's std::atexit does.
inline void (*&children_exit_hook())() {
  static void (*hook)() = nullptr;
  return hook;
}

/// The target's thread: end this worker's own children, then exit.
[[noreturn]] inline void worker_exit(int code);
[[noreturn]] inline void worker_finish(int code) {
  if (auto h = children_exit_hook(); h && !runtime::instance().on_runtime_thread()) h();
  if (!runtime::instance().on_runtime_thread())
    (void)runtime::instance().deliveries().wait_for(std::chrono::seconds(10));
  worker_exit(code);
}

[[noreturn]] inline void worker_exit(int code) {
  // An srun step reports exit status 128+n as "killed by signal n": tell the
  // master which one it was (the frame precedes the link's end). Behind what
  // the link is writing unless this is the thread that writes it.
  if (code > 128 && code <= 128 + 64) {
    auto report = frame(frame_kind::exiting, std::int32_t(code));
    if (runtime::instance().on_runtime_thread()) (void)master_writer().try_send(report);
    else (void)master_writer().send(std::move(report), exit_report_limit);
  }
  log_writer::instance().exiting(); // the records logged so far (bounded: ~2 s)
  std::fflush(stdout);
  std::fflush(stderr);
  std::cout.flush();
  runtime::instance().remove_own_run_dir();
  std::_Exit(code);
}

/// Handlers for frame kinds the core worker loop does not know (remote
/// objects), with the master link; register at static-initialization time
/// (before fiber::init runs the worker). `on_runtime`: the frame, on the
/// runtime thread. `on_main` (optional): the frame as the worker's main
/// thread read it (see worker_main); true if it dealt with it there, false
/// to hand it to `on_runtime` (the runtime thread then reads the link).
struct worker_extension {
  void (*on_runtime)(const std::shared_ptr<peer_link>& master, std::span<const std::byte> body) = nullptr;
  bool (*on_main)(const std::shared_ptr<peer_link>& master, std::span<const std::byte> body) = nullptr;
};
inline std::unordered_map<std::uint8_t, worker_extension>& worker_extensions() {
  static std::unordered_map<std::uint8_t, worker_extension> m;
  return m;
}
inline bool add_worker_extension(frame_kind k, worker_extension h) {
  worker_extensions()[std::uint8_t(k)] = h;
  return true;
}

/// Main-thread work queue of the worker.
class worker_loop {
public:
  void push(std::function<void()> f) {
    {
      std::lock_guard lk(m_);
      q_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  void run_one() {
    std::function<void()> f;
    {
      std::unique_lock lk(m_);
      cv_.wait(lk, [&] { return !q_.empty(); });
      f = std::move(q_.front());
      q_.pop_front();
    }
    f();
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> q_;
};

/// Runs one chunk: per item, status byte then the result or the error. A
/// result that cannot be sent (over max_message_size_mb) becomes that
/// task's fiber::error; if the chunk's results together cannot, each task's.
inline chunk_result_msg run_chunk(const chunk_view& c) {
  chunk_result_msg out{c.chunk_id, {}};
  writer w(buffer_cache::instance().take(c.args.size() + c.count));
  const target_info* t = registry::instance().find(c.target_id);
  reader in(c.args);
  auto fail_item = [&](std::size_t mark, std::string_view why) {
    w.buffer().resize(mark);
    w.write(wire_status::error);
    write_failure(w, why);
  };
  for (std::uint32_t i = 0; i < c.count; ++i) {
    auto mark = w.size();
    write_item_ok(w);
    try {
      if (!t) throw error("fiber: target " + std::to_string(c.target_id) + " is not registered in this worker");
      t->invoke(in, w);
    } catch (...) {
      w.buffer().resize(mark);
      write_item_current_exception(w);
    }
    if (!fits_in_frame(w.size() - mark)) fail_item(mark, oversize_message("a task's result", w.size() - mark));
  }
  if (!fits_in_frame(w.size())) {
    const auto why = oversize_message("the results of a chunk of " + std::to_string(c.count) + " tasks", w.size());
    w.buffer().clear();
    for (std::uint32_t i = 0; i < c.count; ++i) fail_item(w.size(), why);
  }
  out.results = w.release();
  return out;
}

/// The run's secret: from the environment (cluster jobs), else from its
/// file (jobs on the master's machine).
inline std::string read_secret(const worker_env& env) {
  if (!env.secret.empty()) return env.secret;
  std::string s;
  if (!env.secret_file.empty()) {
    std::ifstream in(env.secret_file);
    std::getline(in, s);
  }
  return s;
}

/// Where a worker on another host listens for its own services (a Queue it
/// creates): its address on the route to the master — the master's address
/// belongs to the master's host. "tls+tcp://10.0.0.1:4000" → "tls+tcp://10.0.0.7:0".
inline std::string own_listen_base(const std::string& master_url) {
  const auto host_begin = master_url.find("://") + 3;
  const auto colon = master_url.rfind(':');
  const std::string host = master_url.substr(host_begin, colon - host_begin);
  const bool bracketed = host.size() > 2 && host.front() == '[';
  const auto local = route_source(bracketed ? host.substr(1, host.size() - 2) : host, master_url.substr(colon + 1));
  return master_url.substr(0, host_begin) + (local.empty() ? host : local) + ":0";
}

/// Runs a Process's target on the main thread and exits with its code.
[[noreturn]] inline void run_process_target(const run_msg& r) {
  int code = 0;
  const target_info* t = registry::instance().find(r.target_id);
  try {
    if (!t) throw error("fiber: target not registered in this worker");
    reader in(r.args);
    writer out;
    t->invoke(in, out);
  } catch (...) {
    auto p = current_exception_payload();
    reader pr(p);
    auto type = pr.read<std::string>();
    auto msg = pr.read<std::string>();
    std::fprintf(stderr, "fiber[%s]: target %s threw %s: %s\n", runtime::instance().process_name().c_str(),
                 t ? std::string(t->name).c_str() : "?", type.c_str(), msg.c_str());
    code = 1;
  }
  worker_finish(code);
}

/// Runs the chunks of one `tasks` frame on the main thread; `owner` keeps
/// the bytes the chunks' arguments lie in. Each result leaves as soon as it
/// is ready, and the next chunk starts only once it is written: should that
/// chunk crash this worker, the master knows which one it was (the oldest it
/// holds) and reruns the others without counting it. The main thread writes
/// it itself when the link has nothing else queued (no hop to the runtime
/// thread and back); otherwise it is queued there and the next chunk waits
/// until it is written.
inline void run_tasks(const std::weak_ptr<peer_link>& weak, const direct_writer& direct,
                      const std::vector<chunk_view>& chunks) {
  static std::shared_ptr<blocking_result<>> previous; // main thread only
  for (auto& c : chunks) {
    if (previous) previous->wait();
    previous = nullptr;
    // The frame is its head and the results as they are (no copy).
    auto r = run_chunk(c);
    auto head = results_frame_head(r.chunk_id, r.results.size());
    if (direct.try_send(head, r.results)) {
      buffer_cache::instance().give(std::move(r.results));
      continue;
    }
    auto results = share_recycled(std::move(r.results));
    auto sent = std::make_shared<blocking_result<>>();
    previous = sent;
    asio::post(runtime::instance().executor(), [weak, sent, head = std::move(head), results]() mutable {
      if (auto l = weak.lock())
        l->send(std::move(head), shared_bytes{results, *results}, [sent] { sent->set(nullptr); });
      else sent->set(nullptr);
    });
  }
}

/// The worker's main thread and its master link. While idle, the main
/// thread borrows the link's read side and blocks on it: a task reaches it
/// from nng's poller directly (no hops through nng's callback thread and
/// the runtime thread), and tasks the master sent ahead are read without
/// waking any thread. Frames for others (remote objects) go to the runtime
/// thread, unless their handler takes them here (worker_extension::on_main:
/// a manager process capped at one thread). While a task runs, the runtime thread's heartbeat tick takes the
/// read side back (so heartbeats and other frames are read); the main
/// thread asks for it again once the task is done.
class worker_main {
public:
  static worker_main& instance() {
    static worker_main w;
    return w;
  }

  void set_link(std::shared_ptr<peer_link> l) {
    link_ = l;
    direct_ = l->direct();
    master_writer() = direct_;
  }

  /// Main thread, between work items: borrow the reader unless already asked.
  void want_reader() {
    if (asked_ || !reads_) return;
    asked_ = true;
    auto l = link_.lock();
    if (!l) return;
    asio::post(runtime::instance().executor(), [l, this] {
      l->lend_reader([this](lent_reader r) {
        if (reads_) loop_.push([this, r] { read_loop(r); });
        else r.give_back(); // a Process target runs: the runtime thread reads
      });
    });
  }

  /// One frame from the master, read by the main thread while it holds the
  /// read side (`reader`), or by the runtime thread (`reader` null): tasks
  /// run on the main thread (now, or queued), a Process's target runs for
  /// the process's lifetime (the runtime thread reads from then on), other
  /// frames (remote objects) are handled on the runtime thread, which reads
  /// from the first of them on.
  void on_frame(frame_kind k, std::span<const std::byte> body, message& raw, const lent_reader* reader) {
    switch (k) {
    case frame_kind::heartbeat: // for the link (runtime thread): a ping, or its period when it changed
      if (reader && body.size() >= sizeof(std::uint32_t) &&
          (heartbeat_has_ping(body) || !std::ranges::equal(body.first(sizeof(std::uint32_t)), delivered_period_))) {
        delivered_period_.assign(body.begin(), body.begin() + sizeof(std::uint32_t));
        if (auto l = link_.lock()) l->deliver(std::move(raw));
      } else if (reader) {
        buffer_cache::instance().give(std::move(raw));
      }
      return;
    case frame_kind::shutdown: worker_exit(0);
    case frame_kind::tasks: {
      auto chunks = decode_tasks_view(body); // the arguments are read where they arrived (no copy)
      if (reader) {
        run_tasks(link_, direct_, chunks);
        return buffer_cache::instance().give(std::move(raw));
      }
      auto owner = share_recycled(std::move(raw));
      return loop_.push([this, chunks = std::move(chunks), owner] { run_tasks(link_, direct_, chunks); });
    }
    case frame_kind::initialize: {
      auto msg = deserialize<run_msg>(body);
      if (reader) return run_initializer(msg);
      return loop_.push([this, msg = std::move(msg)] { run_initializer(msg); });
    }
    case frame_kind::run: {
      auto msg = deserialize<run_msg>(body);
      reads_ = false;
      if (!reader) return loop_.push([msg = std::move(msg)] { run_process_target(msg); });
      reader->give_back();
      run_process_target(msg);
    }
    default: break;
    }
    if (reader) {
      if (auto it = worker_extensions().find(std::uint8_t(k)); it != worker_extensions().end() && it->second.on_main)
        if (auto l = link_.lock(); l && it->second.on_main(l, body))
          return buffer_cache::instance().give(std::move(raw));
      if (auto l = link_.lock()) l->deliver(std::move(raw)); // to the runtime thread
      if (worker_extensions().contains(std::uint8_t(k))) {
        // A manager process: its frames are the runtime thread's, which keeps
        // the read side from now on (one hop to an object's actor, not two).
        // Given back after the delivery, which then comes first.
        reads_ = false;
        reader->give_back();
      }
    } else if (auto it = worker_extensions().find(std::uint8_t(k)); it != worker_extensions().end()) {
      if (auto l = link_.lock()) it->second.on_runtime(l, body);
    }
  }

  /// Any thread: `f` runs on the main thread, after the work queued before it.
  void post(std::function<void()> f) { loop_.push(std::move(f)); }

  [[noreturn]] void run() {
    for (;;) {
      want_reader();
      try { // a failure in one work item (out of memory, say) ends that item, not the worker
        loop_.run_one();
      } catch (const std::exception& e) {
        log(log_level::error, "worker: ", e.what());
      }
    }
  }

private:
  // Main thread, holding the read side: reads and runs frames until the
  // read side was taken back or the link failed.
  void read_loop(lent_reader r) {
    asked_ = false;
    delivered_period_.clear(); // the runtime thread may have read others meanwhile
    auto l = link_.lock();
    if (!l) return;
    for (;;) {
      message m;
      if (auto ec = r.recv(m)) {
        if (ec == asio::error::already_started) return; // taken back: ask again
        r.give_back(ec); // the link closes (the line saying why goes first: stream_state); exit follows
        return;
      }
      try { // as peer_link's own reads do (the bytes read count for liveness: stream_state)
        auto [k, body] = unframe(m);
        on_frame(k, body, m, &r);
      } catch (const std::exception& e) {
        log(log_level::warning, "dropping malformed frame from the master: ", e.what());
      }
    }
  }

  // Main thread: a Pool's initializer, before any task. Its outcome goes to
  // the master; a worker whose initializer threw exits once that is sent.
  void run_initializer(const run_msg& msg) {
    writer w; // the frame: kind, then the outcome as a results item
    w.write(static_cast<std::uint8_t>(frame_kind::initialized));
    bool ok = true;
    try {
      const target_info* t = registry::instance().find(msg.target_id);
      if (!t) throw error("fiber: initializer " + std::to_string(msg.target_id) + " is not registered in this worker");
      reader in(msg.args);
      writer ignored;
      t->invoke(in, ignored);
      write_item_ok(w);
    } catch (...) {
      write_item_current_exception(w);
      ok = false;
    }
    auto l = link_.lock();
    if (!l) return;
    auto f = w.release();
    if (ok) {
      if (!direct_.try_send(f))
        asio::post(runtime::instance().executor(), [l, f = std::move(f)]() mutable { l->send(std::move(f)); });
      return;
    }
    asio::post(runtime::instance().executor(), [l, f = std::move(f)]() mutable {
      l->send(std::move(f), [] { worker_exit(exit_initializer_failed); });
    });
  }

  worker_loop loop_;
  std::weak_ptr<peer_link> link_;
  direct_writer direct_;
  bool asked_ = false;                      // main thread only
  std::vector<std::byte> delivered_period_; // main thread: the master's period as last delivered
  std::atomic<bool> reads_{true};           // false once a Process target runs
};

/// Applies the configuration the master sent in its handshake (`cfg`),
/// but for TLS material when `master_url` is TLS (this process's own
/// holds). Runtime thread.
inline void apply_master_config(const std::string& master_url, const std::map<std::string, std::string>& cfg) {
  for (auto& [k, v] : cfg) {
    if (is_tls_url(master_url) && is_tls_key(k)) continue;
    try {
      set_config(k, v);
    } catch (const config_error&) {
    }
  }
}

[[noreturn]] inline void run_worker() {
  const auto& env = worker_environment();
  if (env.pdeathsig) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (env.reply_fd >= 0) ::fcntl(env.reply_fd, F_SETFD, FD_CLOEXEC); // a reply line (reply_line.hpp): ours alone
  const std::string url = env.master;
  const std::uint64_t id = env.worker_id;
  auto& rt = runtime::instance();
  rt.become_worker(env.name.empty() ? "worker" : env.name, read_secret(env), env.secret.empty());
  // Services this worker owns listen as its master does: ipc, or the same
  // scheme (tcp://, tls+tcp://) and host with an ephemeral port.
  rt.set_default_listen_base(url.starts_with("ipc://") ? "ipc://" : own_listen_base(url));
  if (!url.starts_with("ipc://")) libcrypto_api::get(); // frame MACs: read the library here, not on the runtime thread
  if (is_tls_url(url)) rt.prepare_tls_client();         // and TLS's context

  auto& main = worker_main::instance();
  // A target that calls std::exit(n) ends the job with n (as in Python's
  // multiprocessing). Registered after the runtime and the main loop, this
  // runs before their destructors, which would tear the runtime down under
  // its own threads (nng callbacks, the runtime thread): flush and leave at once.
  ::on_exit([](int status, void*) { worker_finish(status); }, nullptr);
  blocking_result<> connected;
  // The host's relay first, if the run has them (the `relay` key); when none
  // answers, this worker binds the relay's name and relays for the workers
  // after it (relay.hpp), and dials the master itself. A refusal
  // (handshake_error) is final.
  int elections = 3; // lost ones (another bound the name first): dial it again
  std::function<void(const std::string&)> dial = [&](const std::string& to) {
    rt.connect(to, role::worker, id,
               [&, to](std::exception_ptr e, std::shared_ptr<peer_link> l, std::map<std::string, std::string> cfg) {
                 if (e) {
                   try {
                     std::rethrow_exception(e);
                   } catch (const handshake_error& h) {
                     std::fprintf(stderr, "%s\n", h.what());
                     worker_exit(exit_refused);
                   } catch (const std::exception& x) {
                     if (to != url) {
                       if (become_host_relay(to, url, [] { worker_exit(exit_master_lost); })) return dial(url);
                       if (--elections > 0) return dial(to);
                       log(log_level::info, "relay ", to, " unreachable (", x.what(), "): dialling the master");
                       return dial(url);
                     }
                     std::fprintf(stderr, "fiber[%s]: %s\n", rt.process_name().c_str(), x.what());
                     worker_exit(exit_master_lost);
                   }
                 }
                 apply_master_config(url, cfg);
                 l->set_max_message_size(rt.transport().max_message_size); // the master's, just applied
                 main.set_link(l);
                 // Frames read on the runtime thread (the main thread is busy,
                 // or has not borrowed the read side yet).
                 l->start([&main](frame_kind k, std::span<const std::byte> body,
                                  message& raw) { main.on_frame(k, body, raw, nullptr); },
                          [](const std::string& reason) {
                            log(log_level::info, "master link lost (", reason, "): exiting");
                            worker_exit(exit_master_lost);
                          });
                 connected.set(nullptr);
               });
  };
  asio::post(rt.executor(), [&] { dial(env.relay.empty() ? url : env.relay); });
  connected.wait();
  main.run();
}

} // namespace fiber::detail
