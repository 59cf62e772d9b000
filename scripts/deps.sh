#!/usr/bin/env bash
# Install what kerasc's build and tests need, only what is missing, so that
# `make demo` and `make check` are the whole set-up on a fresh Debian machine.
# Debian packages via apt-get; npm packages (real pretrained models, the
# TensorFlow.js oracle) into tools/node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_PACKAGES=(
  build-essential cmake pkg-config clang libclang-rt-dev
  libhdf5-dev libzip-dev libcjson-dev zlib1g-dev libcmocka-dev libopenblas-dev libdnnl-dev
  libjpeg62-turbo-dev libpng-dev libzmq3-dev libsodium-dev iproute2 nftables
  nodejs npm python3 python3-numpy python3-h5py
  # the cluster tests print the stacks of a worker that stopped answering
  gdb
)

missing=()
for pkg in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# nodejs/npm may come from elsewhere (a node install outside dpkg): accept it.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for pkg in "${missing[@]}"; do
    [[ "$pkg" == nodejs || "$pkg" == npm ]] || filtered+=("$pkg")
  done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi

if ((${#missing[@]})); then
  echo "deps: installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm packages pinned in tools/package-lock.json; scripts are never run.
if [[ ! -d tools/node_modules/nsfwjs ]]; then
  echo "deps: installing npm packages into tools/"
  (cd tools && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
