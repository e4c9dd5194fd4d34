// SPDX-License-Identifier: BSL-1.0
// bench_objects: the object store (fiber::put, object_ref<T>::get) against
// sending the value in every task, and against Python's shared memory.
//
//  1. One object, many local readers: a --size MiB std::vector<float> put
//     once; for each W of --workers, a Pool of W workers (warmed up: every
//     worker has run a task), then W tasks (chunksize 1) that get() it,
//     touch one float per 4 KiB page and return the sum, their pid and where
//     the span lies. Figures: seconds until all W have it; the object's PSS
//     summed over the workers and the owner (read from /proc/PID/smaps once
//     all have it, so sharing is counted once), as a multiple of one copy
//     (target ≤ 1.1x). Baselines in the same run: (a) the vector as each
//     task's argument (today's way: W private copies, each counted by its
//     resident bytes, mincore), only where its peak memory fits (see below); (b)
//     Python's multiprocessing.shared_memory (bench/baselines/shm_attach.py:
//     W forked processes attach by name and touch every page).
//  2. ES bytes per generation (dry run, local): θ = 166,673 floats (a
//     256x256 MLP for Humanoid), P tasks, each reading one element. The
//     master's egress around one map (automatic chunksize), over
//     tcp://127.0.0.1: the bytes_sent of its TCP sockets (`ss -ti`; not
//     /proc/self/io wchar, which leaves out sendmsg, nng's send: it stays at
//     0 here, printed beside), tasks carrying (θ, seed) against one put(θ)
//     and tasks of (object_ref, seed). Target: put-once ≤ |θ| x hosts +
//     64 B x P.
//  3. Across hosts (the netns rig of tests/rigs/netns-up.sh 3, as root;
//     skipped with the reason otherwise): 3 workers, one per host, each
//     get() a --remote-size MiB object put in the master: seconds until all
//     have it, against size / link rate when --rate-mbit shapes the links
//     (tc tbf on the rig's veths, removed after); the master's egress (its
//     sockets' bytes_sent; the veths' tx_bytes beside) against the object's
//     size (target ≤ 1.2x: each host fetches its own copy from the owner
//     today, so ~3x).
//
// Sizes for this machine (2 CPUs, 23 GiB, shared): --size 1024 default, W up
// to 64. Baseline (a) needs about 2W + 3 copies at its peak (the owner's
// vector and object, the serialized argument, and per worker its receive
// buffer and decoded vector), so it runs only where W x size ≤ 8 GiB and
// that peak fits in 60% of MemAvailable; else n/a with the reason. P =
// 1000 and 10000 (today's way holds up to P x |θ| = 6.7 GB of serialized
// tasks in the master at P = 10000).
//
//   bench_objects [--size 1024] [--workers 1,8,64] [--population 1000,10000] [--es-workers 2]
//                 [--remote-size 256] [--rate-mbit R] [--parts local,es,hosts] [--reps 3]
//                 [--require-rig] [--smoke]
#include "bench_netns.hpp"
#include "bench_util.hpp"

#include <fiber/fiber.hpp>
#include <fiber/object_store.hpp>

#include <cstdint>
#include <map>
#include <ranges>
#include <set>
#include <span>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

namespace {

using floats = fiber::object_ref<std::vector<float>>;
constexpr std::size_t page_floats = 4096 / sizeof(float);

/// One reader's report: the sum of the floats it touched, its pid, where
/// its view lies (to read its PSS from outside), and its share of memory
/// (kB) read in the task: the mapping's PSS, or a private copy's resident
/// bytes.
using reading = std::tuple<double, std::int64_t, std::uint64_t, std::int64_t>;

/// The Pss (kB) of the mapping of process `pid` (0: this one) that holds
/// `addr`; -1 if none.
long mapping_pss_kb(long pid, std::uint64_t addr) {
  std::ifstream sm(pid ? "/proc/" + std::to_string(pid) + "/smaps" : std::string("/proc/self/smaps"));
  std::string line;
  bool in = false;
  while (std::getline(sm, line)) {
    std::uint64_t lo = 0, hi = 0;
    char dash = 0;
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') != std::string::npos &&
        line.find(':') > line.find(' ')) {
      std::istringstream ls(line);
      ls >> std::hex >> lo >> dash >> hi;
      in = addr >= lo && addr < hi;
    } else if (in && line.rfind("Pss:", 0) == 0) {
      return std::atol(line.c_str() + 4);
    }
  }
  return -1;
}

