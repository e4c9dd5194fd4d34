// SPDX-License-Identifier: BSL-1.0
// Writes the seed corpus for fuzz_frame (one valid frame of each kind, as
// the transport delivers it: no length prefix) into the directory given as
// argv[1]. The committed files in corpus/frame/ were made with:
//   clang++ -std=c++20 -I include tests/fuzz/make_corpus_frame.cpp -o /tmp/mcf
//   /tmp/mcf tests/fuzz/corpus/frame
#include <fiber/detail/heartbeat_wire.hpp>
#include <fiber/detail/protocol.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace {

namespace fd = fiber::detail;

void seed(const std::string& dir, const char* name, const std::vector<std::byte>& f) {
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> b;
  for (int x : v) b.push_back(std::byte(x));
  return b;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  using K = fd::frame_kind;

  fd::nonce_t nonce{};
  for (std::size_t i = 0; i < nonce.size(); ++i) nonce[i] = std::uint8_t(i * 7 + 1);
  fd::mac_t mac{};
  for (std::size_t i = 0; i < mac.size(); ++i) mac[i] = std::uint8_t(255 - i);

  seed(dir, "challenge", fd::frame(K::challenge, fd::challenge_msg{nonce, fd::protocol_version}));
  fd::auth_msg a;
  a.mac = mac;
  a.nonce = nonce;
  a.role = std::uint8_t(fd::role::worker);
  a.worker_id = 3;
  a.registry_hash = 0x1234567890abcdefull;
  a.build_id = "3f2a9c0d5e6b7a8c9d0e1f2a3b4c5d6e7f8a9b0c";
  a.pid = 4242;
  a.host = "node-1";
  a.name = "pool-1-w3";
  seed(dir, "auth-worker", fd::frame(K::auth, a));
  a.role = std::uint8_t(fd::role::client);
  a.worker_id = 0;
  a.name = "master";
  seed(dir, "auth-client", fd::frame(K::auth, a));
  seed(dir, "auth_ok",
       fd::frame(K::auth_ok,
                 fd::auth_ok_msg{
                     mac,
                     {{"heartbeat_interval_ms", "500"}, {"log_level", "warning"}, {"max_message_size_mb", "1024"}}}));
  seed(dir, "refused", fd::frame(K::refused, fd::refused_msg{"fiber: handshake refused: other build"}));
  seed(dir, "heartbeat", fd::frame(K::heartbeat));
  seed(dir, "heartbeat-period", fd::heartbeat_frame({500}));
  seed(dir, "heartbeat-ping", fd::heartbeat_frame({500, 123456789, 0, 0}));
  seed(dir, "heartbeat-echo", fd::heartbeat_frame({500, 0, 123456789, 2500000}));
  seed(dir, "shutdown", fd::frame(K::shutdown));
  seed(dir, "run", fd::frame(K::run, fd::run_msg{77, bytes({42, 0, 0, 0, 5, 'h', 'e', 'l', 'l', 'o'})}));
  seed(dir, "tasks",
       fd::frame(K::tasks, std::vector<fd::chunk_msg>{{1, 77, 2, bytes({1, 0, 0, 0, 2, 0, 0, 0})},
                                                      {2, 77, 1, bytes({3, 0, 0, 0})}}));
  seed(dir, "results",
       fd::frame(K::results, std::vector<fd::chunk_result_msg>{{1, bytes({0, 1, 0, 0, 0, 0, 4, 0, 0, 0})},
                                                               {2, bytes({1, 3, 'e', 'r', 'r', 1, 'x'})}}));
  seed(dir, "request", fd::frame(K::request, fd::request_msg{9, 2, 1, bytes({1, 2, 3})}));
  seed(dir, "reply-ok", fd::frame(K::reply, fd::reply_msg{9, 0, bytes({7})}));
  seed(dir, "reply-error", fd::frame(K::reply, fd::reply_msg{10, 1, bytes({3, 'e', 'r', 'r', 2, 'n', 'o'})}));
  return 0;
}
