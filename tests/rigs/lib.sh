# shellcheck shell=bash
# SPDX-License-Identifier: BSL-1.0
# Helpers sourced by fiber's test-rig scripts (tests/rigs/*.sh): logging,
# root check, pid files that name live daemons, stopping them, apt installs.
# Not a script of its own. Callers set RIG_NAME (the log prefix) first.

rig_log() { echo "[${RIG_NAME:-rig}] $*" >&2; }
rig_die() { echo "[${RIG_NAME:-rig}] ERROR: $*" >&2; exit 1; }
rig_need_root() { [ "$(id -u)" = 0 ] || rig_die "must run as root (CI runs it as root; locally: sudo bash $0)"; }

# rig_alive PID [COMM-PREFIX]: PID is a live, non-zombie process (PID 1 of
# some containers reaps orphans late, so kill -0 alone is not enough) whose
# command name starts with COMM-PREFIX.
rig_alive() {
  local pid=$1 st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ] || return 1
  [ -z "${2:-}" ] || grep -q "^$2" "/proc/$pid/comm" 2>/dev/null
}

# rig_pidfile_alive FILE COMM-PREFIX: FILE names a live COMM-PREFIX process.
rig_pidfile_alive() {
  [ -f "$1" ] || return 1
  rig_alive "$(cat "$1" 2>/dev/null)" "$2"
}

# rig_stop_pidfile FILE COMM-PREFIX: SIGTERM the process FILE names (only if it
# is a COMM-PREFIX process), SIGKILL after 10 s, then remove FILE.
rig_stop_pidfile() {
  local pf=$1 comm=$2 pid
  [ -f "$pf" ] || return 0
  pid=$(cat "$pf" 2>/dev/null || true)
  if rig_alive "$pid" "$comm"; then
    rig_log "stopping $comm (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do rig_alive "$pid" || break; sleep 0.1; done
    if rig_alive "$pid"; then
      rig_log "$comm (pid $pid) did not exit after SIGTERM: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do rig_alive "$pid" || break; sleep 0.1; done
    fi
  fi
  rm -f "$pf"
}

# rig_pids COMM: pids of live (non-zombie) processes whose name is exactly COMM.
rig_pids() {
  local p out=""
  for p in $(pgrep -x "$1" 2>/dev/null); do rig_alive "$p" && out+="$p "; done
  echo "${out% }"
}

# rig_apt_install PACKAGE...: apt-get install without recommends, no stdin,
# waiting for another apt's lock; refreshes the package lists only if needed.
rig_apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  local apt=(apt-get -o DPkg::Lock::Timeout=600)
  rig_log "installing $* (apt-get, no recommends)"
  "${apt[@]}" install -y -q --no-install-recommends "$@" </dev/null >/dev/null 2>&1 && return 0
  "${apt[@]}" update -q </dev/null >/dev/null 2>&1 || true
  "${apt[@]}" install -y -q --no-install-recommends "$@" </dev/null >/dev/null || rig_die "apt-get install $* failed"
}
