// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pool_scheduler.hpp
/// The Pool's scheduler, on the runtime thread. Pull-based: each worker
/// holds a few chunks (its credit window: `prefetch`, or more for chunks that
/// run in well under a millisecond, see pool_worker::window()); its roster
/// (pool_roster.hpp) records which worker holds which chunk. A worker that
/// dies hands its chunks back to the front of the queue (up to max_retries
/// times each); a chunk's result is accepted once — by chunk id — so every
/// result is delivered exactly once whatever dies, hangs or resumes.
/// Follows Uber's Fiber (arXiv 2003.11164, section 3.3, "Error handling").

#include <fiber/detail/buffer_cache.hpp>
#include <fiber/detail/call_sync.hpp>
#include <fiber/detail/link_drain.hpp>
#include <fiber/detail/pool_roster.hpp>
#include <fiber/detail/pool_wire.hpp>
#include <fiber/detail/stats_sources.hpp>
#include <fiber/detail/supervisor.hpp>
#include <fiber/detail/worker_host.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

namespace fiber::detail {

/// One chunk as a call submits it: its sequence number in the call, the
/// message, and where each task's arguments end in `msg.args` (so that a
/// chunk whose worker dies can be split into single tasks; required when it
/// holds more than one task).
struct chunk_input {
  std::uint64_t seq = 0;
  chunk_msg msg;
  std::vector<std::uint32_t> ends;
};

struct pool_settings {
  std::string name;
  unsigned processes = 1;
  int max_retries = 3;
  unsigned prefetch = 2;
  fiber::resources res;
  unsigned maxtasksperchild = 0;      ///< 0: unlimited
  std::optional<run_msg> initializer; ///< run by every worker before its first task
};

/// The scheduler of one Pool. On its host's executor (the runtime thread)
/// unless a member says otherwise; create with std::make_shared.
class pool_scheduler : public std::enable_shared_from_this<pool_scheduler>, public stats_source {
public:
  /// Workers of `host` (which outlives it: runtime_host::instance(), or a
  /// test's fake) started on launcher `l`.
  pool_scheduler(pool_settings s, std::shared_ptr<backend::launcher> l, worker_host& host)
      : s_(std::move(s)), launcher_(std::move(l)), host_(host) {}

  /// Runtime thread. Launch the initial workers; throws backend_error.
  void start() {
    sup_ = std::make_shared<supervisor>(host_, launcher_, "fiber::Pool " + s_.name, "workers",
                                        supervisor::forward_to(shared_from_this()));
    grow();
  }

  /// Runtime thread. Queue chunks of a job. A closed Pool still takes the
  /// chunks of calls submitted before close() (and of imap feeders), and
  /// starts workers for them if its own have retired; once its shutdown has
  /// finished, chunks fail.
  void submit(std::shared_ptr<pool_job> job, std::vector<chunk_input> chunks) {
    if (terminated_ || failed_ || finished_) {
      // After fail_all (no worker can start), later calls fail the same way instead of waiting.
      auto e = failed_ ? failed_
                       : std::make_exception_ptr(error(terminated_ ? "fiber::Pool: terminated"
                                                                   : "fiber::Pool: joined; no worker is left"));
      for (auto& c : chunks) {
        counts_.submitted += c.msg.count;
        ++chunk_sizes_[std::countr_zero(chunk_size_bucket(c.msg.count))];
        count_failed(c.msg.count, failed_ ? "no_worker" : "terminated");
        job->on_chunk_failed(c.seq, e);
      }
      return;
    }
    for (auto& c : chunks) {
      counts_.submitted += c.msg.count;
      ++chunk_sizes_[std::countr_zero(chunk_size_bucket(c.msg.count))];
      roster_.pending.push_back(roster_.add(job, c.seq, std::move(c.msg), std::move(c.ends), 0, nullptr, 0));
    }
    // A closed Pool's workers may have retired already; with
    // maxtasksperchild the new work may call for successors ahead (ahead()).
    if (closing_ || s_.maxtasksperchild) grow_or_fail();
    dispatch();
  }

  /// Runtime thread. Change the number of workers while running.
  void resize(unsigned n) {
    s_.processes = n;
    if (!wants_workers()) return;
    grow();
    shrink();
  }