/// Bytes this process's TCP sockets sent (tcpi_bytes_sent, from `ss -ti`):
/// its egress on the wire, which /proc/self/io wchar does not count (nng
/// sends with sendmsg, which wchar leaves out).
std::uint64_t tcp_bytes_sent() {
  const std::string me = "pid=" + std::to_string(::getpid()) + ",";
  std::string out;
  if (FILE* p = ::popen("ss -tinpH 2>/dev/null", "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ::pclose(p);
  }
  std::istringstream in(out);
  std::uint64_t sum = 0;
  bool mine = false;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (!std::isspace(static_cast<unsigned char>(line[0]))) mine = line.find(me) != std::string::npos;
    if (auto at = line.find("bytes_sent:"); mine && at != std::string::npos)
      sum += std::strtoull(line.c_str() + at + 11, nullptr, 10);
  }
  return sum;
}

/// Resident bytes of [p, p + n): for a private copy, its whole share (PSS)
/// of memory, where the PSS of its mapping would count what the allocator
/// put next to it.
std::uint64_t resident_bytes(const void* p, std::size_t n) {
  const std::size_t pg = std::size_t(::sysconf(_SC_PAGESIZE));
  auto lo = reinterpret_cast<std::uintptr_t>(p) & ~(pg - 1);
  const auto hi = reinterpret_cast<std::uintptr_t>(p) + n;
  std::vector<unsigned char> in((hi - lo + pg - 1) / pg);
  if (::mincore(reinterpret_cast<void*>(lo), hi - lo, in.data()) != 0) return 0;
  std::uint64_t r = 0;
  for (auto c : in) r += (c & 1) * pg;
  return r;
}

std::uint64_t wchar() {
  std::ifstream io("/proc/self/io");
  std::string k;
  std::uint64_t v = 0;
  while (io >> k >> v)
    if (k == "wchar:") return v;
  return 0;
}

std::uint64_t tx_bytes(const std::string& dev) {
  std::ifstream f("/sys/class/net/" + dev + "/statistics/tx_bytes");
  std::uint64_t v = 0;
  f >> v;
  return v;
}

long mem_available_mb() {
  std::ifstream f("/proc/meminfo");
  std::string k;
  long v = 0;
  std::string unit;
  while (f >> k >> v >> unit)
    if (k == "MemAvailable:") return v / 1024;
  return 0;
}

// A page-strided read: what a reader that uses the object pays to map it.
reading touch(std::span<const float> v) {
  double s = 0;
  for (std::size_t i = 0; i < v.size(); i += page_floats) s += v[i];
  const auto at = reinterpret_cast<std::uint64_t>(v.data());
  return {s, ::getpid(), at, mapping_pss_kb(0, at)};
}

// Warm-up tasks (an empty input) sleep a little, so that every worker gets one.
reading warm() {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return {0, ::getpid(), 0, -1};
}

reading read_ref(floats r) { return r ? touch(r.get()) : warm(); }
reading read_copy(std::vector<float> v) {
  if (v.empty()) return warm();
  auto r = touch(v);
  std::get<3>(r) = std::int64_t(resident_bytes(v.data(), v.size() * sizeof(float)) / 1024);
  return r;
}

// ES tasks: one element of θ (the rollout itself is not what is measured).
float es_copy(std::pair<std::vector<float>, std::uint64_t> t) {
  return t.first[std::size_t(t.second % t.first.size())];
}
float es_ref(std::pair<floats, std::uint64_t> t) {
  auto th = t.first.get();
  return th[std::size_t(t.second % th.size())];
}

/// Starts every worker of `pool`: warm-up maps until W distinct pids ran one.
template <class P, class Empty>
std::size_t warm_up(P& pool, unsigned W, Empty empty) {
  std::set<std::int64_t> pids;
  for (int round = 0; round < 20 && pids.size() < W; ++round)
    for (auto& r : pool.map(std::vector(2 * W, empty), 1)) pids.insert(std::get<1>(r));
  return pids.size();
}

