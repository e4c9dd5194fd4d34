// SPDX-License-Identifier: BSL-1.0
#pragma once
// Shared helpers of fiber's benchmarks against their peers (issue 9): medians,
// running a peer program as a subprocess and reading its figures, and the
// `ROW | ... |` lines that bench/run_all.sh collects into bench/RESULTS.md.
//
// Peers (the baselines, bench/baselines/README.md): BENCH_PEERS (default:
// <source>/bench/baselines) holds the Python scripts, run with BENCH_PYTHON
// (default /usr/bin/python3), and the C sources; their binaries are looked
// for in BENCH_PEER_BIN (default: <build>/peers, where run_all.sh compiles
// them) and compiled there with `gcc -O2` on first use when missing. A baseline that cannot run is
// reported as n/a; the benchmark still exits 0 (a benchmark is not a test).
// (Not FIBER_*: fiber refuses FIBER_ variables it does not know.)
//
// Nothing here pins threads or processes: every figure is unpinned.

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <link.h>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#ifndef FIBER_BENCH_PEERS_DEFAULT
#define FIBER_BENCH_PEERS_DEFAULT "bench/baselines"
#endif
#ifndef FIBER_BENCH_BINARY_DIR
#define FIBER_BENCH_BINARY_DIR "."
#endif
#ifndef FIBER_BENCH_PEER_BIN_DEFAULT
#define FIBER_BENCH_PEER_BIN_DEFAULT "peers"
#endif

namespace bench {

using clk = std::chrono::steady_clock;

inline double seconds_since(clk::time_point t0) { return std::chrono::duration<double>(clk::now() - t0).count(); }

inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// The p-th quantile (0..1), nearest rank, as the peers compute p99.
inline double quantile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  auto i = std::size_t(double(v.size()) * p);
  return v[std::min(v.size() - 1, i)];
}

inline std::string fmt(const char* f, double x) {
  if (std::isnan(x)) return "n/a";
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

inline bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

inline std::string peers_dir() { return env_or("BENCH_PEERS", FIBER_BENCH_PEERS_DEFAULT); }
inline std::string python() { return env_or("BENCH_PYTHON", "/usr/bin/python3"); }

/// Runs `cmd` through /bin/sh and returns its stdout (stderr passes through).
/// Call it while no Pool is running: a peer must not compete with fiber's workers.
inline std::string run_capture(const std::string& cmd) {
  std::fflush(stdout);
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  if (st != 0) std::fprintf(stderr, "bench: `%s` exited with status %d\n", cmd.c_str(), st);
  return out;
}

/// Path of a compiled C peer (nng_pingpong, spawn), compiling it on first use.
inline std::optional<std::string> peer_binary(const std::string& name, const std::string& libs = "") {
  const std::string dir = env_or("BENCH_PEER_BIN", FIBER_BENCH_PEER_BIN_DEFAULT);
  const std::string bin = dir + "/" + name;
  if (exists(bin)) return bin;
  const std::string src = peers_dir() + "/" + name + ".c";
  if (!exists(src)) {
    std::fprintf(stderr, "bench: peer %s not found (set BENCH_PEERS)\n", src.c_str());
    return std::nullopt;
  }
  ::mkdir(dir.c_str(), 0755);
  const std::string cmd = "gcc -O2 -o '" + bin + "' '" + src + "' " + libs;
  if (std::system(cmd.c_str()) != 0 || !exists(bin)) {
    std::fprintf(stderr, "bench: could not build %s\n", bin.c_str());
    return std::nullopt;
  }
  return bin;
}

/// First capture group of `re` in `text` as a number, or NaN.
inline double grab(const std::string& text, const std::string& re) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex(re)) && m.size() > 1) return std::strtod(m[1].str().c_str(), nullptr);
  return NAN;
}

/// Figures of bench/baselines/nng_pingpong.c (one run).
struct nng_figures {
  double req_ipc_median_us = NAN, req_ipc_p99_us = NAN;
  double push_ipc_64_msgs = NAN; ///< 64 B PUSH/PULL msg/s (median of its reps)
  double push_ipc_1m_mibs = NAN; ///< 1 MiB PUSH/PULL MiB/s (median of its reps)
  std::string raw;
};

