// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file wait.hpp
/// fiber::wait — multiprocessing.connection.wait: block until one of several
/// Connections or Queues is readable or one of several Processes has ended.
///
/// ```cpp
/// auto [a, b] = fiber::Pipe<int>();
/// fiber::Process p{fiber::target<&work>, std::move(b)};
/// p.start();
/// for (auto& ready : fiber::wait({a, p}, std::chrono::seconds(5)))
///   if (ready == a) std::cout << a.recv() << '\n';
///   else p.join();
/// ```

#include <fiber/detail/runtime.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace fiber {

namespace detail {
/// What fiber::wait can watch: `fiber_watch(w, ready)` calls `ready` once
/// `w` is ready (possibly at once, possibly on fiber's runtime thread) and
/// returns a function that withdraws the watch; `fiber_probe(w, done)` calls
/// `done` with whether `w` is ready now (possibly on the runtime thread).
template <class W>
concept watchable = requires(W& w, std::function<void()> ready, std::function<void(bool)> done) {
  { fiber_watch(w, std::move(ready)) } -> std::convertible_to<std::function<void()>>;
  fiber_probe(w, std::move(done));
};
} // namespace detail

/// Something fiber::wait waits on: a `Connection<T>` end (ready when recv()
/// would not block: an item waits, or the other end is gone), a `Queue<T>`
/// (ready when get() would not block) or a `Process` (ready once it has
/// ended). Made implicitly from any of them; compares by the identity of
/// the object it names, which must outlive it. Copyable.
class waitable {
public:
  /// Names `w` (a Connection end, a Queue or a Process), which must outlive this waitable.
  template <class W>
    requires detail::watchable<W> waitable(
        W& w) // NOLINT(google-explicit-constructor): implicit, as fiber::wait({a, p}) needs
        : id_(&w),
          watch_([&w](std::function<void()> ready) { return fiber_watch(w, std::move(ready)); }),
          probe_([&w](std::function<void(bool)> done) { fiber_probe(w, std::move(done)); }) {}

    /// True if both name the same object.
    friend bool operator==(const waitable& a, const waitable& b) noexcept { return a.id_ == b.id_; }

    /// Calls `ready` once the object is ready (at once if it is; possibly on
    /// fiber's runtime thread: keep it short) and returns a function that
    /// withdraws the watch (safe to call after `ready` ran). fiber::wait uses it.
    std::function<void()> watch(std::function<void()> ready) const { return watch_(std::move(ready)); }
    /// Calls `done` with whether the object is ready now (possibly on fiber's
    /// runtime thread). fiber::wait uses it.
    void probe(std::function<void(bool)> done) const { probe_(std::move(done)); }

  private:
    const void* id_;
    std::function<std::function<void()>(std::function<void()>)> watch_;
    std::function<void(std::function<void(bool)>)> probe_;
};

namespace detail {
/// The objects of `objects` that are ready, in their order, once at least
/// one is, or none when `deadline` passes first. Once one is ready, every
/// other is asked whether it is ready too (all at once), so that every
/// ready object is returned, as multiprocessing.connection.wait does.
inline std::vector<waitable> wait_until(std::vector<waitable> objects,
                                        std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (detail::runtime::instance().on_runtime_thread())
    throw std::logic_error("fiber::wait: blocking wait on fiber's runtime thread (e.g. in a completion handler)");
  struct shared {
    std::mutex m;
    std::condition_variable cv;
    std::vector<bool> ready;
    std::size_t probes_left = 0;
  };
  auto st = std::make_shared<shared>();
  st->ready.assign(objects.size(), false);
  std::vector<std::function<void()>> cancels;
  cancels.reserve(objects.size());
  for (std::size_t i = 0; i < objects.size(); ++i)
    cancels.push_back(objects[i].watch([st, i] {
      {
        std::lock_guard lk(st->m);
        st->ready[i] = true;
      }
      st->cv.notify_all();
    }));
  std::vector<std::size_t> unsettled;
  {
    std::unique_lock lk(st->m);
    auto any = [&] {
      for (bool r : st->ready)
        if (r) return true;
      return false;
    };
    bool some = deadline ? st->cv.wait_until(lk, *deadline, any) : (st->cv.wait(lk, any), true);
    if (some)
      for (std::size_t i = 0; i < objects.size(); ++i)
        if (!st->ready[i]) unsettled.push_back(i);
    st->probes_left = unsettled.size();
  }
  for (auto& cancel : cancels) cancel();
  for (auto i : unsettled)
    objects[i].probe([st, i](bool ready) {
      {
        std::lock_guard lk(st->m);
        if (ready) st->ready[i] = true;
        --st->probes_left;
      }
      st->cv.notify_all();
    });
  std::vector<waitable> out;
  std::unique_lock lk(st->m);
  st->cv.wait(lk, [&] { return st->probes_left == 0; });
  for (std::size_t i = 0; i < objects.size(); ++i)
    if (st->ready[i]) out.push_back(objects[i]);
  return out;
}
} // namespace detail

/// Blocks until at least one of `objects` is ready and returns every one
/// that is ready then, in their order (multiprocessing.connection.wait).
/// Throws std::logic_error for a closed or send-only Connection, a closed
/// Queue handle, a Process not started or closed, and on fiber's runtime thread.
///
/// ```cpp
/// for (auto& r : fiber::wait({a, q, p})) if (r == a) a.recv();
/// ```
inline std::vector<waitable> wait(std::vector<waitable> objects) {
  return detail::wait_until(std::move(objects), std::nullopt);
}

/// As above, but returns an empty vector if none is ready within `timeout`.
template <class Rep, class Period>
std::vector<waitable> wait(std::vector<waitable> objects, std::chrono::duration<Rep, Period> timeout) {
  return detail::wait_until(std::move(objects),
                            std::chrono::steady_clock::now() +
                                std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout));
}

} // namespace fiber