std::vector<unsigned> parse_list(const std::string& s) {
  std::vector<unsigned> v;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) v.push_back(unsigned(std::stoul(x)));
  return v;
}

struct local_figures {
  double secs = NAN, pss_x = NAN;
  std::size_t readers = 0;
};

// fiber: W tasks that get() the object on a fresh, warmed-up Pool.
local_figures run_put(const floats& ref, unsigned W, const std::vector<float>& v) {
  fiber::Pool<&read_ref> pool{fiber::target<&read_ref>, {.processes = W}};
  const auto up = warm_up(pool, W, floats());
  auto t0 = bench::clk::now();
  auto got = pool.map(std::vector<floats>(W, ref), 1);
  local_figures f;
  f.secs = bench::seconds_since(t0);
  // Every reader's PSS now that all of them map it (a reader that read it
  // early saw a larger share), and the owner's once it read it too.
  auto own = ref.get();
  (void)touch(own);
  std::map<std::int64_t, std::uint64_t> at;
  for (auto& r : got) {
    at[std::get<1>(r)] = std::get<2>(r);
    if (std::get<0>(r) != double(v[0]) * double((v.size() + page_floats - 1) / page_floats))
      std::fprintf(stderr, "bench_objects: a reader's sum is wrong\n");
  }
  long pss = std::max(0L, mapping_pss_kb(0, reinterpret_cast<std::uint64_t>(own.data())));
  for (auto& [pid, a] : at) pss += std::max(0L, mapping_pss_kb(pid, a));
  f.pss_x = double(pss) * 1024.0 / double(v.size() * sizeof(float));
  f.readers = at.size();
  if (up < W) std::printf("  (warm-up reached %zu of %u workers)\n", up, W);
  return f;
}

// Today's way: the vector as each task's argument.
local_figures run_copy(unsigned W, const std::vector<float>& v) {
  fiber::Pool<&read_copy> pool{fiber::target<&read_copy>, {.processes = W}};
  (void)warm_up(pool, W, std::vector<float>());
  auto t0 = bench::clk::now();
  std::vector<fiber::async_result<reading>> hs;
  for (unsigned i = 0; i < W; ++i) hs.push_back(pool.apply_async(v));
  long pss = 0;
  std::set<std::int64_t> pids;
  for (auto& h : hs) {
    auto r = h.get();
    pss += std::max<std::int64_t>(0, std::get<3>(r));
    pids.insert(std::get<1>(r));
  }
  local_figures f;
  f.secs = bench::seconds_since(t0);
  // W copies: the owner's own vector is not counted (nor in run_put).
  f.pss_x = double(pss) * 1024.0 / double(v.size() * sizeof(float));
  f.readers = pids.size();
  return f;
}

