// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/manager_relay.hpp
/// The master side of a RemoteManager: it supervises the manager processes
/// and is the relay service every Remote handle sends its calls to.

#include <fiber/backend/launcher.hpp>
#include <fiber/detail/call_table.hpp>
#include <fiber/detail/frame_limit.hpp>
#include <fiber/detail/inherited_link.hpp>
#include <fiber/detail/object_wire.hpp>
#include <fiber/detail/peer_link.hpp>
#include <fiber/detail/runtime_host.hpp>
#include <fiber/detail/protocol.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/service.hpp>
#include <fiber/detail/stats_sources.hpp>
#include <fiber/detail/supervisor.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>
#include <fiber/log.hpp>

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>
#include <algorithm>
#include <chrono>

namespace fiber::detail {

struct manager_settings {
  std::string name;
  unsigned processes = 1;
  unsigned threads = 0; // manager_options::threads
  fiber::resources res;
  std::chrono::milliseconds shutdown_grace{5000};
};

/// Launches and supervises the manager processes and relays calls to them.
/// Runtime thread only. A manager process that dies (link lost, heartbeat
/// missed, job ended) fails the calls waiting on it and every later call on
/// its objects with worker_lost; a replacement process is started so that
/// later make() calls still have `processes` processes to spread over.
class manager_relay : public service, public stats_source, public std::enable_shared_from_this<manager_relay> {
public:
  using make_done = std::function<void(std::exception_ptr, std::uint64_t object_id)>;

  manager_relay(manager_settings s, std::shared_ptr<backend::launcher> l) : s_(std::move(s)), launcher_(std::move(l)) {}

  /// Launch the processes; throws backend_error.
  void start() {
    sup_ = std::make_shared<supervisor>(runtime_host::instance(), launcher_, "fiber::RemoteManager " + s_.name,
                                        "manager processes", supervisor::forward_to(shared_from_this()));
    sup_->with_reply_lines();
    grow();
    stats_sources::instance().add(std::static_pointer_cast<const stats_source>(shared_from_this()));
  }

  /// Runtime thread. This RemoteManager's part of fiber::stats().
  void add_to(runtime_stats& out) const override {
    manager_stats m;
    m.name = s_.name;
    m.backend = std::string(launcher_->name());
    m.processes = s_.processes;
    m.objects = objects_.size();
    m.calls = calls_sent_ + calls_->sent_directly();
    auto waiting = calls_->waiting(); // process → calls waiting
    for (auto& [wid, n] : waiting) m.calls_waiting += n;
    m.calls_waiting += makes_.size();
    m.workers_lost = workers_lost_;
    m.workers_started = workers_started_;
    m.bytes_sent = ended_traffic_.bytes_sent;
    m.bytes_received = ended_traffic_.bytes_received;
    m.recent_losses = losses_.events();
    m.workers_by_state = no_workers_by_state();
    for (auto& [cid, c] : makes_) ++waiting[c.proc];
    for (auto& [wid, p] : procs_) {
      worker_stats w{p.name,
                     p.link ? p.link->peer().host : std::string(),
                     worker_state::idle,
                     p.calls + calls_->sent_directly(wid),
                     waiting[wid],
                     p.objects};
      if (p.link) {
        add_link_traffic(w, p.link->traffic());
        m.bytes_sent += w.bytes_sent;
        m.bytes_received += w.bytes_received;
        ++m.workers_by_host[w.host];
      }
      if (p.dead || p.exited) w.state = worker_state::lost;
      else if (!p.link) w.state = worker_state::starting;
      else if (w.tasks_held) w.state = worker_state::busy;
      ++m.workers_by_state[w.state];
      m.workers.push_back(std::move(w));
    }
    out.managers.push_back(std::move(m));
  }

