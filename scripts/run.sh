#!/usr/bin/env bash
# Installs what is missing, builds kvscope, and opens kvscope-ui on the scenario/recording given,
# or by default on scenarios/smollm2-chat.json when SmolLM2-135M is on disk (scripts/models.sh
# fetches it) and scenarios/minimal.json (stories260K) otherwise. Without a display it runs the
# same scenario headless with `kvscope run` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
kvscope_install_deps
bash scripts/models.sh || echo "run.sh: continuing with stories260K only" >&2
cmake --preset release -G Ninja >/dev/null
cmake --build --preset release -j "$(nproc)"
if [[ $# -eq 0 ]]; then
  # A real chat model answering six users who share one system turn: paging, prefix sharing and
  # the attention sinks of a modern model in one run (README, "Quick start").
  if ./build/cli/kvscope info --model smollm2 >/dev/null 2>&1; then
    set -- scenarios/smollm2-chat.json
  else
    echo "run.sh: SmolLM2-135M not found; opening the stories260K scenario instead" >&2
    set -- scenarios/minimal.json
  fi
fi
scenario="$1"
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