  /// Runtime thread. Stop workers once every chunk submitted has its result
  /// or error and every imap feeder has submitted its input (join), or now
  /// (terminate: every chunk fails). Until then a closing Pool keeps its
  /// workers and replaces those that die, retire or are still starting.
  /// `done` runs when every worker job has ended.
  void shutdown(bool now, std::function<void()> done) {
    closing_ = true;
    on_all_exited_ = std::move(done);
    if (now) {
      terminated_ = true;
      stopped_.store(true, std::memory_order_relaxed);
      sup_->close();
      auto e = std::make_exception_ptr(error("fiber::Pool: terminated"));
      for (auto& [id, c] : roster_.take_chunks()) {
        count_failed(c.msg.count, "terminated");
        c.fail(e);
      }
      sup_->cancel_all(9);
    }
    maybe_finish();
  }

  /// Any thread. An imap feeder of call `st` starts: until feed_end() the
  /// Pool's join waits for it, and release_feeders() wakes it.
  void feed_begin(std::weak_ptr<call_sync> st) {
    std::lock_guard lk(feeders_m_);
    ++feeding_;
    feeders_.push_back(std::move(st));
  }
  /// Runtime thread, posted by the feeder after its last submission.
  void feed_end() {
    {
      std::lock_guard lk(feeders_m_);
      --feeding_;
    }
    maybe_finish();
  }
  /// Any thread. The Pool was closed: imap feeders read the rest of their
  /// input at once instead of waiting for their consumer (Python's imap
  /// submits every task; join waits for them).
  void release_feeders() {
    std::vector<std::weak_ptr<call_sync>> f;
    {
      std::lock_guard lk(feeders_m_);
      released_.store(true);
      f = feeders_;
    }
    for (auto& w : f)
      if (auto s = w.lock()) {
        { std::lock_guard lk(s->m); } // a feeder between its predicate and its wait sees the flag
        s->cv.notify_all();
      }
  }
  /// Any thread: release_feeders() was called.
  bool feeders_released() const noexcept { return released_.load(); }

  /// Any thread: terminated (submissions fail at once).
  bool terminated() const noexcept { return stopped_.load(std::memory_order_relaxed); }

  unsigned live_workers() const { return roster_.live(); }
  std::size_t worker_count() const { return roster_.workers.size(); }
  std::vector<std::int64_t> worker_pids() const {
    std::vector<std::int64_t> p;
    for (auto& [id, w] : roster_.workers)
      if (w.link && !w.exited) p.push_back(sup_->pid(id, w.link.get()));
    return p;
  }

  /// Runtime thread. This Pool's part of fiber::stats().
  void add_to(runtime_stats& out) const override {
    pool_stats p;
    p.name = s_.name;
    p.backend = std::string(launcher_->name());
    p.processes = s_.processes;
    p.workers_lost = workers_lost_;
    p.workers_started = workers_started_;
    p.bytes_sent = ended_traffic_.bytes_sent;
    p.bytes_received = ended_traffic_.bytes_received;
    p.tasks = counts_;
    for (unsigned i = 0; i < chunk_sizes_.size(); ++i)
      if (chunk_sizes_[i]) p.chunk_sizes[std::uint64_t(1) << i] = chunk_sizes_[i];
    p.recent_losses = losses_.events();
    for (auto& [id, c] : roster_.chunks) {
      (c.holder ? p.tasks.running : p.tasks.queued) += c.msg.count;
      ++(c.holder ? p.chunks_running : p.chunks_queued);
    }
    p.workers_by_state = no_workers_by_state();
    for (auto& [id, w] : roster_.workers) {
      worker_stats ws{w.name, w.link ? w.link->peer().host : std::string(), worker_state::idle, w.tasks};
      if (w.link) {
        add_link_traffic(ws, w.link->traffic());
        p.bytes_sent += ws.bytes_sent;
        p.bytes_received += ws.bytes_received;
      }
      for (auto cid : w.held)
        if (auto c = roster_.chunks.find(cid); c != roster_.chunks.end() && c->second.holder == id)
          ws.tasks_held += c->second.msg.count;
      if (w.exited || w.exit_wait || w.drain_timer || (w.link && w.link->closed())) ws.state = worker_state::lost;
      else if (w.retiring) ws.state = worker_state::retiring;
      else if (!w.link) ws.state = worker_state::starting;
      else if (!w.held.empty()) ws.state = worker_state::busy;
      ++p.workers_by_state[ws.state];
      if (w.link) ++p.workers_by_host[ws.host];
      p.workers.push_back(std::move(ws));
    }
    out.pools.push_back(std::move(p));
  }

private:
  friend class supervisor; // supervisor::forward_to calls on_connect, on_exit, on_refused
  // Local workers start a few at a time: a starting worker is CPU-bound
  // (exec, dynamic linking, static initialisation, the handshake), so more
  // of them than there are cores only share the cores and all connect later
  // — and a Pool's first result waits for the first of them. The next ones
  // start as these connect (or exit); should none connect for stagger, as
  // many again start anyway (a slow start must not hold the others back).
  static constexpr auto stagger = std::chrono::milliseconds(20);
  // Never more starting than the master (or a host's relay) takes
  // handshakes at once: past that a start only loads the cores.
  static constexpr unsigned max_starting = unsigned(max_pending_handshakes);
  bool paced() const { return launcher_->traits().shares_cores; }