  /// Construct an object (ctor `ctor`, serialized `args`) in the process
  /// holding the fewest objects; `done` gets its id or the error.
  void make(std::uint64_t ctor, std::vector<std::byte> args, make_done done) {
    if (shut_) return done(std::make_exception_ptr(error("fiber::RemoteManager " + s_.name + ": shut down")), 0);
    if (fatal_) return done(fatal_, 0);
    if (!fits_in_frame(args.size()))
      return done(
          std::make_exception_ptr(error(oversize_message("a remote object's constructor arguments", args.size()))), 0);
    proc* best = nullptr;
    std::uint64_t best_id = 0;
    for (auto& [wid, p] : procs_) {
      if (p.dead) continue;
      if (!best || p.objects < best->objects) {
        best = &p;
        best_id = wid;
      }
    }
    if (!best)
      return done(
          std::make_exception_ptr(worker_lost("fiber::RemoteManager " + s_.name + ": no manager process is running")),
          0);
    auto obj = next_object_++;
    auto cid = calls_->next_id();
    objects_[obj] = object_rec{best_id, false, {}};
    ++best->objects;
    ++best->calls;
    ++calls_sent_;
    object_msg m{object_op::make, cid, obj, ctor, std::move(args)};
    auto f = frame(frame_kind::object, m);
    makes_[cid] = make_rec{std::move(done), best_id, std::move(m)};
    send(*best, std::move(f));
  }

  void handle(std::uint64_t /*peer*/, std::uint32_t op, std::span<const std::byte> payload, reply_fn reply) override {
    reader r(payload);
    auto obj = r.read<std::uint64_t>();
    if (op == relay_op::destroy) {
      destroy(obj);
      return reply(wire_status::ok, {});
    }
    if (op != relay_op::call)
      return reply(wire_status::error, failure_payload("fiber::Remote: unknown operation " + std::to_string(op)));
    auto fn = r.read<std::uint64_t>();
    auto it = objects_.find(obj);
    if (it == objects_.end())
      return reply(wire_status::error,
                   failure_payload("fiber::Remote: object " + std::to_string(obj) + " of RemoteManager " + s_.name +
                                   " does not exist (its last owning handle was destroyed, or the manager shut down)"));
    if (it->second.lost) return reply(wire_status::worker_lost, failure_payload(it->second.why));
    auto pit = procs_.find(it->second.proc);
    if (pit == procs_.end())
      return reply(wire_status::worker_lost, failure_payload("fiber::Remote: manager process gone"));
    auto cid = calls_->next_id();
    auto rest = r.read_span(r.remaining());
    calls_->add(cid, {std::move(reply), it->second.proc});
    ++pit->second.calls;
    ++calls_sent_;
    send(pit->second, frame(frame_kind::object, object_msg{object_op::call, cid, obj, fn, {rest.begin(), rest.end()}}));
  }

  /// Stop every manager process: objects are destroyed there (their
  /// destructors run), then the processes exit; after `shutdown_grace` the
  /// rest are killed. Waiting calls fail with fiber::error. `done` runs when
  /// every job has ended.
  void stop_processes(std::function<void()> done) {
    on_all_exited_ = std::move(done);
    if (!shut_) {
      shut_ = true;
      sup_->close();
      auto why = "fiber::RemoteManager " + s_.name + ": shut down";
      objects_.clear();
      for (auto& c : calls_->take_all()) c.reply(wire_status::error, failure_payload(why));
      for (auto& [cid, m] : std::exchange(makes_, {})) m.done(std::make_exception_ptr(error(why)), 0);
      for (auto& [wid, p] : procs_) {
        if (p.link && !p.dead) p.link->send(frame(frame_kind::object, object_msg{object_op::quit, 0, 0, 0, {}}));
        else sup_->cancel(wid, 9);
      }
      grace_ = std::make_unique<asio::steady_timer>(runtime::instance().executor(), s_.shutdown_grace);
      grace_->async_wait([weak = weak_from_this()](std::error_code ec) {
        auto s = weak.lock();
        if (ec || !s) return;
        for (auto& [wid, p] : s->procs_) {
          log(log_level::warning, p.name, ": did not exit within the shutdown grace period; killing it");
          s->sup_->cancel(wid, 9);
        }
      });
    }
    maybe_finish();
  }

  std::vector<std::int64_t> pids() const {
    std::vector<std::int64_t> out;
    for (auto& [wid, p] : procs_)
      if (p.link && !p.dead) out.push_back(sup_->pid(wid, p.link.get()));
    return out;
  }

  std::size_t object_count() const { return objects_.size(); }

