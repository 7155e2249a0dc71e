#!/usr/bin/env bash
# Runs one kvscope command and checks its exit code and output: a CLI test for CTest.
# Usage: expect.sh EXIT_CODE REGEX COMMAND [ARGS...]   (REGEX: grep -E over stdout + stderr)
set -u
want_rc=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
if [ "$rc" -ne "$want_rc" ]; then
  printf 'expected exit code %s, got %s from: %s\n%s\n' "$want_rc" "$rc" "$*" "$out" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  printf 'expected output matching /%s/ from: %s\ngot:\n%s\n' "$regex" "$*" "$out" >&2
  exit 1
fi
exit 0