  // Workers launched beyond `processes`, ahead of need: with
  // maxtasksperchild, on a backend whose jobs do not share the master's
  // cores, the successors of workers that will retire while queued tasks
  // exceed what the workers left can take, at most 2 x processes. They
  // connect and wait, without tasks, for a seat (docs/RATIONALE.md,
  // "Replacements ahead of need").
  unsigned ahead() const {
    const std::uint64_t m = s_.maxtasksperchild;
    if (!m || paced() || !wants_workers()) return 0;
    const std::uint64_t cap = 2ull * s_.processes;
    std::uint64_t active = 0, capacity = 0;
    for (auto& [id, w] : roster_.workers)
      if (!w.retiring) {
        ++active;
        capacity += m - std::min(w.tasks, m);
      }
    if (active < s_.processes) capacity += (s_.processes - active) * m;
    const std::uint64_t queued = roster_.queued_tasks(capacity + cap * m);
    if (queued <= capacity) return active > s_.processes ? unsigned(active - s_.processes) : 0u;
    const std::uint64_t base = std::max<std::uint64_t>(active, s_.processes);
    return unsigned(std::min(base + (queued - capacity + m - 1) / m, s_.processes + cap) - s_.processes);
  }

  void grow() {
    const unsigned active = roster_.active();
    const unsigned want = s_.processes + ahead();
    if (active >= want) return;
    const unsigned missing = want - active;
    unsigned n = missing;
    if (paced()) {
      const unsigned st = roster_.starting(), cap = start_window_ + start_extra_;
      n = std::min(missing, cap > st ? cap - st : 0u);
      if (n < missing) arm_stagger();
      if (n == 0) return;
    }
    // Checked once for all missing.
    if (missing > fds_reserved_) {
      sup_->reserve(missing);
      fds_reserved_ = missing;
    }
    fds_reserved_ -= n;
    std::vector<std::string> names;
    for (unsigned i = 0; i < n; ++i) names.push_back(s_.name + "-w" + std::to_string(next_worker_index_++));
    auto ids = sup_->launch(names, s_.res);
    workers_started_ += ids.size();
    for (std::size_t i = 0; i < ids.size(); ++i) roster_.add_worker(ids[i]).name = names[i];
  }

  void arm_stagger() {
    if (stagger_timer_) return;
    stagger_timer_ = std::make_unique<asio::steady_timer>(host_.executor(), stagger);
    std::weak_ptr<pool_scheduler> weak = shared_from_this();
    stagger_timer_->async_wait([weak](std::error_code ec) {
      auto s = weak.lock();
      if (ec || !s) return;
      s->stagger_timer_.reset();
      if (!s->wants_workers()) return;
      if (!std::exchange(s->connected_since_stagger_, false))
        s->start_extra_ = std::min<unsigned>(s->start_extra_ + s->start_window_, max_starting - s->start_window_);
      s->grow_or_fail();
      s->maybe_finish();
    });
  }

  // grow() from an event handler: a backend that cannot start workers any
  // more fails the Pool's calls instead of escaping into the event loop.
  void grow_or_fail() {
    try {
      grow();
    } catch (...) {
      fail_all(std::current_exception());
    }
  }