  /// Its calls and routes: handles in this process send through it
  /// (call_table::try_call). Any thread.
  const std::shared_ptr<call_table>& direct_calls() const noexcept { return calls_; }

private:
  friend class supervisor; // supervisor::forward_to calls on_connect, on_exit, on_refused
  struct proc {
    std::string name;
    std::shared_ptr<worker_link> link;
    stream line_stream;                         // its reply line's connection, once it has one
    std::shared_ptr<reply_line> line;           // its reply line, once lent; null: none
    std::vector<std::vector<std::byte>> queued; // frames sent before it connected
    std::size_t objects = 0;
    std::uint64_t calls = 0; // calls and constructions sent to it (fiber::stats())
    bool dead = false;       // lost: takes no new objects
    bool exited = false;     // its job ended
  };
  struct object_rec {
    std::uint64_t proc = 0;
    bool lost = false;
    std::string why;
  };
  struct make_rec {
    make_done done;
    std::uint64_t proc = 0;
    object_msg msg;
  };

  void send(proc& p, std::vector<std::byte> f) {
    if (p.link) p.link->send(std::move(f));
    else p.queued.push_back(std::move(f));
  }

  void grow() {
    unsigned active = 0;
    for (auto& [wid, p] : procs_) active += p.dead ? 0 : 1;
    if (active >= s_.processes || shut_ || fatal_) return;
    std::vector<std::string> names;
    for (unsigned i = active; i < s_.processes; ++i) names.push_back(s_.name + "-m" + std::to_string(next_index_++));
    sup_->reserve(names.size());
    auto ids = sup_->launch(names, s_.res);
    for (std::size_t i = 0; i < ids.size(); ++i) procs_[ids[i]].name = names[i];
    workers_started_ += ids.size();
  }

  void on_refused(const std::string& reason) { fail_fatal(std::make_exception_ptr(handshake_error(reason)), reason); }

  void on_connect(std::uint64_t wid, std::shared_ptr<worker_link> l) {
    auto it = procs_.find(wid);
    if (it == procs_.end()) return l->send(frame(frame_kind::shutdown));
    auto& p = it->second;
    p.link = l;
    std::weak_ptr<manager_relay> weak = shared_from_this();
    auto& rt = runtime::instance();
    if (const int fd = sup_->take_reply_line(wid); fd >= 0) {
      try {
        p.line_stream = socket_stream(rt.executor(), adopt_socket(rt.executor(), fd), rt.transport());
        lend_line(p, wid);
      } catch (const std::exception& e) {
        log(log_level::warning, p.name, ": no reply line (", e.what(), ")");
      }
    } else if (l->direct() && !l->is_ipc()) { // it dials one (object_host)
      rt.expect_reply_line(wid, [weak, wid](const peer_identity& peer, stream& st) {
        auto s = weak.lock();
        return s && s->on_line_dialled(wid, peer, st);
      });
    }
    l->start(
        [weak](frame_kind k, std::span<const std::byte> body, message&) {
          if (auto s = weak.lock(); s && k == frame_kind::object_reply) s->on_reply(body);
        },
        [weak, wid](const std::string& reason) {
          if (auto s = weak.lock()) s->on_link_lost(wid, reason);
        });
    if (shut_) {
      l->send(frame(frame_kind::object, object_msg{object_op::quit, 0, 0, 0, {}}));
      return;
    }
    if (s_.threads) l->send(frame(frame_kind::object, object_msg{object_op::threads, 0, 0, s_.threads, {}}));
    for (auto& f : p.queued) l->send(std::move(f));
    p.queued.clear();
  }

  void on_reply(std::span<const std::byte> body) {
    auto r = deserialize<reply_msg>(body);
    if (auto c = calls_->take(r.request_id)) return c->reply(r.status, std::move(r.payload));
    if (auto it = makes_.find(r.request_id); it != makes_.end()) {
      auto m = std::move(it->second);
      makes_.erase(it);
      if (r.status == wire_status::ok) {
        if (auto p = procs_.find(m.proc); p != procs_.end() && p->second.link && !p->second.dead)
          calls_->route(m.msg.object_id, m.proc, p->second.link, p->second.line);
        return m.done(nullptr, m.msg.object_id);
      }
      forget_object(m.msg.object_id);
      m.done(failure_of(r.status, r.payload), 0);
    }
  }

  void forget_object(std::uint64_t obj) {
    calls_->unroute(obj);
    auto it = objects_.find(obj);
    if (it == objects_.end()) return;
    if (auto p = procs_.find(it->second.proc); p != procs_.end() && !it->second.lost && p->second.objects > 0)
      --p->second.objects;
    objects_.erase(it);
  }

