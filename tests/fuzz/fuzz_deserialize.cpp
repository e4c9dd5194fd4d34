// SPDX-License-Identifier: BSL-1.0
// libFuzzer target for fiber::deserialize. The first byte picks a type; the
// rest is decoded as that type. Only fiber::serialization_error may escape
// the decoder (anything else reaches libFuzzer as a crash), and what decodes
// must re-encode to exactly the same bytes: the format has one encoding per
// value (minimal varints, 0/1 bools and tags, zero padding, ordered keys).
//
//   tests/fuzz/run.sh fuzz_deserialize 60
#include "fuzz_deserialize_types.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

namespace {

enum class check { canonical, decode_only };

template <class T>
void one(std::span<const std::byte> in, check c) {
  T value;
  try {
    value = fiber::deserialize<T>(in);
  } catch (const fiber::serialization_error&) {
    return; // the only acceptable failure
  }
  if (c == check::canonical) {
    const std::vector<std::byte> again = fiber::serialize(value);
    if (again.size() != in.size() || std::memcmp(again.data(), in.data(), in.size()) != 0) {
      std::fprintf(stderr, "fuzz_deserialize: %.*s decoded from %zu bytes re-encodes to %zu bytes\n",
                   static_cast<int>(fiber::detail::type_name<T>().size()), fiber::detail::type_name<T>().data(),
                   in.size(), again.size());
      std::abort();
    }
  } else {
    (void)fiber::serialize(value);
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data) + 1, size - 1);
  switch (data[0] % 10) {
  case 0: one<fuzz::nested>(in, check::canonical); break;
  case 1: one<fuzz::inner>(in, check::canonical); break;
  case 2: one<fuzz::record>(in, check::canonical); break;
  case 3: one<fuzz::tree>(in, check::canonical); break;
  case 4: one<std::vector<fuzz::fixed_rec>>(in, check::canonical); break;
  case 5:
    one<std::variant<std::monostate, bool, std::optional<std::int16_t>, std::vector<bool>>>(in, check::canonical);
    break;
  case 6: one<std::map<std::string, std::set<std::uint32_t>>>(in, check::canonical); break;
  case 7: one<std::vector<std::vector<std::string>>>(in, check::canonical); break;
  case 8: one<fuzz::unordered>(in, check::decode_only); break; // iteration order varies
  case 9:
    one<std::tuple<std::string, std::array<fuzz::point, 2>, std::vector<std::monostate>>>(in, check::canonical);
    break;
  }
  return 0;
}
