#!/usr/bin/python3
# SPDX-License-Identifier: BSL-1.0
"""Framework-overhead test in the style of the Fiber paper: n tasks that each
sleep d seconds are mapped over a pool of W workers; wall time is compared with
the ideal n*d/W.  Pool start-up is timed separately and is NOT inside "wall";
each pool is warmed up (one small map) before timing.

Run (Debian python, which has dask/distributed/ipyparallel):
    /usr/bin/python3 overhead.py [--workers 2] [--ideal 2.0] [--reps 3]
        [--durations 0.001,0.01,0.1] [--frameworks inline,mp,cf,dask,ipp]
"""
import argparse
import statistics
import sys
import time


def sleep_task(d):
    import time  # imported here so ipyparallel engines need no global `time`
    time.sleep(d)
    return d


def tiny(x):
    return x + 1


class Inline:
    """Control row: n/W sleeps back to back in this process (no framework)."""
    name = "inline (no IPC, n/W sleeps)"

    def __init__(self, w):
        self.w = w

    def start(self):
        pass

    def run(self, d, n):
        t0 = time.perf_counter()
        for _ in range(n // self.w):
            sleep_task(d)
        return time.perf_counter() - t0

    def stop(self):
        pass


class MPPool:
    name = "multiprocessing.Pool map(chunksize=1)"

    def __init__(self, w):
        self.w = w

    def start(self):
        import multiprocessing as mp
        self.pool = mp.get_context("fork").Pool(self.w)
        self.pool.map(tiny, range(4 * self.w), chunksize=1)

    def run(self, d, n):
        t0 = time.perf_counter()
        self.pool.map(sleep_task, [d] * n, chunksize=1)
        return time.perf_counter() - t0

    def stop(self):
        self.pool.close()
        self.pool.join()


class CFPool:
    name = "concurrent.futures.ProcessPoolExecutor map(chunksize=1)"

    def __init__(self, w):
        self.w = w

    def start(self):
        import concurrent.futures as cf
        import multiprocessing as mp
        self.ex = cf.ProcessPoolExecutor(self.w, mp_context=mp.get_context("fork"))
        list(self.ex.map(tiny, range(4 * self.w)))

    def run(self, d, n):
        t0 = time.perf_counter()
        list(self.ex.map(sleep_task, [d] * n, chunksize=1))
        return time.perf_counter() - t0

    def stop(self):
        self.ex.shutdown()


class Dask:
    name = "dask.distributed LocalCluster client.map+gather"

    def __init__(self, w):
        self.w = w

    def start(self):
        from dask.distributed import Client, LocalCluster
        self.cluster = LocalCluster(n_workers=self.w, threads_per_worker=1,
                                    processes=True, dashboard_address=None)
        self.client = Client(self.cluster)
        self.client.gather(self.client.map(tiny, range(4 * self.w), pure=False))

    def run(self, d, n):
        t0 = time.perf_counter()
        # pure=False: identical arguments must not be deduplicated into one key
        self.client.gather(self.client.map(sleep_task, [d] * n, pure=False))
        return time.perf_counter() - t0

    def stop(self):
        self.client.close()
        self.cluster.close()


class IPP:
    name = "ipyparallel load_balanced_view().map"

    def __init__(self, w):
        self.w = w

    def start(self):
        import ipyparallel as ipp
        self.cluster = ipp.Cluster(n=self.w, log_level=40)
        self.rc = self.cluster.start_and_connect_sync()
        self.rc.wait_for_engines(self.w, timeout=120)
        self.view = self.rc.load_balanced_view()
        self.view.map(tiny, range(4 * self.w), chunksize=1).get()

    def run(self, d, n):
        t0 = time.perf_counter()
        self.view.map(sleep_task, [d] * n, chunksize=1).get()
        return time.perf_counter() - t0

    def stop(self):
        self.rc.close()
        self.cluster.stop_cluster_sync()


FRAMEWORKS = {"inline": Inline, "mp": MPPool, "cf": CFPool, "dask": Dask, "ipp": IPP}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", "-W", type=int, default=2)
    ap.add_argument("--ideal", type=float, default=2.0, help="target ideal seconds")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--durations", default="0.001,0.01,0.1")
    ap.add_argument("--frameworks", default="inline,mp,cf,dask,ipp")
    a = ap.parse_args()
    W = a.workers
    ds = [float(x) for x in a.durations.split(",")]
    print(f"python {sys.version.split()[0]}  W={W}  reps={a.reps}  ideal~{a.ideal}s",
          flush=True)
    rows, startups = [], []
    for key in a.frameworks.split(","):
        fw = FRAMEWORKS[key](W)
        try:
            t0 = time.perf_counter()
            fw.start()
            startups.append((fw.name, time.perf_counter() - t0))
            for d in ds:
                n = max(W, round(a.ideal * W / d))
                ideal = n * d / W
                walls = [fw.run(d, n) for _ in range(a.reps)]
                med = statistics.median(walls)
                rows.append((fw.name, d, n, med, ideal, walls))
                print(f"  {key:6s} d={d*1e3:g}ms n={n} wall={med:.3f}s "
                      f"ratio={med/ideal:.3f} runs={[round(x, 3) for x in walls]}",
                      flush=True)
            fw.stop()
        except Exception as e:  # report and continue with other frameworks
            print(f"  {key}: FAILED: {type(e).__name__}: {e}", flush=True)
    print()
    print("| framework | d (ms) | n | wall median (s) | ideal (s) | wall/ideal "
          "| excess per task (us) |")
    print("|---|---|---|---|---|---|---|")
    for name, d, n, med, ideal, _ in rows:
        print(f"| {name} | {d*1e3:g} | {n} | {med:.3f} | {ideal:.3f} "
              f"| {med/ideal:.3f} | {(med-ideal)/n*1e6:.0f} |")
    print()
    print("| framework | pool start-up incl. warm-up map (s) |")
    print("|---|---|")
    for name, s in startups:
        print(f"| {name} | {s:.2f} |")


if __name__ == "__main__":
    main()