void part_local(const bench::common_args& a, const std::string& workers, bool smoke) {
  const std::uint64_t mb = smoke ? 8 : std::stoull(bench::opt(a, "--size").value_or("1024"));
  const auto ws = parse_list(!workers.empty() ? workers : smoke ? "1,8" : "1,8,64");
  const std::size_t n = std::size_t(mb << 20) / sizeof(float);
  std::printf("\n## 1. one object of %llu MiB, many local readers (reps %d)\n", (unsigned long long)mb, a.reps);
  std::vector<float> v(n, 1.0f);
  const auto ref = fiber::put(v);
  // An argument of the object's size needs frames that large.
  // set_config alone did not reach the workers' link limit (they closed the
  // link on a 1 GiB argument), so their environment says it too.
  if (mb + 16 > 1024) {
    const auto lim = std::to_string(std::min<std::uint64_t>(4095, mb + 16));
    fiber::set_config("max_message_size_mb", lim);
    ::setenv("FIBER_MAX_MESSAGE_SIZE_MB", lim.c_str(), 1);
  }
  for (unsigned W : ws) {
    std::vector<double> fs, fx, cs, cx, ps;
    std::string copy_why;
    const std::uint64_t peak_mb = mb * (2 * W + 3);
    if (W * mb > 8192) copy_why = "W x size > 8 GiB";
    else if (mb + 16 > 4095) copy_why = "size over the largest frame (max_message_size_mb ≤ 4095)";
    else if (double(peak_mb) > 0.6 * double(mem_available_mb()))
      copy_why = "peak ~" + std::to_string(peak_mb) + " MiB > 60% of MemAvailable " +
                 std::to_string(mem_available_mb()) + " MiB";
    std::size_t readers = 0;
    for (int rep = 0; rep < a.reps; ++rep) {
      auto shm = bench::run_capture(bench::python() + " '" + bench::peers_dir() + "/shm_attach.py' --size-mb " +
                                    std::to_string(mb) + " --workers " + std::to_string(W));
      ps.push_back(bench::grab(shm, R"(attach_touch_s ([0-9.]+))"));
      auto f = run_put(ref, W, v);
      fs.push_back(f.secs), fx.push_back(f.pss_x), readers = f.readers;
      local_figures c;
      if (copy_why.empty()) c = run_copy(W, v);
      cs.push_back(c.secs), cx.push_back(c.pss_x);
      std::printf("W=%u rep %d: put+get %.3f s, PSS %.3fx (%zu readers) | task argument %s s, PSS %s x (%zu "
                  "readers) | mp.shared_memory %s s\n",
                  W, rep + 1, f.secs, f.pss_x, f.readers, bench::fmt("%.3f", c.secs).c_str(),
                  bench::fmt("%.2f", c.pss_x).c_str(), c.readers, bench::fmt("%.3f", ps.back()).c_str());
      std::fflush(stdout);
    }
    if (!copy_why.empty()) std::printf("W=%u: task-argument baseline not run: %s\n", W, copy_why.c_str());
    const double f = bench::median(fs), x = bench::median(fx), c = bench::median(cs), cxm = bench::median(cx),
                 p = bench::median(ps);
    const std::string what = "objects: " + std::to_string(mb) + " MiB vector<float> put once, " + std::to_string(W) +
                             " local reader" + (W > 1 ? "s" : "");
    const std::string copy_na = copy_why.empty() ? "" : " (not run: " + copy_why + ")";
    bench::row(what, "s until all W have it (get + touch each page)", bench::fmt("%.3f", f),
               "as task argument: " + bench::fmt("%.3f", c) + copy_na, bench::fmt("%.2fx", f / c), "-", "-");
    bench::row(what, "s until all W have it (get + touch each page)", bench::fmt("%.3f", f),
               "Python mp.shared_memory attach + touch: " + bench::fmt("%.3f", p), bench::fmt("%.2fx", f / p), "-",
               "-");
    bench::row(what, "PSS of the object, " + std::to_string(readers) + " workers + owner, x one copy",
               bench::fmt("%.3fx", x), "as task argument: " + bench::fmt("%.2fx", cxm) + copy_na,
               bench::fmt("%.3fx", x / cxm), "≤ 1.1x", bench::verdict(x <= 1.1, !std::isnan(x)));
  }
}

