#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# docker-up.sh: a Docker daemon for fiber's docker tests (the CTest fixture
# docker_up, and CI's docker stage). No systemd, no registry.
#   bash tests/rigs/docker-up.sh
# Installs Debian's docker.io (no recommends) if dockerd is missing; starts
#   dockerd --iptables=false --ip6tables=false --ip-forward=false --bridge=none
#           --storage-driver=overlay2
# (it starts its own containerd) unless a daemon already answers, and waits
# until `docker version` works. Containers then use the host network.
# FIBER_DOCKER_RIG_DIR (default /var/tmp/fiber-docker-rig): pid file and log;
# docker-down.sh stops the daemon only if this script started it.
# DOCKER_HOST=unix:///other.sock: a private daemon on that socket, with its
# state under FIBER_DOCKER_RIG_DIR (beside a system daemon, untouched).
set -euo pipefail
dir=${FIBER_DOCKER_RIG_DIR:-/var/tmp/fiber-docker-rig}
mkdir -p "$dir"
args=(--iptables=false --ip6tables=false --ip-forward=false --bridge=none --storage-driver=overlay2)
host=${DOCKER_HOST:-unix:///var/run/docker.sock}
if [[ $host != unix:///var/run/docker.sock ]]; then
  [[ $host == unix://* ]] || { echo "docker-up: can start a daemon on a unix socket only (DOCKER_HOST=$host)" >&2; exit 1; }
  args+=(-H "$host" --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid")
fi
if docker version >/dev/null 2>&1; then
  echo "docker-up: a daemon already answers; using it as it is"
  exit 0
fi
if ! command -v dockerd >/dev/null; then
  [[ $(id -u) == 0 ]] || { echo "docker-up: dockerd is missing; run as root to install docker.io" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends docker.io >/dev/null
fi
[[ $(id -u) == 0 ]] || { echo "docker-up: no daemon answers and starting dockerd needs root" >&2; exit 1; }
dockerd "${args[@]}" >"$dir/dockerd.log" 2>&1 &
echo $! >"$dir/dockerd.pid"
for _ in $(seq 1 200); do
  if docker version >/dev/null 2>&1; then
    echo "docker-up: dockerd $(cat "$dir/dockerd.pid") ready"
    exit 0
  fi
  kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null || break
  sleep 0.1 # polling the daemon's socket against a 20 s deadline
done
echo "docker-up: dockerd did not answer; see $dir/dockerd.log" >&2
tail -n 20 "$dir/dockerd.log" >&2
exit 1
