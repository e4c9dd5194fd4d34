// SPDX-License-Identifier: BSL-1.0
// Tests for fiber/serialize.hpp: round trips for every supported kind, the
// wire layout, and that hostile bytes only ever raise serialization_error.
#include <fiber/serialize.hpp>
#include <fiber/detail/pool_call.hpp>
#include <fiber/detail/protocol.hpp>

#include <boost/describe/class.hpp>
#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

namespace {

using bytes = std::vector<std::byte>;

bytes make_bytes(std::initializer_list<int> v) {
  bytes out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

template <class T>
T round_trip(const T& v) {
  return fiber::deserialize<T>(fiber::serialize(v));
}

// --- user types ------------------------------------------------------------------

enum class color : std::uint8_t { red = 1, green = 2 };
enum plain_enum { pe_a = -5, pe_b = 70000 };

struct point { // aggregate, memcpy-able (no padding)
  float x;
  float y;
  bool operator==(const point&) const = default;
};

struct padded { // aggregate with padding: field by field
  char c;
  double d;
  bool operator==(const padded&) const = default;
};

struct empty_agg {
  bool operator==(const empty_agg&) const = default;
};

struct nested_agg { // aggregate of everything
  int id;
  std::string name;
  std::vector<point> points;
  std::map<std::string, std::vector<int>> index;
  std::optional<std::variant<int, std::string, point>> extra;
  std::array<padded, 2> pads;
  std::tuple<std::uint8_t, std::set<int>, std::pair<bool, double>> misc;
  std::chrono::milliseconds timeout;
  bool operator==(const nested_agg&) const = default;
};

// Describe with a private member and a described base.
struct base_info {
  int version = 0;
  std::string tag;
  bool operator==(const base_info&) const = default;
};
BOOST_DESCRIBE_STRUCT(base_info, (), (version, tag))

class account : public base_info {
public:
  account() = default;
  account(int v, std::string owner, double balance, std::vector<std::string> h)
      : base_info{v, "acct"}, history_(std::move(h)), owner_(std::move(owner)), balance_(balance) {}
  bool operator==(const account&) const = default;
  const std::string& owner() const { return owner_; }

protected:
  std::vector<std::string> history_;

private:
  std::string owner_;
  double balance_ = 0;
  BOOST_DESCRIBE_CLASS(account, (base_info), (), (history_), (owner_, balance_))
};

// Private base, described.
class sealed : private base_info {
public:
  sealed() = default;
  explicit sealed(int v) : base_info{v, "sealed"}, n_(v * 2) {}
  bool operator==(const sealed&) const = default;
  int version_of() const { return version; }

private:
  int n_ = 0;
  BOOST_DESCRIBE_CLASS(sealed, (base_info), (), (), (n_))
};

// Describe wins over PFR: only the described member is sent.
struct partly_described {
  int sent = 0;
  int not_sent = 0;
};
BOOST_DESCRIBE_STRUCT(partly_described, (), (sent))

struct with_c_array { // C arrays work through Describe
  int a[3] = {};
  std::string s[2];
  bool operator==(const with_c_array& o) const { return std::equal(a, a + 3, o.a) && std::equal(s, s + 2, o.s); }
};
BOOST_DESCRIBE_STRUCT(with_c_array, (), (a, s))

} // namespace

namespace app {

// ADL hook, free functions in the type's namespace. Encodes as a string.
class opaque {
public:
  opaque() = default;
  explicit opaque(std::string v) : v_(std::move(v)) {}
  const std::string& value() const { return v_; }
  bool operator==(const opaque&) const = default;

private:
  std::string v_;
};
inline void fiber_serialize(fiber::writer& w, const opaque& o) { w.write(o.value()); }
inline void fiber_deserialize(fiber::reader& r, opaque& o) { o = opaque(r.read<std::string>()); }

// Hook as hidden friends, on an aggregate: the hook wins over PFR.
struct tagged {
  int v = 0;
  bool operator==(const tagged&) const = default;
  friend void fiber_serialize(fiber::writer& w, const tagged& t) {
    w.write(std::uint8_t{0xAB});
    w.write(t.v);
  }
  friend void fiber_deserialize(fiber::reader& r, tagged& t) {
    if (r.read<std::uint8_t>() != 0xAB) r.fail("bad tagged magic");
    t.v = r.read<int>();
  }
};

// A recursive type: needs the hook (see serialize.hpp "Limits").
struct tree {
  int value = 0;
  std::vector<tree> kids;
  bool operator==(const tree&) const = default;
  friend void fiber_serialize(fiber::writer& w, const tree& t) {
    w.write(t.value);
    w.write_varint(t.kids.size());
    for (const tree& k : t.kids) w.write(k);
  }
  friend void fiber_deserialize(fiber::reader& r, tree& t) {
    t.value = r.read<int>();
    const std::size_t n = r.read_length(5); // int + varint: >= 5 bytes each
    t.kids.clear();
    for (std::size_t i = 0; i < n; ++i) t.kids.push_back(r.read<tree>());
  }
};

// A hook type whose encoding is empty: containers of it get pad bytes.
struct stateless {
  bool operator==(const stateless&) const = default;
  friend void fiber_serialize(fiber::writer&, const stateless&) {}
  friend void fiber_deserialize(fiber::reader&, stateless&) {}
};

// A type whose construction from int throws: makes a valueless variant.
struct throws_on_int {
  throws_on_int() = default;
  explicit throws_on_int(int) { throw std::runtime_error("no"); }
  std::string s; // not trivially copyable, so libstdc++ may leave the variant valueless
  friend void fiber_serialize(fiber::writer&, const throws_on_int&) {}
  friend void fiber_deserialize(fiber::reader&, throws_on_int&) {}
};

// Only half a hook: not serializable.
struct half {
  int v;
};
inline void fiber_serialize(fiber::writer&, const half&) {}

class no_strategy {
public:
  explicit no_strategy(int v) : v_(v) {}
  int v() const { return v_; }

private:
  int v_;
};

struct derived_agg : point {
  int z;
};

// A hook for a base class must not slice a derived class.
struct shape {
  int sides = 0;
  friend void fiber_serialize(fiber::writer& w, const shape& s) { w.write(s.sides); }
  friend void fiber_deserialize(fiber::reader& r, shape& s) { s.sides = r.read<int>(); }
};
class square : public shape {
public:
  int side_length() const { return len_; }

private:
  int len_ = 0;
};

// A hook template for a family of types (as fiber's own handles do).
template <class T>
struct handle {
  T id{};
  bool operator==(const handle&) const = default;
};
template <class T>
void fiber_serialize(fiber::writer& w, const handle<T>& h) {
  w.write(std::uint8_t{0x42});
  w.write(h.id);
}
template <class T>
void fiber_deserialize(fiber::reader& r, handle<T>& h) {
  if (r.read<std::uint8_t>() != 0x42) r.fail("bad handle magic");
  h.id = r.read<T>();
}

struct const_member {
  const int c;
};

} // namespace app

// Greedy user functions named like fiber's internals must not be found by
// ADL from inside the library (its internal calls are qualified).
namespace greedy {
struct payload {
  int x;
  std::string s;
  bool operator==(const payload&) const = default;
};
// (Functions of the user's own, e.g. for another format, that happen to
// share names and a parameter type with fiber's internals.)
inline void encode(fiber::writer&, const payload&) { throw std::logic_error("greedy encode"); }
inline void decode(fiber::reader&, payload&) { throw std::logic_error("greedy decode"); }
} // namespace greedy

// A hook in namespace fiber is found through the writer for every T; one
// reachable only through a converting constructor must not capture other types.
namespace fiber {
struct converts_from_int {
  converts_from_int(int v) : v(v) {} // NOLINT: implicit on purpose
  int v;
};
inline void fiber_serialize(writer& w, const converts_from_int& c) {
  w.write(std::string("hijacked"));
  w.write(c.v);
}
inline void fiber_deserialize(reader& r, converts_from_int& c) {
  (void)r.read<std::string>();
  c.v = r.read<int>();
}
} // namespace fiber

namespace {

/// Counts allocations, to prove decoding never allocates what the input
/// cannot back.
struct alloc_stats {
  std::size_t largest = 0;
  std::size_t total = 0;
};
inline alloc_stats g_alloc;

template <class T>
struct counting_alloc {
  using value_type = T;
  counting_alloc() = default;
  template <class U>
  counting_alloc(const counting_alloc<U>&) noexcept {}
  T* allocate(std::size_t n) {
    const std::size_t b = n * sizeof(T);
    g_alloc.largest = std::max(g_alloc.largest, b);
    g_alloc.total += b;
    return std::allocator<T>{}.allocate(n);
  }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>{}.deallocate(p, n); }
  template <class U>
  bool operator==(const counting_alloc<U>&) const noexcept {
    return true;
  }
};

} // namespace

