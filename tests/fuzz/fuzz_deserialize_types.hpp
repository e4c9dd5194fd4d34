// SPDX-License-Identifier: BSL-1.0
#pragma once
// The types fuzz_deserialize.cpp decodes, shared with the seed-corpus
// generator (make_corpus_deserialize.cpp) so the seeds stay valid encodings.
#include <fiber/serialize.hpp>

#include <boost/describe/class.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

namespace fuzz {

struct inner { // PFR aggregate, variable size
  std::string name;
  std::vector<std::int32_t> values;
  std::optional<double> weight;
  bool flag = false;
};

struct fixed_rec { // fixed-size block path (bool + padding)
  bool on = false;
  std::int16_t a = 0;
  double b = 0;
  std::array<bool, 3> bits{};
};

struct point { // memcpy path
  float x = 0, y = 0;
};

struct nested {
  std::uint64_t id = 0;
  std::vector<inner> items;
  std::map<std::string, std::vector<std::string>> tags;
  std::variant<std::monostate, std::int64_t, std::string, inner> payload;
  std::optional<std::map<int, inner>> extra;
  std::array<std::uint16_t, 3> triple{};
  std::vector<bool> bits;
  std::set<std::int8_t> small;
  std::chrono::milliseconds ms{0};
  std::tuple<char, float, std::u16string> tup;
  std::vector<fixed_rec> recs;
  std::vector<point> points;
  std::vector<std::monostate> empties; // pad bytes
};

struct header {
  int version = 0;
  std::string tag;
};
BOOST_DESCRIBE_STRUCT(header, (), (version, tag))

class record : public header { // Describe: base + private members
public:
  record() = default;
  record(std::string owner, std::vector<std::pair<std::string, double>> entries)
      : header{2, "rec"}, owner_(std::move(owner)), entries_(std::move(entries)) {}

private:
  std::string owner_;
  std::vector<std::pair<std::string, double>> entries_;
  BOOST_DESCRIBE_CLASS(record, (header), (), (), (owner_, entries_))
};

struct tree { // ADL hook, recursive
  int value = 0;
  std::vector<tree> kids;
  friend void fiber_serialize(fiber::writer& w, const tree& t) {
    w.write(t.value);
    w.write_varint(t.kids.size());
    for (const tree& k : t.kids) w.write(k);
  }
  friend void fiber_deserialize(fiber::reader& r, tree& t) {
    t.value = r.read<int>();
    const std::size_t n = r.read_length(5);
    t.kids.clear();
    for (std::size_t i = 0; i < n; ++i) t.kids.push_back(r.read<tree>());
  }
};

using unordered = std::unordered_map<std::string, std::vector<float>>;

} // namespace fuzz
