// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file backend/detail/job_table.hpp
/// The bookkeeping every launcher keeps per job: its exit handler, the
/// signals cancel() asked for, and its end reported exactly once.

#include <fiber/backend/launcher.hpp>

#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fiber::detail {

/// Throws std::invalid_argument unless launch() got one exit handler per
/// spec. Example: `check_handlers("slurm", specs.size(), on_exit.size());`
inline void check_handlers(std::string_view backend, std::size_t specs, std::size_t handlers) {
  if (specs != handlers)
    throw std::invalid_argument(std::string(backend) + ": launch: one exit handler per spec (" + std::to_string(specs) +
                                " specs, " + std::to_string(handlers) + " handlers)");
}

/// What every launcher records of one job; a launcher's own record derives
/// from it and adds what its backend needs.
struct job_record {
  std::string id;                ///< the job's id (backend::job::id)
  backend::exit_handler on_exit; ///< taken when its end is reported
  bool reported = false;         ///< its end was reported
  int asked = 0;                 ///< the last signal cancel() asked for; 0: none
  std::uint64_t asked_mask = 0;  ///< every signal cancel() asked for (bit n: signal n)

  /// cancel() asked for `signal`.
  void ask(int signal) noexcept {
    asked = signal;
    if (signal > 0 && signal < 64) asked_mask |= std::uint64_t(1) << signal;
  }
  /// Whether cancel() asked for `signal` at some point.
  bool was_asked(int signal) const noexcept { return signal > 0 && signal < 64 && (asked_mask >> signal & 1); }
};

/// How a job_table hands a job's end to its handler.
enum class delivery {
  post, ///< posted to the executor: safe anywhere, e.g. inside launch() or cancel(), which a handler may re-enter
  call  ///< called at once: from a completion already running on the executor after launch() returned
};

/// A launcher's jobs by id, each reported ended exactly once. Runtime thread
/// only, as the launcher that owns it.
template <class Record>
  requires std::derived_from<Record, job_record>
class job_table {
public:
  /// `ex`: where posted handlers run (the runtime's executor).
  explicit job_table(asio::any_io_executor ex) : ex_(std::move(ex)) {}

  /// The record of a new job `id` holding its handler (an id already there keeps its record and gets `on_exit`).
  Record& add(const std::string& id, backend::exit_handler on_exit) {
    auto& r = jobs_[id];
    r.id = id;
    r.on_exit = std::move(on_exit);
    return r;
  }

  /// The record of job `id`, or nullptr.
  Record* find(std::string_view id) {
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : &it->second;
  }
  /// The record of job `id`, or nullptr.
  const Record* find(std::string_view id) const {
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : &it->second;
  }
  /// Whether job `id` has a record.
  bool contains(std::string_view id) const { return jobs_.find(id) != jobs_.end(); }

  /// Hands `x` to r's handler unless its end was reported already; the
  /// record stays until forget(). Returns whether this call reported it.
  bool report(Record& r, backend::job_exit x, delivery how = delivery::post) {
    if (r.reported) return false;
    r.reported = true;
    deliver(std::move(r.on_exit), std::move(x), how);
    return true;
  }

  /// report() and forget() job `id` (nothing when it has no record): the
  /// record is gone before a handler called at once runs.
  void finish(std::string_view id, backend::job_exit x, delivery how = delivery::post) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return;
    auto h = std::move(it->second.on_exit);
    const bool reported = it->second.reported;
    jobs_.erase(it);
    if (!reported) deliver(std::move(h), std::move(x), how);
  }

  /// Drops job `id`'s record without reporting anything.
  void forget(std::string_view id) {
    if (auto it = jobs_.find(id); it != jobs_.end()) jobs_.erase(it);
  }

  /// Jobs not yet reported ended.
  std::size_t live() const noexcept {
    std::size_t n = 0;
    for (auto& [id, r] : jobs_) n += r.reported ? 0 : 1;
    return n;
  }
  /// Records held (reported ones included until forgotten).
  std::size_t size() const noexcept { return jobs_.size(); }

  /// The jobs not yet reported ended, counted by `state_of(record)`
  /// (launcher::job_states).
  template <class StateOf>
  std::map<std::string, unsigned> states(StateOf state_of) const {
    std::map<std::string, unsigned> out;
    for (auto& [id, r] : jobs_)
      if (!r.reported) ++out[std::string(state_of(r))];
    return out;
  }

  /// Ids of the records `pred` holds for: a snapshot to act on while records come and go.
  template <class Pred>
  std::vector<std::string> ids(Pred pred) const {
    std::vector<std::string> v;
    for (auto& [id, r] : jobs_)
      if (pred(r)) v.push_back(id);
    return v;
  }

  /// Iteration over (id, record) pairs, ordered by id.
  auto begin() { return jobs_.begin(); }
  /// End of the iteration.
  auto end() { return jobs_.end(); }
  /// Iteration over (id, record) pairs, ordered by id.
  auto begin() const { return jobs_.begin(); }
  /// End of the iteration.
  auto end() const { return jobs_.end(); }

private:
  void deliver(backend::exit_handler h, backend::job_exit x, delivery how) {
    if (!h) return;
    if (how == delivery::call) return h(x);
    asio::post(ex_, [h = std::move(h), x = std::move(x)] { h(x); });
  }

  asio::any_io_executor ex_;
  std::map<std::string, Record, std::less<>> jobs_;
};

} // namespace fiber::detail
