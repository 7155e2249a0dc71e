#!/usr/bin/env bash
# Installs the Debian packages kvscope needs (as root), or prints the exact apt line to run.
# Sourced by scripts/run.sh and scripts/test.sh.
set -euo pipefail

KVSCOPE_PACKAGES=(cmake ninja-build g++ libgtest-dev libbenchmark-dev nlohmann-json3-dev
  libimgui-dev libglfw3-dev libgl-dev libstb-dev xvfb xauth libgl1-mesa-dri clang
  libclang-rt-14-dev libomp-dev ccache clang-format clang-tidy  # fuzz/sanitizer runtimes, OpenMP for clang, ccache, lint
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev python3-zmq python3-msgpack  # kvscope attach
  python3-venv)  # the attach tests against the engines' own publisher code

kvscope_install_deps() {
  local missing=()
  for p in "${KVSCOPE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then return 0; fi
  if [ "$(id -u)" -eq 0 ]; then
    echo "kvscope: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "kvscope: missing packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}
