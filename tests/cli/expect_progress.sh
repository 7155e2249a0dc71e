#!/usr/bin/env bash
# Runs one kvscope command with stderr not a terminal (a file) and checks its progress: exit code
# 0, a progress line on stderr matching REGEX, and stdout valid JSON with no progress in it.
# Usage: expect_progress.sh REGEX COMMAND [ARGS...]   (run it with KVSCOPE_PROGRESS_INTERVAL set)
set -u
regex=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$@" >"$dir/stdout" 2>"$dir/stderr"
rc=$?
if [ "$rc" -ne 0 ]; then
  printf 'expected exit code 0, got %s from: %s\n' "$rc" "$*" >&2
  cat "$dir/stderr" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" "$dir/stderr"; then
  printf 'expected a progress line on stderr matching /%s/ from: %s\nstderr:\n' "$regex" "$*" >&2
  cat "$dir/stderr" >&2
  exit 1
fi
if grep -q $'\r' "$dir/stderr"; then
  printf 'expected plain lines on stderr (not a terminal), got carriage returns from: %s\n' "$*" >&2
  exit 1
fi
if ! python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$dir/stdout"; then
  printf 'expected stdout to be JSON alone from: %s\nstdout:\n' "$*" >&2
  cat "$dir/stdout" >&2
  exit 1
fi
exit 0