void part_es(const bench::common_args& a, bool smoke) {
  constexpr std::size_t theta_n = 376 * 256 + 256 + 256 * 256 + 256 + 256 * 17 + 17; // 166,673
  static_assert(theta_n == 166673);
  const auto ps = parse_list(bench::opt(a, "--population").value_or(smoke ? "100" : "1000,10000"));
  const unsigned W = unsigned(std::stoul(bench::opt(a, "--es-workers").value_or("2")));
  const std::uint64_t theta_bytes = theta_n * sizeof(float);
  std::printf("\n## 2. ES bytes per generation: θ %zu floats (%llu B), %u workers, local (hosts = 1)\n", theta_n,
              (unsigned long long)theta_bytes, W);
  std::vector<float> theta(theta_n);
  for (std::size_t i = 0; i < theta_n; ++i) theta[i] = float(i % 1000) * 1e-3f;
  // Over tcp://127.0.0.1, so that the sockets' own counters give the egress.
  fiber::set_config("local_transport", "tcp");
  fiber::Pool<&es_copy> copies{fiber::target<&es_copy>, {.processes = W}};
  fiber::Pool<&es_ref> refs{fiber::target<&es_ref>, {.processes = W}};
  (void)copies.map(std::vector(2 * W, std::pair{theta, std::uint64_t(0)}), 1); // workers up, buffers grown
  for (unsigned P : ps) {
    // Today's way: every task carries θ (a lazy range: θ is copied only into each task's bytes).
    auto tasks = std::views::iota(0u, P) | std::views::transform([&](unsigned i) {
                   return std::pair{theta, std::uint64_t(i) * 2654435761u};
                 });
    auto w0 = wchar();
    auto b0 = tcp_bytes_sent();
    auto t0 = bench::clk::now();
    auto r1 = copies.map(tasks);
    const double s1 = bench::seconds_since(t0);
    const double per_task = double(tcp_bytes_sent() - b0), per_task_w = double(wchar() - w0);
    // Put once: θ into the store, the tasks carry its reference. The put is
    // inside the generation (each generation has a new θ).
    w0 = wchar();
    b0 = tcp_bytes_sent();
    t0 = bench::clk::now();
    auto ref = fiber::put(theta);
    auto rtasks = std::views::iota(0u, P) | std::views::transform([&](unsigned i) {
                    return std::pair{ref, std::uint64_t(i) * 2654435761u};
                  });
    auto r2 = refs.map(rtasks);
    const double s2 = bench::seconds_since(t0);
    const double put_once = double(tcp_bytes_sent() - b0), put_once_w = double(wchar() - w0);
    if (r1 != r2) std::fprintf(stderr, "bench_objects: ES results differ between the two ways\n");
    const double target = double(theta_bytes) * 1 + 64.0 * P;
    std::printf("P=%u: θ per task %.0f B (%.3f x |θ| x P) in %.3f s | put once %.0f B (%.1f B per task) in %.3f s "
                "| wchar moved %.0f and %.0f B\n",
                P, per_task, per_task / (double(theta_bytes) * P), s1, put_once, put_once / P, s2, per_task_w,
                put_once_w);
    bench::row("objects: ES generation, θ 166,673 floats, P = " + std::to_string(P) + ", 1 host",
               "master egress bytes per generation (TCP bytes_sent), put once", bench::fmt("%.0f", put_once),
               "θ in every task: " + bench::fmt("%.0f", per_task), bench::fmt("%.4fx", put_once / per_task),
               "≤ |θ| x 1 + 64 B x P = " + bench::fmt("%.0f", target), bench::verdict(put_once <= target));
  }
  fiber::set_config("local_transport", "ipc");
}

// Shapes (or, with rate 0, unshapes) the master's side of the rig's links.
void shape(int hosts, unsigned rate_mbit) {
  for (int i = 1; i <= hosts; ++i) {
    const std::string dev = "rigv" + std::to_string(i);
    std::string cmd = "tc qdisc del dev " + dev + " root 2>/dev/null";
    if (rate_mbit)
      cmd = "tc qdisc replace dev " + dev + " root tbf rate " + std::to_string(rate_mbit) +
            "mbit burst 256kb latency 100ms";
    if (std::system(cmd.c_str()) != 0 && rate_mbit) std::fprintf(stderr, "bench_objects: `%s` failed\n", cmd.c_str());
  }
}

std::int64_t remote_sum(floats r) {
  if (!r) return std::get<1>(warm());
  return std::int64_t(std::get<0>(touch(r.get())));
}

