#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# netns-down.sh: removes every host netns-up.sh made (any N), the bridge and
# the guard route. Processes still inside those namespaces get SIGTERM, then
# SIGKILL, by pid. Idempotent; root, no stdin.
#
#   bash tests/rigs/netns-down.sh [--keep-guard]   # keep the 10.200/16 unreachable route
set -uo pipefail
RIG_NAME=netns-down
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
P=${NETNS_RIG_PREFIX:-righost}
BR=${NETNS_RIG_BR:-rigbr0}
rig_need_root

ours() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${P}[0-9]+\$" || true; }

for ns in $(ours); do
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [ -n "${pids// /}" ] || continue
  rig_log "$ns: SIGTERM to $pids"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for _ in $(seq 1 30); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  if [ -n "${pids// /}" ]; then
    rig_log "$ns: SIGKILL to $pids"
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  fi
done
for ns in $(ours); do
  ip netns del "$ns" 2>/dev/null && rig_log "deleted $ns"
  rm -rf "/etc/netns/$ns"
done
# The root-side veths die with their peers; remove half-made leftovers too.
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^rig[vp][0-9]+$' || true); do
  ip link del "$l" 2>/dev/null || true
done
if ip link show "$BR" >/dev/null 2>&1; then ip link del "$BR" && rig_log "deleted bridge $BR"; fi
rm -f "/var/tmp/fiber-netns-rig/$P.hosts"
rmdir /var/tmp/fiber-netns-rig 2>/dev/null || true
if [ "${1:-}" != --keep-guard ]; then
  ip route del unreachable 10.200.0.0/16 metric 4000 2>/dev/null || true
fi
rig_log "down"
exit 0
