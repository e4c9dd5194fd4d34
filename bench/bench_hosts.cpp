// SPDX-License-Identifier: BSL-1.0
// bench_hosts: fiber across hosts (issue 22). The master runs in the root
// network namespace (10.200.0.1 on the rig's bridge), its workers in the
// network-namespace hosts of tests/rigs/netns-up.sh (righost1..3 =
// 10.200.0.11..13): every byte crosses two veth pairs and the bridge over
// tcp://, and the same again over tls+tcp:// (fiber's: OpenSSL's TLS 1.3
// handshake, then encrypted frames; raw nng's: mbedTLS; a certificate made
// here with the openssl CLI). Each figure sits next to raw nng between the
// same two namespaces in the same run (bench/baselines/nng_pingpong.c: its
// client in the root namespace, its server in righost1 by
// `--server-netns`), the runs interleaved repetition by repetition:
//
//  - apply round trip, Pool of 1 worker on righost1: median of --trips trips
//    (after 100 warm-up trips) against nng REQ/REP 64 B; targets ≤ 1.2x raw
//    nng over tcp://, and TLS ≤ 1.5x TCP (fiber's TLS round trip over its TCP one);
//  - unchunked apply_async stream (empty tasks), 1 worker: tasks/s, next to
//    nng PUSH/PULL 64 B msg/s (one way) [no target];
//  - payload: 1 MiB vector<float> argument and result, 1 worker: MiB/s moved
//    (arguments + results) against nng PUSH/PULL of 1 MiB messages (one
//    way, as bench_payload); target ≥ 0.8x over tcp://; TLS shown too,
//    and its price: TLS ≥ 0.5x fiber's own tcp:// (issue 28);
//  - price of frame MACs (docs/security.md): the round trip, the unchunked
//    stream and the payload over tcp:// on two Pools alive together, one
//    with frame MACs and one without, by turns (trip by trip, batch by
//    batch; which is made first alternates between repetitions): the
//    medians of the differences and ratios of the repetitions;
//    targets ≤ +5 µs and ≥ 0.9x;
//  - 1 ms overhead, bench_overhead's method: n tasks sleeping 1 ms,
//    chunksize 1, W = 2 workers (righost1, righost2), n so that the ideal
//    n·d/W is --ideal s; excess per task above an in-process control run next
//    to it, median of --pairs pairs; target ≤ 10 µs over tcp:// (TLS shown);
//    and the workers' gap between two tasks (see bench_overhead).
//
// How the workers get onto the hosts: a backend policy of this file (the
// public fiber::backend::launcher interface) that runs this executable as
// `nsenter --net=/run/netns/righostN -- <exe>` with fiber's local launcher
// and has them dial back tcp://10.200.0.1:0 (or tls+tcp://). Not the Slurm
// backend, because (1) the Slurm backend always listens on tcp:// (its
// listen_url has no TLS), (2) placement is exact (worker i on host i), and
// (3) a Pool starts in milliseconds instead of a scheduling pass per
// repetition. Steady state does not depend on the launcher: with
// `--slurm` and the `slurm-up.sh --nodes 3 --netns` rig up, the TCP round trip
// is measured once more with the worker a Slurm job on righost1 (a check row).
//
// Needs root (nsenter) and the rig (bash tests/rigs/netns-up.sh 3, or the
// Slurm rig with --netns); without them it says so and exits 0 (with
// --require-rig: 1).
//
//   bench_hosts [--reps 5] [--pairs 9] [--trips 2000] [--stream 20000] [--tasks 200] [--ideal 2.0]
//               [--hosts 3] [--transports tcp,tls] [--parts rtt,stream,payload,mac,overhead] [--slurm]
//               [--require-rig] [--control] [--pin] [--smoke]
// --transports / --parts: a subset (for profiling one figure; rows of the
// others then read n/a); --no-baseline: fiber alone (for perf stat / strace);
// --control: the mac part with neither Pool tagged (an A/A run, as
// bench_frame_mac's), to read the method's own bias and noise across hosts.
// --pin: every thread of the master on CPU 0, the workers on CPU 1 (taskset),
// so that two Pools' round trips differ only by what their links do, not by
// where the scheduler put their threads (the rows say "pinned").
#include "bench_mac_pair.hpp"
#include "bench_netns.hpp"
#include "bench_tasks.hpp"
#include "bench_util.hpp"

