// SPDX-License-Identifier: BSL-1.0
// Producers and consumers in separate processes, connected by fiber::Queues.
//
//   ./process_queue               # local child processes
//   FIBER_BACKEND=slurm ./process_queue   # the same program on a Slurm cluster
//
// The queues live in this (master) process; the workers reach them through
// the handles passed as arguments. Every item is got exactly once.

#include <fiber/process.hpp>
#include <fiber/queue.hpp>

#include <cstdio>
#include <string>
#include <vector>

struct Job {
  int id;
  std::string text;
};

struct Result {
  int id;
  std::size_t words;
  std::string worker;
};

// A producer: puts `n` jobs, numbered from `first`.
void produce(fiber::Queue<Job> jobs, int first, int n) {
  for (int i = first; i < first + n; ++i) jobs.put({i, "job number " + std::to_string(i) + " has six words"});
}

// A consumer: works until it gets a job with id < 0 (the stop signal).
void consume(fiber::Queue<Job> jobs, fiber::Queue<Result> results) {
  for (;;) {
    Job j = jobs.get();
    if (j.id < 0) return;
    std::size_t words = 1;
    for (char c : j.text) words += c == ' ';
    results.put({j.id, words, fiber::current_process().name});
  }
}

int main(int argc, char** argv) {
  fiber::init(argc, argv);

  constexpr int producers = 2, consumers = 3, per_producer = 50;
  fiber::Queue<Job> jobs{16}; // bounded: producers wait when consumers fall behind
  fiber::Queue<Result> results;

  std::vector<fiber::Process> procs;
  for (int p = 0; p < producers; ++p) procs.emplace_back(fiber::target<&produce>, jobs, p * per_producer, per_producer);
  for (int c = 0; c < consumers; ++c) procs.emplace_back(fiber::target<&consume>, jobs, results);
  for (auto& p : procs) p.start();

  std::size_t total_words = 0;
  for (int i = 0; i < producers * per_producer; ++i) total_words += results.get().words;

  for (int c = 0; c < consumers; ++c) jobs.put({-1, ""}); // one stop signal per consumer
  for (auto& p : procs) p.join();

  std::printf("%d jobs, %zu words\n", producers * per_producer, total_words);
  return total_words == std::size_t(6 * producers * per_producer) ? 0 : 1;
}