  void destroy(std::uint64_t obj) {
    auto it = objects_.find(obj);
    if (it == objects_.end()) return;
    auto wid = it->second.proc;
    bool lost = it->second.lost;
    forget_object(obj);
    if (lost) return;
    if (auto p = procs_.find(wid); p != procs_.end() && !p->second.dead)
      send(p->second, frame(frame_kind::object, object_msg{object_op::destroy, 0, obj, 0, {}}));
  }

  void on_link_lost(std::uint64_t wid, const std::string& reason) {
    auto it = procs_.find(wid);
    if (it == procs_.end()) return;
    sup_->link_lost(wid, reason);
    if (!it->second.exited) {
      if (!shut_) log(log_level::warning, it->second.name, ": ", reason, "; its objects are lost");
      sup_->cancel(wid, 9); // a hung process must not come back
    }
    lose(wid, reason);
    replace();
  }

  // A line that authenticated for `wid`: taken if `wid` is live, connected
  // and the same process (pid, host, incarnation) as its link. It is used
  // once its first frame (a reply to call 0) says the process writes on it.
  bool on_line_dialled(std::uint64_t wid, const peer_identity& peer, stream& st) {
    auto it = procs_.find(wid);
    if (it == procs_.end() || it->second.dead || !it->second.link || it->second.line_stream.is_open()) return false;
    const auto& linked = it->second.link->peer();
    if (peer.pid != linked.pid || peer.host != linked.host || peer.incarnation != linked.incarnation) return false;
    it->second.line_stream = std::move(st);
    it->second.line_stream.async_recv([weak = weak_from_this(), wid](std::error_code ec, message m) {
      if (auto s = weak.lock()) s->on_line_ready(wid, ec, m);
    });
    return true;
  }

  void on_line_ready(std::uint64_t wid, std::error_code ec, const message& m) {
    auto it = procs_.find(wid);
    if (it == procs_.end() || it->second.dead) return;
    auto& p = it->second;
    try {
      if (ec) throw std::system_error(ec);
      if (decode_frame<reply_msg>(frame_kind::object_reply, m).request_id != 0)
        throw serialization_error("a reply before the line said it is ready");
      lend_line(p, wid);
    } catch (const std::exception& e) { // its replies stay on the link
      log(log_level::warning, p.name, ": its reply line failed before use (", e.what(), ")");
      p.line_stream.close();
    }
  }

  // Lends the line's read side; once it is lent, calls may be answered there.
  void lend_line(proc& p, std::uint64_t wid) {
    p.line_stream.lend_reader([weak = weak_from_this(), wid](lent_reader r) {
      if (auto s = weak.lock()) s->on_line_lent(wid, std::move(r));
    });
  }

  void on_line_lent(std::uint64_t wid, lent_reader r) {
    auto it = procs_.find(wid);
    if (it == procs_.end() || it->second.dead) return;
    auto& p = it->second;
    try {
      p.line = std::make_shared<reply_line>(
          std::move(r),
          [calls = std::weak_ptr<call_table>(calls_)](std::uint64_t id, wire_status st, std::vector<std::byte> b) {
            if (auto t = calls.lock())
              if (auto c = t->take(id)) c->reply(st, std::move(b));
          },
          [weak = weak_from_this(), wid](const std::string& why) { // on the reading thread
            asio::post(runtime::instance().executor(), [weak, wid, why] {
              if (auto s = weak.lock()) s->on_line_broken(wid, why);
            });
          });
    } catch (const std::exception& e) {
      return log(log_level::warning, p.name, ": no reply line (", e.what(), ")");
    }
    calls_->set_line(wid, p.line);
  }

  // Its reply line failed: replies may be lost on it, so the process is.
  void on_line_broken(std::uint64_t wid, const std::string& why) {
    auto it = procs_.find(wid);
    if (it == procs_.end() || it->second.dead || !it->second.link) return;
    it->second.link->close("its reply line failed (" + why + ")");
  }

  // Start replacements for lost processes now (not when their exit is
  // reported), so that make() always finds a process to queue on.
  void replace() {
    if (shut_ || fatal_) return;
    try {
      grow();
    } catch (const std::exception& e) {
      fail_fatal(std::current_exception(), e.what());
    }
  }

