// SPDX-License-Identifier: BSL-1.0
// libFuzzer target for fiber's wire-protocol frame decoder: the input is one
// frame as the transport delivers it ([u8 kind][serialized body], length
// prefix already stripped). It goes through exactly what the runtime does
// with an incoming frame:
//   - decode_auth_frame: the server's only read of an unauthenticated peer
//     (bounded to max_auth_frame, kind auth, auth_msg);
//   - decode_frame<Msg> for the message type of the frame's kind (and, for
//     every other type, with that type's kind: a mismatch must be refused);
//   - decode_heartbeat for a heartbeat's body.
// Only fiber::serialization_error may escape; a frame that decodes must
// re-encode to the same bytes (one encoding per value).
//
//   tests/fuzz/run.sh fuzz_frame 60
// Seeds: tests/fuzz/corpus/frame/ (made by make_corpus_frame.cpp).
#include <fiber/detail/heartbeat_wire.hpp>
#include <fiber/detail/protocol.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

namespace {

namespace fd = fiber::detail;

void same_bytes(std::span<const std::byte> in, const std::vector<std::byte>& again, const char* what) {
  if (again.size() != in.size() || std::memcmp(again.data(), in.data(), in.size()) != 0) {
    std::fprintf(stderr, "fuzz_frame: a %s frame of %zu bytes re-encodes to %zu bytes\n", what, in.size(),
                 again.size());
    std::abort();
  }
}

/// Decodes `in` as a frame of kind K carrying Msg. Returns whether it decoded.
template <class Msg>
bool as(fd::frame_kind k, std::span<const std::byte> in, const char* what) {
  Msg m;
  try {
    m = fd::decode_frame<Msg>(k, in);
  } catch (const fiber::serialization_error&) {
    return false; // the only acceptable failure
  }
  if (in.empty() || in[0] != std::byte(k)) {
    std::fprintf(stderr, "fuzz_frame: a frame of kind %d decoded as a %s frame\n", in.empty() ? -1 : int(in[0]), what);
    std::abort();
  }
  same_bytes(in, fd::frame(k, m), what);
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);

  // The server side of the handshake: the only bytes of an unauthenticated
  // peer fiber ever deserializes.
  try {
    auto a = fd::decode_auth_frame(in);
    if (size > fd::max_auth_frame) {
      std::fprintf(stderr, "fuzz_frame: decode_auth_frame accepted %zu bytes\n", size);
      std::abort();
    }
    same_bytes(in, fd::frame(fd::frame_kind::auth, a), "auth (pre-authentication)");
  } catch (const fiber::serialization_error&) {
  }

  if (size == 0) {
    try {
      (void)fd::unframe(in);
      std::fprintf(stderr, "fuzz_frame: unframe accepted an empty frame\n");
      std::abort();
    } catch (const fiber::serialization_error&) {
    }
    return 0;
  }

  // Every message type under the frame's own kind, and under the kind it
  // belongs to (which must refuse a frame of another kind).
  using K = fd::frame_kind;
  int decoded = 0;
  decoded += as<fd::challenge_msg>(K::challenge, in, "challenge");
  decoded += as<fd::auth_msg>(K::auth, in, "auth");
  decoded += as<fd::auth_ok_msg>(K::auth_ok, in, "auth_ok");
  decoded += as<fd::refused_msg>(K::refused, in, "refused");
  decoded += as<fd::run_msg>(K::run, in, "run");
  decoded += as<std::vector<fd::chunk_msg>>(K::tasks, in, "tasks");
  decoded += as<std::vector<fd::chunk_result_msg>>(K::results, in, "results");
  decoded += as<fd::request_msg>(K::request, in, "request");
  decoded += as<fd::reply_msg>(K::reply, in, "reply");
  if (decoded > 1) {
    std::fprintf(stderr, "fuzz_frame: one frame decoded as %d kinds\n", decoded);
    std::abort();
  }
  // Body-less kinds: the runtime looks at the kind only.
  const auto [k, body_] = fd::unframe(in);
  const std::span<const std::byte> body = body_; // lambdas below capture it (clang 14: not a binding)
  // The in-place decoders (Pool tasks and results) accept exactly what
  // deserialize accepts, with the same fields.
  auto agree = [&](auto owning, auto view, const char* what) {
    bool a = true, b = true;
    decltype(owning()) o;
    decltype(view()) v;
    try {
      o = owning();
    } catch (const fiber::serialization_error&) {
      a = false;
    }
    try {
      v = view();
    } catch (const fiber::serialization_error&) {
      b = false;
    }
    bool same = a == b && (!a || o.size() == v.size());
    for (std::size_t i = 0; same && a && i < o.size(); ++i) {
      const auto& x = o[i];
      const auto& y = v[i];
      const auto& xb = [&]() -> const std::vector<std::byte>& {
        if constexpr (requires { x.args; }) return x.args;
        else return x.results;
      }();
      const auto yb = [&] {
        if constexpr (requires { y.args; }) return y.args;
        else return y.results;
      }();
      same = x.chunk_id == y.chunk_id && xb.size() == yb.size() &&
             (xb.empty() || std::memcmp(xb.data(), yb.data(), xb.size()) == 0);
    }
    if (!same) {
      std::fprintf(stderr, "fuzz_frame: the in-place %s decoder disagrees with deserialize\n", what);
      std::abort();
    }
  };
  agree([&] { return fiber::deserialize<std::vector<fd::chunk_msg>>(body); },
        [&] { return fd::decode_tasks_view(body); }, "tasks");
  agree([&] { return fiber::deserialize<std::vector<fd::chunk_result_msg>>(body); },
        [&] { return fd::decode_results_view(body); }, "results");
  // Heartbeats: decode_heartbeat takes any body or throws serialization_error;
  // a body it takes (other than an empty one) re-encodes to the same bytes.
  if (k == K::heartbeat) {
    try {
      const auto h = fd::decode_heartbeat(body);
      if (!body.empty()) same_bytes(in, fd::heartbeat_frame(h), "heartbeat");
    } catch (const fiber::serialization_error&) {
    }
  }
  return 0;
}
