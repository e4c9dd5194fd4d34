// SPDX-License-Identifier: BSL-1.0
// With object_b.cpp: two classes `Env`, each in an anonymous namespace of its
// own file, both made remote. fiber must refuse to start.

#include <fiber/manager.hpp>

#include <cstdio>

namespace {
struct Env {
  explicit Env(int seed) : seed_(seed) {}
  int step(int a) { return a + seed_; }
  int seed_;
};
BOOST_DESCRIBE_STRUCT(Env, (), (step))
} // namespace

void use_env_b();

int main() {
  // Never runs the manager: naming make() and call<&Env::step> registers both.
  fiber::RemoteManager<Env>* manager = nullptr;
  if (manager) (void)manager->make(1).call<&Env::step>(2);
  use_env_b();
  std::printf("no clash reported\n");
  return 0;
}
