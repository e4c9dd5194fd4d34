// SPDX-License-Identifier: BSL-1.0
// bench_docker: the docker backend's two figures (issue 19), each next to its
// baseline measured in the same run.
//
//  - Startup: a Pool of 8 docker workers (fiber::backend::docker), from
//    construction to its first result (the first container created, started,
//    its worker dialled back, authenticated and ran a task), and to all 8
//    connected; median of --reps. Baseline: one `docker run --rm --init
//    --network host` of the same image, with the same bind mount, running
//    this program with --exit-now (the docker CLI: create, attach, start,
//    wait, remove), median of as many runs, interleaved with fiber's.
//    Target: ≤ 1.5x one docker run (the 8 containers start concurrently).
//  - Overhead: bench_overhead's method with docker workers on the host
//    network: n tasks sleeping 1 ms, chunksize 1, W workers, n so that the
//    ideal n·d/W is --ideal s; excess per task above an in-process control,
//    paired per repetition; the same with local workers in the same run,
//    over ipc:// (their default) and over tcp://127.0.0.1 (what docker
//    workers on the host network dial). Target: as local, ≤ 10 µs above the
//    control. --cpu N: resources.cpu of the docker workers (NanoCpus; 0: no
//    CFS quota).
//
// The image: --image NAME, else FIBER_DOCKER_IMAGE, else one made here from
// this program's shared-library closure (`ldd`, `docker import`) and removed
// at the end. No daemon: the rows say n/a, exit 0 (a benchmark is not a test).
//
//   bench_docker [--workers 2] [--pool-workers 8] [--reps 5] [--ideal 2.0] [--cpu 1] [--image NAME] [--smoke]
#include "bench_util.hpp"

#include <fiber/backend/docker.hpp>
#include <fiber/backend/local.hpp>
#include <fiber/fiber.hpp>

#include <string_view>
#include <thread>

#include <time.h>
#include <unistd.h>

