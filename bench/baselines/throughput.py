#!/usr/bin/python3
# SPDX-License-Identifier: BSL-1.0
"""Empty-task throughput and single-task round-trip latency per framework.

Throughput: map f(x)=x+1 over range(n) on a warm pool of W workers; tasks/s
(median of --reps runs).  Latency: submit one f(x), wait for its result,
repeat --lat-n times (after 50 warm-up trips); median and p99 in us.
A raw multiprocessing.Pipe ping-pong between two processes is the baseline.

Run: /usr/bin/python3 throughput.py [--workers 2] [--reps 3] [--lat-n 1000]
         [--scale 1.0] [--frameworks pipe,mp,cf,dask,ipp] [--lat-only]
"""
import argparse
import statistics
import sys
import time


def f(x):
    return x + 1


def median_p99(ts):
    ts = sorted(ts)
    return statistics.median(ts), ts[min(len(ts) - 1, int(len(ts) * 0.99))]


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _echo(conn):
    while True:
        x = conn.recv()
        if x is None:
            return
        conn.send(f(x))


def run_pipe(W, a):
    """Baseline: Python-level IPC floor (pickle + pipe, no framework)."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    here, there = ctx.Pipe()
    p = ctx.Process(target=_echo, args=(there,))
    p.start()
    lat = []
    for i in range(a.lat_n + 50):
        t0 = time.perf_counter()
        here.send(i)
        here.recv()
        if i >= 50:
            lat.append((time.perf_counter() - t0) * 1e6)
    here.send(None)
    p.join()
    return [], lat


def run_mp(W, a):
    import multiprocessing as mp
    pool = mp.get_context("fork").Pool(W)
    pool.map(f, range(100), chunksize=1)
    n1, nbig, big = int(100000 * a.scale), int(4000000 * a.scale), a.big_chunksize
    thr = [] if a.lat_only else [("chunksize=1", n1, [n1 / timed(lambda: pool.map(f, range(n1), chunksize=1))
                                for _ in range(a.reps)]),
           (f"chunksize={big}", nbig,
            [nbig / timed(lambda: pool.map(f, range(nbig), chunksize=big))
             for _ in range(a.reps)])]
    lat = []
    for i in range(a.lat_n + 50):
        t0 = time.perf_counter()
        pool.apply(f, (i,))
        if i >= 50:
            lat.append((time.perf_counter() - t0) * 1e6)
    pool.close()
    pool.join()
    return thr, lat


def run_cf(W, a):
    import concurrent.futures as cf
    import multiprocessing as mp
    ex = cf.ProcessPoolExecutor(W, mp_context=mp.get_context("fork"))
    list(ex.map(f, range(100)))
    n1, nbig, big = int(50000 * a.scale), int(4000000 * a.scale), a.big_chunksize
    thr = [] if a.lat_only else [("chunksize=1", n1, [n1 / timed(lambda: list(ex.map(f, range(n1), chunksize=1)))
                                for _ in range(a.reps)]),
           (f"chunksize={big}", nbig,
            [nbig / timed(lambda: list(ex.map(f, range(nbig), chunksize=big)))
             for _ in range(a.reps)])]
    lat = []
    for i in range(a.lat_n + 50):
        t0 = time.perf_counter()
        ex.submit(f, i).result()
        if i >= 50:
            lat.append((time.perf_counter() - t0) * 1e6)
    ex.shutdown()
    return thr, lat


def run_dask(W, a):
    from dask.distributed import Client, LocalCluster
    cluster = LocalCluster(n_workers=W, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    c = Client(cluster)
    c.gather(c.map(f, range(100), pure=False))
    n1 = int(5000 * a.scale)
    thr = [] if a.lat_only else [("client.map per task", n1,
            [n1 / timed(lambda: c.gather(c.map(f, range(n1), pure=False)))
             for _ in range(a.reps)])]
    lat = []
    for i in range(a.lat_n + 50):
        t0 = time.perf_counter()
        c.submit(f, i, pure=False).result()
        if i >= 50:
            lat.append((time.perf_counter() - t0) * 1e6)
    c.close()
    cluster.close()
    return thr, lat


def run_ipp(W, a):
    import ipyparallel as ipp
    cluster = ipp.Cluster(n=W, log_level=40)
    rc = cluster.start_and_connect_sync()
    rc.wait_for_engines(W, timeout=120)
    v = rc.load_balanced_view()
    v.map(f, range(100), chunksize=1).get()
    n1 = int(3000 * a.scale)
    thr = [] if a.lat_only else [("lbview.map chunksize=1", n1,
            [n1 / timed(lambda: v.map(f, range(n1), chunksize=1).get())
             for _ in range(a.reps)])]
    lat = []
    for i in range(a.lat_n + 50):
        t0 = time.perf_counter()
        v.apply_sync(f, i)
        if i >= 50:
            lat.append((time.perf_counter() - t0) * 1e6)
    rc.close()
    cluster.stop_cluster_sync()
    return thr, lat


FRAMEWORKS = {
    "pipe": ("raw mp.Pipe ping-pong (baseline)", run_pipe),
    "mp": ("multiprocessing.Pool (map / apply)", run_mp),
    "cf": ("concurrent.futures.ProcessPoolExecutor (map / submit)", run_cf),
    "dask": ("dask.distributed LocalCluster (map+gather / submit)", run_dask),
    "ipp": ("ipyparallel load_balanced_view (map / apply_sync)", run_ipp),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", "-W", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--lat-n", type=int, default=1000)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply task counts")
    ap.add_argument("--big-chunksize", type=int, default=10000)
    ap.add_argument("--frameworks", default="pipe,mp,cf,dask,ipp")
    ap.add_argument("--lat-only", action="store_true", help="skip throughput")
    a = ap.parse_args()
    print(f"python {sys.version.split()[0]}  W={a.workers}  reps={a.reps}  "
          f"lat-n={a.lat_n}", flush=True)
    thr_rows, lat_rows = [], []
    for key in a.frameworks.split(","):
        name, fn = FRAMEWORKS[key]
        try:
            thr, lat = fn(a.workers, a)
        except Exception as e:
            print(f"  {key}: FAILED: {type(e).__name__}: {e}", flush=True)
            continue
        for mode, n, rates in thr:
            thr_rows.append((name, mode, n, statistics.median(rates), rates))
            print(f"  {key} {mode} n={n} tasks/s={[round(r) for r in rates]}", flush=True)
        med, p99 = median_p99(lat)
        lat_rows.append((name, med, p99, len(lat)))
        print(f"  {key} latency median={med:.0f}us p99={p99:.0f}us", flush=True)
    if thr_rows:
        print()
        print("| framework | mode | n tasks | tasks/s (median) | us/task |")
        print("|---|---|---|---|---|")
        for name, mode, n, r, _ in thr_rows:
            print(f"| {name} | {mode} | {n} | {r:,.0f} | {1e6/r:.1f} |")
    print()
    print("| framework | round-trip median (us) | p99 (us) | trips |")
    print("|---|---|---|---|")
    for name, med, p99, n in lat_rows:
        print(f"| {name} | {med:.0f} | {p99:.0f} | {n} |")


if __name__ == "__main__":
    main()
