// SPDX-License-Identifier: BSL-1.0
#pragma once
/// @file detail/pool_roster.hpp
/// What a Pool's scheduler records of its workers and chunks: which worker
/// holds which chunk and in what order it was sent, each worker's state and
/// pace, and the parts of a split chunk until the last one is done.

#include <fiber/detail/buffer_cache.hpp>
#include <fiber/detail/bytes.hpp>
#include <fiber/detail/pool_wire.hpp>
#include <fiber/detail/stream_state.hpp>
#include <fiber/detail/worker_link.hpp>

#include <asio/steady_timer.hpp>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fiber::detail {

/// One map/apply call as the scheduler sees it. Callbacks run on the runtime thread.
struct pool_job {
  /// Chunk `seq` of `items` inputs finished: its results blob (per-item
  /// status + value), in the frame it arrived in.
  std::function<void(std::uint64_t seq, std::uint32_t items, shared_bytes results)> on_chunk;
  /// Chunk `seq` can never finish (its workers died too often, pool terminated).
  std::function<void(std::uint64_t seq, std::exception_ptr)> on_chunk_failed;
};

/// A chunk of several tasks whose worker died, rerun as single tasks (the
/// parts) so that only the task that kills its worker is charged. Its
/// results go to the call as one blob, in order, once every part is done.
struct pool_split {
  std::shared_ptr<pool_job> job;
  std::uint64_t seq;
  std::vector<shared_bytes> parts; ///< per task: its result, or a worker_lost item
  std::uint32_t remaining;
  bool failed = false; ///< the call was failed as a whole (terminate)
};

/// One chunk from its submission until its result or failure reaches its call.
struct pool_chunk {
  std::shared_ptr<pool_job> job;
  std::uint64_t seq;
  chunk_msg msg; ///< args empty when in big_args
  std::shared_ptr<const std::vector<std::byte>> big_args;
  int deaths = 0;
  std::uint64_t holder = 0;           ///< worker id, 0 = queued
  std::uint64_t sent = 0;             ///< dispatch order: a worker runs what it holds in this order
  clock::time_point dispatched{};     ///< when it was sent to its holder
  std::vector<std::uint32_t> ends;    ///< where each task's arguments end (splittable if count > 1)
  std::shared_ptr<pool_split> parent; ///< set on the parts of a split chunk
  std::uint32_t index = 0;            ///< this part's task in parent
  std::string exit_note{};            ///< how a dead holder's job ended, in its backend's words (out of memory)

  /// Finished with `results`: to its call, or into its split parent.
  void deliver(shared_bytes results) {
    if (!parent) return job->on_chunk(seq, msg.count, std::move(results));
    auto& p = *parent;
    if (p.failed) return;
    p.parts[index] = std::move(results);
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

  /// Can never finish: its call fails (once per split chunk).
  void fail(std::exception_ptr e) {
    if (!parent) return job->on_chunk_failed(seq, e);
    if (std::exchange(parent->failed, true)) return;
    parent->job->on_chunk_failed(parent->seq, e);
  }
};

/// One worker from its launch until its job's end.
struct pool_worker {
  std::string name;
  std::shared_ptr<worker_link> link;
  std::set<std::uint64_t> held; ///< the chunks sent to it whose results have not come
  double service_s = 0;         ///< moving average of its chunks' run time (0: none seen yet)
  clock::time_point last_result{};
  bool ready = false;  ///< connected, and its initializer (if any) has run
  bool seated = false; ///< takes tasks: one of at most `processes` (see pool_roster::seat)
  bool retiring = false;
  bool exited = false;
  std::uint64_t tasks = 0;                         ///< tasks sent to it (maxtasksperchild)
  std::unique_ptr<asio::steady_timer> drain_timer; ///< exited, its link still being read to the end
  std::unique_ptr<asio::steady_timer> exit_wait;   ///< link lost, waiting for the job's end (see on_link_lost)
  std::string lost_reason;                         ///< why the link was lost, while exit_wait runs
  std::string exit_reason;                         ///< the backend's words on the job's end
  std::uint64_t charged = 0;    ///< the chunk charged with its death (its exit report may come after)
  std::uint64_t tasks_lost = 0; ///< tasks it held when lost (handed back or failed): fiber::stats()

  /// Whether it has been sent its `maxtasksperchild` tasks (0: unlimited).
  bool spent(unsigned maxtasksperchild) const { return maxtasksperchild && tasks >= maxtasksperchild; }

  /// Its credit window: `prefetch` chunks, or about a millisecond of work
  /// when its chunks are shorter than that (at most 32).
  unsigned window(unsigned prefetch) const {
    // Tiny tasks are not throttled to `prefetch` per round trip while long
    // ones stay spread evenly (a worker never holds much more than 1 ms
    // beyond `prefetch` chunks of work that others could have taken).
    constexpr double target_s = 1e-3;
    constexpr unsigned max_window = 32;
    if (service_s <= 0 || service_s * prefetch >= target_s) return prefetch;
    return std::clamp(unsigned(target_s / service_s), prefetch, std::max(prefetch, max_window));
  }