  void shrink() {
    unsigned active = roster_.active();
    // Retire idle workers first, then the ones holding the least work.
    std::vector<std::pair<std::size_t, std::uint64_t>> order;
    for (auto& [id, w] : roster_.workers)
      if (!w.retiring) order.push_back({w.link && w.seated ? w.held.size() + 1 : 0, id});
    std::sort(order.begin(), order.end());
    const unsigned keep = s_.processes + ahead();
    for (auto& [load, id] : order) {
      if (active <= keep) break;
      --active;
      retire(id);
    }
  }

  void retire(std::uint64_t id) {
    auto& w = roster_.update(id, [](pool_worker& x) { x.retiring = true; });
    reseat_ = true;
    sup_->retire(id);
    if (w.held.empty()) {
      if (w.link) w.link->send(frame(frame_kind::shutdown));
      else sup_->cancel(id, 15);
    }
  }

  void on_refused(const std::string& reason) { fail_all(std::make_exception_ptr(handshake_error(reason))); }

  void on_connect(std::uint64_t id, std::shared_ptr<worker_link> l) {
    auto it = roster_.workers.find(id);
    if (it == roster_.workers.end()) return l->send(frame(frame_kind::shutdown));
    auto& w = it->second;
    roster_.update(id, [&](pool_worker& x) {
      x.link = l;
      x.ready = !s_.initializer; // else once its initializer has run
    });
    reseat_ = true;
    connected_since_stagger_ = true;
    if (wants_workers()) {
      if (roster_.starting() == 0) start_extra_ = 0;
      grow_or_fail(); // the next workers, if they were held back
    }
    std::weak_ptr<pool_scheduler> weak = shared_from_this();
    l->start(
        [weak, id](frame_kind k, std::span<const std::byte> body, message& raw) {
          auto s = weak.lock();
          if (s && k == frame_kind::results) s->on_results(id, body, raw);
          else if (s && k == frame_kind::initialized) s->on_initialized(id, body);
        },
        [weak, id](const std::string& reason) {
          if (auto s = weak.lock()) s->on_link_lost(id, reason);
        });
    if (w.retiring || !wants_workers()) {
      l->send(frame(frame_kind::shutdown));
      return;
    }
    if (s_.initializer) return l->send(frame(frame_kind::initialize, *s_.initializer));
    dispatch();
  }

  // A worker ran its initializer: it takes tasks from now on; or it failed,
  // and the worker exits (its end is reported as usual, no task is charged:
  // it held none). Failures in a row beyond the start budget end the Pool.
  void on_initialized(std::uint64_t id, std::span<const std::byte> body) {
    auto it = roster_.workers.find(id);
    if (it == roster_.workers.end()) return;
    reader r(body);
    if (auto e = read_item(r)) {
      std::string why;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        why = x.what();
      }
      log(log_level::warning, it->second.name, ": initializer failed: ", why);
      if (++failed_inits_ > std::max(3u, 2 * s_.processes))
        fail_all(std::make_exception_ptr(worker_lost("fiber::Pool " + s_.name +
                                                     ": no worker can start: the "
                                                     "initializer failed in " +
                                                     std::to_string(failed_inits_) +
                                                     " workers in a row; last: " + why)));
      return;
    }
    failed_inits_ = 0;
    roster_.update(it->first, [](pool_worker& w) { w.ready = true; });
    reseat_ = true;
    dispatch();
  }

  void on_results(std::uint64_t wid, std::span<const std::byte> body, message& raw) {
    auto results = decode_results_view(body);
    // The results stay in the frame they arrived in: callers decode them from there.
    std::shared_ptr<const message> owner = share_recycled(std::move(raw));
    auto& workers = roster_.workers;
    auto& chunks = roster_.chunks;
    auto wit = workers.find(wid);
    const auto now = clock::now();
    for (auto& r : results) {
      if (wit != workers.end()) wit->second.held.erase(r.chunk_id);
      auto it = chunks.find(r.chunk_id);
      if (it == chunks.end() || it->second.holder != wid) continue; // late duplicate: already rerun elsewhere
      if (wit != workers.end()) wit->second.finished(it->second.dispatched, now);
      auto rec = std::move(it->second);
      chunks.erase(it);
      counts_.done += rec.msg.count;
      rec.deliver(shared_bytes{owner, r.results});
    }
    if (wit != workers.end()) roster_.reopen(wid);
    if (wit != workers.end() && wit->second.held.empty() && wit->second.link) {
      auto& w = wit->second;
      if (w.spent(s_.maxtasksperchild) && !w.retiring) { // maxtasksperchild: it exits, another takes its place
        retire(wid);
        if (wants_workers()) grow_or_fail();
      } else if (w.retiring) {
        w.link->send(frame(frame_kind::shutdown));
      }
    }
    dispatch();
    maybe_finish();
  }