// --- the concept ------------------------------------------------------------------

static_assert(fiber::serializable<int>);
static_assert(fiber::serializable<const std::string&>);
static_assert(fiber::serializable<nested_agg>);
static_assert(fiber::serializable<account>);
static_assert(fiber::serializable<sealed>);
static_assert(fiber::serializable<app::opaque>);
static_assert(fiber::serializable<app::tree>);
static_assert(fiber::serializable<std::vector<app::opaque>>);
static_assert(fiber::serializable<std::variant<std::monostate, int>>);
static_assert(fiber::serializable<std::chrono::system_clock::time_point>);
static_assert(fiber::serializable<int[4]>);
static_assert(fiber::serializable<std::vector<bool>>);
static_assert(fiber::serializable<empty_agg>);
static_assert(!fiber::serializable<int*>);
static_assert(!fiber::serializable<std::unique_ptr<int>>);
static_assert(!fiber::serializable<app::no_strategy>);
static_assert(!fiber::serializable<app::half>);
static_assert(!fiber::serializable<std::vector<app::no_strategy>>);
static_assert(!fiber::serializable<std::map<int, std::optional<app::half>>>);
static_assert(!fiber::serializable<app::derived_agg>); // PFR cannot do bases
static_assert(!fiber::serializable<app::const_member>);
static_assert(!fiber::serializable<std::string_view>); // not owning: refuse
static_assert(fiber::serializable<app::shape>);
static_assert(!fiber::serializable<app::square>); // the base's hook does not slice it
static_assert(fiber::serializable<app::handle<int>>);
static_assert(fiber::detail::kind_of<int> == fiber::detail::kind::scalar); // not hijacked
static_assert(fiber::detail::kind_of<fiber::converts_from_int> == fiber::detail::kind::hook);

// The culprit named by the diagnostic is the innermost offending type.
static_assert(
    std::is_same_v<fiber::detail::first_bad<std::map<int, std::vector<app::no_strategy>>>::type, app::no_strategy>);
