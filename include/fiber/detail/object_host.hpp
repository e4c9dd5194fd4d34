// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/object_host.hpp
/// The objects of one manager process: `frame_kind::object` frames from the
/// master construct, call and destroy them on their actors, and each call is
/// answered with an `object_reply`. Capped at one thread, the process runs
/// them on its main thread, which reads the link itself.

#include <fiber/detail/actor.hpp>
#include <fiber/detail/frame_limit.hpp>
#include <fiber/detail/object_registry.hpp>
#include <fiber/detail/object_wire.hpp>
#include <fiber/detail/peer_link.hpp>
#include <fiber/detail/protocol.hpp>
#include <fiber/detail/reply_line.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/detail/worker.hpp>
#include <fiber/error.hpp>
#include <fiber/serialize.hpp>

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

namespace fiber::detail {

/// The objects of one manager process. Frames arrive on the runtime thread
/// (the object table is touched there only); constructors, methods and
/// destructors run on the object's actor, never on the runtime thread.
/// Serial (manager_options::threads = 1): frames are handled, and
/// constructors, methods and destructors run, on the worker's main thread
/// (the table is touched there only), as it reads them: no wake of another
/// thread between a call's arrival and its method.
class object_host {
public:
  static object_host& instance() {
    static auto* h = new object_host; // never destroyed: actors may outlive static destruction
    return *h;
  }

  /// Runtime thread: one `frame_kind::object` frame from the master.
  void on_frame(const std::shared_ptr<peer_link>& master, std::span<const std::byte> body) {
    if (link_.link.lock() != master) {
      if (link_.link.expired()) dial_reply_line(*master);
      link_ = reply_to{master, master->direct()};
    }
    auto msg = deserialize<object_msg>(body);
    switch (msg.op) {
    case object_op::make: return make(std::move(msg));
    case object_op::call:
    case object_op::call_aside: return call(std::move(msg));
    case object_op::destroy: return destroy(msg.object_id);
    case object_op::quit: return quit();
    case object_op::threads:
      if (msg.fn_id == 1) serial_ = true; // before any object: every later frame goes to the main thread
      else actor_pool::instance().limit(std::size_t(msg.fn_id));
      return;
    default: log(log_level::warning, "object host: unknown operation ", int(msg.op));
    }
  }

  /// A process that did not inherit a reply line and reaches its master
  /// directly over TCP dials it once more for one (role::reply_line); until
  /// it is connected, and if that fails, replies go on the link. Any thread.
  static void dial_reply_line(const peer_link& master) {
    const auto& env = worker_environment();
    if (env.reply_fd >= 0 || !env.relay.empty() || master.is_ipc() || !master.direct()) return;
    auto& rt = runtime::instance();
    asio::post(rt.executor(), [&rt, url = env.master, id = env.worker_id] {
      rt.connect(url, role::reply_line, id,
                 [](std::exception_ptr e, std::shared_ptr<peer_link> l, std::map<std::string, std::string>) {
                   try {
                     if (e) std::rethrow_exception(e);
                     reply_line_writer::instance().adopt(std::move(l));
                   } catch (const std::exception& x) {
                     log(log_level::info, "no reply line (", x.what(), "): replies go on the link");
                   }
                 });
    });
  }

  /// Serial: runs on the worker's main thread (as it reads the frames).
  bool serial() const noexcept { return serial_; }

private:
  struct hosted {
    std::uint64_t type_id = 0;
    std::shared_ptr<void> obj; // touched by actor tasks only
    std::shared_ptr<actor> act = std::make_shared<actor>();
  };

  /// Where replies go: the master's link, and its direct writer.
  struct reply_to {
    std::weak_ptr<peer_link> link;
    direct_writer direct;
  };

  // Any thread: the frame is built here and sent from the runtime thread,
  // where replies that pile up leave together. `direct`: an actor thread
  // with no more calls queued writes it itself if the link has nothing
  // queued either (no hop to the runtime thread and back, as a Pool worker
  // sends its results) — never the runtime thread, which must not block on
  // a full socket. `aside`: the call asked for its reply on the reply
  // line, which any thread but the runtime thread writes.
  static void reply(const reply_to& to, std::uint64_t call_id, wire_status status, std::vector<std::byte> payload,
                    bool direct = false, bool aside = false) {
    if (call_id == 0) return;
    if (!fits_in_frame(payload.size())) { // the call fails, not the link
      payload = failure_payload(oversize_message("a remote object's reply", payload.size()));
      status = wire_status::error;
    }
    auto f = frame(frame_kind::object_reply, reply_msg{call_id, status, std::move(payload)});
    auto& rt = runtime::instance();
    if (aside && !rt.on_runtime_thread() && reply_line_writer::instance().send(f)) return;
    if (direct && !rt.on_runtime_thread() && to.direct.try_send(f)) return;
    asio::post(rt.executor(), [link = to.link, f = std::move(f)]() mutable {
      if (auto l = link.lock()) l->send(std::move(f));
    });
  }

  void make(object_msg msg) {
    auto e = object_registry::instance().find_ctor(msg.fn_id);
    if (!e)
      return reply(link_, msg.call_id, wire_status::error,
                   failure_payload("fiber::RemoteManager::make: constructor not registered in the manager process"));
    if (objects_.count(msg.object_id))
      return reply(link_, msg.call_id, wire_status::error,
                   failure_payload("fiber::RemoteManager::make: duplicate object id"));
    auto h = std::make_shared<hosted>();
    h->type_id = e->type_id;
    objects_[msg.object_id] = h;
    ++live_;
    const auto call_id = msg.call_id, object_id = msg.object_id;
    try {
      post_make(h, *e, std::move(msg));
    } catch (const error& x) { // no thread to run it
      objects_.erase(object_id);
      release();
      reply(link_, call_id, status_of(x), failure_payload(x.what()));
    }
  }