  void on_exit(std::uint64_t wid, const backend::job_exit& ex) {
    auto it = procs_.find(wid);
    if (it == procs_.end()) return;
    auto& p = it->second;
    p.exited = true;
    bool never_connected = !p.link;
    if (p.link) {
      p.link->close("job ended");
      const auto t = p.link->traffic();
      ended_traffic_.bytes_sent += t.bytes_sent;
      ended_traffic_.bytes_received += t.bytes_received;
    }
    lose(wid, "exited with code " + std::to_string(ex.exitcode()));
    // Objects made on a process that never connected were never constructed:
    // make them again elsewhere.
    std::vector<make_rec> redo;
    if (never_connected)
      for (auto m = makes_.begin(); m != makes_.end();) {
        if (m->second.proc == wid) {
          forget_object(m->second.msg.object_id);
          redo.push_back(std::move(m->second));
          m = makes_.erase(m);
        } else {
          ++m;
        }
      }
    procs_.erase(wid);
    if (!shut_ && sup_->start_budget_exhausted(s_.processes))
      fail_fatal(sup_->start_failure(), "manager processes keep failing to start");
    replace();
    for (auto& m : redo) make(m.msg.fn_id, std::move(m.msg.args), std::move(m.done));
    maybe_finish();
  }

  // A process is gone (or going): what waits on it fails, its objects are lost.
  void lose(std::uint64_t wid, const std::string& reason) {
    auto it = procs_.find(wid);
    if (it == procs_.end()) return;
    auto& p = it->second;
    bool connected = p.link != nullptr;
    if (p.dead) return;
    p.dead = true;
    runtime::instance().forget_reply_line(wid);
    if (!shut_) {
      ++workers_lost_;
      losses_.add(p.name, connected ? p.link->peer().host : std::string(), reason, p.objects);
    }
    if (!connected) return; // makes queued on it are redone by on_exit
    auto pid = sup_->pid(wid, p.link.get());
    auto why = "fiber::RemoteManager " + s_.name + ": manager process " + p.name + " (pid " + std::to_string(pid) +
               ") was lost (" + reason + "); the objects it held are gone";
    calls_->unroute_proc(wid); // before the calls it holds are taken: none is added after
    for (auto& c : calls_->take_of(wid)) c.reply(wire_status::worker_lost, failure_payload(why));
    for (auto m = makes_.begin(); m != makes_.end();) {
      if (m->second.proc == wid) {
        auto rec = std::move(m->second);
        m = makes_.erase(m);
        objects_.erase(rec.msg.object_id);
        rec.done(std::make_exception_ptr(worker_lost(why)), 0);
      } else {
        ++m;
      }
    }
    for (auto& [id, o] : objects_)
      if (o.proc == wid && !o.lost) {
        o.lost = true;
        o.why = why;
      }
  }

  void fail_fatal(std::exception_ptr e, const std::string& why) {
    if (fatal_) return;
    fatal_ = e;
    log(log_level::error, "fiber::RemoteManager ", s_.name, ": ", why);
    for (auto m = makes_.begin(); m != makes_.end();) {
      auto wid = m->second.proc;
      auto p = procs_.find(wid);
      if (p == procs_.end() || !p->second.link) { // not constructed: cannot be redone now
        auto rec = std::move(m->second);
        m = makes_.erase(m);
        forget_object(rec.msg.object_id);
        rec.done(e, 0);
      } else {
        ++m;
      }
    }
    for (auto& [wid, p] : procs_)
      if (!p.link) sup_->cancel(wid, 9);
  }

  void maybe_finish() {
    if (shut_ && procs_.empty() && on_all_exited_) {
      grace_.reset();
      std::exchange(on_all_exited_, nullptr)();
    }
  }

  manager_settings s_;
  std::shared_ptr<backend::launcher> launcher_;
  std::shared_ptr<supervisor> sup_;
  std::map<std::uint64_t, proc> procs_; // worker id → process, in launch order
  std::unordered_map<std::uint64_t, object_rec> objects_;
  std::shared_ptr<call_table> calls_ = std::make_shared<call_table>(runtime::instance().executor());
  std::unordered_map<std::uint64_t, make_rec> makes_;
  std::uint64_t next_object_ = 1;
  std::uint64_t calls_sent_ = 0, workers_started_ = 0, workers_lost_ = 0; // fiber::stats()
  link_traffic ended_traffic_;                                            // bytes of processes gone
  loss_log losses_;
  unsigned next_index_ = 1;
  std::exception_ptr fatal_;
  bool shut_ = false;
  std::unique_ptr<asio::steady_timer> grace_;
  std::function<void()> on_all_exited_;
};

} // namespace fiber::detail