static_assert(std::is_same_v<fiber::detail::first_bad<std::tuple<int, app::half>>::type, app::half>);

// Bulk-copy classification.
static_assert(fiber::detail::memcpy_wire<float>);
static_assert(fiber::detail::memcpy_wire<color>);
static_assert(fiber::detail::memcpy_wire<point>);
static_assert(fiber::detail::memcpy_wire<std::array<point, 3>>);
static_assert(fiber::detail::memcpy_wire<std::chrono::nanoseconds>);
static_assert(!fiber::detail::memcpy_wire<bool>);   // must be validated on read
static_assert(!fiber::detail::memcpy_wire<padded>); // padding bytes are not sent
static_assert(fiber::detail::min_wire_size<padded>() == 9);
static_assert(fiber::detail::min_wire_size<std::monostate>() == 0);

// --- round trips --------------------------------------------------------------------

TEST_CASE("scalars round-trip", "[serialize]") {
  CHECK(round_trip(true) == true);
  CHECK(round_trip(false) == false);
  CHECK(round_trip('x') == 'x');
  CHECK(round_trip(std::int8_t{-128}) == -128);
  CHECK(round_trip(std::uint16_t{65535}) == 65535);
  CHECK(round_trip(std::int32_t{-123456789}) == -123456789);
  CHECK(round_trip(std::numeric_limits<std::int64_t>::min()) == std::numeric_limits<std::int64_t>::min());
  CHECK(round_trip(std::numeric_limits<std::uint64_t>::max()) == std::numeric_limits<std::uint64_t>::max());
  CHECK(round_trip(3.25f) == 3.25f);
  CHECK(round_trip(-1e300) == -1e300);
  CHECK(round_trip(std::numeric_limits<double>::infinity()) == std::numeric_limits<double>::infinity());
  CHECK(round_trip(color::green) == color::green);
  CHECK(round_trip(static_cast<color>(200)) == static_cast<color>(200)); // any underlying value
  CHECK(round_trip(pe_b) == pe_b);
  CHECK(round_trip(pe_a) == pe_a);
  CHECK(round_trip(std::byte{0xfe}) == std::byte{0xfe});
  CHECK(round_trip(U'\U0001F600') == U'\U0001F600');
}

TEST_CASE("strings round-trip", "[serialize]") {
  CHECK(round_trip(std::string{}).empty());
  CHECK(round_trip(std::string("hello")) == "hello");
  const std::string with_nuls("a\0b\0c", 5);
  CHECK(round_trip(with_nuls) == with_nuls);
  const std::string big(100'000, 'z');
  CHECK(round_trip(big) == big);
  CHECK(round_trip(std::u16string(u"h\u00e9llo")) == u"h\u00e9llo");
  CHECK(round_trip(std::u32string(U"\U0001F600x")) == U"\U0001F600x");
}

TEST_CASE("sequences round-trip", "[serialize]") {
  CHECK(round_trip(std::vector<int>{}).empty());
  CHECK(round_trip(std::vector<int>{1, -2, 3}) == std::vector<int>{1, -2, 3});
  std::vector<float> f(10'000);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i) * 0.5f;
  CHECK(round_trip(f) == f);
  CHECK(round_trip(std::vector<std::string>{"", "a", "bc"}) == std::vector<std::string>{"", "a", "bc"});
  CHECK(round_trip(std::vector<std::vector<int>>{{}, {1}, {2, 3}}) == std::vector<std::vector<int>>{{}, {1}, {2, 3}});
  CHECK(round_trip(std::vector<point>{{1, 2}, {3, 4}}) == std::vector<point>{{1, 2}, {3, 4}});
  CHECK(round_trip(std::vector<padded>{{'a', 1.5}, {'b', 2.5}}) == std::vector<padded>{{'a', 1.5}, {'b', 2.5}});
  CHECK(round_trip(std::vector<std::byte>{std::byte{1}, std::byte{255}}) ==
        std::vector<std::byte>{std::byte{1}, std::byte{255}});
  CHECK(round_trip(std::array<int, 3>{7, 8, 9}) == std::array<int, 3>{7, 8, 9});
  CHECK(round_trip(std::array<std::string, 2>{"x", "yz"}) == std::array<std::string, 2>{"x", "yz"});
  CHECK(round_trip(std::array<int, 0>{}) == std::array<int, 0>{});
  CHECK(round_trip(std::array<bool, 3>{true, false, true}) == std::array<bool, 3>{true, false, true});
}

TEST_CASE("vector<bool> round-trips at every size around byte boundaries", "[serialize]") {
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 100u, 1000u}) {
    std::vector<bool> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = (i * 7 + 3) % 5 < 2;
    INFO("n = " << n);
    const bytes b = fiber::serialize(v);
    CHECK(b.size() == (n < 128 ? 1 : 2) + (n + 7) / 8); // packed 8 per byte
    CHECK(fiber::deserialize<std::vector<bool>>(b) == v);
  }
}

TEST_CASE("C arrays round-trip through reader and inside described structs", "[serialize]") {
  const int src[4] = {1, 2, 3, 4};
  const bytes b = fiber::serialize(src);
  CHECK(b.size() == 16);
  int dst[4] = {};
  fiber::reader r(b);
  r.read(dst);
  CHECK(r.empty());
  CHECK(std::equal(src, src + 4, dst));

  with_c_array w;
  w.a[0] = 5;
  w.a[2] = -1;
  w.s[1] = "second";
  CHECK(round_trip(w) == w);
}

