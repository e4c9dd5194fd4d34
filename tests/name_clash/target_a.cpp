// SPDX-License-Identifier: BSL-1.0
// With target_b.cpp: two functions `work` of one signature, each in an
// anonymous namespace of its own file. fiber must refuse to start.

#include <fiber/target.hpp>

#include <cstdio>

namespace {
int work(int x) { return x + 1; }
} // namespace

std::uint64_t work_id_b();

int main() {
  // Reached only if both registered without a word: side b's id runs side a's work.
  std::printf("no clash reported: %s\n", fiber::target<&work>.id == work_id_b() ? "ids equal" : "ids differ");
  return 0;
}
