#!/usr/bin/env bash
# shellcheck disable=SC2016 # single-quoted commands for bash -c expand there, not here
# SPDX-License-Identifier: BSL-1.0
# selftest.sh: proves fiber's test rigs on this machine (root, ~30 s): brings
# each rig up, uses it, tears it down, and checks that nothing is left.
# Prints PASS/FAIL lines and "N passed, M failed"; exits non-zero on a failure.
#
#   bash tests/rigs/selftest.sh            # slurm (1 node, then 3 netns hosts) and netns
#   bash tests/rigs/selftest.sh slurm      # only Slurm
#   bash tests/rigs/selftest.sh netns      # only the network namespaces
#
# Refuses to run (exit 2) while a Slurm controller or rig namespaces that it
# would have to tear down are already up: it never stops someone else's rig.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export RIG_NAME=selftest
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$HERE/lib.sh"
WHAT=${1:-all}
case $WHAT in all | slurm | netns) ;; *) rig_die "usage: selftest.sh [all|slurm|netns]" ;; esac
rig_need_root

T=$(mktemp -d /tmp/fiber-rig-selftest.XXXXXX)
chmod 755 "$T" # job output is written by the jobs' user (root here, but be plain)
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# check NAME CMD...: runs CMD (output to the log), PASS if it succeeds.
check() {
  local name=$1
  shift
  echo "--- $name" >>"$T/log"
  if "$@" >>"$T/log" 2>&1; then ok "$name"; else bad "$name (log: $T/log)"; fi
}
# eventually SECONDS CMD...: CMD succeeds within SECONDS (polled every 0.1 s).
eventually() {
  local end=$((SECONDS + $1))
  shift
  until "$@"; do ((SECONDS < end)) || return 1; sleep 0.1; done
}
no_daemons() { # no live (non-zombie) slurmctld, slurmd, slurmstepd or munged
  local d
  for d in slurmctld slurmd slurmstepd munged; do [[ -z $(rig_pids "$d") ]] || return 1; done
}
no_rig_netns() { ! ip netns list 2>/dev/null | grep -q '^righost' && ! ip link show rigbr0 >/dev/null 2>&1; }
conf_not_ours() { ! head -1 /etc/slurm/slurm.conf 2>/dev/null | grep -q "tests/rigs/slurm-up.sh"; }

if [[ -n $(rig_pids slurmctld) ]]; then
  echo "selftest: a slurmctld is already running (pid $(rig_pids slurmctld)); stop it first (slurm-down.sh)" >&2
  exit 2
fi
if ! no_rig_netns; then
  echo "selftest: rig namespaces already exist (ip netns list); remove them first (netns-down.sh)" >&2
  exit 2
fi
# However this ends, leave nothing up.
cleanup() { bash "$HERE/slurm-down.sh" >>"$T/log" 2>&1; bash "$HERE/netns-down.sh" >>"$T/log" 2>&1; }
trap cleanup EXIT
trap 'exit 143' TERM INT HUP

sbatch_runs() { # a batch job runs, writes its output, and leaves the queue
  local j out=$T/sbatch.out
  rm -f "$out"
  j=$(sbatch --parsable -o "$out" --wrap 'echo batch-ok on $(hostname)') || return 1
  eventually 30 grep -q batch-ok "$out" || return 1
  eventually 30 bash -c "[[ -z \$(squeue -h -j $j 2>/dev/null) ]]"
}
scancel_works() {
  local j
  j=$(sbatch --parsable -o /dev/null --wrap 'sleep 300') || return 1
  eventually 30 bash -c "squeue -h -j $j -t R | grep -q ." || return 1
  scancel "$j"
  eventually 30 bash -c "scontrol show job $j 2>/dev/null | grep -q JobState=CANCELLED || [[ -z \$(squeue -h -j $j) ]]"
}
eight_at_once() { # 8 one-CPU jobs run at the same time on 8 virtual CPUs
  local i
  for i in 1 2 3 4 5 6 7 8; do sbatch -Q -n1 -o /dev/null --wrap "sleep 4" >/dev/null || return 1; done
  eventually 20 bash -c '(( $(squeue -h -t R | wc -l) == 8 ))' || return 1
  eventually 30 bash -c '[[ -z $(squeue -h) ]]'
}

