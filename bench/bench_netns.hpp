// SPDX-License-Identifier: BSL-1.0
#pragma once
// The network-namespace hosts of tests/rigs/netns-up.sh as a fiber backend
// for benchmarks: each job runs as `nsenter --net=/run/netns/righostN -- <exe>`
// with fiber's local launcher and dials back tcp:// (or tls+tcp://)
// 10.200.0.1, so every byte crosses two veth pairs and the bridge. Placement
// is exact (job k on hosts[k % size]). Used by bench_hosts and bench_envs.

#include "bench_util.hpp"

#include <fiber/backend/launcher.hpp>
#include <fiber/backend/local.hpp>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <unistd.h>

namespace bench::netns {

inline constexpr const char* master_addr = "10.200.0.1";

// ---- the hosts backend --------------------------------------------------------

inline std::string ns_name(int i) { return bench::env_or("NETNS_RIG_PREFIX", "righost") + std::to_string(i); }
inline std::string host_addr(int i) { return "10.200.0." + std::to_string(10 + i); }

/// Hosts of the next Pool's workers, in order (worker k on hosts[k % size]).
struct placement {
  std::vector<int> hosts{1};
  std::atomic<std::size_t> next{0};
  std::string worker_cpus; ///< the workers' CPUs (a taskset -c list); empty: where the scheduler puts them
};
inline placement& place() {
  static placement p;
  return p;
}
inline void place_on(std::vector<int> hosts) {
  place().hosts = std::move(hosts);
  place().next = 0;
}

/// Pins every thread of this process to `cpu` (threads made later inherit
/// it from their maker); false when the kernel refuses.
inline bool pin_this_process(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  bool ok = true;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (auto* e = ::readdir(d))
      if (e->d_name[0] != '.') ok = ::sched_setaffinity(std::atoi(e->d_name), sizeof set, &set) == 0 && ok;
    ::closedir(d);
  }
  return ok;
}

/// Starts each job with fiber's local launcher inside a rig host's network
/// namespace; workers dial tcp:// (or tls+tcp://) 10.200.0.1.
template <bool Tls>
class netns_launcher final : public fiber::backend::launcher {
public:
  explicit netns_launcher(asio::any_io_executor ex)
      : local_(std::make_shared<fiber::detail::local_launcher>(std::move(ex))) {}
  std::string_view name() const noexcept override { return Tls ? "netns-tls" : "netns-tcp"; }
  // Another host: no shared run directory (the secret travels in the job's
  // environment, the worker dials listen_url()); still the master's child
  // (nsenter execs, no fork) on the master's cores.
  fiber::backend::launcher_traits traits() const noexcept override { return {false, true, true, 1}; }
  std::string listen_url() override { return std::string(Tls ? "tls+tcp://" : "tcp://") + master_addr + ":0"; }
  std::vector<fiber::backend::job> launch(const std::vector<fiber::backend::job_spec>& specs,
                                          std::vector<fiber::backend::exit_handler> on_exit) override {
    auto in_ns = specs;
    std::vector<std::string> hosts;
    for (auto& s : in_ns) {
      const auto& h = place().hosts;
      hosts.push_back(ns_name(h[place().next++ % h.size()]));
      s.argv.insert(s.argv.begin(), {"/usr/bin/nsenter", "--net=/run/netns/" + hosts.back(), "--"});
      if (!place().worker_cpus.empty()) s.argv.insert(s.argv.begin(), {"/usr/bin/taskset", "-c", place().worker_cpus});
    }
    auto jobs = local_->launch(in_ns, std::move(on_exit));
    for (std::size_t i = 0; i < jobs.size(); ++i) jobs[i].host = hosts[i];
    return jobs;
  }
  void cancel(const fiber::backend::job& j, int signal) override { local_->cancel(j, signal); }

private:
  std::shared_ptr<fiber::detail::local_launcher> local_;
};

struct hosts_tcp {
  static std::shared_ptr<fiber::backend::launcher> make(asio::any_io_executor ex) {
    return std::make_shared<netns_launcher<false>>(std::move(ex));
  }
};
struct hosts_tls {
  static std::shared_ptr<fiber::backend::launcher> make(asio::any_io_executor ex) {
    return std::make_shared<netns_launcher<true>>(std::move(ex));
  }
};
static_assert(fiber::backend::policy<hosts_tcp> && fiber::backend::policy<hosts_tls>);

inline bool has_local_address(const std::string& addr) {
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return false;
  bool found = false;
  for (auto* i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf))
      found = addr == buf;
  }
  ::freeifaddrs(ifs);
  return found;
}

/// Empty when the rig can be used; else why not.
inline std::string rig_missing(int hosts) {
  if (::geteuid() != 0) return "not root (nsenter needs CAP_SYS_ADMIN)";
  if (!bench::exists("/usr/bin/nsenter")) return "no /usr/bin/nsenter (util-linux)";
  if (!has_local_address(master_addr)) return std::string("no address ") + master_addr + " in this namespace";
  for (int i = 1; i <= hosts; ++i)
    if (!bench::exists("/run/netns/" + ns_name(i))) return "no network namespace " + ns_name(i);
  return {};
}

} // namespace bench::netns
