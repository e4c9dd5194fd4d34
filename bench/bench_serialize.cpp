// SPDX-License-Identifier: BSL-1.0
// Serialization throughput next to plain memcpy of the same bytes, measured
// in the same run so machine noise affects both alike.
//
//   bench_serialize [FLOATS] [REPS]     defaults: 1048576 floats, 15 repetitions
//   bench_serialize --smoke             a tiny run (4096 floats, 3 repetitions)
//
// Prints medians. A round trip is serialize (allocates the buffer, copies in)
// plus deserialize (allocates the value, copies out); the memcpy baseline does
// the same two allocations and two copies with nothing else.
#include <fiber/serialize.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

using clock_type = std::chrono::steady_clock;

/// Keeps the optimizer from discarding a result (gcc/clang).
template <class T>
void keep(T const& v) {
  asm volatile("" : : "r,m"(v) : "memory");
}

template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = clock_type::now();
    f();
    t.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// 50 fields of mixed width: padding forces the field-by-field path.
struct record50 {
  double d0, d1, d2, d3, d4, d5, d6, d7, d8, d9;
  float f0, f1, f2, f3, f4, f5, f6, f7, f8, f9;
  std::int64_t l0, l1, l2, l3, l4, l5, l6, l7, l8, l9;
  std::int32_t i0, i1, i2, i3, i4, i5, i6, i7, i8, i9;
  std::uint8_t b0, b1, b2, b3, b4, b5, b6, b7, b8, b9;
};
static_assert(boost::pfr::tuple_size_v<record50> == 50);
static_assert(!fiber::detail::memcpy_wire<record50>, "meant to take the per-field path");

void report(const char* what, std::size_t bytes, double fiber_s, double memcpy_s) {
  const double gbs = static_cast<double>(bytes) / fiber_s / 1e9;
  const double mgbs = static_cast<double>(bytes) / memcpy_s / 1e9;
  std::printf("%-44s %9.2f GB/s   memcpy %9.2f GB/s   ratio %5.2fx of memcpy time\n", what, gbs, mgbs,
              fiber_s / memcpy_s);
}

} // namespace

int main(int argc, char** argv) {
  const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
  const std::size_t n = smoke ? 4096 : argc > 1 ? std::strtoull(argv[1], nullptr, 10) : std::size_t{1} << 20;
  const int reps = smoke ? 3 : argc > 2 ? std::atoi(argv[2]) : 15;
  if (n == 0 || reps <= 0) {
    std::fprintf(stderr, "usage: %s [FLOATS>0] [REPS>0] | --smoke\n", argv[0]);
    return 2;
  }
#if defined(__GLIBC__)
  // Steady state, as in a long-running worker: keep freed blocks in the heap
  // instead of returning them to the kernel, so that every sample does not
  // page-fault its buffers in again (that cost, the same for fiber and for
  // memcpy, otherwise swamps both on VMs).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif

  // --- a vector of n floats ---------------------------------------------------
  std::vector<float> floats(n);
  for (std::size_t i = 0; i < n; ++i) floats[i] = static_cast<float>(i) * 0.25f;
  const std::size_t payload = n * sizeof(float);

  const double ser = median_seconds(reps, [&] { keep(fiber::serialize(floats)); });
  const std::vector<std::byte> wire = fiber::serialize(floats);
  const double deser = median_seconds(reps, [&] { keep(fiber::deserialize<std::vector<float>>(wire)); });
  const double rt = median_seconds(reps, [&] {
    const std::vector<std::byte> b = fiber::serialize(floats);
    keep(fiber::deserialize<std::vector<float>>(b));
  });
  const double mc1 = median_seconds(reps, [&] {
    auto dst = std::make_unique_for_overwrite<std::byte[]>(payload);
    std::memcpy(dst.get(), floats.data(), payload);
    keep(dst);
  });
  const double mc2 = median_seconds(reps, [&] {
    auto a = std::make_unique_for_overwrite<std::byte[]>(payload);
    std::memcpy(a.get(), floats.data(), payload);
    auto b = std::make_unique_for_overwrite<float[]>(n);
    std::memcpy(b.get(), a.get(), payload);
    keep(b);
  });
  if (fiber::deserialize<std::vector<float>>(wire) != floats) {
    std::fprintf(stderr, "round trip mismatch\n");
    return 1;
  }

  std::printf("vector<float> of %zu (%zu bytes), median of %d\n", n, payload, reps);
  report("  serialize", payload, ser, mc1);
  report("  deserialize", payload, deser, mc1);
  report("  serialize + deserialize", payload, rt, mc2);

  // --- one 50-field aggregate, many round trips per sample ----------------------
  record50 rec{};
  boost::pfr::for_each_field(rec,
                             [i = 0](auto& f) mutable { f = static_cast<std::remove_reference_t<decltype(f)>>(++i); });
  const std::size_t wire50 = fiber::serialize(rec).size();
  const std::size_t batch = std::max<std::size_t>(1, std::min<std::size_t>(n / 16, 100'000));

  const double agg_rt = median_seconds(reps, [&] {
    for (std::size_t i = 0; i < batch; ++i) {
      const std::vector<std::byte> b = fiber::serialize(rec);
      keep(fiber::deserialize<record50>(b));
    }
  });
  const double agg_mc = median_seconds(reps, [&] {
    for (std::size_t i = 0; i < batch; ++i) {
      std::vector<std::byte> b(wire50); // the same allocation serialize makes
      std::memcpy(b.data(), &rec, wire50);
      record50 out;
      std::memcpy(&out, b.data(), wire50);
      keep(out);
    }
  });
  if (fiber::deserialize<record50>(fiber::serialize(rec)).i9 != rec.i9) {
    std::fprintf(stderr, "round trip mismatch\n");
    return 1;
  }
  std::printf("50-field aggregate (%zu wire bytes, sizeof %zu), %zu round trips per sample\n", wire50, sizeof(record50),
              batch);
  report("  serialize + deserialize", wire50 * batch, agg_rt, agg_mc);
  std::printf("  %.1f ns per round trip (memcpy %.1f ns)\n", agg_rt / static_cast<double>(batch) * 1e9,
              agg_mc / static_cast<double>(batch) * 1e9);

  // --- a vector of such aggregates (field by field, one buffer) -------------------
  const std::vector<record50> recs(std::max<std::size_t>(1, n / 64), rec);
  const std::vector<std::byte> recs_wire = fiber::serialize(recs);
  const double vrt = median_seconds(reps, [&] {
    const std::vector<std::byte> b = fiber::serialize(recs);
    keep(fiber::deserialize<std::vector<record50>>(b));
  });
  const std::size_t recs_bytes = recs.size() * sizeof(record50);
  const double vmc = median_seconds(reps, [&] {
    auto a = std::make_unique_for_overwrite<std::byte[]>(recs_bytes);
    std::memcpy(a.get(), recs.data(), recs_bytes);
    std::vector<record50> b(recs.size());
    std::memcpy(b.data(), a.get(), recs_bytes);
    keep(b);
  });
  std::printf("vector<50-field aggregate> of %zu (%zu wire bytes)\n", recs.size(), recs_wire.size());
  report("  serialize + deserialize", recs_wire.size(), vrt, vmc);
  return 0;
}