#include <fiber/backend/local.hpp>
#include <fiber/backend/slurm.hpp>
#include <fiber/fiber.hpp>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using namespace bench::netns;

// ---- tasks ------------------------------------------------------------------------

int f(int x) { return x + 1; }
std::vector<float> echo(std::vector<float> v) { return v; }

using bench::sleep_task;
using bench::stamp;
using bench::worker_gaps;

constexpr std::size_t floats = (1u << 20) / sizeof(float);

/// A CA-less self-signed certificate whose names are every address a peer
/// dials (OpenSSL checks an address against the subjectAltName IP
/// entries, a name against the DNS ones); used as its own CA, so both sides verify each other, as in
/// fiber's TLS tests. Empty on failure.
struct tls_files {
  std::string dir, cert, key;
  ~tls_files() {
    if (!dir.empty()) fs::remove_all(dir);
  }
};
bool make_tls(tls_files& t, int hosts) {
  char tmpl[] = "/tmp/fiber-bench-hosts-tls-XXXXXX";
  if (!::mkdtemp(tmpl)) return false;
  t.dir = tmpl;
  t.cert = t.dir + "/cert.pem";
  t.key = t.dir + "/key.pem";
  std::string san = "DNS:127.0.0.1,IP:127.0.0.1,DNS:" + std::string(master_addr) + ",IP:" + master_addr;
  for (int i = 1; i <= hosts; ++i) san += ",DNS:" + host_addr(i) + ",IP:" + host_addr(i);
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=fiber-bench -addext "
                          "subjectAltName=" +
                          san + " -keyout " + t.key + " -out " + t.cert + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0 && bench::exists(t.cert);
}

// ---- raw nng between the namespaces --------------------------------------------

struct nng_hosts {
  double rtt_us = NAN, push64_msgs = NAN, push1m_mibs = NAN;
};
nng_hosts run_nng(bool tls, const tls_files& t, long trips, long n64, long n1m, const std::string& tests) {
  nng_hosts r;
  auto bin = bench::peer_binary("nng_pingpong", "-lnng");
  if (!bin) return r;
  std::string cmd = *bin + " --url " + (tls ? "tls+tcp://" : "tcp://") + host_addr(1) + ":0 --server-netns " +
                    ns_name(1) + " --tests " + tests;
  if (tls) cmd += " --tls-cert " + t.cert + " --tls-key " + t.key + " --tls-ca " + t.cert;
  cmd += " " + std::to_string(trips) + " " + std::to_string(n64) + " " + std::to_string(n1m) + " 1";
  auto out = bench::run_capture(cmd);
  const std::string lbl = tls ? "tls" : "tcp";
  r.rtt_us = bench::grab(out, R"(REQ/REP\s+)" + lbl + R"(\s+64B RTT us: median\s+([0-9.]+))");
  r.push64_msgs = bench::grab(out, R"(PUSH/PULL )" + lbl + R"(\s+64B: median\s+([0-9.]+) msg/s)");
  r.push1m_mibs = bench::grab(out, R"(PUSH/PULL )" + lbl + R"(\s+1048576B: median\s+[0-9.]+ msg/s\s+([0-9.]+) MiB/s)");
  return r;
}

// ---- fiber ------------------------------------------------------------------------

struct fiber_one {
  double rtt_us = NAN, rtt_p99_us = NAN, stream_tasks = NAN, payload_mibs = NAN;
};