  /// The result of a chunk sent at `dispatched` arrived at `now`: its run
  /// time goes into service_s.
  void finished(clock::time_point dispatched, clock::time_point now) {
    // It runs its chunks one after the other: this one started once the
    // previous result left, or once it arrived (plus latency).
    const auto start = std::max(last_result, dispatched);
    const double run = std::chrono::duration<double>(now - start).count();
    service_s = service_s == 0 ? run : 0.8 * service_s + 0.2 * run;
    last_result = now;
  }
};

/// A Pool's workers (by worker id) and chunks (by chunk id), and the queue
/// of chunks no worker holds. It records and counts; pool_scheduler
/// decides. Runtime thread only.
class pool_roster {
public:
  std::map<std::uint64_t, pool_worker> workers;
  std::unordered_map<std::uint64_t, pool_chunk> chunks;
  std::deque<std::uint64_t> pending; ///< chunk ids no worker holds, the next to send first

  /// Records chunk `seq` of `job` (its tasks' argument `ends`, the deaths
  /// charged so far, and for a part its split parent and task index) under a
  /// new chunk id, which it returns. The chunk is not queued.
  std::uint64_t add(const std::shared_ptr<pool_job>& job, std::uint64_t seq, chunk_msg msg,
                    std::vector<std::uint32_t> ends, int deaths, std::shared_ptr<pool_split> parent,
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
    chunks.emplace(id, pool_chunk{.job = job,
                                  .seq = seq,
                                  .msg = std::move(msg),
                                  .big_args = std::move(big),
                                  .deaths = deaths,
                                  .ends = std::move(ends),
                                  .parent = std::move(parent),
                                  .index = index});
    return id;
  }

  /// The tasks of chunk `rec` (taken out of chunks) as single-task chunks:
  /// new ids, the same deaths, in order.
  std::vector<std::uint64_t> split(const pool_chunk& rec) {
    const std::vector<std::byte>& args = rec.big_args ? *rec.big_args : rec.msg.args;
    auto parent = std::make_shared<pool_split>(pool_split{rec.job, rec.seq, std::vector<shared_bytes>(rec.msg.count),
                                                          rec.msg.count});
    std::vector<std::uint64_t> ids;
    std::uint32_t begin = 0;
    for (std::uint32_t k = 0; k < rec.msg.count; ++k) {
      const std::uint32_t end = rec.ends[k];
      chunk_msg m{0, rec.msg.target_id, 1, std::vector<std::byte>(args.begin() + begin, args.begin() + end)};
      begin = end;
      ids.push_back(add(rec.job, rec.seq, std::move(m), {}, rec.deaths, parent, k));
    }
    return ids;
  }

  /// Records chunk `c` (id `cid`) as sent to worker `w` (id `wid`) at `now`,
  /// after every chunk sent before.
  void mark_sent(std::uint64_t cid, pool_chunk& c, std::uint64_t wid, pool_worker& w, clock::time_point now) {
    c.holder = wid;
    c.sent = next_dispatch_++;
    c.dispatched = now;
    w.tasks += c.msg.count;
    w.held.insert(cid);
  }

  /// Every chunk, taken out; the queue is emptied.
  std::unordered_map<std::uint64_t, pool_chunk> take_chunks() {
    auto all = std::move(chunks);
    chunks.clear();
    pending.clear();
    return all;
  }

  /// The chunks of `held` that worker `id` still holds, in the order sent.
  std::vector<std::uint64_t> held_in_order(const std::set<std::uint64_t>& held, std::uint64_t id) const {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> mine; // (sent, chunk id)
    for (auto cid : held)
      if (auto c = chunks.find(cid); c != chunks.end() && c->second.holder == id)
        mine.emplace_back(c->second.sent, cid);
    std::sort(mine.begin(), mine.end());
    std::vector<std::uint64_t> ids;
    for (auto& m : mine) ids.push_back(m.second);
    return ids;
  }

  /// Whether charging worker `id`'s death now fails a task (see
  /// pool_scheduler::lose): the oldest chunk it holds is a single task at
  /// its last retry.
  bool would_fail(const pool_worker& w, std::uint64_t id, int max_retries) const {
    const pool_chunk* oldest = nullptr;
    for (auto cid : w.held)
      if (auto c = chunks.find(cid); c != chunks.end() && c->second.holder == id)
        if (!oldest || c->second.sent < oldest->sent) oldest = &c->second;
    return oldest && oldest->msg.count == 1 && oldest->deaths + 1 > max_retries;
  }

