// SPDX-License-Identifier: BSL-1.0
// bench_frame_mac: what frame MACs (docs/security.md, key frame_mac) cost on
// a Pool of one local worker over tcp://127.0.0.1 (local_transport = tcp),
// against a Pool with frame_mac = false alive beside it (the baseline; the
// flag is fixed per link at its handshake). Rows: the apply round trip of an
// empty task (median µs over --trips; target: at most 5 µs more), and the
// 1 MiB payload stream of bench_payload (MiB/s moved, arguments + results;
// target ≥ 0.9x). Trips and batches of tasks alternate between the two
// Pools, so a change in the machine's load falls on both alike, and which
// Pool is made first alternates between repetitions.
//
// A third row: the CPU time of the tags one round trip adds, in a loop (the
// round trip moves by tens of µs with where the scheduler puts the worker,
// more than the tags cost).
//
// --control: both Pools without tags (an A/A run): the rows then show what
// the method reads when there is no difference, its bias and its noise.
//
//   bench_frame_mac [--reps 15] [--trips 1000] [--tasks 200] [--control] [--smoke]
#include "bench_mac_pair.hpp"
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

#include <algorithm>
#include <string>
#include <memory>
#include <utility>
#include <vector>

namespace {
void nothing() {}
std::vector<float> echo(std::vector<float> v) { return v; }

constexpr std::size_t floats = (1u << 20) / sizeof(float);

struct figures {
  double rtt_us = NAN, payload_mibs = NAN;
};

void nowhere() {}                          // nothing to choose before a Pool is made
using from_env = fiber::backend::from_env; // as fiber::Pool by default

/// One repetition: {on, off}.
std::pair<figures, figures> run(int trips, int tasks, const std::vector<float>& v, bool on_first) {
  figures on{}, off{};
  {
    auto [p_on, p_off] = bench::pools_on_off<&nothing, from_env>(on_first, nowhere);
    for (int i = 0; i < 50; ++i) p_on->apply(), p_off->apply();
    std::vector<double> us_on, us_off;
    bench::by_turns(*p_on, *p_off, trips, [&](auto& pool, bool mac) {
      auto t0 = bench::clk::now();
      pool.apply();
      (mac ? us_on : us_off).push_back(1e6 * bench::seconds_since(t0));
    });
    on.rtt_us = bench::median(us_on);
    off.rtt_us = bench::median(us_off);
  }
  if (tasks <= 0) return {on, off};
  auto [p_on, p_off] = bench::pools_on_off<&echo, from_env>(on_first, nowhere, v);
  for (int i = 0; i < 2; ++i) (void)p_on->apply(v), (void)p_off->apply(v);
  std::size_t bad = 0;
  const int per_batch = std::min(tasks, 20), batches = (tasks + per_batch - 1) / per_batch;
  double s_on = 0, s_off = 0;
  bench::by_turns(*p_on, *p_off, batches, [&](auto& pool, bool mac) {
    auto t0 = bench::clk::now();
    std::vector<fiber::async_result<std::vector<float>>> hs;
    for (int i = 0; i < per_batch; ++i) hs.push_back(pool.apply_async(v));
    for (auto& h : hs) bad += h.get().size() != floats;
    (mac ? s_on : s_off) += bench::seconds_since(t0);
  });
  const int moved = 2 * batches * per_batch;
  on.payload_mibs = moved / s_on;
  off.payload_mibs = moved / s_off;
  if (bad) std::fprintf(stderr, "bench_frame_mac: %zu bad results\n", bad);
  return {on, off};
}

/// The CPU time, in µs, of the tags one apply round trip adds: two seals and
/// two opens of a 64-byte frame (under 4 KiB: the engine frames that small use).
double tag_cpu_us() {
  const fiber::detail::session_key k{7};
  fiber::detail::frame_mac seal(k), open(k);
  const std::vector<std::byte> m(64);
  std::byte tag[fiber::detail::frame_tag_size];
  const int n = 200000;
  int bad = 0;
  auto t0 = bench::clk::now();
  for (int i = 0; i < n; ++i) {
    seal.seal({m}, tag);
    bad += !open.open(m, tag);
  }
  if (bad) std::fprintf(stderr, "bench_frame_mac: %d tags did not open\n", bad);
  return 2e6 * bench::seconds_since(t0) / n;
}
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  if (!a.reps_given && !a.smoke) a.reps = 15;
  const int trips = a.smoke ? 100 : std::atoi(bench::opt(a, "--trips").value_or("1000").c_str());
  const int tasks = a.smoke ? 8 : std::atoi(bench::opt(a, "--tasks").value_or("200").c_str());
  bench::mac_control = std::find(a.rest.begin(), a.rest.end(), "--control") != a.rest.end();
  bench::header(bench::mac_control ? "bench_frame_mac --control: two Pools, both without frame MACs (A/A)"
                                   : "bench_frame_mac: frame MACs on and off, 1 local worker over tcp://127.0.0.1");
  std::printf("trips=%d tasks=%d reps=%d\n", trips, tasks, a.reps);
  fiber::set_config("local_transport", "tcp");
  std::vector<float> v(floats, 1.0f);
  std::vector<double> rtt_on, rtt_off, pay_on, pay_off;
  for (int rep = 0; rep < a.reps; ++rep) {
    auto [on, off] = run(trips, tasks, v, rep % 2 == 0);
    rtt_on.push_back(on.rtt_us);
    rtt_off.push_back(off.rtt_us);
    pay_on.push_back(on.payload_mibs);
    pay_off.push_back(off.payload_mibs);
    std::printf("rep %d: round trip %.1f / %.1f µs, payload %.0f / %.0f MiB/s (on / off)\n", rep + 1, on.rtt_us,
                off.rtt_us, on.payload_mibs, off.payload_mibs);
    std::fflush(stdout);
  }
  const double r_on = bench::median(rtt_on), r_off = bench::median(rtt_off);
  const double p_on = bench::median(pay_on), p_off = bench::median(pay_off);
  std::vector<double> dr, pq; // within each repetition: the machine's load moves both alike
  for (std::size_t i = 0; i < rtt_on.size(); ++i) {
    dr.push_back(rtt_on[i] - rtt_off[i]);
    pq.push_back(pay_on[i] / pay_off[i]);
  }
  const double d = bench::median(dr), q = bench::median(pq);
  const std::string tag = bench::mac_control ? " (control: neither has tags)" : "";
  bench::row("frame MACs: apply round trip, 1 worker, tcp://127.0.0.1" + tag,
             "median µs (difference: median of those in each repetition)", bench::fmt("%.1f", r_on),
             "frame_mac = false: " + bench::fmt("%.1f", r_off), bench::fmt("%+.1f µs", d), "≤ +5 µs",
             bench::verdict(d <= 5.0, true));
  const double cpu = tag_cpu_us();
  bench::row("frame MACs: CPU of the tags one round trip adds (2 seals + 2 opens, 64 B frames)", "µs, in a loop",
             bench::fmt("%.2f", cpu), "-", bench::fmt("%+.2f µs", cpu), "≤ +5 µs", bench::verdict(cpu <= 5.0, true));
  bench::row("frame MACs: payload (1 MiB argument and result), 1 worker, tcp://127.0.0.1" + tag,
             "MiB/s moved, arguments + results (ratio: median of those in each repetition)", bench::fmt("%.0f", p_on),
             "frame_mac = false: " + bench::fmt("%.0f", p_off), bench::fmt("%.2fx", q), "≥ 0.9x",
             bench::verdict(q >= 0.9, true));
  return 0;
}