TEST_CASE("associative containers round-trip", "[serialize]") {
  const std::map<std::string, int> m{{"a", 1}, {"b", 2}};
  CHECK(round_trip(m) == m);
  const std::unordered_map<int, std::string> um{{1, "one"}, {2, "two"}, {3, ""}};
  CHECK(round_trip(um) == um);
  const std::set<std::string> s{"x", "y"};
  CHECK(round_trip(s) == s);
  const std::unordered_set<int> us{5, 6, 7};
  CHECK(round_trip(us) == us);
  CHECK(round_trip(std::map<int, int>{}).empty());
  CHECK(round_trip(std::unordered_set<std::string>{}).empty());
  const std::map<int, std::map<int, std::set<int>>> deep{{1, {{2, {3, 4}}}}, {5, {}}};
  CHECK(round_trip(deep) == deep);
}

TEST_CASE("deserializing into an existing container replaces its contents", "[serialize]") {
  std::map<int, int> m{{9, 9}, {10, 10}};
  const bytes b = fiber::serialize(std::map<int, int>{{1, 2}});
  fiber::reader r(b);
  r.read(m);
  CHECK(m == std::map<int, int>{{1, 2}});
  std::vector<std::string> v{"old", "stuff"};
  const bytes bv = fiber::serialize(std::vector<std::string>{"new"});
  fiber::reader rv(bv);
  rv.read(v);
  CHECK(v == std::vector<std::string>{"new"});
}

TEST_CASE("pair, tuple, optional, variant, monostate, chrono round-trip", "[serialize]") {
  CHECK(round_trip(std::pair<int, std::string>{4, "four"}) == std::pair<int, std::string>{4, "four"});
  CHECK(round_trip(std::tuple<>{}) == std::tuple<>{});
  const std::tuple<int, std::string, double, color> t{1, "t", 2.5, color::red};
  CHECK(round_trip(t) == t);
  CHECK(round_trip(std::optional<int>{}) == std::nullopt);
  CHECK(round_trip(std::optional<std::string>{"x"}) == std::optional<std::string>{"x"});
  CHECK(round_trip(std::optional<std::optional<int>>{std::optional<int>{}}) ==
        std::optional<std::optional<int>>{std::optional<int>{}});

  using V = std::variant<std::monostate, int, std::string, std::vector<int>>;
  CHECK(round_trip(V{}) == V{});
  CHECK(round_trip(V{42}) == V{42});
  CHECK(round_trip(V{std::string("s")}) == V{std::string("s")});
  CHECK(round_trip(V{std::vector<int>{1, 2}}) == V{std::vector<int>{1, 2}});
  // Duplicate alternative types: the index, not the type, is preserved.
  using D = std::variant<int, int>;
  const D second{std::in_place_index<1>, 7};
  CHECK(round_trip(second).index() == 1);
  CHECK(std::get<1>(round_trip(second)) == 7);

  CHECK(round_trip(std::monostate{}) == std::monostate{});
  CHECK(fiber::serialize(std::monostate{}).empty());
  CHECK(round_trip(std::chrono::milliseconds{-1234}) == std::chrono::milliseconds{-1234});
  CHECK(round_trip(std::chrono::duration<double>{1.5}) == std::chrono::duration<double>{1.5});
  const auto now = std::chrono::system_clock::now();
  CHECK(round_trip(now) == now);
}

TEST_CASE("aggregates round-trip via Boost.PFR", "[serialize]") {
  CHECK(round_trip(point{1.5f, -2}) == point{1.5f, -2});
  CHECK(round_trip(padded{'q', 9.75}) == padded{'q', 9.75});
  CHECK(round_trip(empty_agg{}) == empty_agg{});
  CHECK(fiber::serialize(empty_agg{}).empty());
  nested_agg n{7,
               "name",
               {{1, 2}, {3, 4}},
               {{"k", {1, 2, 3}}, {"e", {}}},
               std::variant<int, std::string, point>{point{5, 6}},
               {padded{'a', 1}, padded{'b', 2}},
               {9, {1, 2}, {true, 0.25}},
               std::chrono::milliseconds{250}};
  CHECK(round_trip(n) == n);
  n.extra.reset();
  CHECK(round_trip(n) == n);
  CHECK(round_trip(nested_agg{}) == nested_agg{});
}

TEST_CASE("Describe classes round-trip bases and private members", "[serialize]") {
  const account a{3, "ann", 12.5, {"open", "deposit"}};
  const account b = round_trip(a);
  CHECK(b == a);
  CHECK(b.owner() == "ann");
  CHECK(b.version == 3);
  CHECK(b.tag == "acct");
  CHECK(round_trip(account{}) == account{});

  const sealed s{21};
  CHECK(round_trip(s) == s);
  CHECK(round_trip(s).version_of() == 21);

  // Describe wins over PFR: the undescribed member is not on the wire.
  const bytes pb = fiber::serialize(partly_described{1, 2});
  CHECK(pb.size() == sizeof(int));
  const auto p = fiber::deserialize<partly_described>(pb);
  CHECK(p.sent == 1);
  CHECK(p.not_sent == 0);
}

