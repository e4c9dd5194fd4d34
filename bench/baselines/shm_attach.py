#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
# Baseline of bench_objects (one object, many local readers): Python's
# multiprocessing.shared_memory. The parent forks W processes first (they
# wait on an Event, so their start is not timed, as fiber's Pool is warmed
# up), then creates a SharedMemory of --size-mb MiB and fills it; the clock
# starts when it releases them: each attaches by name and touches every
# 4 KiB page (one byte each), and reports. Prints the seconds until all W
# have attached and touched. Standard library only.
#
#   python3 shm_attach.py --size-mb 1024 --workers 8
import argparse
import multiprocessing as mp
import os
import time
from multiprocessing import resource_tracker, shared_memory

PAGE = 4096


def reader(name, go, done):
    # An attaching process registers the segment with the resource tracker
    # (Python < 3.13 has no track=False), which would unlink it and warn when
    # this process exits: the parent owns it.
    resource_tracker.register = lambda *a, **k: None
    go.wait()
    shm = shared_memory.SharedMemory(name=name)
    touched = len(bytes(shm.buf[::PAGE]))  # one byte per page, a C loop
    shm.close()
    done.put(touched)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--size-mb", type=int, default=1024)
    p.add_argument("--workers", type=int, default=8)
    a = p.parse_args()
    size = a.size_mb << 20
    ctx = mp.get_context("fork")
    name = "fiber_bench_shm_%d" % os.getpid()
    go, done = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=reader, args=(name, go, done)) for _ in range(a.workers)]
    for pr in procs:
        pr.start()
    shm = shared_memory.SharedMemory(name=name, create=True, size=size)
    try:
        chunk = b"\x01" * (8 << 20)
        for at in range(0, size, len(chunk)):
            n = min(len(chunk), size - at)
            shm.buf[at : at + n] = chunk[:n]
        t0 = time.perf_counter()
        go.set()
        pages = sum(done.get() for _ in procs)
        secs = time.perf_counter() - t0
        for pr in procs:
            pr.join()
        print("workers %d size_mb %d pages_touched %d" % (a.workers, a.size_mb, pages))
        print("attach_touch_s %.6f" % secs)
    finally:
        shm.close()
        shm.unlink()


if __name__ == "__main__":
    main()
