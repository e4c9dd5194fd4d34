// SPDX-License-Identifier: BSL-1.0
// The C++ side of tests/fake_kube for fiber's tests and benchmarks: start
// fake_kube.py, read its ready line (with a deadline), call its Kubernetes API
// and its /fake/ control API, stop it (SIGTERM, then wait) leaving nothing.
#pragma once

#include <fiber/backend/detail/http_client.hpp>
#include <fiber/backend/kubernetes/access.hpp>

#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace fiber_test {

/// A running fake API server in its own state directory (see tests/fake_kube/README.md).
class fake_kube {
public:
  /// Starts it with `args` added (flags of fake_kube.py) and waits up to 20 s
  /// for its ready line. The fake stops with the thread that started it
  /// (--die-with-parent) if this object is never destroyed. Throws
  /// std::runtime_error if it does not become ready.
  explicit fake_kube(std::vector<std::string> args = {}) {
    char tmpl[] = "/tmp/fiber-fake-kube-XXXXXX";
    if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp");
    dir_ = tmpl;
    std::vector<std::string> argv{python(), script(), "--state-dir", dir_, "--die-with-parent"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    int rc = ::posix_spawn(&pid_, argv[0].c_str(), &fa, nullptr, a.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(out[1]);
    if (rc != 0) {
      ::close(out[0]);
      throw std::runtime_error("cannot start " + argv[0] + " " + argv[1]);
    }
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      auto n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, std::size_t(n));
    }
    ::close(out[0]); // it prints nothing more
    info_ = nlohmann::json::parse(line.substr(0, line.find('\n')), nullptr, false);
    if (!info_.is_object() || !info_.contains("url")) {
      stop();
      throw std::runtime_error("fake_kube did not become ready within 20 s; it said: " + line);
    }
    // The fixture's own calls go as another user: by_user["fake-user"] in
    // /fake/stats then counts the calls of the code under test only.
    observer_token_ = control("POST", "tokens", {{"user", "fixture"}}).value("token", "");
  }
  fake_kube(const fake_kube&) = delete;
  fake_kube& operator=(const fake_kube&) = delete;
  ~fake_kube() { stop(); }

  /// SIGTERM; it kills its pods' processes and exits (waited for, up to 15 s, then SIGKILL).
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
      while (::waitpid(pid_, &st, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, &st, 0);
          break;
        }
        ::usleep(10000); // waiting for a child to exit (bounded)
      }
      pid_ = -1;
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }

  const nlohmann::json& info() const { return info_; }
  std::string get(const char* k) const { return info_.value(k, ""); }
  std::string url() const { return get("url"); }
  std::string kubeconfig() const { return get("kubeconfig"); }
  std::string state_dir() const { return dir_; }
  pid_t pid() const { return pid_; }

  /// Credentials as a client would hold them: the fake's CA and a valid token.
  fiber::detail::kube::access access() const {
    fiber::detail::kube::access a;
    a.server = url();
    a.tls.ca_file = get("ca");
    a.token = get("token");
    a.source = "the fake's token";
    return a;
  }

  /// A call to the Kubernetes API as the fixture (user "fixture", not the
  /// kubeconfig's): (HTTP status, body as JSON or null).
  std::pair<long, nlohmann::json> api(const std::string& method, const std::string& path,
                                      const nlohmann::json& body = nullptr) const {
    return call(method, path, body, observer_token_);
  }

  /// API calls counted for the kubeconfig's user (the code under test) since
  /// the last `POST /fake/stats/reset`: {"create pods": n, ...}.
  nlohmann::json user_requests() const {
    return control("GET", "stats")["by_user"].value(get("user"), nlohmann::json::object());
  }

  /// As api(), the body as text (pod logs).
  std::pair<long, std::string> api_text(const std::string& method, const std::string& path) const {
    return call_raw(method, path, nullptr, observer_token_);
  }

  /// A call to the /fake/ control API; throws std::runtime_error unless it succeeds.
  nlohmann::json control(const std::string& method, const std::string& path,
                         const nlohmann::json& body = nullptr) const {
    auto [status, j] = call(method, "/fake/" + path, body, get("admin_token"));
    if (status / 100 != 2)
      throw std::runtime_error("fake_kube " + method + " /fake/" + path + ": HTTP " + std::to_string(status) + " " +
                               j.dump());
    return j;
  }

  /// Names of the pods in `ns` matching a label selector.
  std::vector<std::string> pods(const std::string& selector, const std::string& ns = "default") const {
    auto [status, j] = api("GET", "/api/v1/namespaces/" + ns + "/pods?labelSelector=" + escape(selector));
    std::vector<std::string> names;
    if (status == 200 && j["items"].is_array())
      for (auto& p : j["items"]) names.push_back(p["metadata"].value("name", ""));
    return names;
  }

  static std::string escape(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
      if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') out += char(c);
      else {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", c);
        out += b;
      }
    }
    return out;
  }

private:
  static std::string python() {
    const char* p = std::getenv("FIBER_FAKE_KUBE_PYTHON");
    return p && *p ? p : "/usr/bin/python3";
  }
  static std::string script() {
    std::string here = __FILE__;
    return here.substr(0, here.rfind('/')) + "/fake_kube.py";
  }

  std::pair<long, nlohmann::json> call(const std::string& method, const std::string& path, const nlohmann::json& body,
                                       const std::string& token) const {
    auto [status, text] = call_raw(method, path, body, token);
    if (status == 0) return {0, nlohmann::json(text)};
    return {status, nlohmann::json::parse(text, nullptr, false)};
  }

  std::pair<long, std::string> call_raw(const std::string& method, const std::string& path, const nlohmann::json& body,
                                        const std::string& token) const {
    fiber::detail::http::request r;
    r.method = method;
    r.url = url() + path;
    r.tls.ca_file = get("ca");
    r.bearer_token = token;
    if (!body.is_null()) {
      r.body = body.dump();
      r.headers.emplace_back("Content-Type", "application/json");
    }
    r.timeout = std::chrono::seconds(20);
    auto res = fiber::detail::http::perform_blocking({r}, std::chrono::seconds(20));
    auto& [ec, resp] = res.at(0);
    if (ec) return {0, resp.error};
    return {resp.status, resp.body};
  }

  pid_t pid_ = -1;
  std::string dir_, observer_token_;
  nlohmann::json info_;
};

} // namespace fiber_test
