#!/usr/bin/env bash
# Installs every Debian package fiber needs to build, test and run its examples.
# Idempotent, non-interactive; run as root on Debian bookworm.
set -euo pipefail

# libasio-dev recommends libboost-dev (1.74, no PFR/Describe) which conflicts
# with libboost1.81-dev: never install recommends, and name 1.81 explicitly.
packages=(
  build-essential cmake ninja-build pkg-config git
  libnng-dev libasio-dev libboost1.81-dev
  catch2 libtomlplusplus-dev libcli11-dev libssl-dev
  libmujoco-dev libmujoco-samples gnuplot-nox
  clang libclang-rt-14-dev
  python3 procps iproute2
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "fiber setup: all ${#packages[@]} packages present"
