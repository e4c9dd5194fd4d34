// SPDX-License-Identifier: BSL-1.0
// pipe: a fiber::Pipe between the master and one Process. The master sends
// numbers down one end, the child sends their squares back up the other;
// closing the master's end is the child's signal to stop (it reads EOF).
//
//   ./pipe [count]                      # local child process
//   FIBER_BACKEND=slurm ./pipe          # the same program on a Slurm cluster

#include <fiber/error.hpp>
#include <fiber/pipe.hpp>
#include <fiber/process.hpp>

#include <cstdio>
#include <string>

// The child: answers every number with its square until the other end is gone.
void squarer(fiber::Connection<long> conn) {
  try {
    for (;;) {
      long x = conn.recv();
      conn.send(x * x);
    }
  } catch (const fiber::eof_error&) {
    // the master closed its end and we have read everything it sent: done
  }
}

int main(int argc, char** argv) {
  fiber::init(argc, argv);

  const long count = argc > 1 ? std::stol(argv[1]) : 100;

  // Duplex: both ends send and receive. Passing `there` to the Process moves
  // that end into the child; `here` stays with the master.
  auto [here, there] = fiber::Pipe<long>();
  fiber::Process child{fiber::target<&squarer>, std::move(there)};
  child.start();

  long sum = 0;
  for (long i = 1; i <= count; ++i) {
    here.send(i);       // master -> child
    sum += here.recv(); // child -> master
  }
  here.close(); // the child's recv() now throws eof_error, and it returns
  child.join();

  const long expected = count * (count + 1) * (2 * count + 1) / 6;
  std::printf("sum of %ld squares computed by %s: %ld (expected %ld), exit code %d\n", count, child.name().c_str(), sum,
              expected, child.exitcode().value_or(-1));
  return sum == expected && child.exitcode() == 0 ? 0 : 1;
}