/// Runs nng_pingpong with the given sizes (every test it has runs; the sizes
/// keep the ones a benchmark does not need short).
inline nng_figures run_nng_pingpong(long trips, long n_small, long n_big, int reps) {
  nng_figures f;
  auto bin = peer_binary("nng_pingpong", "-lnng");
  if (!bin) return f;
  f.raw = run_capture(*bin + " " + std::to_string(trips) + " " + std::to_string(n_small) + " " + std::to_string(n_big) +
                      " " + std::to_string(reps));
  f.req_ipc_median_us = grab(f.raw, R"(REQ/REP\s+ipc\s+64B RTT us: median\s+([0-9.]+))");
  f.req_ipc_p99_us = grab(f.raw, R"(REQ/REP\s+ipc\s+64B RTT us: median\s+[0-9.]+\s+p99\s+([0-9.]+))");
  f.push_ipc_64_msgs = grab(f.raw, R"(PUSH/PULL ipc\s+64B: median\s+([0-9.]+) msg/s)");
  f.push_ipc_1m_mibs = grab(f.raw, R"(PUSH/PULL ipc\s+1048576B: median\s+[0-9.]+ msg/s\s+([0-9.]+) MiB/s)");
  return f;
}

/// The efficiency of each generation examples/es printed in `out`, after the
/// first one (which includes the workers' start).
inline std::vector<double> es_efficiencies(const std::string& out) {
  std::vector<double> v;
  std::regex re(R"(gen\s+\d+ \|.*\| eff ([0-9.]+))");
  std::istringstream in(out);
  bool first = true;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    if (!first) v.push_back(std::strtod(m[1].str().c_str(), nullptr));
    first = false;
  }
  return v;
}

/// One line of the results table: `ROW | bench | figure | fiber | baseline | ratio | target | met |`.
/// `met` is "met", "missed" or "-" (no target on this line).
inline void row(const std::string& bench, const std::string& figure, const std::string& fiber,
                const std::string& baseline, const std::string& ratio, const std::string& target,
                const std::string& met) {
  std::printf("ROW | %s | %s | %s | %s | %s | %s | %s |\n", bench.c_str(), figure.c_str(), fiber.c_str(),
              baseline.c_str(), ratio.c_str(), target.c_str(), met.c_str());
  std::fflush(stdout);
}

/// " (FIBER_STATIC_DEPS=ON)" when this program was linked with fiber's
/// dependencies static (no libnng.so loaded), else "": start-up rows say which.
inline std::string linkage() {
  bool shared_nng = false;
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* found) {
        if (info->dlpi_name && std::strstr(info->dlpi_name, "libnng.so")) *static_cast<bool*>(found) = true;
        return 0;
      },
      &shared_nng);
  return shared_nng ? "" : " (FIBER_STATIC_DEPS=ON)";
}

inline std::string verdict(bool ok, bool known = true) { return !known ? "n/a" : ok ? "met" : "missed"; }

/// The unchunked stream: apply_async(i) for i in [0, n) on `pool`, whose
/// task returns i + 1, then every get(); returns the seconds it took.
/// Throws std::runtime_error naming `who` when the results do not add up.
template <class Pool>
double apply_stream(Pool& pool, int n, const char* who) {
  const auto t0 = clk::now();
  std::vector<decltype(pool.apply_async(0))> hs;
  hs.reserve(std::size_t(n));
  for (int i = 0; i < n; ++i) hs.push_back(pool.apply_async(i));
  long long sum = 0;
  for (auto& h : hs) sum += h.get();
  const double s = seconds_since(t0);
  if (sum != (long long)n * (n + 1) / 2) throw std::runtime_error(std::string(who) + ": wrong apply_async results");
  return s;
}

