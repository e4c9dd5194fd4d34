// SPDX-License-Identifier: BSL-1.0
// The other `Env` of object_a.cpp.

#include <fiber/manager.hpp>

namespace {
struct Env {
  explicit Env(int seed) : seed_(seed) {}
  int step(int a) { return a * seed_; }
  int seed_;
};
BOOST_DESCRIBE_STRUCT(Env, (), (step))
} // namespace

void use_env_b() {
  fiber::RemoteManager<Env>* manager = nullptr;
  if (manager) (void)manager->make(1).call<&Env::step>(2);
}
