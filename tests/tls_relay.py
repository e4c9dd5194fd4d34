#!/usr/bin/env python3
# SPDX-License-Identifier: BSL-1.0
# A man in the middle for test_security: accepts TLS with its own certificate,
# dials the real server over TLS without verifying it, relays both ways, and
# appends one line per connection to LOG: "relayed <n>" (plaintext bytes it
# read from the client and passed on) or "refused <reason>".
#
#   tls_relay.py PORT_FILE TARGET_HOST:PORT CERT KEY LOG
# PORT_FILE receives the port it listens on (relay_listen.py); it runs until killed.

import socket
import ssl
import sys
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from relay_listen import serve_forever  # noqa: E402

port_file, target, cert, key, log_path = sys.argv[1:6]
host, port = target.rsplit(":", 1)
log_lock = threading.Lock()


def log(line):
    with log_lock, open(log_path, "a") as f:
        f.write(line + "\n")


def pump(src, dst, counter):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            if counter is not None:
                counter[0] += len(data)
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(conn, server_ctx, client_ctx):
    try:
        front = server_ctx.wrap_socket(conn, server_side=True)
    except (ssl.SSLError, OSError) as e:
        log("refused " + type(e).__name__)
        conn.close()
        return
    back = client_ctx.wrap_socket(socket.create_connection((host, int(port))))
    carried = [0]
    t = threading.Thread(target=pump, args=(back, front, None), daemon=True)
    t.start()
    pump(front, back, carried)
    t.join(5)
    log("relayed %d" % carried[0])


def main():
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    serve_forever(port_file, lambda conn: serve(conn, server_ctx, client_ctx))


main()
