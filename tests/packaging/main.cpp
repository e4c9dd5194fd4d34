// SPDX-License-Identifier: BSL-1.0
// A consumer of fiber: proves that fiber::fiber carries everything needed to
// compile and link against fiber's headers. Shared by both consumer projects.
#if __has_include(<fiber/serialize.hpp>)
#include <fiber/serialize.hpp>

#include <cstdio>
#include <string>
#include <vector>

struct sample {
  int id;
  std::string name;
  std::vector<double> values;
};

int main() {
  const sample in{7, "fiber", {1.5, 2.5}};
  const auto bytes = fiber::serialize(in);
  const auto out = fiber::deserialize<sample>(bytes);
  const bool ok = out.id == in.id && out.name == in.name && out.values == in.values;
  std::printf("consumer: serialize round trip %s (%zu bytes)\n", ok ? "ok" : "FAILED", bytes.size());
  return ok ? 0 : 1;
}
#else
#include <fiber/error.hpp>

#include <cstdio>

int main() {
  try {
    throw fiber::remote_error{"std::runtime_error", "boom"};
  } catch (const fiber::error& e) {
    std::printf("consumer: caught %s\n", e.what());
    return 0;
  }
  return 1;
}
#endif
