// SPDX-License-Identifier: BSL-1.0
#pragma once
// Helpers of the tests against real cluster managers (Docker, Kubernetes'
// fake, Slurm): shell commands for inspection, bounded polling of external
// state, and the worker processes a test may have left behind.

#include <fiber/stats.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <csignal>
#include <set>
#include <spawn.h>
#include <string_view>
#include <sys/wait.h>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <vector>

extern "C" char** environ;

namespace fiber_test {

/// The first IPv4 address of an up, non-loopback interface of this network
/// namespace ("" if none): in the Slurm rig's --netns mode, the host's eth0
/// address.
/// fiber::stats(): the jobs of `backend` in `state` (the backend's own word).
inline unsigned backend_jobs(const std::string& backend, const std::string& state) {
  for (auto& b : fiber::stats().backends)
    if (b.name == backend && b.jobs_by_state.contains(state)) return b.jobs_by_state.at(state);
  return 0;
}

inline std::string host_address() {
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return {};
  std::string out;
  for (auto* i = ifs; i && out.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP))
      continue;
    char buf[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf)) out = buf;
  }
  ::freeifaddrs(ifs);
  return out;
}

/// The whole file at `p` ("" if it cannot be read).
inline std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// stdout of `sh -c cmd`: inspection and fault injection with a cluster
/// manager's own tools, never fiber's own path.
inline std::string shell(const std::string& cmd) {
  std::string out;
  if (std::FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (auto n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

inline std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  s.erase(0, s.find_first_not_of(" \t\r\n"));
  return s;
}

/// The non-blank lines of `s`, trimmed.
inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!trim(l).empty()) v.push_back(trim(l));
  return v;
}

/// Polls `pred` every 20 ms until it holds (true) or `timeout` passes
/// (false): for state outside this process (a daemon, an API server, /proc),
/// which nothing here can wait on.
template <class Pred>
bool poll_until(Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// A task's pid, start and end (CLOCK_REALTIME, ns): the rigs' hosts and the
/// fake's pods run on this machine and share its clock.
using task_span = std::array<std::int64_t, 3>;

/// A Pool target: sleeps `ms`, returns its span.
inline task_span span_after(int ms) {
  auto now = [] { return std::chrono::system_clock::now().time_since_epoch().count(); };
  const std::int64_t t0 = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {::getpid(), t0, now()};
}

/// Tasks run per worker pid, and the most tasks that ran at once.
struct span_summary {
  std::map<std::int64_t, int> per_pid;
  int most_at_once = 0;
};
inline span_summary summarize(const std::vector<task_span>& spans) {
  span_summary r;
  std::vector<std::pair<std::int64_t, int>> edges; // (time, +1 start / -1 end)
  for (auto& [pid, start, end] : spans) {
    ++r.per_pid[pid];
    edges.emplace_back(start, 1);
    edges.emplace_back(end, -1);
  }
  std::sort(edges.begin(), edges.end()); // an end sorts before a start at the same instant
  int running = 0;
  for (auto& [t, d] : edges) r.most_at_once = std::max(r.most_at_once, running += d);
  return r;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Whether a Slurm controller answers `sinfo` (asked once per process:
/// sinfo retries for ~9 s when none does).
inline bool slurm_answers() {
  static const bool up = !trim(shell("sinfo -h -o %t 2>/dev/null")).empty();
  return up;
}

/// "id name" of the jobs squeue lists (pending, running, completing) whose
/// name starts with `prefix`: the jobs a test program submitted.
inline std::vector<std::string> slurm_jobs(const std::string& prefix) {
  std::vector<std::string> v;
  for (auto& l : lines(shell("squeue -h -r -o '%i %j' 2>/dev/null")))
    if (l.find(" " + prefix) != std::string::npos) v.push_back(l);
  return v;
}

/// A directory /tmp/<prefix>-XXXXXX, removed with what it holds when this
/// ends. Throws std::system_error if it cannot be made.
struct temp_dir {
  std::filesystem::path path;
  explicit temp_dir(const std::string& prefix) {
    std::string t = "/tmp/" + prefix + "-XXXXXX";
    if (!::mkdtemp(t.data())) throw std::system_error(errno, std::generic_category(), "mkdtemp " + t);
    path = t;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

/// The parent of `pid` (0 if unknown).
inline long parent_of(long pid) {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto rp = stat.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream rest(stat.substr(rp + 2));
  std::string state;
  long ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

/// Processes running this executable with this process's arguments, except
/// this one and its ancestors (a test that re-runs this binary): workers, in
/// containers, pods or jobs or not. Zombies count as gone.
inline std::vector<int> stray_workers() {
  namespace fs = std::filesystem;
  std::vector<int> v;
  std::set<long> ancestors;
  for (long p = parent_of(::getpid()); p > 1; p = parent_of(p)) ancestors.insert(p);
  const auto self = fs::read_symlink("/proc/self/exe");
  // Workers run with their master's argv. Another test of the same group
  // executable (ctest -j) runs with another Catch filter: not ours.
  const auto own_cmdline = read_file("/proc/self/cmdline");
  for (auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (!std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const int pid = std::stoi(name);
    if (pid == ::getpid() || ancestors.count(pid)) continue;
    std::error_code ec;
    if (fs::read_symlink(e.path() / "exe", ec) != self || ec) continue;
    if (read_file((e.path() / "cmdline").string()) != own_cmdline) continue;
    const auto stat = read_file((e.path() / "stat").string());
    const auto rp = stat.rfind(')');
    if (rp != std::string::npos && rp + 2 < stat.size() && stat[rp + 2] == 'Z') continue;
    v.push_back(pid);
  }
  return v;
}

/// This test binary run again as a separate master (Catch test `filter`),
/// for tests that SIGKILL a master: started, and read until it prints
/// "READY <run id>". Kills and reaps it when destroyed.
class child_master {
public:
  explicit child_master(const std::string& filter) {
    int out[2];
    if (::pipe(out) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    const auto self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::string a0 = self, a1 = filter;
    char* argv[] = {a0.data(), a1.data(), nullptr};
    if (::posix_spawn(&pid_, self.c_str(), &fa, nullptr, argv, environ) != 0) pid_ = 0;
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    out_ = ::fdopen(out[0], "r");
    char line[512];
    while (pid_ && run_.empty() && out_ && std::fgets(line, sizeof line, out_)) {
      said_ += line;
      if (std::string_view(line).starts_with("READY ")) run_ = trim(std::string(line).substr(6));
    }
  }
  child_master(const child_master&) = delete;
  child_master& operator=(const child_master&) = delete;
  ~child_master() {
    kill();
    if (out_) std::fclose(out_);
  }

  /// The run id it printed ("" if it ended or failed first).
  const std::string& run() const { return run_; }
  /// Everything it printed until then.
  const std::string& said() const { return said_; }
  /// SIGKILLs it and reaps it.
  void kill() {
    if (!pid_) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = 0;
  }

private:
  pid_t pid_ = 0;
  std::FILE* out_ = nullptr;
  std::string run_, said_;
};

} // namespace fiber_test
