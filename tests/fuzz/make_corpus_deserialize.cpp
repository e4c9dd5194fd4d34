// SPDX-License-Identifier: BSL-1.0
// Writes the seed corpus for fuzz_deserialize (valid encodings, one per
// selector) into the directory given as argv[1]. The committed files in
// corpus/deserialize/ were made with:
//   clang++ -std=c++20 -I include tests/fuzz/make_corpus_deserialize.cpp -o /tmp/mc
//   /tmp/mc tests/fuzz/corpus/deserialize
#include "fuzz_deserialize_types.hpp"

#include <cstdio>
#include <fstream>
#include <string>

namespace {

template <class T>
void seed(const std::string& dir, std::uint8_t selector, const char* name, const T& value) {
  const std::vector<std::byte> bytes = fiber::serialize(value);
  const std::string path = dir + "/" + std::to_string(selector) + "-" + name;
  std::ofstream out(path, std::ios::binary);
  out.put(static_cast<char>(selector));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  using namespace fuzz;

  inner in{"alpha", {1, -2, 3}, 0.5, true};
  nested full;
  full.id = 300;
  full.items = {in, inner{"", {}, std::nullopt, false}};
  full.tags = {{"a", {"x", "y"}}, {"b", {}}};
  full.payload = in;
  full.extra = std::map<int, inner>{{1, in}, {7, {}}};
  full.triple = {1, 2, 65535};
  full.bits = {true, false, true, true, false, false, false, true, true};
  full.small = {-3, 0, 9};
  full.ms = std::chrono::milliseconds{1500};
  full.tup = {'c', 2.5f, u"h\u00e9"};
  full.recs = {fixed_rec{true, -4, 1.25, {true, false, true}}};
  full.points = {{1, 2}, {3, 4}};
  full.empties = std::vector<std::monostate>(3);
  seed(dir, 0, "nested-full", full);
  seed(dir, 0, "nested-empty", nested{});
  nested str;
  str.payload = std::string("payload");
  seed(dir, 0, "nested-string-payload", str);
  seed(dir, 1, "inner", in);
  seed(dir, 2, "record", record{"owner", {{"x", 1.0}, {"y", -2.0}}});
  seed(dir, 3, "tree", tree{1, {tree{2, {}}, tree{3, {tree{4, {}}}}}});
  seed(dir, 4, "fixed-recs", std::vector<fixed_rec>{fixed_rec{}, fixed_rec{true, 7, -0.5, {false, true, false}}});
  using V = std::variant<std::monostate, bool, std::optional<std::int16_t>, std::vector<bool>>;
  seed(dir, 5, "variant-optional", V{std::optional<std::int16_t>{-9}});
  seed(dir, 5, "variant-bits", V{std::vector<bool>{true, true, false}});
  seed(dir, 6, "map-of-sets", std::map<std::string, std::set<std::uint32_t>>{{"k", {1, 200, 70000}}, {"z", {}}});
  seed(dir, 7, "strings", std::vector<std::vector<std::string>>{{"a", "bb"}, {}, {std::string(130, 'q')}});
  seed(dir, 8, "unordered", unordered{{"w", {1.0f, 2.0f}}, {"v", {}}});
  seed(dir, 9, "tuple",
       std::tuple<std::string, std::array<point, 2>, std::vector<std::monostate>>{
           "t", {point{1, 2}, point{3, 4}}, std::vector<std::monostate>(2)});
  return 0;
}
