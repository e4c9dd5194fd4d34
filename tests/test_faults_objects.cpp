// SPDX-License-Identifier: BSL-1.0
// The object store across the Slurm rig's hosts (issue 30): Slurm workers in
// the network namespaces righost1..3 read one object put in the master; each
// host holds one copy, the owner sends about one, and every copy is freed
// when the owner drops it. Label `faults` (the rig: bash
// tests/rigs/slurm-up.sh --nodes 3 --netns, as CI's faults stage starts it).
// Every job is named "fiberft-objects"; none is left in squeue after it.

#include <fiber/backend/slurm.hpp>
#include <fiber/object_store.hpp>
#include <fiber/pool.hpp>
#include <fiber/serialize.hpp>

#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>

#include "integration_support.hpp"
#include "support.hpp"

using namespace std::chrono_literals;

namespace {

using floats = fiber::object_ref<std::vector<float>>;

// This worker's host (its network namespace), the sum it read, and the
// bytes it holds in its store; with an empty reference (the owner dropped
// the object), the bytes it holds once the drop has reached it (or still
// holds after 20 s).
std::array<std::uint64_t, 3> read_on_host(floats r) {
  auto& store = fiber::detail::object_store::instance();
  if (!r) {
    (void)fiber_test::eventually([&] { return store.held_bytes() == 0; }, std::chrono::seconds(20));
    return {fiber::detail::host_key(), 0, store.held_bytes()};
  }
  auto v = r.get();
  const double sum = std::accumulate(v.begin(), v.end(), 0.0);
  return {fiber::detail::host_key(), std::uint64_t(sum), store.held_bytes()};
}

struct objects_jobs_cleanup {
  ~objects_jobs_cleanup() {
    if (!fiber_test::poll_until([] { return fiber_test::slurm_jobs("fiberft-objects").empty(); }, 20s))
      fiber_test::shell("squeue -h -o '%i %j' | awk '$2 ~ /^fiberft-objects/ {print $1}' | xargs -r scancel");
  }
};

} // namespace

// First in this file: the master must not listen on ipc:// yet, or the
// object would name that URL instead.
TEST_CASE("an object put while the master listened only on loopback TCP (local_transport = tcp) is read on the "
          "Slurm hosts",
          "[faults][slurm]") {
  if (!fiber_test::slurm_answers())
    FAIL("no Slurm cluster answers: start it with bash tests/rigs/slurm-up.sh --nodes 3 --netns");
  objects_jobs_cleanup cleanup;
  fiber::set_config("local_transport", "tcp");
  // as the next case has it: the Slurm backend reads its keys once, when its first Pool starts
  fiber::set_config("slurm.extra_args", "--cpus-per-task=8");
  std::vector<float> v(1 << 20, 1.0f);
  {
    fiber::Pool<&read_on_host> local{fiber::target<&read_on_host>, {.processes = 1}};
    auto r = fiber::put(v);
    auto bytes = fiber::serialize(r); // the URL it names: the master's only listener then
    fiber::reader in(bytes);
    REQUIRE(in.read<bool>());
    REQUIRE(in.read<std::string>().starts_with("tcp://127.0.0.1:"));
    CHECK(local.apply(r)[1] == v.size());

    fiber::pool_options o;
    o.processes = 2;
    o.name = "fiberft-objects";
    fiber::Pool<&read_on_host, fiber::backend::slurm> pool{fiber::target<&read_on_host>, o};
    for (auto& [host, sum, held] : pool.map(std::vector<floats>(4, r), 1)) {
      CHECK(sum == v.size());
      CHECK(host != fiber::detail::host_key());
    }
    pool.close();
    pool.join();
  }
  fiber::set_config("local_transport", "ipc");
}

TEST_CASE("objects across the Slurm rig's hosts: one copy per host, about one sent, all freed", "[faults][slurm]") {
  if (!fiber_test::slurm_answers())
    FAIL("no Slurm cluster answers: start it with bash tests/rigs/slurm-up.sh --nodes 3 --netns");
  objects_jobs_cleanup cleanup;
  std::vector<float> v(8 << 20); // 32 MiB: 4 pieces
  std::iota(v.begin(), v.end(), 0.0f);
  const auto want = std::uint64_t(std::accumulate(v.begin(), v.end(), 0.0));
  const std::uint64_t size = v.size() * sizeof(float);
  auto r = fiber::put(v);
  auto& served = fiber::detail::object_source::served();
  const auto served0 = served.load();

  fiber::set_config("slurm.extra_args", "--cpus-per-task=8"); // a rig node each: one worker per host
  fiber::pool_options o;
  o.processes = 3;
  o.name = "fiberft-objects";
  fiber::Pool<&read_on_host, fiber::backend::slurm> pool{fiber::target<&read_on_host>, o};
  auto got = pool.map(std::vector<floats>(12, r), 1);
  std::map<std::uint64_t, std::uint64_t> held_per_host;
  for (auto& [host, sum, held] : got) {
    CHECK(sum == want);
    CHECK(host != fiber::detail::host_key()); // a Slurm job runs on a rig host, not the master's
    held_per_host[host] = std::max(held_per_host[host], held);
  }
  CHECK(held_per_host.size() == 3);
  for (auto& [host, held] : held_per_host) CHECK(held == size); // each host holds one copy
  CHECK(served.load() - served0 <= size * 12 / 10);             // the owner sent about one
  std::printf("objects: 12 reads on %zu hosts, the owner sent %.2f x the object\n", held_per_host.size(),
              double(served.load() - served0) / double(size));

  r = floats(); // the owner's last reference: every host frees its copy
  for (auto& [host, sum, held] : pool.map(std::vector<floats>(12), 1)) CHECK(held == 0);
  pool.close();
  pool.join();
  fiber::set_config("slurm.extra_args", "");
}
