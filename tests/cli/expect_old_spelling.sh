#!/usr/bin/env bash
# An old switch spelling of a kvscope command against its new subverb spelling: both exit 0 with
# the same stdout, the old one's stderr holds exactly one notice naming the new spelling, and the
# new one's none.
# Usage: expect_old_spelling.sh KVSCOPE OLD_ARGS... -- NEW_ARGS...
set -u
bin=$1
shift
old=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  old+=("$1")
  shift
done
shift
new=("$@")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$bin" "${old[@]}" >"$dir/old.out" 2>"$dir/old.err"
rc_old=$?
"$bin" "${new[@]}" >"$dir/new.out" 2>"$dir/new.err"
rc_new=$?
if [ "$rc_old" -ne 0 ] || [ "$rc_new" -ne 0 ]; then
  printf 'expected exit code 0 from both, got %s (old) and %s (new)\n' "$rc_old" "$rc_new" >&2
  cat "$dir/old.err" "$dir/new.err" >&2
  exit 1
fi
if ! cmp -s "$dir/old.out" "$dir/new.out"; then
  printf 'expected the same stdout from: %s\nand: %s\n' "${old[*]}" "${new[*]}" >&2
  diff "$dir/old.out" "$dir/new.out" >&2
  exit 1
fi
notices=$(grep -c "^kvscope ${new[0]}: note: " "$dir/old.err")
if [ "$notices" -ne 1 ] || ! grep -qF "\`kvscope ${new[0]} ${new[1]} " "$dir/old.err"; then
  printf 'expected one notice naming `kvscope %s %s` on stderr from: %s\ngot:\n' \
    "${new[0]}" "${new[1]}" "${old[*]}" >&2
  cat "$dir/old.err" >&2
  exit 1
fi
if grep -q "note: " "$dir/new.err"; then
  printf 'expected no notice from the new spelling: %s\n' "${new[*]}" >&2
  exit 1
fi
exit 0
