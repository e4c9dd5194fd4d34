// SPDX-License-Identifier: BSL-1.0
// bench_fleet's emulated workers: a few generator processes, each holding many
// worker links that speak the real protocol (handshake, heartbeats, tasks,
// results) over real TCP, or (relay mode) one relay link carrying its workers'
// (relay_wire.hpp), and the backend that hands them the master's job specs.
#pragma once

#include <fiber/backend/detail/environment.hpp>
#include <fiber/detail/relay_wire.hpp>
#include <fiber/fiber.hpp>

#include <asio/posix/stream_descriptor.hpp>
#include <asio/read_until.hpp>
#include <asio/streambuf.hpp>
#include <asio/write.hpp>

#include <deque>
#include <random>
#include <spawn.h>
#include <sstream>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unordered_map>

extern char** environ;

namespace fleet {
namespace fd = fiber::detail;

// One line at a time to a pipe, without blocking the executor's thread.
class line_writer {
public:
  line_writer(asio::any_io_executor ex, int fd) : d_(std::move(ex), fd) {}
  void put(std::string line) {
    out_ += line;
    out_ += '\n';
    if (!busy_) flush();
  }
  asio::posix::stream_descriptor& descriptor() { return d_; }

private:
  void flush() {
    if (out_.empty()) return;
    busy_ = true;
    sending_ = std::move(out_);
    out_.clear();
    asio::async_write(d_, asio::buffer(sending_), [this](std::error_code ec, std::size_t) {
      busy_ = false;
      if (!ec) flush();
    });
  }
  asio::posix::stream_descriptor d_;
  std::string out_, sending_;
  bool busy_ = false;
};

// Calls `on_line` for each line read from `d` until end of file.
inline void read_lines(asio::posix::stream_descriptor& d, std::shared_ptr<asio::streambuf> buf,
                       std::function<void(const std::string&)> on_line, std::function<void()> on_eof) {
  asio::async_read_until(d, *buf, '\n', [&d, buf, on_line, on_eof](std::error_code ec, std::size_t n) {
    if (ec) return on_eof();
    std::string line(asio::buffers_begin(buf->data()), asio::buffers_begin(buf->data()) + std::ptrdiff_t(n) - 1);
    buf->consume(n);
    on_line(line);
    read_lines(d, buf, on_line, on_eof);
  });
}

// ---- generator side: one process, many emulated workers -------------------

/// Commands (stdin): `spawn ID NAME URL SECRET`, `cancel ID SIGNAL`,
/// `vanish N`, `drop-relay`; reports (stdout): `exit ID e|s CODE` (exited /
/// signalled). In relay mode the generator is its workers' host relay: one
/// link to the master, each worker joined through it (as relay.hpp's
/// relay_state joins workers that authenticated at it); `drop-relay` closes
/// that link as a relay's death would, and its workers report SIGKILL.
class generator {
public:
  generator(asio::io_context& io, std::size_t window, bool relay)
      : io_(io), window_(window), relay_mode_(relay), out_(io.get_executor(), 1) {}

  void command(const std::string& line) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    if (verb == "spawn") {
      auto w = std::make_shared<worker>();
      in >> w->id >> w->name >> w->url >> w->secret;
      workers_[w->id] = w;
      if (relay_mode_) return join(w);
      waiting_.push_back(w);
      pump();
    } else if (verb == "cancel") {
      std::uint64_t id = 0;
      int sig = 0;
      in >> id >> sig;
      end(id, "s " + std::to_string(sig), true);
    } else if (verb == "vanish") {
      std::size_t n = 0;
      in >> n;
      std::vector<std::uint64_t> up;
      for (auto& [id, w] : workers_)
        if (w->link || w->joined) up.push_back(id);
      std::shuffle(up.begin(), up.end(), rng_);
      for (std::size_t i = 0; i < n && i < up.size(); ++i) end(up[i], "s 9", true);
    } else if (verb == "drop-relay" && relay_) {
      relay_->close("relay killed");
    }
  }

  /// Closes every link (stdin ended: the master is gone).
  void stop() {
    for (auto& [id, w] : workers_)
      if (w->link) w->link->close("generator stopping");
    workers_.clear();
    if (relay_) relay_->close("generator stopping");
  }

private:
  struct worker {
    std::uint64_t id = 0;
    std::string name, url, secret;
    std::shared_ptr<fd::peer_link> link;
    std::chrono::milliseconds pause{2};
    bool ended = false, joined = false; // joined: through the relay link
  };

  // ---- relay mode ----