/// Resident set (VmRSS) and proportional set (Pss) of a process, KiB; -1 if unknown.
struct mem_kib {
  long rss = -1, pss = -1;
  long uss = -1; ///< private (clean + dirty): what the process alone holds
};
inline mem_kib process_memory(long pid) {
  mem_kib m;
  const std::string base = pid > 0 ? "/proc/" + std::to_string(pid) : std::string("/proc/self");
  std::ifstream st(base + "/status");
  std::string line;
  while (std::getline(st, line))
    if (line.rfind("VmRSS:", 0) == 0) m.rss = std::atol(line.c_str() + 6);
  std::ifstream sm(base + "/smaps_rollup");
  while (std::getline(sm, line))
    if (line.rfind("Pss:", 0) == 0) m.pss = std::atol(line.c_str() + 4);
    else if (line.rfind("Private_Clean:", 0) == 0 || line.rfind("Private_Dirty:", 0) == 0)
      m.uss = std::max(m.uss, 0L) + std::atol(line.c_str() + 14);
  return m;
}

/// CPU seconds (user + system) process `pid` has used, all its threads (0:
/// this process); 0 if it is gone. Example: `process_cpu_seconds(worker_pid)`.
inline double process_cpu_seconds(long pid) {
  std::ifstream in(pid > 0 ? "/proc/" + std::to_string(pid) + "/stat" : std::string("/proc/self/stat"));
  std::string s((std::istreambuf_iterator<char>(in)), {});
  const auto p = s.rfind(')');
  if (p == std::string::npos || p + 2 > s.size()) return 0;
  std::istringstream rest(s.substr(p + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i == 14 || i == 15) ticks += std::stod(field); // utime, stime
  return ticks / double(::sysconf(_SC_CLK_TCK));
}

inline int thread_count(long pid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(st, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return -1;
}

/// Common flags: --smoke, --reps N, --workers W.
struct common_args {
  bool smoke = false;
  int reps = 3;
  bool reps_given = false; ///< --reps was on the command line
  unsigned workers = 2;
  std::vector<std::string> rest;
};
inline common_args parse_common(int argc, char** argv) {
  common_args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--smoke") a.smoke = true;
    else if (s == "--reps" && i + 1 < argc) a.reps = std::max(1, std::atoi(argv[++i])), a.reps_given = true;
    else if (s == "--workers" && i + 1 < argc) { // also left in rest: benches that read opt("--workers") see it
      a.workers = unsigned(std::max(1, std::atoi(argv[i + 1])));
      a.rest.push_back(s);
      a.rest.push_back(argv[++i]);
    } else a.rest.push_back(s);
  }
  if (a.smoke) a.reps = 1;
  return a;
}

/// Value of `--name V` among the remaining arguments.
inline std::optional<std::string> opt(const common_args& a, const std::string& name) {
  for (std::size_t i = 0; i + 1 < a.rest.size(); ++i)
    if (a.rest[i] == name) return a.rest[i + 1];
  return std::nullopt;
}

/// `--name N` among the remaining arguments as a number; else `smoke` in a
/// smoke run, `dflt` otherwise.
inline double opt_num(const common_args& a, const std::string& name, double dflt, double smoke) {
  auto v = opt(a, name);
  return v ? std::stod(*v) : a.smoke ? smoke : dflt;
}

/// How an idle CPU waits, e.g. "cpuidle haltpoll, guest_halt_poll_ns 0":
/// in a KVM guest whose idle vCPUs halt at once, every wakeup across CPUs
/// pays a VM exit, which moves round trips by tens of µs (docs/RATIONALE.md).
inline std::string idle_policy() {
  auto first_line = [](const char* path) {
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
  };
  std::string driver = first_line("/sys/devices/system/cpu/cpuidle/current_driver");
  if (driver.empty()) return "cpuidle ?";
  std::string s = "cpuidle " + driver;
  if (driver == "haltpoll")
    s += ", guest_halt_poll_ns " + first_line("/sys/module/haltpoll/parameters/guest_halt_poll_ns");
  return s;
}

inline void header(const char* what) {
  char host[256] = "?";
  ::gethostname(host, sizeof host);
  std::printf("# %s  (nproc %ld, host %s, %s; unpinned: threads and processes go where the scheduler puts them)\n",
              what, ::sysconf(_SC_NPROCESSORS_ONLN), host, idle_policy().c_str());
  std::fflush(stdout);
}

} // namespace bench