/// Round trip, stream and payload on a Pool of one worker on righost1.
/// trips, stream or tasks 0: that part is not run.
template <class Backend>
fiber_one run_fiber_one(int trips, int stream, int tasks) {
  fiber_one r;
  place_on({1});
  fiber::Pool<&f, Backend> pool{fiber::target<&f>, {.processes = 1}};
  std::vector<double> t;
  for (int i = 0; i < (trips ? trips + 100 : 0); ++i) {
    auto t0 = bench::clk::now();
    int y = pool.apply(i);
    double us = bench::seconds_since(t0) * 1e6;
    if (y != i + 1) std::fprintf(stderr, "bench_hosts: bad result\n");
    if (i >= 100) t.push_back(us);
  }
  r.rtt_us = bench::median(t);
  r.rtt_p99_us = bench::quantile(t, 0.99);
  if (stream) r.stream_tasks = stream / bench::apply_stream(pool, stream, "bench_hosts");
  pool.terminate();
  if (!tasks) return r;
  // Payload: a Pool of its own (echo).
  place_on({1});
  fiber::Pool<&echo, Backend> ep{fiber::target<&echo>, {.processes = 1}};
  std::vector<float> v(floats);
  for (std::size_t i = 0; i < floats; ++i) v[i] = float(i);
  for (int i = 0; i < 2; ++i) (void)ep.apply(v); // warm-up: connected, buffers grown
  auto t0 = bench::clk::now();
  std::vector<fiber::async_result<std::vector<float>>> hs;
  hs.reserve(std::size_t(tasks));
  for (int i = 0; i < tasks; ++i) hs.push_back(ep.apply_async(v));
  std::size_t bad = 0;
  for (auto& h : hs) {
    auto out = h.get();
    bad += out.size() != floats || out[floats - 1] != v[floats - 1];
  }
  r.payload_mibs = 2.0 * tasks / bench::seconds_since(t0);
  if (bad) std::fprintf(stderr, "bench_hosts: %zu bad payload results\n", bad);
  return r;
}

/// The price of frame MACs: round trips, unchunked stream batches and 1 MiB
/// payload batches over tcp:// on two Pools alive together, one with frame
/// MACs and one without, by turns. trips, stream or tasks 0: not run.
inline void on_righost1() { place_on({1}); }

template <class Backend>
std::pair<fiber_one, fiber_one> run_mac_pair(int trips, int stream, int tasks, bool on_first) {
  fiber_one on, off;
  {
    auto [p_on, p_off] = bench::pools_on_off<&f, Backend>(on_first, on_righost1, 0);
    std::vector<double> t_on, t_off;
    bench::by_turns(*p_on, *p_off, trips ? trips + 100 : 0, [&, i = 0](auto& pool, bool mac) mutable {
      auto t0 = bench::clk::now();
      (void)pool.apply(1);
      if (i++ >= 200) (mac ? t_on : t_off).push_back(bench::seconds_since(t0) * 1e6);
    });
    on.rtt_us = bench::median(t_on);
    off.rtt_us = bench::median(t_off);
    const int batches = 10, per = stream / batches;
    double s_on = 0, s_off = 0;
    bench::by_turns(*p_on, *p_off, per > 0 ? batches : 0, [&](auto& pool, bool mac) {
      auto t0 = bench::clk::now();
      std::vector<fiber::async_result<int>> hs;
      for (int i = 0; i < per; ++i) hs.push_back(pool.apply_async(i));
      for (auto& h : hs) (void)h.get();
      (mac ? s_on : s_off) += bench::seconds_since(t0);
    });
    if (per > 0) on.stream_tasks = per * batches / s_on, off.stream_tasks = per * batches / s_off;
  }
  if (!tasks) return {on, off};
  std::vector<float> v(floats, 1.0f);
  auto [p_on, p_off] = bench::pools_on_off<&echo, Backend>(on_first, on_righost1, v);
  const int per = std::min(tasks, 20), batches = (tasks + per - 1) / per;
  double s_on = 0, s_off = 0;
  bench::by_turns(*p_on, *p_off, batches, [&](auto& pool, bool mac) {
    auto t0 = bench::clk::now();
    std::vector<fiber::async_result<std::vector<float>>> hs;
    for (int i = 0; i < per; ++i) hs.push_back(pool.apply_async(v));
    for (auto& h : hs)
      if (h.get().size() != floats) std::fprintf(stderr, "bench_hosts: bad payload result\n");
    (mac ? s_on : s_off) += bench::seconds_since(t0);
  });
  on.payload_mibs = 2.0 * per * batches / s_on;
  off.payload_mibs = 2.0 * per * batches / s_off;
  return {on, off};
}

