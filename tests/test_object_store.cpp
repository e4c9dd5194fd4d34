// SPDX-License-Identifier: BSL-1.0
// fiber::put and fiber::object_ref: get in the owner, Pool workers and
// Processes; one copy per host; a fetched copy freed when the owner drops
// the object; the bound; the owner killed.
#include <fiber/manager.hpp>
#include <fiber/object_store.hpp>
#include <fiber/pool.hpp>
#include <fiber/process.hpp>
#include <fiber/queue.hpp>
#include <fiber/stats.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <dirent.h>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sched.h>
#include <sys/stat.h>

#include "support.hpp"

namespace {

struct particle {
  double x = 0, y = 0;
  int id = 0;
};

struct flat_point { // no padding: a vector of them is a zero-copy view
  float x = 0, y = 0;
};

struct config {
  std::string name;
  std::map<std::string, int> sizes;
  std::vector<particle> swarm;
};

using floats = fiber::object_ref<std::vector<float>>;

/// A reference's fields as fiber_serialize writes them.
struct wire_ref {
  std::string url;
  std::uint64_t source = 0, nonce = 0, size = 0, type = 0, host = 0, pid = 0, fd = 0;
};

template <class T>
wire_ref fields(const fiber::object_ref<T>& r) {
  auto bytes = fiber::serialize(r);
  fiber::reader in(bytes);
  wire_ref w;
  REQUIRE(in.read<bool>());
  w.url = in.read<std::string>();
  w.source = in.read_varint();
  w.nonce = in.read<std::uint64_t>();
  w.size = in.read_varint();
  w.type = in.read<std::uint64_t>();
  w.host = in.read<std::uint64_t>();
  w.pid = in.read_varint();
  w.fd = in.read_varint();
  return w;
}

/// The same reference, but naming another host: get() fetches a copy over
/// the link instead of mapping the owner's segment.
template <class T>
fiber::object_ref<T> as_if_remote(const fiber::object_ref<T>& r) {
  auto w = fields(r);
  fiber::writer out;
  out.write(true);
  out.write(w.url);
  out.write_varint(w.source);
  out.write(w.nonce);
  out.write_varint(w.size);
  out.write(w.type);
  out.write(std::uint64_t(42)); // another host
  out.write_varint(w.pid);
  out.write_varint(w.fd);
  return fiber::deserialize<fiber::object_ref<T>>(out.release());
}

/// The inode of the file mapped at `p` in this process (0: none).
std::uint64_t mapped_inode(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  while (std::getline(maps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::string perms, off, dev;
    std::uint64_t inode = 0;
    std::istringstream ls(line);
    ls >> std::hex >> lo >> dash >> hi >> std::dec >> perms >> off >> dev >> inode;
    if (a >= lo && a < hi) return inode;
  }
  return 0;
}

double sum_floats(floats r) {
  auto v = r.get();
  return std::accumulate(v.begin(), v.end(), 0.0);
}

std::string config_name(fiber::object_ref<config> r) {
  const config& c = r.get();
  return c.name + ":" + std::to_string(c.sizes.at("b")) + ":" + std::to_string(c.swarm.at(1).id);
}

// Where a worker's view lies, and whether it holds bytes of its own.
std::vector<std::uint64_t> where_mapped(floats r) {
  auto v = r.get();
  return {mapped_inode(v.data()), fiber::detail::object_store::instance().held_bytes()};
}

// In its own network namespace: another host to the object store. False
// without the privilege (not root).
bool own_host() { return ::unshare(CLONE_NEWNET) == 0; }

// A Process on a host of its own: reports the sum it read and the bytes its
// copy holds, or -1 without the privilege for a host of its own.
// Keeps its copy until told to stop.
void fetch_on_own_host(floats r, fiber::Queue<double> out, fiber::Queue<int> stop) {
  if (!own_host()) return out.put(-1);
  out.put(0); // on its host: about to read
  out.put(sum_floats(r));
  (void)stop.get();
}

// A Process on a host of its own that serves `limit` bytes of its copy to
// other hosts and then holds their reads back: reports its sum, and waits
// to be killed.
void serve_part(floats r, std::uint64_t limit, fiber::Queue<double> out, fiber::Queue<int> stop) {
  if (!own_host()) return out.put(-1);
  fiber::detail::object_source::serve_limit() = limit;
  out.put(sum_floats(r));
  (void)stop.get();
}

// A Process on a host of its own that reports when its fetch has received
// `part` bytes (1; -3 if never), then the sum it read; keeps its copy until told to stop.
void fetch_reporting(floats r, std::uint64_t part, fiber::Queue<double> out, fiber::Queue<int> stop) {
  if (!own_host()) return out.put(-1);
  std::thread watch([&] {
    const auto& got = fiber::detail::object_store::fetched();
    out.put(fiber_test::eventually([&] { return got.load() >= part; }, std::chrono::seconds(60)) ? 1 : -3);
  });
  const double sum = sum_floats(r);
  watch.join();
  out.put(sum);
  (void)stop.get();
}

// A Process that puts `mb` MiB: reports 1 when it fit, 0 when the bound
// refused it (naming its key), and tries again when told to.
void put_mb(std::uint64_t mb, fiber::Queue<int> out, fiber::Queue<int> again) {
  for (;;) {
    try {
      auto r = fiber::put(std::vector<char>(mb << 20));
      return out.put(1);
    } catch (const fiber::error& e) {
      out.put(std::string(e.what()).find("object_store_mb") != std::string::npos ? 0 : -4);
    }
    if (again.get() != 1) return;
  }
}

// A Process that puts 3 MiB, holding the host's lock (before its segment
// exists) until told to go on; reports 1 then, 2 once its put returned, and
// keeps the object until told to stop.
void put_holding_lock(fiber::Queue<int> out, fiber::Queue<int> go) {
  int calls = 0;
  fiber::detail::object_store::on_host_locked() = [&] {
    if (calls++ == 0) out.put(1), (void)go.get();
  };
  auto r = fiber::put(std::vector<char>(3 << 20));
  out.put(2);
  (void)go.get();
}

// A Process that reads a copy of `r` (fetched: r names another host), lets
// its reference go, reports the bytes it still holds, and once told to,
// reports them again.
void read_then_idle(floats r, fiber::Queue<std::uint64_t> out, fiber::Queue<int> go) {
  out.put(std::uint64_t(sum_floats(std::exchange(r, floats()))));
  out.put(fiber::detail::object_store::instance().held_bytes());
  (void)go.get();
  out.put(fiber::detail::object_store::instance().held_bytes());
}

// A Process: fetches its copy, reports it, then waits until the owner's drop
// has freed it, and reports that.
void hold_until_dropped(floats r, fiber::Queue<std::uint64_t> out) {
  out.put(std::uint64_t(sum_floats(r)));
  out.put(fiber::detail::object_store::instance().held_bytes());
  r = floats();
  bool freed = fiber_test::eventually([] { return fiber::detail::object_store::instance().held_bytes() == 0; });
  out.put(freed ? 0 : fiber::detail::object_store::instance().held_bytes());
}

// A Process that owns an object and hands out its reference, then waits.
void owner(fiber::Queue<floats> out, fiber::Queue<int> stop) {
  auto r = fiber::put(std::vector<float>(1000, 1.0f));
  out.put(r);
  (void)stop.get();
}

// The next item, or -2 when none came within a minute (the process died).
template <class T>
T next(fiber::Queue<T>& q) {
  auto v = q.get(std::chrono::seconds(60));
  return v ? *v : T(-2);
}

// An actor in a manager process that reads objects it is handed.
struct scorer {
  double score(floats r) const { return sum_floats(std::move(r)); }
};

// A Process that maps an object, says so, and waits to be killed.
void map_and_wait(floats r, fiber::Queue<double> out, fiber::Queue<int> stop) {
  out.put(sum_floats(r));
  (void)stop.get();
}

// Mappings of object store segments in this process and its children (the
// kernel names a memfd's mapping "/memfd:fiber-object (deleted)").
std::size_t object_mappings() {
  std::size_t n = 0;
  auto pids = fiber_test::children();
  pids.push_back(::getpid());
  for (int pid : pids) {
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    while (std::getline(maps, line)) n += line.find("memfd:fiber-object") != std::string::npos;
  }
  return n;
}

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

std::size_t dev_shm_entries() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (auto* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// The names in the run directory (ipc sockets, files), sorted.
std::vector<std::string> run_dir_entries() {
  std::vector<std::string> names;
  const auto& dir = fiber::detail::runtime::instance().run_dir();
  if (dir.empty()) return names;
  for (auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

BOOST_DESCRIBE_STRUCT(scorer, (), (score))

} // namespace

TEST_CASE("put and get in the owner: scalars, strings, vectors, aggregates", "[object_store]") {
  auto i = fiber::put(42);
  CHECK(i.get() == 42);
  auto s = fiber::put(std::string("theta"));
  CHECK(s.get() == "theta");
  std::vector<float> v(1 << 16);
  std::iota(v.begin(), v.end(), 0.0f);
  auto fv = fiber::put(v);
  static_assert(std::is_same_v<decltype(fv.get()), std::span<const float>>);
  CHECK(std::equal(v.begin(), v.end(), fv.get().begin(), fv.get().end()));
  CHECK(fv.size_bytes() == v.size() * sizeof(float));
  auto ps = fiber::put(std::vector<particle>{{1, 2, 3}, {4, 5, 6}});
  CHECK(ps.get()[1].id == 6);
  auto pts = fiber::put(std::vector<flat_point>{{1, 2}, {3, 4}});
  static_assert(std::is_same_v<decltype(pts.get()), std::span<const flat_point>>);
  CHECK(pts.get()[1].y == 4);
  auto c = fiber::put(config{"cfg", {{"a", 1}, {"b", 2}}, {{0, 0, 7}, {1, 1, 8}}});
  CHECK(config_name(c) == "cfg:2:8");
  CHECK(fiber::object_ref<int>{}.size_bytes() == 0);
  CHECK_THROWS_AS(fiber::object_ref<int>{}.get(), std::logic_error);
  // a reference read back names the same object; another type does not read
  auto back = fiber::deserialize<floats>(fiber::serialize(fv));
  CHECK(back.get().data() == fv.get().data());
  CHECK_THROWS_AS(fiber::deserialize<fiber::object_ref<int>>(fiber::serialize(fv)), fiber::serialization_error);
  // fiber::stats(): what the store holds here, against its bound.
  auto use = fiber::stats().object_store;
  CHECK(use.objects >= 6);
  CHECK(use.bytes >= fv.size_bytes());
  CHECK(use.bound_bytes == std::uint64_t(fiber::detail::config_int("object_store_mb")) << 20);
  const auto before = use.objects;
  {
    auto more = fiber::put(std::vector<float>(1000));
    CHECK(fiber::stats().object_store.objects == before + 1);
  }
  CHECK(fiber::stats().object_store.objects == before);
}

TEST_CASE("Pool workers on the owner's host map the owner's one copy", "[object_store]") {
  std::vector<float> v(1 << 20, 0.5f);
  auto r = fiber::put(v);
  struct stat st {};
  REQUIRE(::stat(("/proc/self/fd/" + std::to_string(fields(r).fd)).c_str(), &st) == 0);
  fiber::Pool<&where_mapped> pool(fiber::target<&where_mapped>, {.processes = 8});
  auto got = pool.map(std::vector<floats>(32, r), 1);
  for (auto& g : got) {
    CHECK(g[0] == std::uint64_t(st.st_ino)); // the owner's memfd itself
    CHECK(g[1] == 0);                        // no copy of its own
  }
  CHECK(mapped_inode(r.get().data()) == std::uint64_t(st.st_ino));
  CHECK((st.st_mode & 0777) == 0600); // nobody else's

  fiber::Pool<&sum_floats> sums(fiber::target<&sum_floats>, {.processes = 2});
  CHECK(sums.map(std::vector<floats>(4, r)) == std::vector<double>(4, 0.5 * (1 << 20)));
  fiber::Pool<&config_name> names(fiber::target<&config_name>, {.processes = 2});
  auto c = fiber::put(config{"cfg", {{"b", 3}}, {{0, 0, 1}, {0, 0, 9}}});
  CHECK(names.map(std::vector{c, c, c}) == std::vector<std::string>(3, "cfg:3:9"));
}

TEST_CASE("a process on another host fetches one copy, freed when the owner drops the object", "[object_store]") {
  std::vector<float> v(3 << 20); // 12 MiB: two pieces of 8 MiB at most
  std::iota(v.begin(), v.end(), 0.0f);
  auto r = fiber::put(v);
  const double want = std::accumulate(v.begin(), v.end(), 0.0);
  {
    fiber::Pool<&sum_floats> pool(fiber::target<&sum_floats>, {.processes = 2});
    CHECK(pool.map(std::vector<floats>(4, as_if_remote(r))) == std::vector<double>(4, want));
    // one copy on the host: one worker fetched it, the others map that one
    fiber::Pool<&where_mapped> where(fiber::target<&where_mapped>, {.processes = 3});
    auto got = where.map(std::vector<floats>(12, as_if_remote(r)), 1);
    std::set<std::uint64_t> inodes, holders;
    std::uint64_t held = 0;
    for (auto& g : got) inodes.insert(g[0]), held += g[1];
    CHECK(inodes.size() == 1);
    CHECK(*inodes.begin() != mapped_inode(r.get().data())); // a copy, not the owner's segment
  }

  fiber::Queue<std::uint64_t> out;
  fiber::Process p{fiber::target<&hold_until_dropped>, as_if_remote(r), out};
  p.start();
  CHECK(next(out) == std::uint64_t(want));
  CHECK(next(out) == v.size() * sizeof(float)); // it holds one copy
  r = floats();                                 // the owner's last reference
  CHECK(next(out) == 0);                        // freed there
  p.join();
  CHECK(p.exitcode() == 0);
}

TEST_CASE("hosts fetch from one another: the owner sends about one copy, a dead source is replaced", "[object_store]") {
  std::vector<float> v(24 << 20); // 96 MiB: 12 pieces
  std::iota(v.begin(), v.end(), 0.0f);
  const double want = std::accumulate(v.begin(), v.end(), 0.0);
  auto r = fiber::put(v);
  auto& served = fiber::detail::object_source::served();
  const auto served0 = served.load();
  fiber::Queue<double> out1, out2, out3;
  fiber::Queue<int> stop;
  fiber::Process h1{fiber::target<&fetch_on_own_host>, r, out1, stop};
  h1.start();
  if (next(out1) < 0) {
    h1.join();
    CHECK(h1.exitcode() == 0);
    WARN("skipped: a host of its own (a network namespace) needs root");
    return;
  }
  CHECK(next(out1) == want);
  fiber::Process h2{fiber::target<&fetch_on_own_host>, r, out2, stop};
  h2.start();
  CHECK(next(out2) == 0);
  CHECK(next(out2) == want);
  // two hosts have it; the owner sent one copy (the second read from the first)
  CHECK(served.load() - served0 <= v.size() * sizeof(float) * 12 / 10);

  // the host the chain names next (h2) dies: a third host reads from the owner
  const auto before = served.load();
  fiber::Process h3{fiber::target<&fetch_on_own_host>, r, out3, stop};
  h2.kill();
  h2.join();
  h3.start();
  CHECK(next(out3) == 0);
  CHECK(next(out3) == want);
  CHECK(served.load() - before == v.size() * sizeof(float));
  stop.put(0), stop.put(0);
  for (auto* p : {&h1, &h3}) {
    p->join();
    CHECK(p->exitcode() == 0);
  }
}

TEST_CASE("a serving host killed mid-fetch: the fetch resumes from the owner at the first missing byte",
          "[object_store]") {
  std::vector<float> v(24 << 20); // 96 MiB: 12 pieces
  std::iota(v.begin(), v.end(), 1.0f);
  const double want = std::accumulate(v.begin(), v.end(), 0.0);
  const std::uint64_t size = v.size() * sizeof(float), part = 16 << 20; // two pieces
  auto r = fiber::put(v);
  auto& served = fiber::detail::object_source::served();
  fiber::Queue<double> out1, out2;
  fiber::Queue<int> stop;
  fiber::Process h1{fiber::target<&serve_part>, r, part, out1, stop};
  h1.start();
  const double sum1 = next(out1);
  if (sum1 < 0) {
    h1.join();
    CHECK(h1.exitcode() == 0);
    WARN("skipped: a host of its own (a network namespace) needs root");
    return;
  }
  CHECK(sum1 == want);
  const auto before = served.load();
  fiber::Process h2{fiber::target<&fetch_reporting>, r, part, out2, stop};
  h2.start();
  REQUIRE(next(out2) == 1);       // h2 has `part` bytes from h1, which holds the rest back
  CHECK(served.load() == before); // none from the owner so far
  h1.kill();
  h1.join();
  CHECK(next(out2) == want);
  // the owner sent only what h2 lacked: from the first missing byte on
  CHECK(served.load() - before == size - part);
  stop.put(0);
  h2.join();
  CHECK(h2.exitcode() == 0);
}

TEST_CASE("a manager process reads an object handed to a remote method", "[object_store]") {
  std::vector<float> v(1 << 18, 2.0f);
  auto r = fiber::put(v);
  fiber::RemoteManager<scorer> m{{.processes = 1}};
  auto s = m.make();
  CHECK(s.call<&scorer::score>(r) == 2.0 * v.size());
  CHECK(s.call<&scorer::score>(as_if_remote(r)) == 2.0 * v.size());
}

TEST_CASE("a reader killed while it maps an object leaks nothing", "[object_store]") {
  (void)fiber::put(0); // this process's listener exists before the count (the first put makes it)
  // what earlier cases' objects held goes on the runtime thread: wait for it
  REQUIRE(fiber_test::eventually([] { return object_mappings() == 0; }, std::chrono::seconds(10)));
  const auto fds = open_fds(), shm = dev_shm_entries();
  {
    auto r = fiber::put(std::vector<float>(1 << 20, 1.0f));
    fiber::Queue<double> out;
    fiber::Queue<int> stop;
    fiber::Process near{fiber::target<&map_and_wait>, r, out, stop};              // maps the owner's segment
    fiber::Process far{fiber::target<&map_and_wait>, as_if_remote(r), out, stop}; // holds this host's copy
    near.start();
    far.start();
    CHECK(next(out) == double(1 << 20));
    CHECK(next(out) == double(1 << 20));
    CHECK(object_mappings() >= 3); // the owner's, the readers'
    near.kill();
    far.kill();
    near.join();
    far.join();
  }
  // the readers died holding views, then the owner dropped the object
  CHECK(fiber_test::eventually([] { return object_mappings() == 0; }, std::chrono::seconds(10)));
  // (links of earlier cases may still be closing: fewer is fine)
  CHECK(fiber_test::eventually([&] { return open_fds() <= fds; }, std::chrono::seconds(10)));
  CHECK(dev_shm_entries() == shm);
}

TEST_CASE("past object_store_mb, put fails with an error naming the key", "[object_store]") {
  fiber::set_config("object_store_mb", "1");
  CHECK_THROWS_WITH(fiber::put(std::vector<char>(2 << 20)), Catch::Contains("object_store_mb"));
  auto small = fiber::put(std::vector<char>(512 << 10));
  CHECK_THROWS_WITH(fiber::put(std::vector<char>(768 << 10)), Catch::Contains("object_store_mb"));
  small = {};
  CHECK_NOTHROW(fiber::put(std::vector<char>(768 << 10)));
  fiber::set_config("object_store_mb", "4096");
}

TEST_CASE("object_store_mb bounds the host: a put counts what other processes of the run hold there",
          "[object_store]") {
  fiber::set_config("object_store_mb", "4");
  auto big = fiber::put(std::vector<char>(3 << 20));
  fiber::Queue<int> out, again;
  fiber::Process p{fiber::target<&put_mb>, std::uint64_t(2), out, again};
  p.start();
  CHECK(next(out) == 0); // 3 MiB in the owner here, 2 more do not fit in 4
  big = {};
  again.put(1);
  CHECK(next(out) == 1);
  p.join();
  CHECK(p.exitcode() == 0);
  fiber::set_config("object_store_mb", "4096");
}

TEST_CASE("two puts at once on one host: the second waits for the first's segment and fails past the bound",
          "[object_store]") {
  fiber::set_config("object_store_mb", "4");
  fiber::Queue<int> out, go;
  fiber::Process p{fiber::target<&put_holding_lock>, out, go};
  p.start();
  REQUIRE(next(out) == 1); // p holds the host's lock; its 3 MiB are not there yet
  bool waited = false;
  fiber::detail::object_store::on_host_lock_wait() = [&] {
    if (!std::exchange(waited, true)) go.put(1);
  };
  CHECK_THROWS_WITH(fiber::put(std::vector<char>(3 << 20)), Catch::Contains("object_store_mb"));
  fiber::detail::object_store::on_host_lock_wait() = nullptr;
  CHECK(waited);
  if (!waited) go.put(1);
  CHECK(next(out) == 2);
  go.put(1);
  p.join();
  CHECK(p.exitcode() == 0);
  fiber::set_config("object_store_mb", "4096");
}

TEST_CASE("past object_store_mb, a put evicts the copies other processes of the host no longer use", "[object_store]") {
  fiber::set_config("object_store_mb", "8");
  std::vector<float> v(3 << 18, 1.0f); // 3 MiB
  auto a = fiber::put(v);
  fiber::Queue<std::uint64_t> out;
  fiber::Queue<int> go;
  fiber::Process p{fiber::target<&read_then_idle>, as_if_remote(a), out, go};
  p.start();
  CHECK(next(out) == v.size());
  CHECK(next(out) == v.size() * sizeof(float)); // p keeps its copy, unused
  // 3 MiB here and 3 in p: 4 more fit under 8 only once p evicted its copy
  CHECK_NOTHROW(fiber::put(std::vector<char>(4 << 20)));
  go.put(1);
  CHECK(next(out) == 0);
  p.join();
  CHECK(p.exitcode() == 0);
  fiber::set_config("object_store_mb", "4096");
}

TEST_CASE("the owner killed: get raises worker_lost, nothing is left behind", "[object_store]") {
  const auto shm = dev_shm_entries();
  const auto run_dir0 = run_dir_entries();
  fiber::Queue<floats> refs;
  fiber::Queue<int> stop;
  fiber::Process p{fiber::target<&owner>, refs, stop};
  p.start();
  auto r = refs.get();
  p.kill();
  p.join();
  CHECK_THROWS_AS(r.get(), fiber::worker_lost);
  CHECK(dev_shm_entries() == shm);
  std::vector<std::string> left; // in the run directory now, not before the owner started
  std::ranges::set_difference(run_dir_entries(), run_dir0, std::back_inserter(left));
  std::string names;
  for (auto& name : left) names += name + " ";
  INFO("left in the run directory: " << names);
  CHECK(left.empty());
}