  void join(const std::shared_ptr<worker>& w) {
    if (relay_ && !relay_->closed()) return send_join(w);
    joining_.push_back(w);
    if (relay_dialing_) return;
    relay_dialing_ = true;
    auto r = std::make_shared<worker>(); // the relay's own dial: no worker id
    r->name = "relay-" + std::to_string(::getpid());
    r->url = w->url;
    r->secret = w->secret;
    dial(r);
  }

  void send_join(const std::shared_ptr<worker>& w) {
    w->joined = true;
    fd::peer_identity p{fd::role::worker, w->id, std::int64_t(10'000'000 + w->id), fd::host_name(), w->name, rng_()};
    relay_->send(fd::frame(fd::frame_kind::relay_join, fd::relay_join_msg{std::uint32_t(w->id), p}));
  }

  void relay_up(fd::stream st) {
    relay_dialing_ = false;
    relay_ = std::make_shared<fd::peer_link>(std::move(st), fd::peer_identity{});
    relay_->set_max_message_size(relay_->max_message_size() + fd::relay_overhead);
    std::weak_ptr<fd::peer_link> weak = relay_;
    relay_->start(
        [this, weak](fd::frame_kind k, std::span<const std::byte> body, fd::message&) {
          auto l = weak.lock();
          if (!l) return;
          fd::visit_relay_frame(
              k, body,
              [&](std::uint32_t slot, std::span<const std::byte> inner) {
                auto [ik, ibody] = fd::unframe(inner);
                on_frame(slot, ik, ibody,
                         [l, slot](std::vector<std::byte> f) { l->send(fd::relay_data_head(slot, f)); });
              },
              [](const fd::relay_join_msg&) {}, // the master sends none
              [&](const fd::relay_leave_msg& lv) {
                end(lv.slot, "e 70", false, false); // its link closed: it exits, master lost
              });
        },
        [this](const std::string&) {
          // The relay died: every worker behind it loses its link and exits.
          std::vector<std::uint64_t> ids;
          for (auto& [id, w] : workers_)
            if (w->joined) ids.push_back(id);
          for (auto id : ids) end(id, "s 9", false, false);
        });
    for (auto& w : std::exchange(joining_, {}))
      if (!w->ended) send_join(w);
  }

  // Dials while fewer than window_ handshakes are in flight.
  void pump() {
    while (dialing_ < window_ && !waiting_.empty()) {
      auto w = waiting_.front();
      waiting_.pop_front();
      if (!w->ended) dial(w);
    }
  }

  void dial(std::shared_ptr<worker> w) {
    ++dialing_;
    fd::transport_options opt;
    fd::async_connect(io_.get_executor(), w->url, opt, [this, w](std::error_code ec, fd::stream s) {
      if (ec) return retry(w);
      handshake(w, std::make_shared<fd::stream>(std::move(s)));
    });
  }

  void retry(const std::shared_ptr<worker>& w) {
    --dialing_;
    if (w->ended) return pump();
    // A full pending-handshake table closes the connection: try again later,
    // as runtime::dial does (growing, jittered pause).
    auto t = std::make_shared<asio::steady_timer>(io_);
    std::uniform_int_distribution<int> jitter(0, int(w->pause.count()));
    t->expires_after(w->pause + std::chrono::milliseconds(jitter(rng_)));
    w->pause = std::min(w->pause * 2, std::chrono::milliseconds(500));
    t->async_wait([this, t, w](std::error_code) {
      waiting_.push_back(w);
      pump();
    });
    pump();
  }

  // The client side of the handshake, with this emulated worker's own pid
  // and incarnation in its proof (each is a process to the master).
  void handshake(std::shared_ptr<worker> w, std::shared_ptr<fd::stream> s) {
    s->set_max_message_size(fd::max_handshake_reply);
    s->async_recv([this, w, s](std::error_code ec, fd::message m) {
      if (ec) return retry(w);
      fd::challenge_msg c;
      try {
        c = fd::decode_frame<fd::challenge_msg>(fd::frame_kind::challenge, m);
      } catch (const std::exception&) {
        return retry(w);
      }
      fd::handshake_identity me{w->secret, fd::build_id(), fd::registry::instance().hash(), w->name};
      fd::auth_msg a;
      a.nonce = fd::random_nonce();
      const bool relay = relay_mode_ && w->id == 0;
      a.role = std::uint8_t(relay ? fd::role::relay : fd::role::worker);
      a.worker_id = w->id;
      a.registry_hash = me.registry_hash;
      a.build_id = me.build_id;
      a.pid = std::int64_t(10'000'000 + w->id); // beyond any pid_max: never a real process's
      a.host = fd::host_name();
      a.name = w->name;
      a.incarnation = rng_();
      a.mac = fd::client_proof(w->secret, c.nonce, a, s->binding());
      s->async_send(fd::frame(fd::frame_kind::auth, a), [](std::error_code) {});
      fd::await_auth_ok(s, me, a, false, 256u << 20,
                        [this, w](std::exception_ptr e, fd::stream st, std::map<std::string, std::string> cfg) {
                          if (e) return retry(w);
                          --dialing_;
                          pump();
                          configure(cfg);
                          if (relay_mode_ && w->id == 0) return relay_up(std::move(st));
                          connected(w, std::move(st));
                        });
    });
  }

