# SPDX-License-Identifier: BSL-1.0
# Run by the fake as a separate process: reads "+PGID" / "-PGID" lines on stdin;
# when stdin closes (the fake exited, even by SIGKILL) it kills the process
# groups still listed and removes the fake's Docker containers (argv[1] = label).
import os
import signal
import subprocess
import sys


def main():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)  # only the end of the pipe ends the guardian
    groups = set()
    for line in sys.stdin:
        line = line.strip()
        if line.startswith("+"):
            groups.add(int(line[1:]))
        elif line.startswith("-"):
            groups.discard(int(line[1:]))
    for g in groups:
        try:
            os.killpg(g, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    label = sys.argv[1] if len(sys.argv) > 1 else ""
    if label:
        try:
            ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, timeout=60).stdout.split()
            if ids:
                subprocess.run(["docker", "rm", "-f", *ids], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass


if __name__ == "__main__":
    main()
