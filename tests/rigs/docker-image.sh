#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# docker-image.sh: a Docker image made offline (no registry) from files on
# this machine, for fiber's docker backend: `docker import` of a root file
# system holding programs' shared-library closures (ldd). A few MB, ~0.1 s.
#   bash tests/rigs/docker-image.sh NAME [--libs BINARY]... [--sh] [BINARY[:PATH]]... 
# --libs BINARY   BINARY's libraries only (the default docker.mount_binary
#                 bind-mounts the executable's directory: the image needs no
#                 copy of it); a missing BINARY is skipped with a warning
# BINARY[:PATH]   BINARY itself at PATH (default: its own path), and its libraries
# --sh            /bin/sh and its libraries (fiber itself needs no shell)
# Always: /tmp (1777), and OpenSSL's libssl and libcrypto (fiber opens them
# with dlopen). NAME may carry a tag (fiber-test:ci).
set -Eeuo pipefail
trap 'echo "docker-image: line $LINENO: exit status $? (set -e)" >&2' ERR
(($# >= 1)) || { echo "usage: $0 NAME [--libs BINARY]... [--sh] [BINARY[:PATH]]..." >&2; exit 2; }
name=$1
shift
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
add() { # src [dst]
  local src=$1 dst=${2:-$1}
  [[ -e $root$dst ]] && return 0
  mkdir -p "$root$(dirname "$dst")"
  cp -L "$src" "$root$dst"
}
add_libs() {
  local f
  for f in $(ldd "$1" 2>/dev/null | grep -o '/[^ ]*' | sort -u); do add "$f"; done
}
while (($#)); do
  case $1 in
    --libs)
      shift
      if [[ -z ${1:-} || ! -e $1 ]]; then
        echo "docker-image: --libs '${1:-}': no such file; skipped" >&2
      else
        add_libs "$1"
      fi
      ;;
    --sh)
      add /bin/sh
      add_libs /bin/sh
      ;;
    *)
      src=${1%%:*}
      dst=$src
      [[ $1 == *:* ]] && dst=${1#*:}
      [[ -e $src ]] || { echo "docker-image: $src: no such file" >&2; exit 1; }
      add "$src" "$dst"
      add_libs "$src"
      ;;
  esac
  shift
done
# Libraries fiber opens with dlopen, in no ldd closure: OpenSSL's libssl
# (tls+tcp://) and libcrypto (frame MACs; libssl needs it too).
for lib in libssl.so.3 libcrypto.so.3; do
  # awk reads to the end: an early exit would kill ldconfig with SIGPIPE,
  # which pipefail turns into a silent exit of this script (set -e).
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && p == "" { p = $NF } END { print p }')
  [[ -n $path ]] && add "$path"
done
mkdir -p "$root/tmp"
chmod 1777 "$root/tmp"
[[ -f /etc/ld.so.cache ]] && add /etc/ld.so.cache
tar -C "$root" -c . | docker import - "$name" >/dev/null
echo "docker-image: $name ($(du -sh "$root" | cut -f1))"