  void configure(const std::map<std::string, std::string>& cfg) {
    if (configured_) return; // the master's configuration, as a worker applies it
    for (auto& [k, v] : cfg) try {
        fiber::set_config(k, v);
      } catch (const fiber::config_error&) {
      }
    configured_ = true;
  }

  // A frame from the master to worker `id`; `send` sends its replies.
  template <class Send>
  void on_frame(std::uint64_t id, fd::frame_kind k, std::span<const std::byte> body, Send send) {
    if (k == fd::frame_kind::tasks) {
      for (auto& c : fd::decode_tasks_view(body)) {
        auto r = fd::run_chunk(c);
        auto f = fd::results_frame_head(r.chunk_id, r.results.size());
        f.insert(f.end(), r.results.begin(), r.results.end());
        send(std::move(f));
      }
    } else if (k == fd::frame_kind::initialize) {
      fiber::writer w;
      w.write(std::uint8_t(fd::frame_kind::initialized));
      fd::write_item_ok(w);
      send(w.release());
    } else if (k == fd::frame_kind::shutdown) {
      end(id, "e 0", false);
    }
  }

  void connected(const std::shared_ptr<worker>& w, fd::stream st) {
    if (w->ended) return;
    w->link = std::make_shared<fd::peer_link>(std::move(st), fd::peer_identity{});
    std::weak_ptr<fd::peer_link> weak = w->link;
    w->link->start(
        [this, weak, id = w->id](fd::frame_kind k, std::span<const std::byte> body, fd::message&) {
          auto l = weak.lock();
          if (!l) return;
          on_frame(id, k, body, [&l](std::vector<std::byte> f) { l->send(std::move(f)); });
        },
        [this, id = w->id](const std::string&) { end(id, "e 70", false); }); // master lost: exit_master_lost
  }

  // Worker `id` ends: its link closes without a goodbye (behind the relay:
  // the relay tells the master, unless `tell` is false: the master or the
  // relay's end closed it), its job reports `how`.
  void end(std::uint64_t id, const std::string& how, bool abrupt, bool tell = true) {
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    auto w = it->second;
    workers_.erase(it);
    w->ended = true;
    if (w->link) w->link->close(abrupt ? "killed" : "exiting");
    if (w->joined && tell && relay_ && !relay_->closed())
      relay_->send(fd::frame(fd::frame_kind::relay_leave,
                             fd::relay_leave_msg{std::uint32_t(id), abrupt ? "connection closed" : "exiting"}));
    out_.put("exit " + std::to_string(id) + " " + how);
  }

  asio::io_context& io_;
  std::size_t window_, dialing_ = 0;
  bool relay_mode_;
  std::shared_ptr<fd::peer_link> relay_;         // relay mode: the link to the master
  std::vector<std::shared_ptr<worker>> joining_; // waiting for it
  bool relay_dialing_ = false;
  line_writer out_;
  std::unordered_map<std::uint64_t, std::shared_ptr<worker>> workers_;
  std::deque<std::shared_ptr<worker>> waiting_;
  std::mt19937_64 rng_{std::random_device{}()};
  bool configured_ = false;
};

/// A generator process's main: serves commands until stdin ends.
inline int generator_main(std::size_t window, bool relay) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  asio::io_context io(1);
  generator g(io, window, relay);
  asio::posix::stream_descriptor in(io, 0);
  read_lines(
      in, std::make_shared<asio::streambuf>(), [&](const std::string& l) { g.command(l); },
      [&] {
        g.stop();
        io.stop();
      });
  io.run();
  return 0;
}

// ---- master side: the backend ---------------------------------------------

struct process {
  pid_t pid = -1;
  int to = -1, from = -1; // its stdin, its stdout
};

/// The generators, started before the Pool (not on the runtime thread).
struct fleet_state {
  std::vector<process> procs;
  asio::any_io_executor ex; // the runtime's, once the launcher exists
  std::vector<std::unique_ptr<line_writer>> to;
  std::vector<std::unique_ptr<asio::posix::stream_descriptor>> from;
  std::unordered_map<std::uint64_t, fiber::backend::exit_handler> exits;
  std::uint64_t vanished = 0;
};
inline fleet_state& state() {
  static fleet_state s;
  return s;
}

