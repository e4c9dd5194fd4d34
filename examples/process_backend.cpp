// SPDX-License-Identifier: BSL-1.0
// process_backend: where a Process runs. fiber::Process takes its backend
// from FIBER_BACKEND at run time (local when unset); basic_process<Backend>
// fixes it at compile time. Both report back through a Queue.
//
//   ./process_backend                        # both run as local child processes
//   FIBER_BACKEND=slurm ./process_backend    # the first becomes a Slurm job
// (docker and kubernetes also need their header, or <fiber/fiber.hpp>, in the program.)

#include <fiber/backend/local.hpp>
#include <fiber/config.hpp>
#include <fiber/process.hpp>
#include <fiber/queue.hpp>

#include <cstdio>
#include <string>

// The worker sends back who it is: current_process() in the worker.
void where_am_i(fiber::Queue<fiber::process_info> out) { out.put(fiber::current_process()); }

int main(int argc, char** argv) {
  fiber::init(argc, argv);

  auto config = fiber::effective_config(); // the `backend` key: FIBER_BACKEND, fiber.toml or set_config
  std::string chosen = config.contains("backend") ? config["backend"] : "local";
  fiber::Queue<fiber::process_info> out;

  fiber::Process any{fiber::target<&where_am_i>, out}; // backend::from_env: FIBER_BACKEND
  any.set_name("from-env");
  fiber::basic_process<fiber::backend::local> here{fiber::target<&where_am_i>, out}; // always local
  here.set_name("always-local");
  // A cluster backend by type works the same: fiber::basic_process<fiber::backend::slurm>.

  any.start();
  here.start();
  bool ok = true;
  for (int i = 0; i < 2; ++i) {
    fiber::process_info r = out.get();
    std::printf("%s ran as a worker: %s (pid %lld)\n", r.name.c_str(), r.is_worker ? "yes" : "no",
                static_cast<long long>(r.pid));
    ok = ok && r.is_worker && (r.name == any.name() || r.name == here.name());
  }
  any.join();
  here.join();
  std::printf("backend key: %s; exit codes %d and %d\n", chosen.c_str(), any.exitcode().value_or(-1),
              here.exitcode().value_or(-1));
  return ok && any.exitcode() == 0 && here.exitcode() == 0 ? 0 : 1;
}
