// SPDX-License-Identifier: BSL-1.0
// bench_kubernetes: the kubernetes backend's figures (issue 20), against
// tests/fake_kube (an API server whose kubelet runs each pod's command as a
// local process: what is measured is fiber's side and the API round trips,
// not a real cluster's scheduling and image pulls).
//
//  - Startup: a Pool of 8 workers (fiber::backend::kubernetes), from
//    construction to its first result (the run's Secret and 8 pods created,
//    the first worker dialled back over tls+tcp, authenticated and ran a
//    task), and to all 8 connected; median of --reps. Baseline in the same
//    run: the same Pool with local workers (fiber::backend::local).
//  - API calls per worker, from the fake's /fake/stats over the repetitions
//    (the launcher's list+watch is made once, before them): target one
//    `create pods` and zero polls (`get pods`, `list pods`): pod state comes
//    from the watch. The pods' deletion after their end is counted apart.
//
// Needs /usr/bin/python3 (FIBER_FAKE_KUBE_PYTHON); without it the rows say n/a
// and it exits 0 (a benchmark is not a test).
//
//   bench_kubernetes [--pool-workers 8] [--reps 5] [--smoke]
#include "bench_util.hpp"

#include <fiber/backend/kubernetes.hpp>
#include <fiber/backend/local.hpp>
#include <fiber/fiber.hpp>

#include <string_view>
#include <thread>

#include <unistd.h>

#if defined(FIBER_HAS_KUBERNETES_BACKEND)
#include "../tests/fake_kube/fake_kube.hpp"

namespace {

int ping(int x) { return x + 1; }

struct startup {
  double first_ms, all_ms;
};

template <class Backend>
startup pool_startup(unsigned n) {
  auto t0 = bench::clk::now();
  fiber::Pool<&ping, Backend> pool{fiber::target<&ping>, {.processes = n}};
  int r = pool.apply(1);
  startup s{bench::seconds_since(t0) * 1e3, 0};
  if (r != 2) std::fprintf(stderr, "bench_kubernetes: bad result\n");
  while (pool.live_workers() < n) std::this_thread::yield();
  s.all_ms = bench::seconds_since(t0) * 1e3;
  return s;
}

} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  if (!a.reps_given) a.reps = a.smoke ? 1 : 5;
  const unsigned n = unsigned(std::atoi(bench::opt(a, "--pool-workers").value_or("8").c_str()));
  bench::header("bench_kubernetes: Pool of kubernetes workers against tests/fake_kube, construction to first result; "
                "API calls per worker");
  const std::string python = bench::env_or("FIBER_FAKE_KUBE_PYTHON", "/usr/bin/python3");
  const std::string row_name = "startup, Pool of " + std::to_string(n) + " kubernetes workers (fake API server)";
  if (!bench::exists(python)) {
    std::printf("no %s: nothing measured\n", python.c_str());
    bench::row(row_name, "construction → first result, ms", "n/a", "local workers: n/a", "n/a", "-", "n/a");
    return 0;
  }
  std::unique_ptr<fiber_test::fake_kube> fake;
  try {
    fake = std::make_unique<fiber_test::fake_kube>(std::vector<std::string>{"--node-cpu", "256", "--node-memory", "1Ti",
                                                                            "--no-events", "--pass-env", "ASAN_*",
                                                                            "--pass-env", "LD_LIBRARY_PATH"});
  } catch (const std::exception& e) {
    std::printf("the fake API server did not start (%s): nothing measured\n", e.what());
    bench::row(row_name, "construction → first result, ms", "n/a", "local workers: n/a", "n/a", "-", "n/a");
    return 0;
  }
  ::setenv("KUBECONFIG", fake->kubeconfig().c_str(), 1);
  ::setenv("KUBECACHEDIR", (fake->state_dir() + "/kcache").c_str(), 1);
  fiber::set_config("k8s.image", "fiber-bench:1"); // the process kubelet runs this very executable
  std::printf("fake API server %s (pid %d)  pool workers=%u  reps=%d\n", fake->url().c_str(), int(fake->pid()), n,
              a.reps);

  // The launcher (credentials, list+watch) is made once, as a program's first Pool would: not timed.
  (void)pool_startup<fiber::backend::kubernetes>(1);
  (void)pool_startup<fiber::backend::local>(1);
  auto pods_left = [&] { return fake->pods("app.kubernetes.io/managed-by=fiber").size(); };
  for (int i = 0; i < 500 && pods_left() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  fake->control("POST", "stats/reset", nlohmann::json::object());

  std::vector<double> first, all, local_first, local_all;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto k = pool_startup<fiber::backend::kubernetes>(n);
    auto l = pool_startup<fiber::backend::local>(n);
    first.push_back(k.first_ms);
    all.push_back(k.all_ms);
    local_first.push_back(l.first_ms);
    local_all.push_back(l.all_ms);
    std::printf("rep %d: kubernetes first result %.1f ms, all connected %.1f ms | local %.1f ms, %.1f ms\n", rep + 1,
                k.first_ms, k.all_ms, l.first_ms, l.all_ms);
    std::fflush(stdout);
    // Untimed: the pods of this repetition are deleted before the next one starts.
    for (int i = 0; i < 500 && pods_left() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto calls = fake->user_requests(); // fiber's calls only (the bench's own queries go as another user)
  const double workers = double(n) * a.reps;
  auto per = [&](const char* key) { return calls.value(key, 0) / workers; };
  std::printf("API calls over %d repetitions of %u workers: %s\n", a.reps, n, calls.dump().c_str());

  const double f = bench::median(first), lf = bench::median(local_first);
  bench::row(row_name, "construction → first result, ms", bench::fmt("%.1f", f),
             "local workers: " + bench::fmt("%.1f", lf), bench::fmt("%.2fx", f / lf), "-", "-");
  bench::row(row_name, "construction → all connected, ms", bench::fmt("%.1f", bench::median(all)),
             "local workers: " + bench::fmt("%.1f", bench::median(local_all)),
             bench::fmt("%.2fx", bench::median(all) / bench::median(local_all)), "-", "-");
  const double creates = per("create pods"), polls = per("get pods") + per("list pods");
  bench::row(row_name, "API calls per worker: create pods / polls (get, list)",
             bench::fmt("%.2f", creates) + " / " + bench::fmt("%.2f", polls), "-", "-", "1 create, 0 polls",
             bench::verdict(creates == 1.0 && polls == 0.0));
  bench::row(row_name, "API calls per worker: delete pods (after its end) / watch / create secrets",
             bench::fmt("%.2f", per("delete pods")) + " / " + bench::fmt("%.2f", per("watch pods")) + " / " +
                 bench::fmt("%.2f", per("create secrets")),
             "-", "-", "-", "-");
  fiber::detail::runtime::instance().stop(); // its launchers delete their pods through the fake: before it stops
  return 0;
}
#else
int main(int argc, char** argv) {
  fiber::init(argc, argv);
  std::printf("bench_kubernetes: fiber was built without the kubernetes backend (libcurl4-openssl-dev, "
              "nlohmann-json3-dev)\n");
  return 0;
}
#endif
