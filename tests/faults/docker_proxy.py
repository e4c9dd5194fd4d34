#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
# A Docker-socket proxy for fault tests: forwards a unix socket to the Docker
# daemon's; SIGUSR1 cuts every connection and resets new ones for --outage
# seconds (a daemon restart as clients see it). Counts container creates.
#   docker_proxy.py --listen SOCK [--upstream /var/run/docker.sock] [--outage 3]
#                   [--creates FILE]  (one line appended per POST .../containers/create)
# Prints "READY" once listening; exits on SIGTERM, or when its parent dies.
import argparse
import ctypes
import os
import re
import select
import signal
import socket
import struct
import sys
import threading
import time

CREATE = re.compile(rb"^POST /v[0-9.]+/containers/create", re.M)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--listen", required=True)
    p.add_argument("--upstream", default="/var/run/docker.sock")
    p.add_argument("--outage", type=float, default=3.0)
    p.add_argument("--creates")
    a = p.parse_args()
    ctypes.CDLL(None).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    lock = threading.Lock()
    conns = set()
    state = {"until": 0.0}

    def cut(*_):
        state["until"] = time.time() + a.outage
        with lock:
            for s in list(conns):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def pump(src, dst, count):
        try:
            while True:
                b = src.recv(65536)
                if not b:
                    break
                if count and a.creates:
                    n = len(CREATE.findall(b))
                    if n:
                        with open(a.creates, "a") as f:
                            f.write("create\n" * n)
                dst.sendall(b)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def serve(c):
        u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            u.connect(a.upstream)
        except OSError:
            c.close()
            return
        with lock:
            conns.update((c, u))
        t = threading.Thread(target=pump, args=(u, c, False), daemon=True)
        t.start()
        pump(c, u, True)
        t.join()
        with lock:
            conns.difference_update((c, u))
        c.close()
        u.close()

    signal.signal(signal.SIGUSR1, cut)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if os.path.exists(a.listen):
        os.unlink(a.listen)
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(a.listen)
    ls.listen(128)
    print("READY", flush=True)
    try:
        while True:
            r, _, _ = select.select([ls], [], [], 0.5)
            if not r:
                continue
            c, _ = ls.accept()
            if time.time() < state["until"]:
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
                continue
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    finally:
        os.unlink(a.listen)


if __name__ == "__main__":
    main()