if [[ $WHAT == all || $WHAT == slurm ]]; then
  echo "== slurm: one node"
  check "slurm-up.sh (1 node)" bash "$HERE/slurm-up.sh"
  check "slurm-up.sh again: already up, a no-op" bash -c "bash '$HERE/slurm-up.sh' 2>&1 | grep -q 'already up'"
  check "srun -n1 hostname = $(hostname -s)" bash -c '[[ $(timeout 30 srun -n1 hostname) == "$(hostname -s)" ]]'
  check "sbatch: a batch job runs and leaves the queue" sbatch_runs
  check "scancel: a running job is cancelled" scancel_works
  check "8 one-CPU jobs run at once" eight_at_once

  echo "== slurm: three hosts in network namespaces"
  check "slurm-up.sh --nodes 3 --netns (reshapes the running rig)" bash "$HERE/slurm-up.sh" --nodes 3 --netns
  check "sinfo: righost1..3 idle" bash -c '[[ $(sinfo -h -N -o "%N %T" | sort | tr "\n" " ") == "righost1 idle righost2 idle righost3 idle " ]]'
  for i in 1 2 3; do
    check "srun on righost$i: its name and its own address 10.200.0.$((10 + i))" bash -c \
      "[[ \$(timeout 30 srun -N1 -w righost$i bash -c 'echo \$SLURMD_NODENAME \$(ip -4 -o addr show eth0 | awk \"{print \\\$4}\")') == 'righost$i 10.200.0.$((10 + i))/24' ]]"
  done
  check "srun -N3: one task on each host" bash -c \
    '[[ $(timeout 30 srun -N3 -n3 printenv SLURMD_NODENAME | sort | tr "\n" " ") == "righost1 righost2 righost3 " ]]'
  check "a job on righost2 reaches the controller at 10.200.0.1:6817" \
    timeout 30 srun -N1 -w righost2 bash -c 'exec 3<>/dev/tcp/10.200.0.1/6817'
  check "sbatch on the 3-host rig" sbatch_runs

  echo "== slurm: down"
  check "slurm-down.sh" bash "$HERE/slurm-down.sh"
  check "no slurmctld, slurmd, slurmstepd or munged left" eventually 10 no_daemons
  check "no rig namespaces or bridge left" no_rig_netns
  check "no generated slurm.conf left" conf_not_ours
  check "slurm-down.sh again: a no-op" bash "$HERE/slurm-down.sh"
fi

if [[ $WHAT == all || $WHAT == netns ]]; then
  echo "== netns: two hosts"
  check "netns-up.sh 2" bash "$HERE/netns-up.sh" 2
  check "netns-up.sh 2 again (idempotent)" bash "$HERE/netns-up.sh" 2
  ip netns exec righost1 python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.200.0.11", 7000)); s.listen()
while True:
    c, _ = s.accept(); c.sendall(b"hello-rig\n"); c.close()' </dev/null >/dev/null 2>&1 &
  srv=$!
  reach() { ip netns exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/7000 && head -1 <&3" 2>/dev/null | grep -q hello-rig; }
  check "righost2 -> righost1 TCP" eventually 10 reach righost2 10.200.0.11
  check "righost2 -> righost1 by name (/etc/netns hosts)" reach righost2 righost1
  check "root namespace -> righost1 TCP" eventually 5 bash -c 'timeout 2 bash -c "exec 3<>/dev/tcp/10.200.0.11/7000 && head -1 <&3" | grep -q hello-rig'
  check "righost2 has no route off the rig" bash -c '! ip netns exec righost2 ip route get 192.0.2.1'
  ip link set dev rigv1 down
  check "link down cuts righost1 off" bash -c "! ip netns exec righost2 timeout 2 bash -c 'exec 3<>/dev/tcp/10.200.0.11/7000'"
  ip link set dev rigv1 up
  check "link up heals" eventually 10 reach righost2 10.200.0.11
  kill "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
  check "netns-down.sh" bash "$HERE/netns-down.sh"
  check "no rig namespaces or bridge left" no_rig_netns
  check "no guard route left" bash -c '! ip route show | grep -q "unreachable 10.200.0.0/16"'
fi

trap - EXIT
cleanup
((fail == 0)) && rm -rf "$T"
echo "$pass passed, $fail failed"
((fail == 0))
