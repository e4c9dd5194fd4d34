#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# docker-down.sh: after fiber's docker tests (the CTest fixture docker_down).
#   bash tests/rigs/docker-down.sh [--check] [--label KEY=VALUE]
# Removes the containers labelled app.kubernetes.io/managed-by=fiber (and
# KEY=VALUE: only those of one build tree's tests, on a daemon others use
# too) and stops the dockerd that docker-up.sh started (by its pid file); a
# daemon it did not start is left running. --check: fail (exit 1, listing
# them) if such containers were still there 10 s after the call (AutoRemove
# may be finishing a removal when it starts).
set -uo pipefail
dir=${FIBER_DOCKER_RIG_DIR:-/var/tmp/fiber-docker-rig}
check=0
filters=(--filter label=app.kubernetes.io/managed-by=fiber)
while (($#)); do
  case $1 in
    --check) check=1 ;;
    --label) shift; filters+=(--filter "label=$1") ;;
    *) echo "usage: $0 [--check] [--label KEY=VALUE]" >&2; exit 2 ;;
  esac
  shift
done
rc=0
if docker version >/dev/null 2>&1; then
  deadline=$((SECONDS + 10))
  while [[ -n $(docker ps -aq "${filters[@]}") ]] && ((SECONDS < deadline)); do sleep 0.2; done
  ids=$(docker ps -aq "${filters[@]}")
  if [[ -n $ids ]]; then
    echo "docker-down: fiber containers left behind:" >&2
    docker ps -a "${filters[@]}" --format '{{.ID}} {{.Names}} {{.Status}} {{.Labels}}' >&2
    # shellcheck disable=SC2086
    docker rm -f $ids >/dev/null 2>&1
    ((check)) && rc=1
  fi
fi
if [[ -f $dir/dockerd.pid ]]; then
  pid=$(cat "$dir/dockerd.pid")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$dir/dockerd.pid"
  echo "docker-down: dockerd $pid stopped"
fi
exit "$rc"
