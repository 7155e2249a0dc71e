#!/usr/bin/env bash
# Prepares what tests/attach/check_engine_publisher.py runs: the engines' own KV-event publisher
# code, unmodified, from their PyPI wheels (SGLang 0.5.23's sglang/srt/disaggregation/kv_events.py),
# and a Python environment with the packages that code imports (pyzmq, msgspec, pydantic). Both
# live in a cache outside the repository ($KVSCOPE_ENGINE_CACHE, default ~/.cache/kvscope/engines);
# the engines' code never enters it. Idempotent: what is there and complete is kept.
# Prints the environment's python on stdout. Exit 1 (with the command to retry) when PyPI is not
# reachable.
# Usage: scripts/engine_publishers.sh [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."

quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1
say() { [ "$quiet" = 1 ] || echo "engine_publishers.sh: $*" >&2; }

cache=${KVSCOPE_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/engines}
venv=$cache/venv
mkdir -p "$cache/wheels"

sglang_version=0.5.23
if ! ls "$cache"/wheels/sglang-"$sglang_version"-*.whl >/dev/null 2>&1; then
  say "downloading sglang==$sglang_version (39 MB, the wheel only, no dependencies) into $cache/wheels"
  if ! python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$cache/wheels" \
      "sglang==$sglang_version" >"$cache/pip-sglang.log" 2>&1; then
    echo "engine_publishers.sh: could not download sglang==$sglang_version (see $cache/pip-sglang.log); retry: scripts/engine_publishers.sh" >&2
    exit 1
  fi
fi

if [ ! -f "$venv/.complete" ]; then
  say "making $venv (pyzmq, msgspec, pydantic: what the publisher code imports)"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >"$cache/venv.log" 2>&1 ||
     ! "$venv/bin/pip" install --quiet pyzmq msgspec pydantic >>"$cache/venv.log" 2>&1; then
    echo "engine_publishers.sh: could not make $venv (see $cache/venv.log; python3-venv installed?); retry: scripts/engine_publishers.sh" >&2
    exit 1
  fi
  touch "$venv/.complete"
fi
echo "$venv/bin/python"
