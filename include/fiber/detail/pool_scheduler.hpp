// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pool_scheduler.hpp
/// The Pool's scheduler, on the runtime thread. Pull-based: each worker
/// holds a few chunks (its credit window: `prefetch`, or more for chunks that
/// run in well under a millisecond, see window_of()); the pending table
/// records which worker holds which chunk. A worker that dies hands its
/// chunks back to the front of the queue (up to max_retries times each);
/// a chunk's result is accepted once — by chunk id — so every result is
/// delivered exactly once whatever dies, hangs or resumes.
/// Follows Uber's Fiber (arXiv 2003.11164, section 3.3, "Error handling").

#include <fiber/detail/buffer_cache.hpp>
#include <fiber/detail/call_sync.hpp>
#include <fiber/detail/link_drain.hpp>
#include <fiber/detail/pool_wire.hpp>
#include <fiber/detail/stream_state.hpp>
#include <fiber/detail/supervisor.hpp>
#include <fiber/detail/worker_host.hpp>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace fiber::detail {

/// One map/apply call as the scheduler sees it. Callbacks run on the runtime thread.
struct pool_job {
  /// Chunk `seq` of `items` inputs finished: its results blob (per-item
  /// status + value), in the frame it arrived in.
  std::function<void(std::uint64_t seq, std::uint32_t items, shared_bytes results)> on_chunk;
  /// Chunk `seq` can never finish (its workers died too often, pool terminated).
  std::function<void(std::uint64_t seq, std::exception_ptr)> on_chunk_failed;
};

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
class pool_scheduler : public std::enable_shared_from_this<pool_scheduler> {
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
      for (auto& c : chunks) job->on_chunk_failed(c.seq, e);
      return;
    }
    for (auto& c : chunks) {
      pending_.push_back(add_chunk(job, c.seq, std::move(c.msg), std::move(c.ends), 0, nullptr, 0));
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
      auto chunks = std::move(chunks_);
      chunks_.clear();
      pending_.clear();
      for (auto& [id, c] : chunks) fail_chunk(c, e);
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

  unsigned live_workers() const {
    unsigned n = 0;
    for (auto& [id, w] : workers_) n += w.link && !w.exited ? 1 : 0;
    return n;
  }
  std::size_t worker_count() const { return workers_.size(); }
  std::vector<std::int64_t> worker_pids() const {
    std::vector<std::int64_t> p;
    for (auto& [id, w] : workers_)
      if (w.link && !w.exited) p.push_back(sup_->pid(id, w.link.get()));
    return p;
  }

private:
  friend class supervisor; // supervisor::forward_to calls on_connect, on_exit, on_refused
  /// A chunk of several tasks whose worker died, rerun as single tasks (the
  /// parts) so that only the task that kills its worker is charged. Its
  /// results go to the call as one blob, in order, once every part is done.
  struct split_rec {
    std::shared_ptr<pool_job> job;
    std::uint64_t seq;
    std::vector<shared_bytes> parts; // per task: its result, or a worker_lost item
    std::uint32_t remaining;
    bool failed = false; // the call was failed as a whole (terminate)
  };
  struct chunk_rec {
    std::shared_ptr<pool_job> job;
    std::uint64_t seq;
    chunk_msg msg; // args empty when in big_args
    std::shared_ptr<const std::vector<std::byte>> big_args;
    int deaths = 0;
    std::uint64_t holder = 0;          // worker id, 0 = queued
    std::uint64_t sent = 0;            // dispatch order: a worker runs what it holds in this order
    clock::time_point dispatched{};    // when it was sent to its holder
    std::vector<std::uint32_t> ends;   // where each task's arguments end (splittable if count > 1)
    std::shared_ptr<split_rec> parent; // set on the parts of a split chunk
    std::uint32_t index = 0;           // this part's task in parent
    std::string exit_note{};           // how a dead holder's job ended, in its backend's words (out of memory)
  };

  std::uint64_t add_chunk(const std::shared_ptr<pool_job>& job, std::uint64_t seq, chunk_msg msg,
                          std::vector<std::uint32_t> ends, int deaths, std::shared_ptr<split_rec> parent,
                          std::uint32_t index) {
    // A chunk of several tasks records where each one's arguments end, so
    // that it can be split should its worker die.
    assert(msg.count <= 1 || ends.size() == msg.count);
    msg.chunk_id = next_chunk_++;
    // Large arguments leave as the tail of a frame of their own, shared
    // with this record (kept for reruns) instead of copied into the frame.
    std::shared_ptr<const std::vector<std::byte>> big;
    if (msg.args.size() >= stream_state::copy_threshold) {
      big = share_recycled(std::move(msg.args));
      msg.args = {};
    }
    const auto id = msg.chunk_id;
    chunks_.emplace(id, chunk_rec{.job = job,
                                  .seq = seq,
                                  .msg = std::move(msg),
                                  .big_args = std::move(big),
                                  .deaths = deaths,
                                  .ends = std::move(ends),
                                  .parent = std::move(parent),
                                  .index = index});
    return id;
  }

  // Chunk `rec` finished with `results`: to its call, or into its split parent.
  void deliver(chunk_rec& rec, shared_bytes results) {
    if (!rec.parent) return rec.job->on_chunk(rec.seq, rec.msg.count, std::move(results));
    auto& p = *rec.parent;
    if (p.failed) return;
    p.parts[rec.index] = std::move(results);
    if (--p.remaining) return;
    // Per-task results are self-delimiting: the parts, in order, are the
    // chunk's results blob.
    const auto count = std::uint32_t(p.parts.size());
    std::size_t n = 0;
    for (auto& x : p.parts) n += x.bytes.size();
    auto all = std::make_shared<std::vector<std::byte>>();
    all->reserve(n);
    for (auto& x : p.parts) all->insert(all->end(), x.bytes.begin(), x.bytes.end());
    p.parts.clear();
    const std::span<const std::byte> view(*all);
    p.job->on_chunk(p.seq, count, shared_bytes{std::move(all), view});
  }

  // Chunk `rec` can never finish: its call fails (once per split chunk).
  void fail_chunk(chunk_rec& rec, std::exception_ptr e) {
    if (!rec.parent) return rec.job->on_chunk_failed(rec.seq, e);
    if (std::exchange(rec.parent->failed, true)) return;
    rec.parent->job->on_chunk_failed(rec.parent->seq, e);
  }
  struct worker_rec {
    std::string name;
    std::shared_ptr<worker_link> link;
    std::set<std::uint64_t> held;
    double service_s = 0; // moving average of its chunks' run time (0: none seen yet)
    clock::time_point last_result{};
    bool ready = false;  // connected, and its initializer (if any) has run
    bool seated = false; // takes tasks: one of at most `processes` (see seat)
    bool retiring = false;
    bool exited = false;
    std::uint64_t tasks = 0;                         // tasks sent to it (maxtasksperchild)
    std::unique_ptr<asio::steady_timer> drain_timer; // exited, its link still being read to the end
    std::unique_ptr<asio::steady_timer> exit_wait;   // link lost, waiting for the job's end (see on_link_lost)
    std::string lost_reason;                         // why the link was lost, while exit_wait runs
    std::string exit_reason;                         // the backend's words on the job's end
    std::uint64_t charged = 0; // the chunk charged with its death (its exit report may come after)
  };

  // Whether the worker has been sent its maxtasksperchild tasks.
  bool spent(const worker_rec& w) const { return s_.maxtasksperchild && w.tasks >= s_.maxtasksperchild; }

  // Local workers start a few at a time: a starting worker is CPU-bound
  // (exec, dynamic linking, static initialisation, the handshake), so more
  // of them than there are cores only share the cores and all connect later
  // — and a Pool's first result waits for the first of them. The next ones
  // start as these connect (or exit); should none connect for stagger, as
  // many again start anyway (a slow start must not hold the others back).
  static constexpr auto stagger = std::chrono::milliseconds(20);
  bool paced() const { return launcher_->traits().shares_cores; }
  unsigned starting() const {
    unsigned n = 0;
    for (auto& [id, w] : workers_) n += !w.link && !w.exited && !w.retiring;
    return n;
  }

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
    for (auto& [id, w] : workers_)
      if (!w.retiring) {
        ++active;
        capacity += m - std::min(w.tasks, m);
      }
    if (active < s_.processes) capacity += (s_.processes - active) * m;
    const std::uint64_t enough = capacity + cap * m; // no need to count further
    std::uint64_t queued = 0;
    for (auto cid : pending_) {
      if (auto c = chunks_.find(cid); c != chunks_.end()) queued += c->second.msg.count;
      if (queued >= enough) break;
    }
    if (queued <= capacity) return active > s_.processes ? unsigned(active - s_.processes) : 0u;
    const std::uint64_t base = std::max<std::uint64_t>(active, s_.processes);
    return unsigned(std::min(base + (queued - capacity + m - 1) / m, s_.processes + cap) - s_.processes);
  }

  // Gives free seats (at most `processes` workers take tasks) to ready workers.
  void seat() {
    unsigned seated = 0;
    for (auto& [id, w] : workers_) seated += w.seated && !w.retiring;
    for (auto& [id, w] : workers_) {
      if (seated >= s_.processes) return;
      if (!w.seated && w.ready && !w.retiring && !w.exited && w.link && !w.link->closed()) {
        w.seated = true;
        ++seated;
      }
    }
  }

  void grow() {
    unsigned active = 0;
    for (auto& [id, w] : workers_) active += w.retiring ? 0 : 1;
    const unsigned want = s_.processes + ahead();
    if (active >= want) return;
    const unsigned missing = want - active;
    unsigned n = missing;
    if (paced()) {
      const unsigned st = starting(), cap = start_window_ + start_extra_;
      n = std::min(missing, cap > st ? cap - st : 0u);
      if (n < missing) arm_stagger();
      if (n == 0) return;
    }
    // Checked once for all missing.
    if (missing > fds_reserved_) {
      sup_->reserve_fds(std::size_t(missing) * fds_per_worker, missing);
      fds_reserved_ = missing;
    }
    fds_reserved_ -= n;
    std::vector<std::string> names;
    for (unsigned i = 0; i < n; ++i) names.push_back(s_.name + "-w" + std::to_string(next_worker_index_++));
    auto ids = sup_->launch(names, s_.res);
    for (std::size_t i = 0; i < ids.size(); ++i) workers_[ids[i]].name = names[i];
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
      if (!std::exchange(s->connected_since_stagger_, false)) s->start_extra_ += s->start_window_;
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
    unsigned active = 0;
    for (auto& [id, w] : workers_) active += w.retiring ? 0 : 1;
    // Retire idle workers first, then the ones holding the least work.
    std::vector<std::pair<std::size_t, std::uint64_t>> order;
    for (auto& [id, w] : workers_)
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
    auto& w = workers_[id];
    w.retiring = true;
    sup_->retire(id);
    if (w.held.empty()) {
      if (w.link) w.link->send(frame(frame_kind::shutdown));
      else sup_->cancel(id, 15);
    }
  }

  void on_refused(const std::string& reason) { fail_all(std::make_exception_ptr(handshake_error(reason))); }

  void on_connect(std::uint64_t id, std::shared_ptr<worker_link> l) {
    auto it = workers_.find(id);
    if (it == workers_.end()) return l->send(frame(frame_kind::shutdown));
    auto& w = it->second;
    w.link = l;
    w.ready = !s_.initializer; // else once its initializer has run
    connected_since_stagger_ = true;
    if (wants_workers()) {
      if (starting() == 0) start_extra_ = 0;
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
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
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
    it->second.ready = true;
    dispatch();
  }

  void on_results(std::uint64_t wid, std::span<const std::byte> body, message& raw) {
    auto results = decode_results_view(body);
    // The results stay in the frame they arrived in: callers decode them from there.
    std::shared_ptr<const message> owner = share_recycled(std::move(raw));
    auto wit = workers_.find(wid);
    const auto now = clock::now();
    for (auto& r : results) {
      if (wit != workers_.end()) wit->second.held.erase(r.chunk_id);
      auto it = chunks_.find(r.chunk_id);
      if (it == chunks_.end() || it->second.holder != wid) continue; // late duplicate: already rerun elsewhere
      if (wit != workers_.end()) {
        // The worker runs its chunks one after the other: this one started
        // once the previous result left, or once it arrived (plus latency).
        auto& w = wit->second;
        const auto start = std::max(w.last_result, it->second.dispatched);
        const double run = std::chrono::duration<double>(now - start).count();
        w.service_s = w.service_s == 0 ? run : 0.8 * w.service_s + 0.2 * run;
        w.last_result = now;
      }
      auto rec = std::move(it->second);
      chunks_.erase(it);
      deliver(rec, shared_bytes{owner, r.results});
    }
    if (wit != workers_.end() && wit->second.held.empty() && wit->second.link) {
      auto& w = wit->second;
      if (spent(w) && !w.retiring) { // maxtasksperchild: it exits, another takes its place
        retire(wid);
        if (wants_workers()) grow_or_fail();
      } else if (w.retiring) {
        w.link->send(frame(frame_kind::shutdown));
      }
    }
    dispatch();
    maybe_finish();
  }

  // A worker's credit window: `prefetch` chunks, or about a millisecond of
  // work when its chunks are shorter than that (at most 32), so that tiny
  // tasks are not throttled to `prefetch` per round trip while long ones
  // stay spread evenly (a worker never holds much more than 1 ms beyond
  // `prefetch` chunks of work that others could have taken).
  unsigned window_of(const worker_rec& w) const {
    constexpr double target_s = 1e-3;
    constexpr unsigned max_window = 32;
    if (w.service_s <= 0 || w.service_s * s_.prefetch >= target_s) return s_.prefetch;
    return std::clamp(unsigned(target_s / w.service_s), s_.prefetch, std::max(s_.prefetch, max_window));
  }

  // Fill every worker's credit window, one chunk per worker per pass so a
  // small map spreads over all workers instead of queueing behind one.
  void dispatch() {
    if (pending_.empty()) return;
    seat();
    std::map<std::uint64_t, std::vector<const chunk_rec*>> batches;
    unsigned passes = s_.prefetch;
    for (auto& [id, w] : workers_) passes = std::max(passes, window_of(w));
    const auto now = clock::now();
    for (unsigned pass = 0; pass < passes && !pending_.empty(); ++pass) {
      for (auto& [id, w] : workers_) {
        if (pending_.empty()) break;
        if (!w.seated || !w.ready || w.link->closed() || w.exited || w.retiring || w.held.size() > pass ||
            w.held.size() >= window_of(w) || spent(w))
          continue;
        auto cid = pending_.front();
        pending_.pop_front();
        auto it = chunks_.find(cid);
        if (it == chunks_.end()) continue;
        it->second.holder = id;
        it->second.sent = next_dispatch_++;
        it->second.dispatched = now;
        w.tasks += it->second.msg.count;
        w.held.insert(cid);
        batches[id].push_back(&it->second); // chunks_ is not modified before the frames are built
      }
    }
    // In dispatch order: runs of small chunks share a frame; a chunk with
    // large arguments has a frame of its own, its arguments the frame's tail.
    for (auto& [id, b] : batches) {
      auto& link = workers_[id].link;
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
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
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
      if (!terminated_ && would_fail(w, id)) {
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
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    auto& w = it->second;
    w.exited = true;
    w.exit_reason = ex.reason;
    if (w.exit_wait) { // its link was lost first: charge with the backend's words
      w.exit_wait.reset();
      return end_job(id);
    }
    if (auto c = chunks_.find(w.charged); !ex.reason.empty() && c != chunks_.end()) c->second.exit_note = ex.reason;
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

  // Whether charging worker `id`'s death now fails a task (see lose): the
  // oldest chunk it holds is a single task at its last retry.
  bool would_fail(const worker_rec& w, std::uint64_t id) const {
    const chunk_rec* oldest = nullptr;
    for (auto cid : w.held)
      if (auto c = chunks_.find(cid); c != chunks_.end() && c->second.holder == id)
        if (!oldest || c->second.sent < oldest->sent) oldest = &c->second;
    return oldest && oldest->msg.count == 1 && oldest->deaths + 1 > s_.max_retries;
  }

  // The job's end was not reported within link_drain_limit of its link's
  // loss: charge the death with the link's reason.
  void give_up_exit_wait(std::uint64_t id) {
    auto it = workers_.find(id);
    if (it == workers_.end() || !it->second.exit_wait) return;
    it->second.exit_wait.reset();
    lose(id, it->second.lost_reason);
    dispatch();
  }

  // The rest of a job's end, once its link was read to the end (or never was).
  void end_job(std::uint64_t id) {
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    if (it->second.drain_timer) it->second.drain_timer->cancel();
    if (it->second.link) it->second.link->close("job ended");
    lose(id, it->second.exit_reason.empty() ? "job ended" : "job ended: " + it->second.exit_reason);
    workers_.erase(id);
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
    auto it = workers_.find(id);
    if (it == workers_.end()) return;
    auto held = std::move(it->second.held);
    it->second.held.clear();
    std::vector<std::pair<std::uint64_t, std::uint64_t>> mine; // (sent, chunk id)
    for (auto cid : held)
      if (auto c = chunks_.find(cid); c != chunks_.end() && c->second.holder == id)
        mine.emplace_back(c->second.sent, cid);
    std::sort(mine.begin(), mine.end());
    std::vector<std::uint64_t> requeue;
    for (std::size_t i = 0; i < mine.size(); ++i) {
      auto c = chunks_.find(mine[i].second);
      c->second.holder = 0;
      if (i == 0 && c->second.msg.count > 1) {
        auto rec = std::move(c->second);
        chunks_.erase(c); // before split() adds to chunks_, which may rehash
        auto parts = split(rec);
        requeue.insert(requeue.end(), parts.begin(), parts.end());
      } else if (i == 0 && ++c->second.deaths > s_.max_retries) {
        auto rec = std::move(c->second);
        chunks_.erase(c);
        const std::string why = "fiber::Pool " + s_.name + ": a task's workers died " + std::to_string(rec.deaths) +
                                " times (max_retries " + std::to_string(s_.max_retries) + "); last: " + reason +
                                (rec.exit_note.empty() ? "" : " (before: " + rec.exit_note + ")");
        if (rec.parent) {
          // This task fails in its place; the other parts still deliver.
          writer w;
          write_item_lost(w, why);
          auto item = std::make_shared<std::vector<std::byte>>(w.release());
          const std::span<const std::byte> view(*item);
          deliver(rec, shared_bytes{std::move(item), view});
        } else {
          rec.job->on_chunk_failed(rec.seq, std::make_exception_ptr(worker_lost(why)));
        }
      } else {
        if (i == 0) it->second.charged = mine[i].second;
        requeue.push_back(mine[i].second);
      }
    }
    pending_.insert(pending_.begin(), requeue.begin(), requeue.end());
  }

  // The chunk's tasks as single-task chunks (new ids, same deaths), in order.
  std::vector<std::uint64_t> split(const chunk_rec& rec) {
    const std::vector<std::byte>& args = rec.big_args ? *rec.big_args : rec.msg.args;
    auto parent = std::make_shared<split_rec>(split_rec{rec.job, rec.seq, std::vector<shared_bytes>(rec.msg.count),
                                                        rec.msg.count});
    std::vector<std::uint64_t> ids;
    std::uint32_t begin = 0;
    for (std::uint32_t k = 0; k < rec.msg.count; ++k) {
      const std::uint32_t end = rec.ends[k];
      chunk_msg m{0, rec.msg.target_id, 1, std::vector<std::byte>(args.begin() + begin, args.begin() + end)};
      begin = end;
      ids.push_back(add_chunk(rec.job, rec.seq, std::move(m), {}, rec.deaths, parent, k));
    }
    return ids;
  }

  void fail_all(std::exception_ptr e) {
    failed_ = e;
    auto chunks = std::move(chunks_);
    chunks_.clear();
    pending_.clear();
    for (auto& [id, c] : chunks) fail_chunk(c, e);
    closing_ = true;
    sup_->close();
    sup_->cancel_all(9);
  }

  // Whether work may still come or wait: every chunk submitted has not
  // finished, or an imap feeder is still reading its input.
  bool work_left() const {
    if (!chunks_.empty()) return true;
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
    for (auto& [id, w] : workers_)
      if (!w.retiring) retire(id);
    if (workers_.empty() && on_all_exited_) {
      finished_ = true;
      std::exchange(on_all_exited_, nullptr)();
    }
  }

  pool_settings s_;
  std::shared_ptr<backend::launcher> launcher_;
  worker_host& host_;
  std::shared_ptr<supervisor> sup_;
  std::map<std::uint64_t, worker_rec> workers_;
  std::unordered_map<std::uint64_t, chunk_rec> chunks_;
  std::deque<std::uint64_t> pending_;
  std::uint64_t next_chunk_ = 1, next_dispatch_ = 1;
  unsigned next_worker_index_ = 1;
  unsigned fds_reserved_ = 0; // launches the last reserve_fds covered
  const unsigned start_window_ = std::max(2u, std::thread::hardware_concurrency());
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
  std::function<void()> on_all_exited_;
};

} // namespace fiber::detail