/// Starts `n` generators running `self --generator WINDOW RELAY`.
inline void start(std::size_t n, const std::string& self, std::size_t window, bool relay) {
  for (std::size_t i = 0; i < n; ++i) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::string w = std::to_string(window), r = relay ? "1" : "0";
    std::vector<char*> argv{const_cast<char*>(self.c_str()), const_cast<char*>("--generator"), w.data(), r.data(),
                            nullptr};
    process p;
    if (::posix_spawn(&p.pid, self.c_str(), &fa, nullptr, argv.data(), environ) != 0)
      throw std::runtime_error("posix_spawn " + self);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]);
    ::close(out[1]);
    p.to = in[1];
    p.from = out[0];
    state().procs.push_back(p);
  }
}

/// Closes generator `g`'s relay link, as its relay's death would (relay mode).
inline void drop_relay(std::size_t g) {
  asio::post(state().ex, [g] { state().to.at(g)->put("drop-relay"); });
}

/// Ends the generators (their links close) and reaps them.
inline void stop() {
  for (auto& p : state().procs) ::kill(p.pid, SIGKILL);
  for (auto& p : state().procs) ::waitpid(p.pid, nullptr, 0);
}

/// Asks the generators to drop `n` workers at once (links closed, no goodbye).
inline void vanish(std::size_t n) {
  asio::post(state().ex, [n] {
    auto& s = state();
    for (std::size_t g = 0; g < s.to.size(); ++g)
      s.to[g]->put("vanish " + std::to_string(n / s.to.size() + (g < n % s.to.size())));
  });
}

inline std::string env_value(const fiber::backend::job_spec& s, const std::string& key) {
  for (auto& [k, v] : s.env)
    if (k == key) return v;
  return {};
}

class launcher final : public fiber::backend::launcher {
public:
  explicit launcher(asio::any_io_executor ex) {
    auto& s = state();
    s.ex = ex;
    for (std::size_t g = 0; g < s.procs.size(); ++g) {
      s.to.push_back(std::make_unique<line_writer>(ex, s.procs[g].to));
      s.from.push_back(std::make_unique<asio::posix::stream_descriptor>(ex, s.procs[g].from));
      read_lines(*s.from.back(), std::make_shared<asio::streambuf>(), on_report, [] {});
    }
  }
  std::string_view name() const noexcept override { return "fleet"; }
  fiber::backend::launcher_traits traits() const noexcept override { return {false, false, false, 0}; }
  std::string listen_url() override { return "tcp://127.0.0.1:0"; }

  std::vector<fiber::backend::job> launch(const std::vector<fiber::backend::job_spec>& specs,
                                          std::vector<fiber::backend::exit_handler> on_exit) override {
    auto& s = state();
    std::vector<fiber::backend::job> jobs;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      const auto id = std::stoull(env_value(specs[i], "FIBER_INTERNAL_WORKER_ID"));
      const std::size_t g = id % s.to.size();
      s.exits[id] = std::move(on_exit[i]);
      s.to[g]->put("spawn " + std::to_string(id) + " " + specs[i].name + " " +
                   env_value(specs[i], "FIBER_INTERNAL_MASTER") + " " + env_value(specs[i], "FIBER_INTERNAL_SECRET"));
      jobs.push_back({std::to_string(id), -1, "generator-" + std::to_string(g)});
    }
    return jobs;
  }

  void cancel(const fiber::backend::job& j, int signal) override {
    auto& s = state();
    const auto id = std::stoull(j.id);
    if (s.exits.contains(id)) s.to[id % s.to.size()]->put("cancel " + j.id + " " + std::to_string(signal));
  }

private:
  static void on_report(const std::string& line) {
    std::istringstream in(line);
    std::string verb, how;
    std::uint64_t id = 0;
    int code = 0;
    in >> verb >> id >> how >> code;
    auto& s = state();
    auto it = s.exits.find(id);
    if (verb != "exit" || it == s.exits.end()) return;
    auto h = std::move(it->second);
    s.exits.erase(it);
    fiber::backend::job_exit e;
    e.how = how == "s" ? fiber::backend::job_exit::kind::signalled : fiber::backend::job_exit::kind::exited;
    e.code = code;
    h(e);
  }
};

/// The policy: `fiber::Pool<&f, fleet::backend>`.
struct backend {
  static std::shared_ptr<fiber::backend::launcher> make(const fiber::backend::launch_context& ctx) {
    return std::make_shared<launcher>(ctx.executor);
  }
};

} // namespace fleet
