// SPDX-License-Identifier: BSL-1.0
// The other `work` of target_a.cpp.

#include <fiber/target.hpp>

namespace {
int work(int x) { return x + 2; }
} // namespace

std::uint64_t work_id_b() { return fiber::target<&work>.id; }
