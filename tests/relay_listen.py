# SPDX-License-Identifier: BSL-1.0
# What test_security's relays (tls_relay.py, flip_relay.py) share: listen on
# 127.0.0.1 (or $FIBER_TEST_RELAY_HOST), write the port to PORT_FILE
# (atomically), serve each connection on a thread of its own, until killed.

import os
import socket
import threading


def serve_forever(port_file, serve):
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((os.environ.get("FIBER_TEST_RELAY_HOST", "127.0.0.1"), 0))
    ls.listen(16)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    while True:
        conn, _ = ls.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
