// SPDX-License-Identifier: BSL-1.0
// A backend brought from outside include/ (CONTRIBUTING.md, "Add a backend"):
// a launcher, a policy with one configuration key, and one registration. No
// file of fiber's names it, yet FIBER_BACKEND, set_config, the environment
// and a Process find it.

#include <fiber/backend/detail/named_backends.hpp>
#include <fiber/backend/from_env.hpp>
#include <fiber/backend/launcher.hpp>
#include <fiber/backend/local.hpp>
#include <fiber/config.hpp>
#include <fiber/detail/runtime.hpp>
#include <fiber/error.hpp>
#include <fiber/process.hpp>

#include <catch2/catch.hpp>

#include <asio/io_context.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support.hpp"

namespace {

std::atomic<int> plugin_jobs{0}; // jobs started through the plugin's launcher in this process

/// The plugin's launcher: local child processes (it wraps backend::local's),
/// each with PLUGIN_TAG, the `plugin.tag` key's value, in its environment.
class plugin_launcher final : public fiber::backend::launcher {
public:
  plugin_launcher(const fiber::backend::launch_context& ctx, std::string tag)
      : local_(fiber::backend::local::make(ctx)), tag_(std::move(tag)) {}
  std::string_view name() const noexcept override { return "plugin"; }
  fiber::backend::launcher_traits traits() const noexcept override { return local_->traits(); }
  std::string listen_url() override { return local_->listen_url(); }
  std::vector<fiber::backend::job> launch(const std::vector<fiber::backend::job_spec>& specs,
                                          std::vector<fiber::backend::exit_handler> on_exit) override {
    auto tagged = specs;
    for (auto& s : tagged) s.env.emplace_back("PLUGIN_TAG", tag_);
    plugin_jobs += int(specs.size());
    return local_->launch(tagged, std::move(on_exit));
  }
  void cancel(const fiber::backend::job& j, int signal) override { local_->cancel(j, signal); }

private:
  std::shared_ptr<fiber::backend::launcher> local_;
  std::string tag_;
};

/// The plugin's policy: its name, its one key, its make().
struct plugin {
  static constexpr std::string_view name = "plugin";
  static constexpr std::string_view config_keys = R"(
plugin.tag [untagged] PLUGIN_TAG in the environment of each job the plugin backend starts
)";
  static std::shared_ptr<fiber::backend::launcher> make(const fiber::backend::launch_context& ctx) {
    return std::make_shared<plugin_launcher>(ctx, fiber::detail::config_string("plugin.tag"));
  }
};

// The one registration: name, factory and keys.
const bool plugin_registered = fiber::detail::register_policy<plugin>();

// In the worker: exits with 3 unless its job carried PLUGIN_TAG=expected.
void exit_unless_tagged(std::string expected) {
  const char* tag = std::getenv("PLUGIN_TAG");
  if (!tag || expected != tag) std::exit(3);
}

std::string backend_error_of(const std::string& backend) {
  auto& t = fiber::detail::config_table::instance();
  auto& rt = fiber::detail::runtime::instance();
  ::setenv("FIBER_BACKEND", backend.c_str(), 1);
  t.reload();
  std::string what;
  try {
    rt.sync([&] { fiber::backend::from_env::make(rt.launch_context()); });
  } catch (const fiber::backend_error& e) {
    what = e.what();
  }
  ::unsetenv("FIBER_BACKEND");
  t.reload();
  return what;
}

} // namespace

TEST_CASE("a backend registered from outside include/ brings its configuration key", "[plugin][config]") {
  REQUIRE(plugin_registered);
  auto& t = fiber::detail::config_table::instance();
  CHECK(fiber::detail::config_string("plugin.tag") == "untagged"); // its default
  ::setenv("FIBER_PLUGIN_TAG", "from-env", 1);
  t.reload();
  CHECK(fiber::detail::config_string("plugin.tag") == "from-env");
  auto unknown = t.unknown_environment();
  CHECK(std::find(unknown.begin(), unknown.end(), "FIBER_PLUGIN_TAG") == unknown.end());
  ::unsetenv("FIBER_PLUGIN_TAG");
  t.reload();

  fiber::set_config("plugin.tag", "from-code");
  CHECK(fiber::detail::config_string("plugin.tag") == "from-code");
  CHECK(fiber::effective_config().at("plugin.tag") == "from-code");
  CHECK_THROWS_AS(fiber::set_config("plugin.other", "x"), fiber::config_error);
}

TEST_CASE("FIBER_BACKEND finds a registered backend by its name", "[plugin][config]") {
  auto& t = fiber::detail::config_table::instance();
  auto& rt = fiber::detail::runtime::instance();
  REQUIRE(fiber::detail::find_backend("plugin") != nullptr);
  ::setenv("FIBER_BACKEND", "plugin", 1);
  t.reload();
  std::string name = rt.sync([&] {
    auto l = fiber::backend::from_env::make(rt.launch_context());
    return std::string(l->name());
  });
  ::unsetenv("FIBER_BACKEND");
  t.reload();
  CHECK(name == "plugin");

  // An unknown name lists the registered ones, the plugin among them.
  auto what = backend_error_of("mesos");
  CHECK(what.find("'mesos'") != std::string::npos);
  CHECK(what.find("plugin") != std::string::npos);
  CHECK(what.find("local") != std::string::npos);
}

TEST_CASE("a Process runs through the registered backend, its key applied", "[plugin][process]") {
  fiber::set_config("plugin.tag", "blue"); // read when the runtime makes the plugin's launcher, below
  const int before = plugin_jobs;
  fiber::basic_process<plugin> p{fiber::target<&exit_unless_tagged>, std::string("blue")};
  p.start();
  REQUIRE(p.join(std::chrono::seconds(60)));
  CHECK(p.exitcode() == 0);
  CHECK(plugin_jobs > before);
  fiber_test::require_no_children();
}

TEST_CASE("the local launcher refuses a launch with fewer exit handlers than specs", "[plugin][launcher]") {
  asio::io_context io;
  auto l = std::make_shared<fiber::detail::local_launcher>(io.get_executor());
  std::vector<fiber::backend::job_spec> specs(2);
  for (auto& s : specs) s.argv = {"/bin/true"};
  std::vector<fiber::backend::exit_handler> one(1);
  CHECK_THROWS_WITH(l->launch(specs, std::move(one)),
                    Catch::Contains("one exit handler per spec (2 specs, 1 handlers)"));
}