TEST_CASE("ADL hooks are used first and compose", "[serialize]") {
  CHECK(round_trip(app::opaque{"secret"}) == app::opaque{"secret"});
  // The hidden-friend hook wins over PFR: its magic byte is on the wire.
  const bytes t = fiber::serialize(app::tagged{5});
  REQUIRE(t.size() == 5);
  CHECK(t[0] == std::byte{0xAB});
  CHECK(round_trip(app::tagged{5}) == app::tagged{5});
  CHECK_THROWS_AS(fiber::deserialize<app::tagged>(make_bytes({0xAC, 5, 0, 0, 0})), fiber::serialization_error);

  const std::map<std::string, std::vector<app::opaque>> m{{"k", {app::opaque{"a"}, app::opaque{}}}};
  CHECK(round_trip(m) == m);

  app::tree tr{1, {{2, {}}, {3, {{4, {}}}}}};
  CHECK(round_trip(tr) == tr);

  // Template hooks (like fiber's handles) match their whole family.
  const bytes h = fiber::serialize(app::handle<std::uint16_t>{7});
  CHECK(h == make_bytes({0x42, 7, 0}));
  CHECK(round_trip(app::handle<std::string>{"id"}) == app::handle<std::string>{"id"});

  // Users' own encode/decode are not picked up by ADL.
  CHECK(round_trip(greedy::payload{3, "g"}) == greedy::payload{3, "g"});
  CHECK(round_trip(std::vector<greedy::payload>{{1, "a"}}) == std::vector<greedy::payload>{{1, "a"}});

  // A fiber:: hook reachable by conversion does not apply to int.
  CHECK(fiber::serialize(5) == make_bytes({5, 0, 0, 0}));
  CHECK(fiber::serialize(fiber::converts_from_int{5}).size() == 1 + 8 + 4);
}

TEST_CASE("containers of empty encodings use pad bytes and stay bounded", "[serialize]") {
  const std::vector<std::monostate> v(1000);
  const bytes b = fiber::serialize(v);
  CHECK(b.size() == 2 + 1000); // varint(1000) + one pad byte each
  CHECK(round_trip(v).size() == 1000);
  CHECK(round_trip(std::vector<app::stateless>(3)).size() == 3);
  CHECK(round_trip(std::set<std::monostate>{std::monostate{}}).size() == 1);
  const std::map<int, std::monostate> m{{1, {}}, {2, {}}};
  CHECK(round_trip(m) == m);
  // A huge count of empty elements cannot be backed by the input.
  CHECK_THROWS_AS(fiber::deserialize<std::vector<std::monostate>>(make_bytes({0xff, 0xff, 0xff, 0xff, 0x0f})),
                  fiber::serialization_error);
  CHECK_THROWS_AS(fiber::deserialize<std::vector<std::monostate>>(make_bytes({2, 0, 1})),
                  fiber::serialization_error); // non-zero pad
}

// --- the wire format ------------------------------------------------------------------

TEST_CASE("varints are LEB128 and minimal", "[serialize][wire]") {
  const std::pair<std::uint64_t, std::size_t> cases[] = {{0, 1},
                                                         {1, 1},
                                                         {127, 1},
                                                         {128, 2},
                                                         {16383, 2},
                                                         {16384, 3},
                                                         {(1ull << 32) - 1, 5},
                                                         {1ull << 63, 10},
                                                         {std::numeric_limits<std::uint64_t>::max(), 10}};
  for (auto [value, len] : cases) {
    fiber::writer w;
    w.write_varint(value);
    INFO("value " << value);
    CHECK(w.size() == len);
    fiber::reader r(w.buffer());
    CHECK(r.read_varint() == value);
    CHECK(r.empty());
  }
  fiber::writer w;
  w.write_varint(300);
  CHECK(w.buffer() == make_bytes({0xac, 0x02}));
}

TEST_CASE("encodings are compact", "[serialize][wire]") {
  CHECK(fiber::serialize(true) == make_bytes({1}));
  CHECK(fiber::serialize(std::int32_t{0x01020304}) == make_bytes({4, 3, 2, 1}));
  CHECK(fiber::serialize(std::string{}) == make_bytes({0}));
  CHECK(fiber::serialize(std::string("ab")) == make_bytes({2, 'a', 'b'}));
  CHECK(fiber::serialize(std::optional<int>{}) == make_bytes({0}));
  CHECK(fiber::serialize(std::optional<std::uint8_t>{9}) == make_bytes({1, 9}));
  CHECK(fiber::serialize(std::variant<int, std::uint8_t>{std::uint8_t{7}}) == make_bytes({1, 7}));
  CHECK(fiber::serialize(color::green) == make_bytes({2}));
  CHECK(fiber::serialize(padded{'a', 0.0}).size() == 9); // no padding bytes
  CHECK(fiber::serialize(std::vector<int>{}) == make_bytes({0}));
  CHECK(fiber::serialize(std::map<int, int>{{1, 2}}) == make_bytes({1, 1, 0, 0, 0, 2, 0, 0, 0}));
  CHECK(fiber::serialize(std::pair<std::uint8_t, bool>{3, true}) == make_bytes({3, 1}));
}

TEST_CASE("contiguous trivially-copyable ranges are the raw bytes", "[serialize][wire]") {
  std::vector<float> f(1000);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(i) / 3;
  const bytes b = fiber::serialize(f);
  REQUIRE(b.size() == 2 + f.size() * sizeof(float));
  CHECK(std::memcmp(b.data() + 2, f.data(), f.size() * sizeof(float)) == 0);

  const std::vector<point> pts{{1, 2}, {3, 4}};
  const bytes pb = fiber::serialize(pts);
  REQUIRE(pb.size() == 1 + 2 * sizeof(point));
  CHECK(std::memcmp(pb.data() + 1, pts.data(), 2 * sizeof(point)) == 0);
}

