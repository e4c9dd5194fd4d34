#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
# A man in the middle on plain TCP for test_security: relays both ways, and
# in the first `tasks` frame (kind 11) the server sends on a connection
# flips one bit in the middle of the frame. Appends "flipped <frame length>"
# to LOG when it does.
#
#   flip_relay.py PORT_FILE TARGET_HOST:PORT LOG
# PORT_FILE receives the port it listens on (relay_listen.py); it runs until killed.

import socket
import struct
import sys
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from relay_listen import serve_forever  # noqa: E402

port_file, target, log_path = sys.argv[1:4]
host, port = target.rsplit(":", 1)
TASKS = 11


def log(line):
    with open(log_path, "a") as f:
        f.write(line + "\n")


def close_both(a, b):
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def pump_raw(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    close_both(src, dst)


def recv_exact(s, n):
    buf = b""
    while len(buf) < n:
        data = s.recv(n - len(buf))
        if not data:
            raise EOFError
        buf += data
    return buf


def pump_frames(src, dst):
    """Frames are [u32 little-endian length][payload]; payload[0] is the kind."""
    flipped = False
    try:
        while True:
            header = recv_exact(src, 4)
            (n,) = struct.unpack("<I", header)
            payload = bytearray(recv_exact(src, n))
            if not flipped and n > 64 and payload[0] == TASKS:
                payload[n // 2] ^= 0x01
                flipped = True
                log("flipped %d" % n)
            dst.sendall(header + bytes(payload))
    except (OSError, EOFError):
        pass
    close_both(src, dst)


def serve(conn):
    back = socket.create_connection((host, int(port)))
    t = threading.Thread(target=pump_frames, args=(back, conn), daemon=True)
    t.start()
    pump_raw(conn, back)
    t.join(5)


serve_forever(port_file, serve)
