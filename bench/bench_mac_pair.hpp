// SPDX-License-Identifier: BSL-1.0
#pragma once
// What bench_frame_mac and bench_hosts share to price frame MACs: two Pools
// of one worker alive together, one whose link carries frame MACs and one
// without, made in either order, and steps run on them by turns.

#include <fiber/fiber.hpp>

#include <memory>
#include <utility>

namespace bench {

/// A Pool of one worker running `F` on `Backend`, its link made with frame
/// MACs on or off: the master reads frame_mac when the worker dials, so the
/// Pool makes its first call (`args`) before the key is set back on.
/// `before()` runs just before the Pool is made (e.g. to pick its host).
template <auto F, class Backend, class Before, class... A>
std::unique_ptr<fiber::Pool<F, Backend>> pool_with_mac(bool mac, Before before, const A&... args) {
  fiber::set_config("frame_mac", mac ? "true" : "false");
  before();
  auto p = std::make_unique<fiber::Pool<F, Backend>>(fiber::target<F>, fiber::pool_options{.processes = 1});
  (void)p->apply(args...);
  fiber::set_config("frame_mac", "true");
  return p;
}

/// When true, the Pool "with" frame MACs has none either: a control whose
/// differences show what the method reads when there is nothing to find.
inline bool mac_control = false;

/// Two such Pools, {with frame MACs, without}, made in the order `on_first`
/// says. The Pool made first was 5-15 µs slower a round trip here, whichever
/// it was: repetitions alternate the order.
template <auto F, class Backend, class Before, class... A>
auto pools_on_off(bool on_first, Before before, const A&... args) {
  std::unique_ptr<fiber::Pool<F, Backend>> on, off;
  if (on_first) on = pool_with_mac<F, Backend>(!mac_control, before, args...);
  off = pool_with_mac<F, Backend>(false, before, args...);
  if (!on_first) on = pool_with_mac<F, Backend>(!mac_control, before, args...);
  return std::pair{std::move(on), std::move(off)};
}

/// Runs `step(pool, mac)` on `on` and `off` by turns, `n` times each,
/// alternating which goes first: a change in the machine's load falls on both.
template <class P, class Step>
void by_turns(P& on, P& off, int n, Step step) {
  for (int i = 0; i < n; ++i)
    if (i % 2 == 0) step(on, true), step(off, false);
    else step(off, false), step(on, true);
}

} // namespace bench