  /// The tasks of the queued chunks, counted up to `enough` at least (no
  /// need to count further).
  std::uint64_t queued_tasks(std::uint64_t enough) const {
    std::uint64_t queued = 0;
    for (auto cid : pending) {
      if (auto c = chunks.find(cid); c != chunks.end()) queued += c->second.msg.count;
      if (queued >= enough) break;
    }
    return queued;
  }

  /// A worker launched as `id`, known from now on (its flags all false).
  pool_worker& add_worker(std::uint64_t id) {
    auto& w = workers[id];
    count(id, w, +1);
    return w;
  }
  /// Sets worker `id`'s `link`, `ready`, `retiring`, `exited` or `seated` through
  /// `f(pool_worker&)`, keeping the counts below and the seating queue:
  /// those fields change only here, so that counting costs nothing per
  /// worker (a walk over 10,000 workers for each one connecting made a
  /// relayed fleet's start quadratic: docs/RATIONALE.md, "Scale").
  /// Returns the worker.
  template <class F>
  pool_worker& update(std::uint64_t id, F&& f) {
    auto& w = workers.at(id);
    count(id, w, -1);
    f(w);
    count(id, w, +1);
    return w;
  }
  /// Forgets worker `id`.
  void erase_worker(std::uint64_t id) {
    auto it = workers.find(id);
    if (it == workers.end()) return;
    count(id, it->second, -1);
    workers.erase(it);
  }

  /// Workers launched that have not connected, exited or been retired.
  unsigned starting() const { return starting_; }
  /// Workers not retiring.
  unsigned active() const { return active_; }
  /// Workers connected whose job has not ended.
  unsigned live() const { return live_; }

  /// Gives free seats (at most `processes` workers take tasks) to ready
  /// workers, lowest id first; those seated now are open (see next_open).
  void seat(unsigned processes) {
    while (seated_ < processes && !to_seat_.empty()) {
      const auto id = *to_seat_.begin();
      if (workers.at(id).link->closed()) { // its end is on its way: seated never
        to_seat_.erase(to_seat_.begin());
        continue;
      }
      update(id, [](pool_worker& w) { w.seated = true; });
      reopen(id);
    }
  }

  /// Whether `w` may be sent another chunk now.
  static bool can_take(const pool_worker& w, unsigned prefetch, unsigned maxtasksperchild) {
    return w.seated && w.ready && w.link && !w.link->closed() && !w.exited && !w.retiring &&
           w.held.size() < w.window(prefetch) && !w.spent(maxtasksperchild);
  }

  /// Worker `id` may take chunks again (its results came, or it was just
  /// sent one): it goes back into the dispatch order.
  void reopen(std::uint64_t id) {
    if (auto it = workers.find(id); it != workers.end()) open_.insert({it->second.held.size(), id});
  }

  /// The worker the next chunk goes to, or 0 when none can take one: the
  /// one holding the fewest chunks, then the lowest id — the order of passes
  /// over all workers, each giving one chunk to those holding no more than
  /// the pass number, without visiting every worker for each chunk. Entries
  /// are checked as they are taken: one that cannot take a chunk is
  /// dropped until reopen() or seat() puts it back.
  std::uint64_t next_open(unsigned prefetch, unsigned maxtasksperchild) {
    while (!open_.empty()) {
      const auto [held, id] = *open_.begin();
      open_.erase(open_.begin());
      auto it = workers.find(id);
      if (it == workers.end()) continue;
      if (it->second.held.size() != held) { // stale: its results came since
        open_.insert({it->second.held.size(), id});
        continue;
      }
      if (can_take(it->second, prefetch, maxtasksperchild)) return id;
    }
    return 0;
  }

private:
  // Adds (+1) or takes away (-1) worker `id`'s part in the counts and the
  // seating queue (connected and ready, not seated, retiring or exited).
  void count(std::uint64_t id, const pool_worker& w, int sign) {
    const auto add = [sign](unsigned& n, bool in) { n = in ? unsigned(int(n) + sign) : n; };
    add(active_, !w.retiring);
    add(starting_, !w.link && !w.exited && !w.retiring);
    add(live_, w.link && !w.exited);
    add(seated_, w.seated && !w.retiring);
    if (sign < 0) to_seat_.erase(id);
    else if (w.link && w.ready && !w.seated && !w.retiring && !w.exited) to_seat_.insert(id);
  }

  std::set<std::pair<std::size_t, std::uint64_t>> open_; // (chunks held, worker id): see next_open
  std::uint64_t next_chunk_ = 1, next_dispatch_ = 1;
  unsigned active_ = 0, starting_ = 0, live_ = 0, seated_ = 0; // see count()
  std::set<std::uint64_t> to_seat_;                            // lowest id seated first
};

} // namespace fiber::detail