  // Fill every worker's credit window, the worker holding the fewest chunks
  // first (pool_roster::next_open), so a small map spreads over all workers
  // instead of queueing behind one.
  void dispatch() {
    auto& pending = roster_.pending;
    if (std::exchange(reseat_, false)) roster_.seat(s_.processes);
    if (pending.empty()) return;
    std::map<std::uint64_t, std::vector<const pool_chunk*>> batches;
    const auto now = clock::now();
    while (!pending.empty()) {
      const auto id = roster_.next_open(s_.prefetch, s_.maxtasksperchild);
      if (id == 0) break;
      auto cid = pending.front();
      pending.pop_front();
      if (auto it = roster_.chunks.find(cid); it != roster_.chunks.end()) {
        roster_.mark_sent(cid, it->second, id, roster_.workers.find(id)->second, now);
        batches[id].push_back(&it->second); // chunks are not modified before the frames are built
      }
      roster_.reopen(id); // in the order again by what it holds now; dropped once full
    }
    // In dispatch order: runs of small chunks share a frame; a chunk with
    // large arguments has a frame of its own, its arguments the frame's tail.
    for (auto& [id, b] : batches) {
      auto& link = roster_.workers.at(id).link;
      std::vector<const chunk_msg*> small;
      for (auto* c : b) {
        if (!c->big_args) {
          small.push_back(&c->msg);
          continue;
        }
        if (!small.empty()) link->send(tasks_frame(small));
        small.clear();
        const auto& a = *c->big_args;
        link->send(tasks_frame_head(c->msg.chunk_id, c->msg.target_id, c->msg.count, a.size()),
                   shared_bytes{c->big_args, a});
      }
      if (!small.empty()) link->send(tasks_frame(small));
    }
  }

  void on_link_lost(std::uint64_t id, const std::string& reason) {
    auto it = roster_.workers.find(id);
    if (it == roster_.workers.end()) return;
    auto& w = it->second;
    sup_->link_lost(id, reason);
    if (w.drain_timer) return end_job(id); // its job ended first: every frame it sent is read now
    if (!w.exited) {
      if (!terminated_ && (!w.retiring || !w.held.empty()))
        log(log_level::warning, w.name, ": ", reason, w.held.empty() ? "" : "; rerunning its tasks");
      sup_->cancel(id, 9); // a hung worker must not come back with late results
      // When this death fails a task, its error should name the cause the
      // backend reports (OOMKilled, a lost node), which may trail the link's
      // end: wait for the job's end, at most link_drain_limit.
      if (!terminated_ && roster_.would_fail(w, id, s_.max_retries)) {
        w.lost_reason = reason;
        w.exit_wait = start_link_drain(host_.executor(),
                                       [weak = std::weak_ptr<pool_scheduler>(shared_from_this()), id] {
                                         if (auto s = weak.lock()) s->give_up_exit_wait(id);
                                       });
        return dispatch();
      }
    }
    lose(id, reason);
    // Hand its chunks to the live workers now. Waiting for the next result
    // is not enough: when every other worker is idle (the end of a map, an
    // imap blocked on the lost chunk) nothing would come until the job's end
    // is reported — for a cut-off cluster node, Slurm's node timeout later.
    dispatch();
  }

