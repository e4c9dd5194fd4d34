// SPDX-License-Identifier: BSL-1.0
/// \file main.cpp
/// `es`: OpenAI-style Evolution Strategies (Salimans et al. 2017) with its
/// rollouts farmed out through a fiber::Pool — see README.md beside this file.
///
///   es --env humanoid --population 256 --workers 2 --time-budget 600 --out es-out
///   es --env cartpole --policy linear --population 64 --target-return 475 --time-budget 60
///   es --load es-out/policy.bin --evaluate 20
///
/// FIBER_BACKEND=slurm runs the same binary with one worker per Slurm task.
#include <fiber/fiber.hpp>
#if defined(FIBER_HAS_METRICS) // linked with fiber::metrics: the status page plots the learning curve
#include <fiber/metrics.hpp>
#include <prometheus/gauge.h>
#endif

#include <cstdio>
#include <exception>
#include <functional>

#include "app.hpp"

int main(int argc, char** argv) {
  fiber::init(argc, argv); // in a worker process: serves es::evaluate_batch tasks, never returns
  const auto start = std::chrono::steady_clock::now();

  es::app_options o;
  CLI::App cli{"Evolution Strategies (Salimans et al. 2017) on CartPole or the MuJoCo humanoid, on a fiber::Pool"};
  es::add_options(cli, o);
  CLI11_PARSE(cli, argc, argv);
  const unsigned workers = o.workers ? o.workers : unsigned(fiber::cpu_count());

  // policy.bin is an es::saved_policy aggregate, written by fiber's serializer.
  auto encode = [](const es::saved_policy& p) { return fiber::serialize(p); };
  auto decode = [](std::span<const std::byte> bytes) {
    try {
      return fiber::deserialize<es::saved_policy>(bytes);
    } catch (const fiber::serialization_error&) {
      // An older layout fails somewhere after its leading format string: name it.
      std::string format;
      try {
        format = fiber::reader(bytes).read<std::string>();
      } catch (const fiber::serialization_error&) {
        throw std::runtime_error("not a policy file (no leading format string)");
      }
      if (format != es::saved_policy::current_format)
        throw std::runtime_error("policy format '" + format + "', this program reads '" +
                                 es::saved_policy::current_format + "'");
      throw;
    }
  };
  std::function<void(const es::generation_report&)> publish;
#if defined(FIBER_HAS_METRICS)
  // FIBER_METRICS_ADDRESS=auto: /metrics and the status page show these (docs/observability.md).
  auto& mean_return = prometheus::BuildGauge()
                          .Name("es_mean_return")
                          .Help("Mean episode return of the last generation")
                          .Register(fiber::metrics_registry())
                          .Add({});
  auto& mean_length = prometheus::BuildGauge()
                          .Name("es_mean_episode_length")
                          .Help("Mean episode length of the last generation (steps)")
                          .Register(fiber::metrics_registry())
                          .Add({});
  publish = [&](const es::generation_report& r) {
    mean_return.Set(r.mean_return);
    mean_length.Set(r.mean_length);
  };
  if (auto url = fiber::metrics_url(); !url.empty()) std::printf("es: status page %s/\n", url.c_str());
#endif
  try {
    if (o.threads) { // shared-memory baseline: same program, rollouts on threads of this process
      es::thread_pool<&es::evaluate_batch> pool{workers};
      return es::run_app(o, pool, workers, encode, decode, start, publish);
    }
    fiber::pool_options options{};
    options.processes = workers;
    options.name = "es-rollouts";
    fiber::Pool pool{fiber::target<&es::evaluate_batch>, options};
    return es::run_app(o, pool, workers, encode, decode, start, publish);
  } catch (const CLI::Error& e) {
    return cli.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "es: %s\n", e.what());
    return 1;
  }
}
