// SPDX-License-Identifier: BSL-1.0
// shared_dict: a fiber::shared::dict (Python's Manager().dict()) kept in a
// manager process and filled by two worker Processes through a handle.
// Each call on the dict is one message and runs atomically.
//
//   ./shared_dict                       # local child processes
//   FIBER_BACKEND=slurm ./shared_dict   # the same program on a Slurm cluster

#include <fiber/manager.hpp>
#include <fiber/process.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

using Dict = fiber::shared::dict<std::string, int>;

// A worker: records every word it was given with its length.
void record_lengths(fiber::Remote<Dict> d, std::vector<std::string> words) {
  for (const auto& w : words) d.call<&Dict::set>(w, int(w.size()));
}

int main(int argc, char** argv) {
  fiber::init(argc, argv);

  // One share of words per worker ("the" twice: the same key, the same value).
  const std::vector<std::vector<std::string>> shares = {{"the", "quick", "brown", "fox"},
                                                        {"jumps", "over", "the", "lazy", "dog"}};

  fiber::RemoteManager<Dict> manager{{.processes = 1}}; // must outlive every handle in use
  fiber::Remote<Dict> d = manager.make();               // an empty dict, in the manager process

  std::vector<fiber::Process> procs;
  for (const auto& words : shares) procs.emplace_back(fiber::target<&record_lengths>, d, words);
  for (auto& p : procs) p.start();
  for (auto& p : procs) p.join();

  // What the master expects, computed here; then one call fetches the whole dict.
  std::map<std::string, int> expected;
  for (const auto& words : shares)
    for (const auto& w : words) expected[w] = int(w.size());
  std::map<std::string, int> got = d.call<&Dict::items>();

  std::printf("%llu distinct words in the shared dict; \"quick\" -> %d\n",
              static_cast<unsigned long long>(d.call<&Dict::size>()), d.call<&Dict::get>("quick").value_or(-1));
  bool ok = got == expected;
  for (auto& p : procs) ok = ok && p.exitcode() == 0;
  return ok ? 0 : 1;
}