struct overhead_run {
  double excess_us = NAN; // (wall - ideal) / n
  double gap_median = NAN, gap_mean = NAN;
};

/// n tasks sleeping d_us on W workers (hosts 1..W), chunksize 1.
template <class Backend>
overhead_run run_overhead(unsigned W, std::size_t n, int d_us) {
  overhead_run r;
  std::vector<int> hosts;
  for (unsigned i = 0; i < W; ++i) hosts.push_back(int(i % 3) + 1);
  place_on(hosts);
  fiber::Pool<&sleep_task, Backend> pool{fiber::target<&sleep_task>, {.processes = W}};
  (void)pool.map(std::vector<int>(4 * W, 0), 1); // warm-up: every worker connected
  std::vector<int> in(n, d_us);
  auto t0 = bench::clk::now();
  auto out = pool.map(in, 1);
  double wall = bench::seconds_since(t0);
  double ideal = double(n) * d_us / 1e6 / W;
  r.excess_us = (wall - ideal) / double(n) * 1e6;
  auto gaps = worker_gaps(out);
  double sum = 0;
  for (double g : gaps) sum += g;
  r.gap_median = bench::median(gaps);
  r.gap_mean = gaps.empty() ? NAN : sum / double(gaps.size());
  return r;
}

/// The in-process control: n/W sleeps of d_us back to back; excess per task.
double run_control(unsigned W, std::size_t n, int d_us) {
  auto t0 = bench::clk::now();
  for (std::size_t i = 0; i < n / W; ++i) sleep_task(d_us);
  double wall = bench::seconds_since(t0);
  double ideal = double(n) * d_us / 1e6 / W;
  return (wall - ideal) / double(n) * 1e6;
}

bool slurm_netns_rig() {
  auto out = bench::run_capture("timeout 5 sinfo -h -N -o %N 2>/dev/null");
  return out.find(ns_name(1)) != std::string::npos;
}