  void on_exit(std::uint64_t id, const backend::job_exit& ex) {
    auto it = roster_.workers.find(id);
    if (it == roster_.workers.end()) return;
    auto& w = it->second;
    roster_.update(id, [](pool_worker& w) { w.exited = true; });
    reseat_ = true;
    w.exit_reason = !ex.reason.empty() || ex.how != backend::job_exit::kind::signalled
                        ? ex.reason
                        : "killed by signal " + std::to_string(ex.code);
    if (w.exit_wait) { // its link was lost first: charge with the backend's words
      w.exit_wait.reset();
      return end_job(id);
    }
    if (auto c = roster_.chunks.find(w.charged); !ex.reason.empty() && c != roster_.chunks.end())
      c->second.exit_note = ex.reason;
    // A result sent just before a crash in the next task may still be
    // unread (see start_link_drain): read the link to its end before the
    // chunks are charged, or a finished task is charged with that crash.
    if (w.link && !w.link->closed() && !w.held.empty() && !terminated_ && !w.drain_timer) {
      w.drain_timer = start_link_drain(host_.executor(),
                                       [weak = std::weak_ptr<pool_scheduler>(shared_from_this()), id] {
                                         if (auto s = weak.lock()) s->end_job(id);
                                       });
      return;
    }
    end_job(id);
  }

  // The job's end was not reported within link_drain_limit of its link's
  // loss: charge the death with the link's reason.
  void give_up_exit_wait(std::uint64_t id) {
    auto it = roster_.workers.find(id);
    if (it == roster_.workers.end() || !it->second.exit_wait) return;
    it->second.exit_wait.reset();
    lose(id, it->second.lost_reason);
    dispatch();
  }

  // The rest of a job's end, once its link was read to the end (or never was).
  void end_job(std::uint64_t id) {
    auto it = roster_.workers.find(id);
    if (it == roster_.workers.end()) return;
    if (it->second.drain_timer) it->second.drain_timer->cancel();
    if (it->second.link) it->second.link->close("job ended");
    const std::string reason = it->second.exit_reason.empty() ? "job ended" : "job ended: " + it->second.exit_reason;
    lose(id, reason);
    auto& w = it->second;
    if (!w.retiring && !terminated_) {
      ++workers_lost_;
      losses_.add(w.name, w.link ? w.link->peer().host : std::string(),
                  w.lost_reason.empty() ? reason : reason + " (link: " + w.lost_reason + ")", w.tasks_lost);
    }
    if (w.link) {
      const auto t = w.link->traffic();
      ended_traffic_.bytes_sent += t.bytes_sent;
      ended_traffic_.bytes_received += t.bytes_received;
    }
    roster_.erase_worker(id);
    reseat_ = true;
    if (sup_->start_budget_exhausted(s_.processes)) {
      fail_all(sup_->start_failure());
      return maybe_finish();
    }
    if (wants_workers()) grow_or_fail();
    dispatch();
    maybe_finish();
  }