int part_hosts(const bench::common_args& a, bool smoke, bool require_rig) {
  constexpr int hosts = 3;
  std::printf("\n## 3. one object read on %d hosts (netns rig)\n", hosts);
  if (auto why = bench::netns::rig_missing(hosts); !why.empty()) {
    std::printf("skipped: %s (bring it up: bash tests/rigs/netns-up.sh 3, as root)\n", why.c_str());
    bench::row("objects: across 3 hosts", "skipped: " + why, "-", "-", "-", "-", "n/a");
    return require_rig ? 1 : 0;
  }
  const std::uint64_t mb = smoke ? 8 : std::stoull(bench::opt(a, "--remote-size").value_or("256"));
  const unsigned rate = unsigned(std::stoul(bench::opt(a, "--rate-mbit").value_or("0")));
  std::vector<float> v(std::size_t(mb << 20) / sizeof(float), 1.0f);
  std::vector<double> secs, egress, bridge;
  if (rate) shape(hosts, rate);
  for (int rep = 0; rep < a.reps; ++rep) {
    auto ref = fiber::put(v);
    bench::netns::place_on({1, 2, 3});
    fiber::Pool<&remote_sum, bench::netns::hosts_tcp> pool{fiber::target<&remote_sum>, {.processes = hosts}};
    std::set<std::int64_t> pids;
    for (int round = 0; round < 20 && pids.size() < hosts; ++round)
      for (auto p : pool.map(std::vector(2 * hosts, floats()), 1)) pids.insert(p);
    const auto w0 = wchar();
    const auto s0 = tcp_bytes_sent();
    const auto b0 = tx_bytes("rigbr0");
    std::uint64_t v0 = 0;
    for (int i = 1; i <= hosts; ++i) v0 += tx_bytes("rigv" + std::to_string(i));
    auto t0 = bench::clk::now();
    auto got = pool.map(std::vector<floats>(hosts, ref), 1);
    secs.push_back(bench::seconds_since(t0));
    egress.push_back(double(tcp_bytes_sent() - s0));
    const double wrote = double(wchar() - w0);
    std::uint64_t v1 = 0;
    for (int i = 1; i <= hosts; ++i) v1 += tx_bytes("rigv" + std::to_string(i));
    bridge.push_back(double(v1 - v0));
    for (auto s : got)
      if (s != std::int64_t(v.size() / page_floats)) std::fprintf(stderr, "bench_objects: a host's sum is wrong\n");
    std::printf("rep %d: %.3f s until all %d hosts have it; master's TCP sent %.0f B (%.2f x size), wchar %.0f B; "
                "the rig's veths sent %.0f B (bridge rigbr0 %llu B); warm-up reached %zu workers\n",
                rep + 1, secs.back(), hosts, egress.back(), egress.back() / double(mb << 20), wrote, bridge.back(),
                (unsigned long long)(tx_bytes("rigbr0") - b0), pids.size());
    std::fflush(stdout);
  }
  if (rate) shape(hosts, 0);
  const double s = bench::median(secs), e = bench::median(egress);
  const double size = double(mb << 20);
  const double floor_s = rate ? size * 8 / (double(rate) * 1e6) : NAN;
  const std::string what = "objects: " + std::to_string(mb) + " MiB put in the master, 1 reader on each of 3 hosts";
  bench::row(what, "s until all 3 have it (get + touch each page)", bench::fmt("%.3f", s),
             rate ? "size / link rate (" + std::to_string(rate) +
                        " Mbit/s, tc tbf per host): " + bench::fmt("%.3f", floor_s)
                  : "size / link rate: n/a (links not shaped; --rate-mbit R)",
             bench::fmt("%.2fx", s / floor_s), "-", "-");
  bench::row(what, "master egress bytes (TCP bytes_sent)", bench::fmt("%.0f", e),
             "object size: " + bench::fmt("%.0f", size), bench::fmt("%.2fx", e / size), "≤ 1.2x",
             bench::verdict(e <= 1.2 * size));
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  std::string workers; // a list, which parse_common would read as one number
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--workers") workers = argv[i + 1];
  const bool require_rig = std::find(a.rest.begin(), a.rest.end(), "--require-rig") != a.rest.end();
  const std::string parts = bench::opt(a, "--parts").value_or("local,es,hosts");
  bench::header("bench_objects: fiber::put / object_ref against values in every task");
  std::printf("parts %s, reps %d%s\n", parts.c_str(), a.reps, a.smoke ? " (smoke)" : "");
  // The hosts part first: an object names its owner by the owner's first
  // listener, which the es part's tcp://127.0.0.1 would otherwise be, and
  // the netns hosts cannot reach the master's loopback.
  int rc = 0;
  if (parts.find("hosts") != std::string::npos) rc = part_hosts(a, a.smoke, require_rig);
  if (parts.find("local") != std::string::npos) part_local(a, workers, a.smoke);
  if (parts.find("es") != std::string::npos) part_es(a, a.smoke);
  return rc;
}
