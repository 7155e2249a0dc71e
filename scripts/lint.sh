#!/usr/bin/env bash
# Style and static checks, run by scripts/test.sh after the release build configures (it needs
# build/compile_commands.json):
#   clang-format: every tracked C++ source is formatted as .clang-format says (fix: scripts/lint.sh --fix);
#   clang-tidy:   the checks listed in .clang-tidy on every engine/, present/, cli/ and app/ source
#                 (a file found clean before with the same preprocessed input is skipped).
# Any finding fails (exit 1) and is printed as file:line: message.
# Usage: scripts/lint.sh [--fix] [--format-only]
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0 format_only=0
for a in "$@"; do
  case "$a" in
    --fix) fix=1 ;;
    --format-only) format_only=1 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "scripts/lint.sh: unknown option $a (expected --fix or --format-only)" >&2; exit 2 ;;
  esac
done
for tool in clang-format clang-tidy; do
  command -v "$tool" >/dev/null || { echo "scripts/lint.sh: $tool is not installed (apt-get install clang-format clang-tidy)" >&2; exit 1; }
done

mapfile -t sources < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "$fix" = 1 ]; then
  clang-format -i "${sources[@]}"
  echo "clang-format: formatted ${#sources[@]} files" >&2
  exit 0
fi

echo "== clang-format (${#sources[@]} files) ==" >&2
unformatted=()
for f in "${sources[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if [ ${#unformatted[@]} -gt 0 ]; then
  printf '%s: not clang-formatted (scripts/lint.sh --fix)\n' "${unformatted[@]}" >&2
  exit 1
fi
[ "$format_only" = 1 ] && exit 0

db=build/compile_commands.json
[ -f "$db" ] || { echo "scripts/lint.sh: $db is missing: configure first (cmake --preset release -G Ninja)" >&2; exit 1; }
# Only sources the build compiles (the database may lack optional targets, e.g. without GLFW).
mapfile -t tidy < <(git ls-files 'engine/*.cpp' 'present/*.cpp' 'cli/*.cpp' 'app/*.cpp' |
  while read -r f; do grep -qF "\"file\": \"$PWD/$f\"" "$db" && echo "$f"; done)
echo "== clang-tidy (${#tidy[@]} files, checks in .clang-tidy) ==" >&2
# A file clang-tidy found clean before, with the same preprocessed input, is not run again
# (scripts/tidy_cached.py says what the input covers).
if ! python3 scripts/tidy_cached.py build "${tidy[@]}"; then
  echo "clang-tidy: findings above (checks in .clang-tidy)" >&2
  exit 1
fi
echo "clang-format and clang-tidy: clean" >&2
