#!/usr/bin/env bash
# SPDX-License-Identifier: BSL-1.0
# Installs every Debian package fiber needs to build, test and run its examples
# and to build its API docs. Idempotent, non-interactive, Debian bookworm.
#
#   bash scripts/setup.sh        # as root, or as a user who may use sudo
#
# As a user: when everything is installed already it needs no privilege at
# all; otherwise it re-runs itself with sudo. The Slurm and Docker test rigs
# install what they need themselves (tests/rigs/).
set -euo pipefail

# libasio-dev recommends libboost-dev (1.74, no PFR/Describe) which conflicts
# with libboost1.81-dev: never install recommends, and name 1.81 explicitly.
# prometheus-cpp-dev and libcivetweb-dev: fiber::metrics (fiber/metrics.hpp);
# prometheus and chromium: its tests scrape a master and open its status page.
packages=(
  build-essential cmake ninja-build pkg-config git
  libnng-dev libasio-dev libboost1.81-dev
  catch2 libtomlplusplus-dev libcli11-dev libmbedtls-dev openssl
  nlohmann-json3-dev libcurl4-openssl-dev
  libmujoco-dev libmujoco-samples gnuplot-nox
  clang libclang-rt-14-dev clang-format doxygen
  python3 procps iproute2
  prometheus-cpp-dev libcivetweb-dev prometheus chromium
)
# kubectl (the Kubernetes backend's tests): Debian's kubernetes-client, unless
# a kubectl is already on PATH (another package's kubectl conflicts with it).
if ! command -v kubectl >/dev/null 2>&1; then
  packages+=(kubernetes-client)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})) && ((EUID != 0)); then
  self=$(readlink -f "${BASH_SOURCE[0]}")
  if ! command -v sudo >/dev/null 2>&1; then
    echo "fiber setup: missing packages: ${missing[*]}" >&2
    echo "fiber setup: installing them needs root, and sudo is not installed." >&2
    echo "fiber setup: run it as root instead:  su -c 'bash $self'" >&2
    echo "fiber setup: (or, as root, apt-get install sudo and add your user to the group sudo)" >&2
    exit 1
  fi
  echo "fiber setup: missing packages: ${missing[*]}; re-running with sudo" >&2
  exec sudo DEBIAN_FRONTEND=noninteractive bash "$self" "$@"
fi

if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  # Lock timeout: wait for another apt (unattended upgrades, a parallel job)
  # instead of failing at once.
  apt=(apt-get -o DPkg::Lock::Timeout=600)
  "${apt[@]}" update -qq </dev/null
  "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" </dev/null
fi
echo "fiber setup: all ${#packages[@]} packages present"
