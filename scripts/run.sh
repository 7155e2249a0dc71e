#!/usr/bin/env bash
# Installs what is missing, builds kvscope, and opens kvscope-ui on the default scenario
# (scenarios/minimal.json, or the scenario/recording given). Without a display it runs the same
# scenario headless with `kvscope run` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
kvscope_install_deps
bash scripts/models.sh || echo "run.sh: continuing with stories260K only" >&2
cmake --preset release -G Ninja >/dev/null
cmake --build --preset release -j "$(nproc)"
scenario="${1:-scenarios/minimal.json}"
if [[ -x ./build/app/kvscope-ui ]]; then
  rc=0
  ./build/app/kvscope-ui "$@" || rc=$?
  [[ $rc -ne 3 ]] && exit "$rc"
  echo "run.sh: no display for kvscope-ui (exit code 3); running $scenario headless instead" >&2
else
  echo "run.sh: kvscope-ui was not built (missing GLFW/ImGui/OpenGL); running $scenario headless" >&2
fi
if [[ "$scenario" != *.json ]]; then
  echo "run.sh: $scenario is a recording; headless mode runs scenarios only" >&2
  exit 2
fi
exec ./build/cli/kvscope run "$scenario" --out "out/$(basename "$scenario" .json)"
