#!/usr/bin/env bash
# Installs what is missing, builds kvscope, and runs the main job on the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
kvscope_install_deps
cmake --preset release -G Ninja >/dev/null
cmake --build --preset release -j "$(nproc)"
exec ./build/cli/kvscope generate --prompt "Once upon a time" --steps 256 "$@"
