#!/usr/bin/python3
# SPDX-License-Identifier: BSL-1.0
"""multiprocessing's synchronization across processes, the baselines of
bench_sync: a Manager().Lock() (a lock in a manager process, reached through
a proxy: multiprocessing's cross-machine lock) acquired and released by a
child process, and a multiprocessing.Barrier(2) between the parent and a child.
Prints the lock's acquire+release median / p99 and the barrier's mean cycle, µs.
Run: /usr/bin/python3 sync.py [--trips 3000] [--cycles 2000]"""
import argparse, multiprocessing as mp, statistics, sys, time


def lock_trips(lock, n, out):
    for _ in range(200):  # warm-up
        lock.acquire()
        lock.release()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        lock.acquire()
        lock.release()
        ts.append((time.perf_counter() - t0) * 1e6)
    ts.sort()
    out.put((statistics.median(ts), ts[int(len(ts) * 0.99)]))


def barrier_cycles(bar, n):
    for _ in range(n):
        bar.wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--trips", type=int, default=3000, help="acquire+release pairs")
    ap.add_argument("--cycles", type=int, default=2000, help="barrier cycles")
    a = ap.parse_args()
    print(f"python {sys.version.split()[0]} ({sys.executable})")
    with mp.Manager() as m:
        lock, out = m.Lock(), mp.Queue()
        p = mp.Process(target=lock_trips, args=(lock, a.trips, out))
        p.start()
        med, p99 = out.get()
        p.join()
    print(f"mp manager lock acquire+release median={med:.1f}us p99={p99:.1f}us (n={a.trips})")
    bar = mp.Barrier(2)
    warm = 100
    p = mp.Process(target=barrier_cycles, args=(bar, a.cycles + warm))
    p.start()
    for _ in range(warm):
        bar.wait()
    t0 = time.perf_counter()
    for _ in range(a.cycles):
        bar.wait()
    cycle = (time.perf_counter() - t0) / a.cycles * 1e6
    p.join()
    print(f"mp barrier2 cycle mean={cycle:.1f}us (n={a.cycles})")