  // Runs `f` on h's actor, or now when serial (on the main thread).
  void run(const std::shared_ptr<hosted>& h, std::function<void()> f) {
    if (serial_) return f();
    h->act->post(std::move(f));
  }

  void post_make(const std::shared_ptr<hosted>& h, const ctor_entry& e, object_msg msg) {
    run(h, [this, h, e, link = link_, msg = std::move(msg)] {
      try {
        reader in(msg.args);
        h->obj = e.construct(in);
        reply(link, msg.call_id, wire_status::ok, {});
      } catch (...) {
        reply(link, msg.call_id, wire_status::remote_error, current_exception_payload());
        // The master forgets the object; so do we (where the table is touched).
        auto forget = [this, id = msg.object_id, h] {
          if (auto it = objects_.find(id); it != objects_.end() && it->second == h) objects_.erase(it);
        };
        if (serial_) forget();
        else asio::post(runtime::instance().executor(), forget);
        release();
      }
    });
  }

  void call(object_msg msg) {
    auto it = objects_.find(msg.object_id);
    if (it == objects_.end())
      return reply(link_, msg.call_id, wire_status::error,
                   failure_payload("fiber::Remote: object " + std::to_string(msg.object_id) +
                                   " does not exist in its manager process"));
    auto h = it->second;
    auto m = object_registry::instance().find_method(msg.fn_id);
    if (!m || m->type_id != h->type_id)
      return reply(link_, msg.call_id, wire_status::error,
                   failure_payload("fiber::Remote: method not registered for this object's type "
                                   "(a handle deserialized as Remote of another type?)"));
    const auto call_id = msg.call_id;
    try {
      post_call(h, *m, std::move(msg));
    } catch (const error& x) { // no thread to run it
      reply(link_, call_id, status_of(x), failure_payload(x.what()));
    }
  }

  void post_call(const std::shared_ptr<hosted>& h, const method_entry& m, object_msg msg) {
    run(h, [h, m, link = link_, msg = std::move(msg)] {
      const bool aside = msg.op == object_op::call_aside;
      if (!h->obj)
        return reply(link, msg.call_id, wire_status::error, failure_payload("fiber::Remote: the object was destroyed"),
                     false, aside);
      writer out;
      try {
        reader in(msg.args);
        m.invoke(h->obj.get(), in, out);
      } catch (...) {
        return reply(link, msg.call_id, wire_status::remote_error, current_exception_payload(), false, aside);
      }
      reply(link, msg.call_id, wire_status::ok, out.release(), h->act->nothing_queued(), aside);
    });
  }

  void destroy(std::uint64_t id) {
    auto it = objects_.find(id);
    if (it == objects_.end()) return;
    auto h = std::move(it->second);
    objects_.erase(it);
    run(h, [this, h] {
      bool had = h->obj != nullptr;
      h->obj.reset(); // T's destructor, on the actor
      if (had) release();
    });
  }

  // The manager is shutting down: destroy every object (after the calls
  // already queued on it), then exit.
  void quit() {
    quitting_ = true;
    auto objs = std::move(objects_);
    objects_.clear();
    for (auto& kv : objs)
      run(kv.second, [this, h = kv.second] {
        bool had = h->obj != nullptr;
        h->obj.reset();
        if (had) release();
      });
    if (live_ == 0) exit_once();
  }

  void release() {
    if (--live_ == 0 && quitting_) exit_once();
  }

  void exit_once() {
    if (!exiting_.exchange(true)) worker_exit(0);
  }

  reply_to link_;                                                      // runtime thread
  std::unordered_map<std::uint64_t, std::shared_ptr<hosted>> objects_; // runtime thread
  std::atomic<std::size_t> live_{0}; // objects constructed or being constructed, not yet destroyed
  std::atomic<bool> quitting_{false}, exiting_{false};
  std::atomic<bool> serial_{false}; // set once, by the first frame
};

// The runtime thread read the frame: handled there, or, serial, on the main thread.
inline void object_frame(const std::shared_ptr<peer_link>& master, std::span<const std::byte> body) {
  auto& host = object_host::instance();
  if (!host.serial()) return host.on_frame(master, body);
  worker_main::instance().post([weak = std::weak_ptr<peer_link>(master),
                                bytes = std::vector<std::byte>(body.begin(), body.end())] {
    if (auto l = weak.lock()) object_host::instance().on_frame(l, bytes);
  });
}

// The main thread read the frame: handled there when serial, or when it is
// the frame that makes the process serial (the relay's first).
inline bool object_frame_inline(const std::shared_ptr<peer_link>& master, std::span<const std::byte> body) {
  auto& host = object_host::instance();
  if (!host.serial()) {
    auto msg = deserialize<object_msg>(body);
    if (msg.op != object_op::threads || msg.fn_id != 1) return false;
  }
  host.on_frame(master, body);
  return true;
}

/// Every binary that includes this header can be a manager process.
inline const bool object_host_registered = add_worker_extension(frame_kind::object,
                                                                {&object_frame, &object_frame_inline});

} // namespace fiber::detail
