#!/usr/bin/python3
# SPDX-License-Identifier: BSL-1.0
"""Python process spawn cost: multiprocessing.Process(target=noop).start()+join()
per start method; prints median / p99 microseconds.
Run: /usr/bin/python3 pyspawn.py [--n 1000] [--n-spawn 100]"""
import argparse, multiprocessing as mp, statistics, sys, time


def noop():
    pass


def bench(method, n):
    ctx = mp.get_context(method)
    ts = []
    for i in range(n + 5):
        t0 = time.perf_counter()
        p = ctx.Process(target=noop)
        p.start()
        p.join()
        if i >= 5:
            ts.append((time.perf_counter() - t0) * 1e6)
    ts.sort()
    return statistics.median(ts), ts[int(len(ts) * 0.99)], statistics.mean(ts)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000, help="runs for fork/forkserver")
    ap.add_argument("--n-spawn", type=int, default=100, help="runs for spawn (slow)")
    a = ap.parse_args()
    print(f"python {sys.version.split()[0]} ({sys.executable})")
    for m, n in (("fork", a.n), ("forkserver", a.n), ("spawn", a.n_spawn)):
        med, p99, mean = bench(m, n)
        print(f"mp.Process start+join [{m:10s}] median {med:9.1f} us  p99 {p99:9.1f} us  mean {mean:9.1f} us  (n={n})")