/// Apply round trip with the worker a Slurm job on righost1 (TCP; the Slurm backend has no TLS).
double run_slurm_rtt(int trips) {
  fiber::set_config("listen_address", master_addr);
  fiber::set_config("slurm.extra_args", "--nodelist=" + ns_name(1));
  fiber::set_config("slurm.launch_mode", "sbatch");
  fiber::pool_options o;
  o.processes = 1;
  o.name = "fiber-bench-hosts";
  fiber::Pool<&f, fiber::backend::slurm> pool{fiber::target<&f>, o};
  std::vector<double> t;
  for (int i = 0; i < trips + 100; ++i) {
    auto t0 = bench::clk::now();
    (void)pool.apply(i);
    if (i >= 100) t.push_back(bench::seconds_since(t0) * 1e6);
  }
  pool.close();
  pool.join();
  return bench::median(t);
}

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv); // a worker: serves, never returns
  auto a = bench::parse_common(argc, argv);
  if (!a.reps_given && !a.smoke) a.reps = 5;
  auto num = [&](const char* name, const char* def, const char* smoke) {
    return std::atoi(bench::opt(a, name).value_or(a.smoke ? smoke : def).c_str());
  };
  const int trips = num("--trips", "2000", "100"), stream = num("--stream", "20000", "500"),
            tasks = num("--tasks", "200", "6"), pairs = a.smoke ? 1 : num("--pairs", "9", "1");
  const double ideal_s = std::atof(bench::opt(a, "--ideal").value_or(a.smoke ? "0.05" : "2.0").c_str());
  const int nhosts = std::max(2, num("--hosts", "3", "3"));
  const bool want_slurm = std::find(a.rest.begin(), a.rest.end(), "--slurm") != a.rest.end();
  const bool require_rig = std::find(a.rest.begin(), a.rest.end(), "--require-rig") != a.rest.end();
  const bool no_baseline = std::find(a.rest.begin(), a.rest.end(), "--no-baseline") != a.rest.end();
  bench::mac_control = std::find(a.rest.begin(), a.rest.end(), "--control") != a.rest.end();
  const bool pin = std::find(a.rest.begin(), a.rest.end(), "--pin") != a.rest.end();
  const std::string transports = bench::opt(a, "--transports").value_or("tcp,tls"), parts = [&] {
    auto p = bench::opt(a, "--parts").value_or("rtt,stream,payload,mac,overhead");
    return p == "one" ? std::string("rtt,stream,payload") : p;
  }();
  auto in = [](const std::string& list, const std::string& x) {
    return ("," + list + ",").find("," + x + ",") != std::string::npos;
  };
  fiber::set_log_level(fiber::log_level::error);
  bench::header("bench_hosts: master in the root namespace, workers on the netns rig's hosts, tcp:// and tls+tcp://");

  const std::string rt_name = "hosts: apply round trip, 1 worker on " + ns_name(1);
  if (auto why = rig_missing(nhosts); !why.empty()) {
    std::printf("skipped: the network-namespace rig is not usable here: %s (as root: bash tests/rigs/netns-up.sh 3, "
                "or tests/rigs/slurm-up.sh --nodes 3 --netns)\n",
                why.c_str());
    bench::row(rt_name + ", tcp://", "median µs", "skipped: no rig", "-", "-", "≤ 1.2x", "n/a");
    return require_rig ? 1 : 0;
  }
  if (pin) {
    if (std::thread::hardware_concurrency() < 2 || !pin_this_process(0)) {
      std::printf("--pin: needs two CPUs this process may use\n");
      return 1;
    }
    place().worker_cpus = "1";
    std::printf("pinned: master on CPU 0, workers on CPU 1\n");
  }
  tls_files tls;
  const bool have_tls = make_tls(tls, nhosts);
  if (have_tls) {
    fiber::set_config("tls_cert", tls.cert);
    fiber::set_config("tls_key", tls.key);
    fiber::set_config("tls_ca", tls.cert);
  } else {
    std::printf("no TLS rows: could not make a certificate with the openssl CLI\n");
  }
  const int d_us = 1000;
  const unsigned W = 2;
  const std::size_t n = std::max<std::size_t>(W, std::size_t(std::llround(ideal_s * W / (d_us / 1e6))));
  std::printf("master %s; hosts %s..%s; trips=%d stream=%d payload tasks=%d reps=%d; overhead: W=%u n=%zu "
              "(ideal %.2f s) pairs=%d\n",
              master_addr, ns_name(1).c_str(), ns_name(nhosts).c_str(), trips, stream, tasks, a.reps, W, n, ideal_s,
              pairs);
  std::fflush(stdout);

  // ---- one worker: round trip, stream, payload ----
  std::map<std::string, std::vector<double>> s; // series
  const long n64 = a.smoke ? 2000 : 20000, n1m = a.smoke ? 10 : 200;
  const bool one_worker = in(parts, "rtt") || in(parts, "stream") || in(parts, "payload");
  std::string nng_tests;
  for (auto [part, test] : {std::pair{"rtt", "rtt"}, {"stream", "push64"}, {"payload", "push1m"}})
    if (in(parts, part)) nng_tests += (nng_tests.empty() ? "" : ",") + std::string(test);
  // The price of frame MACs over tcp://: two Pools, with and without, by turns.
  const bool mac_part = in(transports, "tcp") && in(parts, "mac");
  auto run_mac = [&](int rep) {
    std::pair<fiber_one, fiber_one> r;
    try {
      r = run_mac_pair<hosts_tcp>(trips, in(parts, "stream") ? stream : 0, tasks, rep % 2 == 0);
    } catch (const std::exception& e) {
      std::printf("fiber over tcp with and without frame MACs failed: %s\n", e.what());
    }
    for (auto [k, fo] : {std::pair{"mac", r.first}, {"nomac", r.second}}) {
      s[std::string("rtt_") + k].push_back(fo.rtt_us);
      s[std::string("stream_") + k].push_back(fo.stream_tasks);
      s[std::string("payload_") + k].push_back(fo.payload_mibs);
    }
    std::printf("rep %d tcp, frame MACs on / off by turns: apply RTT median %.1f / %.1f µs || stream %.0f / %.0f "
                "tasks/s || payload %.0f / %.0f MiB/s\n",
                rep + 1, r.first.rtt_us, r.second.rtt_us, r.first.stream_tasks, r.second.stream_tasks,
                r.first.payload_mibs, r.second.payload_mibs);
    std::fflush(stdout);
  };
  for (int rep = 0; rep < a.reps && one_worker; ++rep) {
    for (bool use_tls : {false, true}) {
      const std::string k = use_tls ? "tls" : "tcp";
      if ((use_tls && !have_tls) || !in(transports, k)) continue;
      auto nn = no_baseline ? nng_hosts{} : run_nng(use_tls, tls, trips, n64, n1m, nng_tests);
      s["nng_rtt_" + k].push_back(nn.rtt_us);
      s["nng_push64_" + k].push_back(nn.push64_msgs);
      s["nng_push1m_" + k].push_back(nn.push1m_mibs);
      fiber_one fo;
      try {
        const int tr = in(parts, "rtt") ? trips : 0, st = in(parts, "stream") ? stream : 0,
                  ta = in(parts, "payload") ? tasks : 0;
        fo = use_tls ? run_fiber_one<hosts_tls>(tr, st, ta) : run_fiber_one<hosts_tcp>(tr, st, ta);
      } catch (const std::exception& e) {
        std::printf("fiber over %s failed: %s\n", k.c_str(), e.what());
      }
      s["rtt_" + k].push_back(fo.rtt_us);
      s["p99_" + k].push_back(fo.rtt_p99_us);
      s["stream_" + k].push_back(fo.stream_tasks);
      s["payload_" + k].push_back(fo.payload_mibs);
      std::printf("rep %d %s: apply RTT median %.1f µs (p99 %.1f) | nng REQ/REP %.1f µs || stream %.0f tasks/s | "
                  "nng PUSH/PULL 64 B %.0f msg/s || payload %.0f MiB/s | nng PUSH/PULL 1 MiB %.0f MiB/s\n",
                  rep + 1, k.c_str(), fo.rtt_us, fo.rtt_p99_us, nn.rtt_us, fo.stream_tasks, nn.push64_msgs,
                  fo.payload_mibs, nn.push1m_mibs);
      std::fflush(stdout);
    }
    if (mac_part) run_mac(rep);
  }

  // ---- 1 ms overhead: pairs (control, tcp, tls) ----
  for (int p = 0; p < pairs && in(parts, "overhead"); ++p) {
    double ctl = run_control(W, n, d_us);
    s["ctl"].push_back(ctl);
    for (bool use_tls : {false, true}) {
      const std::string k = use_tls ? "tls" : "tcp";
      if ((use_tls && !have_tls) || !in(transports, k)) continue;
      overhead_run o;
      try {
        o = use_tls ? run_overhead<hosts_tls>(W, n, d_us) : run_overhead<hosts_tcp>(W, n, d_us);
      } catch (const std::exception& e) {
        std::printf("overhead over %s failed: %s\n", k.c_str(), e.what());
      }
      s["ovh_" + k].push_back(o.excess_us - ctl);
      s["gapmed_" + k].push_back(o.gap_median);
      s["gapmean_" + k].push_back(o.gap_mean);
      std::printf("pair %d %s: excess %.1f µs/task, control %.1f µs/task -> %.1f above the control; worker gap "
                  "median %.1f mean %.1f µs\n",
                  p + 1, k.c_str(), o.excess_us, ctl, o.excess_us - ctl, o.gap_median, o.gap_mean);
      std::fflush(stdout);
    }
  }

  double slurm_rtt = NAN;
  if (want_slurm && !a.smoke) {
    if (slurm_netns_rig()) {
      try {
        slurm_rtt = run_slurm_rtt(trips);
        std::printf("slurm: apply RTT median %.1f µs (worker a Slurm job on %s)\n", slurm_rtt, ns_name(1).c_str());
      } catch (const std::exception& e) {
        std::printf("slurm check failed: %s\n", e.what());
      }
    } else {
      std::printf("slurm check skipped: no Slurm node %s (bash tests/rigs/slurm-up.sh --nodes 3 --netns)\n",
                  ns_name(1).c_str());
    }
  }

  // ---- rows ----
  auto m = [&](const std::string& k) { return bench::median(s[k]); };
  std::string one = ", 1 worker on " + ns_name(1) + (pin ? " (pinned)" : "");
  for (bool use_tls : {false, true}) {
    if (use_tls && !have_tls) {
      bench::row("hosts: tls+tcp://", "all figures", "n/a (no openssl CLI)", "-", "-", "-", "n/a");
      continue;
    }
    const std::string k = use_tls ? "tls" : "tcp", scheme = use_tls ? "tls+tcp://" : "tcp://";
    const double rtt = m("rtt_" + k), nrtt = m("nng_rtt_" + k);
    bench::row("hosts " + scheme + ": apply round trip" + one, "median µs", bench::fmt("%.1f", rtt),
               "raw nng REQ/REP " + k + " (root ns ↔ " + ns_name(1) + "): " + bench::fmt("%.1f", nrtt),
               bench::fmt("%.2fx", rtt / nrtt), use_tls ? "-" : "≤ 1.2x",
               use_tls ? "-" : bench::verdict(rtt / nrtt <= 1.2, !std::isnan(nrtt)));
    bench::row("hosts " + scheme + ": apply round trip" + one, "p99 µs", bench::fmt("%.1f", m("p99_" + k)), "-", "-",
               "-", "-");
    bench::row("hosts " + scheme + ": apply_async stream, empty tasks" + one, "tasks/s",
               bench::fmt("%.3g", m("stream_" + k)),
               "raw nng PUSH/PULL 64 B " + k + ": " + bench::fmt("%.3g", m("nng_push64_" + k)) + " msg/s",
               bench::fmt("%.2fx", m("stream_" + k) / m("nng_push64_" + k)), "-", "-");
    const double pay = m("payload_" + k), npay = m("nng_push1m_" + k);
    bench::row("hosts " + scheme + ": payload (1 MiB argument and result)" + one, "MiB/s moved (arguments + results)",
               bench::fmt("%.0f", pay), "raw nng PUSH/PULL 1 MiB " + k + ": " + bench::fmt("%.0f", npay),
               bench::fmt("%.2fx", pay / npay), use_tls ? "-" : "≥ 0.8x",
               use_tls ? "-" : bench::verdict(pay / npay >= 0.8, !std::isnan(npay)));
    const double ovh = m("ovh_" + k);
    const std::string oname = "hosts " + scheme + ": overhead 1 ms, W=2 (" + ns_name(1) + ", " + ns_name(2) + ")";
    bench::row(oname,
               "excess µs/task above control, median of " + std::to_string(s["ovh_" + k].size()) +
                   " pairs (control: " + bench::fmt("%.1f", m("ctl")) + " µs)",
               bench::fmt("%.1f", ovh), "-", "-", use_tls ? "-" : "≤ 10 µs",
               use_tls ? "-" : bench::verdict(ovh <= 10, !std::isnan(ovh)));
    bench::row(oname, "worker's gap between tasks, median (mean) µs; mean/W per task",
               bench::fmt("%.1f", m("gapmed_" + k)) + " (" + bench::fmt("%.1f", m("gapmean_" + k)) + "); " +
                   bench::fmt("%.1f", m("gapmean_" + k) / W),
               "-", "-", "-", "-");
  }
  if (have_tls) {
    const double r = m("rtt_tls") / m("rtt_tcp");
    bench::row("hosts: price of TLS, apply round trip" + one, "tls+tcp:// / tcp:// median",
               bench::fmt("%.1f", m("rtt_tls")) + " / " + bench::fmt("%.1f", m("rtt_tcp")) + " µs",
               "raw nng tls / tcp: " + bench::fmt("%.1f", m("nng_rtt_tls")) + " / " +
                   bench::fmt("%.1f", m("nng_rtt_tcp")) + " µs (" +
                   bench::fmt("%.2fx", m("nng_rtt_tls") / m("nng_rtt_tcp")) + ")",
               bench::fmt("%.2fx", r), "≤ 1.5x", bench::verdict(r <= 1.5, !std::isnan(r)));
    const double pr = m("payload_tls") / m("payload_tcp");
    bench::row("hosts: price of TLS, 1 MiB payload" + one, "tls+tcp:// / tcp:// MiB/s",
               bench::fmt("%.0f", m("payload_tls")) + " / " + bench::fmt("%.0f", m("payload_tcp")),
               "raw nng tls / tcp: " + bench::fmt("%.0f", m("nng_push1m_tls")) + " / " +
                   bench::fmt("%.0f", m("nng_push1m_tcp")),
               bench::fmt("%.2fx", pr), "≥ 0.5x", bench::verdict(pr >= 0.5, !std::isnan(pr)));
  }
  if (in(parts, "mac")) { // medians of the differences and ratios within each repetition
    if (bench::mac_control) one += " (control: neither Pool has tags)";
    std::vector<double> dr, pq, sq;
    for (std::size_t i = 0; i < s["rtt_nomac"].size(); ++i) {
      dr.push_back(s["rtt_mac"][i] - s["rtt_nomac"][i]);
      pq.push_back(s["payload_mac"][i] / s["payload_nomac"][i]);
      if (s["stream_nomac"][i] > 0) sq.push_back(s["stream_mac"][i] / s["stream_nomac"][i]);
    }
    const double d = bench::median(dr), pr = bench::median(pq), sr = sq.empty() ? NAN : bench::median(sq);
    bench::row("hosts: price of frame MACs, apply round trip" + one,
               "tcp:// median µs, frame MACs on − off, two Pools by turns (median of the differences)",
               bench::fmt("%.1f", m("rtt_mac")) + " − " + bench::fmt("%.1f", m("rtt_nomac")),
               "frame_mac = false: " + bench::fmt("%.1f", m("rtt_nomac")), bench::fmt("%+.1f µs", d), "≤ +5 µs",
               bench::verdict(d <= 5.0, !std::isnan(d)));
    bench::row("hosts: price of frame MACs, 1 MiB payload" + one,
               "tcp:// MiB/s, frame MACs on / off, two Pools by turns (median of the ratios)",
               bench::fmt("%.0f", m("payload_mac")) + " / " + bench::fmt("%.0f", m("payload_nomac")),
               "frame_mac = false: " + bench::fmt("%.0f", m("payload_nomac")), bench::fmt("%.2fx", pr), "≥ 0.9x",
               bench::verdict(pr >= 0.9, !std::isnan(pr)));
    if (in(parts, "stream"))
      bench::row("hosts: price of frame MACs, unchunked stream" + one,
                 "tcp:// tasks/s, frame MACs on / off, two Pools by turns (median of the ratios)",
                 bench::fmt("%.0f", m("stream_mac")) + " / " + bench::fmt("%.0f", m("stream_nomac")),
                 "frame_mac = false: " + bench::fmt("%.0f", m("stream_nomac")), bench::fmt("%.2fx", sr), "-", "-");
  }
  if (!std::isnan(slurm_rtt))
    bench::row("hosts tcp://: apply round trip, 1 worker a Slurm job on " + ns_name(1) + " (check: same path)",
               "median µs", bench::fmt("%.1f", slurm_rtt), "netns launcher: " + bench::fmt("%.1f", m("rtt_tcp")),
               bench::fmt("%.2fx", slurm_rtt / m("rtt_tcp")), "-", "-");
  return 0;
}
