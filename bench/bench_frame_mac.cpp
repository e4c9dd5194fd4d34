// SPDX-License-Identifier: BSL-1.0
// bench_frame_mac: what frame MACs (docs/security.md, key frame_mac) cost on
// a Pool of one local worker over tcp://127.0.0.1 (local_transport = tcp),
// against the same Pool with frame_mac = false in the same run (the
// baseline). Rows: the apply round trip of an empty task (median µs over
// --trips; target: at most 5 µs more), and the 1 MiB payload stream of
// bench_payload (MiB/s moved, arguments + results; target ≥ 0.9x). Each rep
// runs both, in alternating order.
//
//   bench_frame_mac [--reps 5] [--trips 2000] [--tasks 200] [--smoke]
#include "bench_util.hpp"

#include <fiber/fiber.hpp>

namespace {
void nothing() {}
std::vector<float> echo(std::vector<float> v) { return v; }

constexpr std::size_t floats = (1u << 20) / sizeof(float);

struct figures {
  double rtt_us, payload_mibs;
};

figures run(bool mac, int trips, int tasks, const std::vector<float>& v) {
  fiber::set_config("frame_mac", mac ? "true" : "false");
  figures f{};
  {
    fiber::Pool pool{fiber::target<&nothing>, {.processes = 1}};
    for (int i = 0; i < 50; ++i) pool.apply();
    std::vector<double> us;
    us.reserve(std::size_t(trips));
    for (int i = 0; i < trips; ++i) {
      auto t0 = bench::clk::now();
      pool.apply();
      us.push_back(1e6 * bench::seconds_since(t0));
    }
    f.rtt_us = bench::median(us);
  }
  fiber::Pool pool{fiber::target<&echo>, {.processes = 1}};
  for (int i = 0; i < 2; ++i) (void)pool.apply(v);
  auto t0 = bench::clk::now();
  std::vector<fiber::async_result<std::vector<float>>> hs;
  for (int i = 0; i < tasks; ++i) hs.push_back(pool.apply_async(v));
  std::size_t bad = 0;
  for (auto& h : hs) bad += h.get().size() != floats;
  f.payload_mibs = 2.0 * tasks / bench::seconds_since(t0);
  if (bad) std::fprintf(stderr, "bench_frame_mac: %zu bad results\n", bad);
  return f;
}
} // namespace

int main(int argc, char** argv) {
  fiber::init(argc, argv);
  auto a = bench::parse_common(argc, argv);
  if (!a.reps_given && !a.smoke) a.reps = 5;
  const int trips = a.smoke ? 100 : std::atoi(bench::opt(a, "--trips").value_or("2000").c_str());
  const int tasks = a.smoke ? 8 : std::atoi(bench::opt(a, "--tasks").value_or("200").c_str());
  bench::header("bench_frame_mac: frame MACs on and off, 1 local worker over tcp://127.0.0.1");
  std::printf("trips=%d tasks=%d reps=%d\n", trips, tasks, a.reps);
  fiber::set_config("local_transport", "tcp");
  std::vector<float> v(floats, 1.0f);
  std::vector<double> rtt_on, rtt_off, pay_on, pay_off;
  for (int rep = 0; rep < a.reps; ++rep) {
    figures on, off; // the order alternates: neither side always runs on a machine the other warmed
    if (rep % 2 == 0) {
      on = run(true, trips, tasks, v);
      off = run(false, trips, tasks, v);
    } else {
      off = run(false, trips, tasks, v);
      on = run(true, trips, tasks, v);
    }
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
  bench::row("frame MACs: apply round trip, 1 worker, tcp://127.0.0.1",
             "median µs (difference: median of those in each repetition)", bench::fmt("%.1f", r_on),
             "frame_mac = false: " + bench::fmt("%.1f", r_off), bench::fmt("%+.1f µs", d), "≤ +5 µs",
             bench::verdict(d <= 5.0, true));
  bench::row("frame MACs: payload (1 MiB argument and result), 1 worker, tcp://127.0.0.1",
             "MiB/s moved, arguments + results (ratio: median of those in each repetition)", bench::fmt("%.0f", p_on),
             "frame_mac = false: " + bench::fmt("%.0f", p_off), bench::fmt("%.2fx", q), "≥ 0.9x",
             bench::verdict(q >= 0.9, true));
  return 0;
}