  // The worker's chunks go back to the front of the queue, in the order it
  // got them. Only the one it was running is charged with the death: the
  // oldest it held, since a worker runs chunks in the order sent and reports
  // each as it finishes. The chunks waiting behind a crashing task are not
  // punished for it. A chunk of several tasks is not charged but split into
  // single tasks, since it is not known which of them killed the worker: the
  // one that kills it again is charged. A task charged more than
  // max_retries times fails with worker_lost.
  void lose(std::uint64_t id, const std::string& reason) {
    auto it = roster_.workers.find(id);
    if (it == roster_.workers.end()) return;
    auto held = std::move(it->second.held);
    it->second.held.clear();
    auto& chunks = roster_.chunks;
    const auto mine = roster_.held_in_order(held, id);
    const std::string cause = mine.empty() ? std::string() : loss_cause(reason);
    for (auto cid : mine) it->second.tasks_lost += chunks.at(cid).msg.count;
    std::vector<std::uint64_t> requeue;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      auto c = chunks.find(mine[i]);
      c->second.holder = 0;
      if (i == 0 && c->second.msg.count > 1) {
        auto rec = std::move(c->second);
        chunks.erase(c); // before split() adds to chunks, which may rehash
        auto parts = roster_.split(rec);
        requeue.insert(requeue.end(), parts.begin(), parts.end());
      } else if (i == 0 && ++c->second.deaths > s_.max_retries) {
        auto rec = std::move(c->second);
        chunks.erase(c);
        count_failed(rec.msg.count, cause);
        const std::string why = "fiber::Pool " + s_.name + ": a task's workers died " + std::to_string(rec.deaths) +
                                " times (max_retries " + std::to_string(s_.max_retries) + "); last: " + reason +
                                (rec.exit_note.empty() ? "" : " (before: " + rec.exit_note + ")");
        if (rec.parent) {
          // This task fails in its place; the other parts still deliver.
          writer w;
          write_item_lost(w, why);
          auto item = std::make_shared<std::vector<std::byte>>(w.release());
          const std::span<const std::byte> view(*item);
          rec.deliver(shared_bytes{std::move(item), view});
        } else {
          rec.job->on_chunk_failed(rec.seq, std::make_exception_ptr(worker_lost(why)));
        }
      } else {
        if (i == 0) it->second.charged = mine[i];
        requeue.push_back(mine[i]);
      }
    }
    for (auto cid : requeue) {
      const auto n = roster_.chunks.at(cid).msg.count;
      counts_.rerun += n;
      counts_.rerun_by_cause[cause] += n;
    }
    roster_.pending.insert(roster_.pending.begin(), requeue.begin(), requeue.end());
  }

  void count_failed(std::uint64_t tasks, const std::string& cause) {
    counts_.failed += tasks;
    counts_.failed_by_cause[cause] += tasks;
  }

  void fail_all(std::exception_ptr e) {
    failed_ = e;
    for (auto& [id, c] : roster_.take_chunks()) {
      count_failed(c.msg.count, "no_worker");
      c.fail(e);
    }
    closing_ = true;
    sup_->close();
    sup_->cancel_all(9);
  }

  // Whether work may still come or wait: every chunk submitted has not
  // finished, or an imap feeder is still reading its input.
  bool work_left() const {
    if (!roster_.chunks.empty()) return true;
    std::lock_guard lk(feeders_m_);
    return feeding_ > 0;
  }

  // Whether the Pool should keep, start and replace workers: it runs, or it
  // is closing with work left (join waits for that work, not for the
  // workers connected now).
  bool wants_workers() const { return !terminated_ && !failed_ && (!closing_ || work_left()); }

  void maybe_finish() {
    if (!closing_ || finished_) return;
    if (!terminated_ && !failed_ && work_left()) return; // terminated or failed: what is left fails
    // Only now do workers that end before connecting stop counting as
    // failed starts: while work was left they had to start.
    sup_->close();
    for (auto& [id, w] : roster_.workers)
      if (!w.retiring) retire(id);
    if (roster_.workers.empty() && on_all_exited_) {
      finished_ = true;
      std::exchange(on_all_exited_, nullptr)();
    }
  }

  pool_settings s_;
  std::shared_ptr<backend::launcher> launcher_;
  worker_host& host_;
  std::shared_ptr<supervisor> sup_;
  pool_roster roster_;
  unsigned next_worker_index_ = 1;
  bool reseat_ = false;       // a worker became ready, retired, exited or left: seats to hand out (roster's seat)
  unsigned fds_reserved_ = 0; // launches the last reserve covered
  const unsigned start_window_ = std::max(2u, std::min(std::thread::hardware_concurrency(), max_starting / 2));
  unsigned start_extra_ = 0; // more allowed to start, after stagger periods without a connection
  bool connected_since_stagger_ = false;
  std::unique_ptr<asio::steady_timer> stagger_timer_;
  unsigned failed_inits_ = 0; // initializers that failed in a row
  bool closing_ = false, terminated_ = false;
  bool finished_ = false;            // closing ended: every worker exited, on_all_exited_ ran
  std::atomic<bool> stopped_{false}; // terminated_, for other threads
  mutable std::mutex feeders_m_;     // the imap feeders, shared with their threads
  std::size_t feeding_ = 0;          // feeders that have not posted feed_end()
  std::vector<std::weak_ptr<call_sync>> feeders_;
  std::atomic<bool> released_{false};
  std::exception_ptr failed_; // why fail_all ended the pool
  task_stats counts_;         // fiber::stats(): queued and running are counted at the snapshot
  std::uint64_t workers_lost_ = 0, workers_started_ = 0;
  std::array<std::uint64_t, 64> chunk_sizes_{}; // fiber::stats(): chunks of at most 2^i tasks, by i
  loss_log losses_;                             // fiber::stats(): pool_stats::recent_losses
  link_traffic ended_traffic_;                  // bytes of the links of workers gone
  std::function<void()> on_all_exited_;
};

} // namespace fiber::detail
