// SPDX-License-Identifier: BSL-1.0
// A fiber program that test_faults_edges runs from inside a worker: its own
// main must run (as a master with workers of its own), not become a worker
// of the run that started it.
#include <fiber/init.hpp>
#include <fiber/pool.hpp>
#include <fiber/target.hpp>

#include <cstdio>
#include <vector>

namespace {
int twice(int x) { return 2 * x; }
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  fiber::Pool pool{fiber::target<&twice>, {.processes = 1}};
  auto r = pool.map(std::vector<int>{1, 2, 3});
  std::printf("nested main ran: %d as %s\n", r[0] + r[1] + r[2], fiber::current_process().name.c_str());
  return 0;
}