// --- writer and reader ------------------------------------------------------------

TEST_CASE("writer appends after an initial buffer and releases it", "[serialize][api]") {
  fiber::writer w(make_bytes({0xee, 0xff}));
  w.write(std::uint8_t{1});
  w.write_bytes("xy", 2);
  w.write_bytes(nullptr, 0);
  CHECK(w.size() == 5);
  CHECK(w.buffer() == make_bytes({0xee, 0xff, 1, 'x', 'y'}));
  const bytes out = w.release();
  CHECK(out.size() == 5);
  CHECK(w.size() == 0);
  w.write(std::string("z")); // reusable after release
  CHECK(w.buffer() == make_bytes({1, 'z'}));
}

TEST_CASE("reader reads in sequence, views without copying and checks bounds", "[serialize][api]") {
  fiber::writer w;
  w.write(std::int32_t{-7});
  w.write(std::string("abc"));
  w.write_varint(4);
  w.write_bytes("data", 4);
  const bytes b = w.release();

  fiber::reader r(b);
  CHECK(r.remaining() == b.size());
  CHECK(r.read<std::int32_t>() == -7);
  CHECK(r.position() == 4);
  std::string s;
  r.read(s);
  CHECK(s == "abc");
  const std::size_t n = r.read_length();
  CHECK(n == 4);
  const auto view = r.read_span(n);
  CHECK(view.data() == b.data() + b.size() - 4); // zero-copy
  CHECK(r.empty());
  CHECK_THROWS_AS(r.read_span(1), fiber::serialization_error);
  std::byte x;
  CHECK_THROWS_AS(r.read_bytes(&x, 1), fiber::serialization_error);
  CHECK_THROWS_AS(r.read_varint(), fiber::serialization_error);

  // read_length bounds by min_elem_bytes (0 counts as 1).
  const bytes len = make_bytes({3, 0, 0, 0, 0, 0, 0});
  CHECK(fiber::reader(len).read_length(2) == 3);
  CHECK_THROWS_AS(fiber::reader(len).read_length(3), fiber::serialization_error);
  CHECK(fiber::reader(len).read_length(0) == 3);
  const bytes len7 = make_bytes({7, 0, 0, 0, 0, 0, 0});
  CHECK_THROWS_AS(fiber::reader(len7).read_length(0), fiber::serialization_error);
}

TEST_CASE("reader rejects bad varints", "[serialize][malformed]") {
  const bytes cases[] = {
      make_bytes({0x80}),                                                             // truncated
      make_bytes({0x80, 0x00}),                                                       // non-minimal
      make_bytes({0xff, 0x80, 0x00}),                                                 // non-minimal
      make_bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}),       // > 64 bits
      make_bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00}), // 11 bytes
  };
  for (const bytes& b : cases) {
    fiber::reader r(b);
    CHECK_THROWS_AS(r.read_varint(), fiber::serialization_error);
  }
}

// --- malformed input --------------------------------------------------------------------

namespace {
/// Every strict prefix of a valid encoding must be rejected, never crash.
template <class T>
void check_every_truncation(const T& value) {
  const bytes b = fiber::serialize(value);
  REQUIRE(fiber::deserialize<T>(b) == value);
  for (std::size_t cut = 0; cut < b.size(); ++cut) {
    INFO("type " << fiber::detail::type_name<T>() << ", cut at " << cut << " of " << b.size());
    CHECK_THROWS_AS(fiber::deserialize<T>(std::span(b).first(cut)), fiber::serialization_error);
  }
}
} // namespace

TEST_CASE("truncated input is rejected at every byte boundary", "[serialize][malformed]") {
  check_every_truncation(std::int64_t{-1});
  check_every_truncation(std::string(200, 'q')); // 2-byte length
  check_every_truncation(std::vector<float>{1, 2, 3});
  check_every_truncation(std::vector<std::string>{"a", "", "bcd"});
  check_every_truncation(std::vector<bool>{true, false, true, true, false, false, true, true, true});
  check_every_truncation(std::map<std::string, std::optional<int>>{{"x", 1}, {"y", std::nullopt}});
  check_every_truncation(std::variant<int, std::string>{std::string("vv")});
  check_every_truncation(std::tuple<std::uint8_t, double, std::set<int>>{1, 2.0, {3, 4}});
  check_every_truncation(account{1, "o", 2.0, {"h"}});
  check_every_truncation(app::tree{1, {{2, {}}}});
  check_every_truncation(nested_agg{1,
                                    "n",
                                    {{1, 2}},
                                    {{"k", {1}}},
                                    std::variant<int, std::string, point>{std::string("e")},
                                    {},
                                    {1, {2}, {false, 1.0}},
                                    std::chrono::milliseconds{3}});
}

TEST_CASE("errors name the type, the position and the problem", "[serialize][malformed]") {
  const bytes b = make_bytes({5, 'a', 'b'});
  try {
    (void)fiber::deserialize<std::vector<std::int64_t>>(b);
    FAIL("no throw");
  } catch (const fiber::serialization_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("fiber::deserialize<std::vector<") == 0);
    CHECK(what.find("length 5 at byte 0") != std::string::npos);
  }
  try {
    (void)fiber::deserialize<std::int64_t>(make_bytes({1, 2, 3}));
    FAIL("no throw");
  } catch (const fiber::serialization_error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("truncated input at byte 0: need 8 bytes, 3 remain") != std::string::npos);
  }
}