#if defined(FIBER_HAS_DOCKER_BACKEND)
namespace {

int ping(int x) { return x + 1; }

void sleep_us(int us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

std::string self_exe() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

/// Containers of the launcher behind backend::docker in this process.
std::string docker_run_id() {
  auto& rt = fiber::detail::runtime::instance();
  return rt.sync([&] {
    auto l = std::dynamic_pointer_cast<fiber::detail::docker_launcher>(rt.launcher<fiber::backend::docker>());
    return l ? l->run_id() : std::string();
  });
}

/// Waits (untimed, bounded) until no container of `run` exists.
void wait_gone(const std::string& run) {
  for (int i = 0; i < 200; ++i) {
    if (trim(bench::run_capture("docker ps -aq --filter label=fiber.run=" + run + " 2>/dev/null")).empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

struct overhead_sample {
  double wall, ideal;
  std::size_t n;
  double excess_us() const { return (wall - ideal) / double(n) * 1e6; }
};

template <class Backend>
overhead_sample overhead_run(unsigned W, std::size_t n, int us, int cpu = 1) {
  fiber::pool_options o;
  o.processes = W;
  o.resources.cpu = cpu;
  fiber::Pool<&sleep_us, Backend> pool{fiber::target<&sleep_us>, o};
  pool.map(std::vector<int>(4 * W, 0), 1); // warm-up: every worker connected
  std::vector<int> in(n, us);
  auto t0 = bench::clk::now();
  pool.map(in, 1);
  return {bench::seconds_since(t0), double(n) * us / 1e6 / W, n};
}

overhead_sample control(unsigned W, std::size_t n, int us) {
  auto t0 = bench::clk::now();
  for (std::size_t i = 0; i < n / W; ++i) sleep_us(us);
  return {bench::seconds_since(t0), double(n) * us / 1e6 / W, n};
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--exit-now") return 0; // the baseline container's program
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  if (!a.reps_given) a.reps = a.smoke ? 1 : 5;
  const unsigned pool_workers = a.smoke ? 2
                                        : unsigned(std::atoi(bench::opt(a, "--pool-workers").value_or("8").c_str()));
  const double ideal_s = a.smoke ? 0.05 : std::atof(bench::opt(a, "--ideal").value_or("2.0").c_str());
  const unsigned W = a.workers;
  bench::header("bench_docker: Pool of docker workers, construction to first result; 1 ms task overhead");

  const bool daemon = !trim(bench::run_capture("docker version -f '{{.Server.APIVersion}}' 2>/dev/null")).empty();
  std::string image = bench::opt(a, "--image").value_or(bench::env_or("FIBER_DOCKER_IMAGE", ""));
  bool own_image = false;
  const std::string exe = self_exe(), dir = exe.substr(0, exe.rfind('/'));
  if (daemon && image.empty()) {
    image = "fiber-bench-docker:" + std::to_string(::getpid());
    auto t0 = bench::clk::now();
    auto out = bench::run_capture("set -e; r=$(mktemp -d); for f in $(ldd " + exe +
                                  " | grep -o '/[^ ]*' | sort -u); do cp --parents -L \"$f\" \"$r\"; done; "
                                  "mkdir -p -m 1777 \"$r/tmp\"; tar -C \"$r\" -c . | docker import - " +
                                  image + " >/dev/null; rm -rf \"$r\"; echo made");
    own_image = out.find("made") != std::string::npos;
    std::printf("image %s made from this program's ldd closure in %.2f s\n", image.c_str(), bench::seconds_since(t0));
    if (!own_image) image.clear();
  }
  std::printf("daemon %s  image %s  pool workers=%u  reps=%d  W=%u  ideal=%.2f s\n", daemon ? "up" : "DOWN",
              image.empty() ? "-" : image.c_str(), pool_workers, a.reps, W, ideal_s);
  if (!daemon || image.empty()) {
    std::printf("no Docker daemon or image: nothing measured (start one: bash tests/rigs/docker-up.sh)\n");
    bench::row("startup, Pool of " + std::to_string(pool_workers) + " docker workers",
               "construction → first result, ms", "n/a", "docker run --rm: n/a", "n/a", "≤ 1.5x docker run", "n/a");
    return 0;
  }
  fiber::set_config("docker.image", image);

  // ---- startup -------------------------------------------------------------
  const std::string docker_run = "docker run --rm --init --network host -v " + dir + ":" + dir + ":ro -u " +
                                 std::to_string(::getuid()) + ":" + std::to_string(::getgid()) + " " + image + " " +
                                 exe + " --exit-now >/dev/null 2>&1";
  std::vector<double> first_ms, all_ms, run_ms;
  std::string run;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto t0 = bench::clk::now();
    int rc = std::system(docker_run.c_str());
    run_ms.push_back(bench::seconds_since(t0) * 1e3);
    if (rc != 0) std::fprintf(stderr, "bench_docker: docker run failed (%d)\n", rc);

    t0 = bench::clk::now();
    {
      fiber::Pool<&ping, fiber::backend::docker> pool{fiber::target<&ping>, {.processes = pool_workers}};
      int r = pool.apply(1);
      first_ms.push_back(bench::seconds_since(t0) * 1e3);
      if (r != 2) std::fprintf(stderr, "bench_docker: bad result\n");
      while (pool.live_workers() < pool_workers) std::this_thread::yield();
      all_ms.push_back(bench::seconds_since(t0) * 1e3);
      std::printf("rep %d: docker run --rm %.0f ms | Pool(%u): first result %.0f ms, all connected %.0f ms\n", rep + 1,
                  run_ms.back(), pool_workers, first_ms.back(), all_ms.back());
      std::fflush(stdout);
      if (run.empty()) run = docker_run_id();
    }
    wait_gone(run); // untimed: the next repetition starts from no container
  }
  const double first = bench::median(first_ms), one_run = bench::median(run_ms);
  bench::row("startup, Pool of " + std::to_string(pool_workers) + " docker workers", "construction → first result, ms",
             bench::fmt("%.0f", first), "docker run --rm (same image): " + bench::fmt("%.0f", one_run),
             bench::fmt("%.2fx", first / one_run), "≤ 1.5x docker run", bench::verdict(first <= 1.5 * one_run));
  bench::row("startup, Pool of " + std::to_string(pool_workers) + " docker workers", "construction → all connected, ms",
             bench::fmt("%.0f", bench::median(all_ms)), "docker run --rm: " + bench::fmt("%.0f", one_run),
             bench::fmt("%.2fx", bench::median(all_ms) / one_run), "-", "-");

  // ---- 1 ms overhead ----------------------------------------------------------
  const int us = 1000;
  const std::size_t n = std::max<std::size_t>(W, std::size_t(std::llround(ideal_s * W / 1e-3)));
  const int cpu = std::atoi(bench::opt(a, "--cpu").value_or("1").c_str());
  std::vector<double> dk_excess, local_excess, tcp_excess, ctl_excess, dk_ratio;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto c = control(W, n, us);
    auto d = overhead_run<fiber::backend::docker>(W, n, us, cpu);
    auto l = overhead_run<fiber::backend::local>(W, n, us);
    fiber::set_config("local_transport", "tcp");
    auto t = overhead_run<fiber::backend::local>(W, n, us);
    fiber::set_config("local_transport", "ipc");
    dk_excess.push_back(d.excess_us() - c.excess_us());
    local_excess.push_back(l.excess_us() - c.excess_us());
    tcp_excess.push_back(t.excess_us() - c.excess_us());
    ctl_excess.push_back(c.excess_us());
    dk_ratio.push_back(d.wall / d.ideal);
    std::printf("rep %d d=1ms n=%zu: docker %.3f s (%.3f) local %.3f s local-tcp %.3f s control %.3f s | excess above "
                "control: docker %.1f µs, local %.1f µs, local-tcp %.1f µs\n",
                rep + 1, n, d.wall, d.wall / d.ideal, l.wall, t.wall, c.wall, dk_excess.back(), local_excess.back(),
                tcp_excess.back());
    std::fflush(stdout);
  }
  wait_gone(run);
  const double dk = bench::median(dk_excess), lo = bench::median(local_excess), tc = bench::median(tcp_excess);
  const std::string name = "overhead 1 ms, W=" + std::to_string(W) + ", docker workers (host network)";
  bench::row(name, "wall/ideal", bench::fmt("%.3f", bench::median(dk_ratio)), "-", "-", "-", "-");
  bench::row(name,
             "excess µs/task above control, median of " + std::to_string(dk_excess.size()) +
                 " pairs (control: " + bench::fmt("%.1f", bench::median(ctl_excess)) + " µs)",
             bench::fmt("%.1f", dk), "local workers: " + bench::fmt("%.1f", lo), bench::fmt("%+.1f µs", dk - lo),
             "≤ 10 µs", bench::verdict(dk <= 10));
  bench::row(name, "excess µs/task above control (as above)", bench::fmt("%.1f", dk),
             "local workers over tcp://127.0.0.1: " + bench::fmt("%.1f", tc), bench::fmt("%+.1f µs", dk - tc), "-",
             "-");
  if (own_image) (void)bench::run_capture("docker rmi -f " + image + " >/dev/null 2>&1");
  return 0;
}
#else
int main(int argc, char** argv) {
  fiber::init(argc, argv);
  std::printf("bench_docker: fiber was built without the docker backend (libcurl4-openssl-dev, nlohmann-json3-dev)\n");
  return 0;
}
#endif