TEST_CASE("trailing bytes are an error", "[serialize][malformed]") {
  bytes b = fiber::serialize(std::string("ok"));
  b.push_back(std::byte{0});
  CHECK_THROWS_WITH(fiber::deserialize<std::string>(b), Catch::Contains("1 trailing bytes"));
  CHECK_THROWS_AS(fiber::deserialize<std::monostate>(make_bytes({0})), fiber::serialization_error);
}

TEST_CASE("invalid tags and values are rejected", "[serialize][malformed]") {
  using V = std::variant<int, std::string>;
  CHECK_THROWS_WITH(fiber::deserialize<V>(make_bytes({2, 0, 0, 0, 0})), Catch::Contains("variant index 2"));
  CHECK_THROWS_AS(fiber::deserialize<V>(make_bytes({0x80, 0x01})), fiber::serialization_error);
  CHECK_THROWS_WITH(fiber::deserialize<bool>(make_bytes({2})), Catch::Contains("bool byte 2"));
  CHECK_THROWS_AS(fiber::deserialize<bool>(make_bytes({0xff})), fiber::serialization_error);
  CHECK_THROWS_AS(fiber::deserialize<std::vector<bool>>(make_bytes({1, 0x03})),
                  fiber::serialization_error); // padding bit set
  CHECK_THROWS_AS(fiber::deserialize<std::optional<int>>(make_bytes({2, 0, 0, 0, 0})), fiber::serialization_error);
  CHECK_THROWS_WITH(fiber::deserialize<std::set<std::uint8_t>>(make_bytes({2, 5, 5})),
                    Catch::Contains("out of order or duplicated"));
  CHECK_THROWS_WITH(fiber::deserialize<std::set<std::uint8_t>>(make_bytes({2, 6, 5})),
                    Catch::Contains("out of order")); // one encoding per value
  CHECK(fiber::deserialize<std::set<std::uint8_t>>(make_bytes({2, 5, 6})) == std::set<std::uint8_t>{5, 6});
  CHECK_THROWS_WITH((fiber::deserialize<std::unordered_set<std::uint8_t>>(make_bytes({2, 5, 5}))),
                    Catch::Contains("duplicate key"));
  CHECK(fiber::deserialize<std::unordered_set<std::uint8_t>>(make_bytes({2, 6, 5})) ==
        std::unordered_set<std::uint8_t>{5, 6});
  CHECK_THROWS_AS((fiber::deserialize<std::map<std::uint8_t, std::uint8_t>>(make_bytes({2, 1, 1, 1, 2}))),
                  fiber::serialization_error);
  CHECK_THROWS_AS((fiber::deserialize<std::array<bool, 2>>(make_bytes({1, 3}))), fiber::serialization_error);
}

TEST_CASE("a valueless variant cannot be serialized", "[serialize]") {
  std::variant<std::monostate, app::throws_on_int> v;
  CHECK_THROWS_AS(v.emplace<1>(1), std::runtime_error);
  REQUIRE(v.valueless_by_exception());
  CHECK_THROWS_AS(fiber::serialize(v), fiber::serialization_error);
}

TEST_CASE("huge claimed lengths are rejected quickly without allocating", "[serialize][malformed]") {
  const bytes huge = make_bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 2, 3});
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();

  g_alloc = {};
  using counted_floats = std::vector<float, counting_alloc<float>>;
  using counted_strings =
      std::vector<std::basic_string<char, std::char_traits<char>, counting_alloc<char>>,
                  counting_alloc<std::basic_string<char, std::char_traits<char>, counting_alloc<char>>>>;
  CHECK_THROWS_AS(fiber::deserialize<counted_floats>(huge), fiber::serialization_error);
  CHECK_THROWS_AS(fiber::deserialize<counted_strings>(huge), fiber::serialization_error);
  CHECK(g_alloc.total == 0);
  CHECK_THROWS_AS(fiber::deserialize<std::string>(huge), fiber::serialization_error);
  CHECK_THROWS_AS((fiber::deserialize<std::map<int, int>>(huge)), fiber::serialization_error);
  CHECK_THROWS_AS(fiber::deserialize<std::unordered_set<std::string>>(huge), fiber::serialization_error);
  CHECK_THROWS_AS(fiber::deserialize<std::vector<bool>>(huge), fiber::serialization_error);
  CHECK_THROWS_AS(fiber::deserialize<std::vector<std::monostate>>(huge), fiber::serialization_error);

  // A count the input can back (1 byte per element) for elements that are
  // large in memory: up-front reservation stays capped at 1 MiB.
  using big = std::optional<std::array<double, 1024>>; // 8 KiB in memory, 1 byte on the wire
  bytes claim;
  {
    fiber::writer w;
    w.write_varint(20'000);
    claim = w.release();
    claim.resize(claim.size() + 20'000, std::byte{0x05}); // invalid optional tags
  }
  g_alloc = {};
  CHECK_THROWS_AS((fiber::deserialize<std::vector<big, counting_alloc<big>>>(claim)), fiber::serialization_error);
  CHECK(g_alloc.largest <= (std::size_t{1} << 20) + sizeof(big));
  CHECK(clock::now() - t0 < std::chrono::seconds(5)); // generous: a hang would be endless
}

TEST_CASE("random bytes only ever raise serialization_error", "[serialize][malformed]") {
  std::mt19937_64 rng(20240611);
  std::size_t ok = 0;
  std::size_t rejected = 0;
  auto attempt = [&](auto tag, const bytes& b) {
    using T = typename decltype(tag)::type;
    try {
      (void)fiber::deserialize<T>(b);
      ++ok;
    } catch (const fiber::serialization_error&) {
      ++rejected;
    }
  };
  for (int i = 0; i < 3000; ++i) {
    bytes b(rng() % 64);
    for (auto& x : b) x = static_cast<std::byte>(rng() % 4 == 0 ? rng() % 4 : rng());
    attempt(std::type_identity<std::int32_t>{}, b);
    attempt(std::type_identity<std::string>{}, b);
    attempt(std::type_identity<std::vector<std::string>>{}, b);
    attempt(std::type_identity<std::map<std::uint8_t, std::vector<bool>>>{}, b);
    attempt(std::type_identity<std::variant<std::monostate, bool, std::optional<std::int16_t>>>{}, b);
    attempt(std::type_identity<nested_agg>{}, b);
    attempt(std::type_identity<account>{}, b);
    attempt(std::type_identity<app::tree>{}, b);
  }
  CHECK(ok + rejected == 3000 * 8);
  CHECK(ok > 0); // some short inputs are valid (e.g. int32, small variants)
  CHECK(rejected > 0);
}

TEST_CASE("protocol: tasks and results frames built around their payload and read in place", "[protocol]") {
  namespace fd = fiber::detail;
  using bytes = std::vector<std::byte>;
  auto payload = [](std::size_t n) {
    bytes b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = std::byte(i * 7 + 1);
    return b;
  };
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{200}, std::size_t{70000}}) {
    const bytes args = payload(n);
    // head + payload is exactly the owning encoding
    bytes f = fd::tasks_frame_head(42, 7, 3, n);
    f.insert(f.end(), args.begin(), args.end());
    CHECK(f == fd::frame(fd::frame_kind::tasks, std::vector<fd::chunk_msg>{{42, 7, 3, args}}));
    bytes g = fd::results_frame_head(43, n);
    g.insert(g.end(), args.begin(), args.end());
    CHECK(g == fd::frame(fd::frame_kind::results, std::vector<fd::chunk_result_msg>{{43, args}}));
  }
  // Views decode what deserialize decodes, and refuse what it refuses.
  const std::vector<fd::chunk_msg> chunks{{1, 2, 3, payload(10)}, {4, 5, 6, {}}, {7, 8, 9, payload(300)}};
  const bytes tf = fd::frame(fd::frame_kind::tasks, chunks);
  auto tv = fd::decode_tasks_view(fd::unframe(tf).second);
  REQUIRE(tv.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(tv[i].chunk_id == chunks[i].chunk_id);
    CHECK(tv[i].target_id == chunks[i].target_id);
    CHECK(tv[i].count == chunks[i].count);
    CHECK(bytes(tv[i].args.begin(), tv[i].args.end()) == chunks[i].args);
  }
  const std::vector<fd::chunk_result_msg> results{{1, payload(20)}, {2, {}}};
  const bytes rf = fd::frame(fd::frame_kind::results, results);
  auto rv = fd::decode_results_view(fd::unframe(rf).second);
  REQUIRE(rv.size() == 2);
  CHECK(rv[0].chunk_id == 1);
  CHECK(rv[1].chunk_id == 2);
  CHECK(rv[1].results.empty());
  CHECK(bytes(rv[0].results.begin(), rv[0].results.end()) == results[0].results);
  for (const bytes* f : {&tf, &rf}) {
    const auto body = fd::unframe(*f).second;
    for (std::size_t cut = 0; cut <= body.size(); ++cut) { // every truncation, and one trailing byte
      bytes b(body.begin(), body.begin() + std::ptrdiff_t(cut));
      if (cut == body.size()) b.push_back(std::byte{0});
      bool owning_ok = true, view_ok = true;
      try {
        if (f == &tf) (void)fiber::deserialize<std::vector<fd::chunk_msg>>(b);
        else (void)fiber::deserialize<std::vector<fd::chunk_result_msg>>(b);
      } catch (const fiber::serialization_error&) {
        owning_ok = false;
      }
      try {
        if (f == &tf) (void)fd::decode_tasks_view(b);
        else (void)fd::decode_results_view(b);
      } catch (const fiber::serialization_error&) {
        view_ok = false;
      }
      CHECK(owning_ok == view_ok);
    }
  }
}

TEST_CASE("a chunk's results with bytes after them are a serialization_error", "[protocol][malformed]") {
  namespace fd = fiber::detail;
  fiber::writer w;
  fd::write_item_ok(w);
  w.write(std::int32_t(7));
  auto blob = w.release();
  std::int32_t got = 0;
  auto decode = [&] {
    fd::decode_results<std::int32_t>(
        blob, 1, [&](std::size_t, std::int32_t&& v) { got = v; }, [](std::size_t, std::exception_ptr) {});
  };
  decode();
  CHECK(got == 7);
  blob.push_back(std::byte{0});
  CHECK_THROWS_AS(decode(), fiber::serialization_error);
}
