#!/usr/bin/env bash
# Packs what the bare GPU machine lacks into one git-ignored folder, .gpu-pack/, to carry with a
# `device` call (docs/gpu-results.md), and prints the exact call to make:
#   googletest/         GoogleTest's sources (Debian's /usr/src/googletest), built there
#   prefix/             the nlohmann-json header and its CMake package; stb's PNG writer and
#                       easy-font headers (the report's plots)
#   models/             stories260K and its tokenizer; SmolLM2-135M-Instruct cut to the most
#                       transformer blocks that fit (scripts/gguf_truncate.py): the full file is
#                       98 MB and a call carries 64 MiB, working tree included
#   models/golden/      stories260K's golden greedy text
#   MANIFEST            what is in it, the SmolLM2 cut included
# Run here, after scripts/models.sh; then the call it prints runs scripts/gpu-check.sh there.
# Usage: scripts/gpu-pack.sh [--budget-mib N]   (default 60: the carry's 64 MiB less a margin)
set -euo pipefail
cd "$(dirname "$0")/.."

budget_mib=60
while [ $# -gt 0 ]; do
  case "$1" in
    --budget-mib) budget_mib=${2:?--budget-mib needs a number}; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-pack.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

fail() { echo "gpu-pack.sh: $*" >&2; exit 2; }
shared=../shared/models
smol=${KVSCOPE_MODELS:-assets/models}/SmolLM2-135M-Instruct.Q4_1.gguf
for f in "$shared/stories260K.bin" "$shared/tok512.bin" "$shared/golden/stories260K_greedy256.txt"; do
  [ -f "$f" ] || fail "$f: missing (../shared/models beside the checkout)"
done
[ -f "$smol" ] || fail "$smol: missing (run scripts/models.sh first)"
[ -d /usr/src/googletest/googletest ] || fail "/usr/src/googletest: missing (apt-get install googletest)"
[ -f /usr/include/nlohmann/json.hpp ] || fail "/usr/include/nlohmann: missing (apt-get install nlohmann-json3-dev)"
for h in stb_image_write.h stb_easy_font.h; do
  [ -f /usr/include/stb/$h ] || fail "/usr/include/stb/$h: missing (apt-get install libstb-dev)"
done
json_cmake=$(dirname "$(find /usr/share/cmake /usr/lib/cmake /usr/lib/*/cmake -name nlohmann_jsonConfig.cmake 2>/dev/null | head -n 1)")
[ -f "$json_cmake/nlohmann_jsonConfig.cmake" ] || fail "nlohmann_jsonConfig.cmake: not found"
grep -qx '/.gpu-pack/' .gitignore || fail ".gitignore lacks /.gpu-pack/ (the pack must never be committed)"

pack=.gpu-pack
tmp=$(mktemp -d .gpu-pack.tmp.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/prefix/include/stb" "$tmp/prefix/share/cmake" "$tmp/models/golden"
cp /usr/include/stb/stb_image_write.h /usr/include/stb/stb_easy_font.h "$tmp/prefix/include/stb/"
cp -r /usr/src/googletest/googletest "$tmp/googletest"
cp -r /usr/include/nlohmann "$tmp/prefix/include/"
cp -r "$json_cmake" "$tmp/prefix/share/cmake/nlohmann_json"
cp "$shared/stories260K.bin" "$shared/tok512.bin" "$tmp/models/"
cp "$shared/golden/stories260K_greedy256.txt" "$tmp/models/golden/"

# What travels besides the pack: tracked files and untracked ones git does not ignore.
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null |
  awk '{s += $1} END {print s + 0}')
pack_bytes=$(du -sb "$tmp" | cut -f1)
budget=$((budget_mib * 1024 * 1024))
room=$((budget - tree_bytes - pack_bytes))
# The most blocks whose cut file fits the room left (each block of SmolLM2 is about 2.2 MB).
total_layers=30
layers=$total_layers
while [ "$layers" -ge 1 ]; do
  python3 scripts/gguf_truncate.py "$smol" "$tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
    --layers "$layers" >"$tmp/truncate.log"
  size=$(stat -c %s "$tmp/models/SmolLM2-135M-Instruct.Q4_1.gguf")
  [ "$size" -le "$room" ] && break
  layers=$(( layers - 1 - (size - room) / 2300000 ))  # skip the blocks that clearly do not fit
done
[ "$layers" -ge 1 ] || fail "no SmolLM2 cut fits in ${budget_mib} MiB beside a ${tree_bytes}-byte tree"
rm -f "$tmp/truncate.log"
{
  echo "kvscope GPU pack, made $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- || echo +uncommitted)"
  echo "googletest: /usr/src/googletest/googletest ($(dpkg-query -W -f='${Version}' googletest 2>/dev/null || echo '?'))"
  echo "nlohmann-json: /usr/include/nlohmann ($(dpkg-query -W -f='${Version}' nlohmann-json3-dev 2>/dev/null || echo '?'))"
  echo "stories260K: ../shared/models/stories260K.bin, tok512.bin, golden/stories260K_greedy256.txt"
  echo "smollm2_layers: $layers of $total_layers (scripts/gguf_truncate.py; the full file does not fit the carry)"
} >"$tmp/MANIFEST"
rm -rf "$pack"
mv "$tmp" "$pack"
trap - EXIT
total=$((tree_bytes + $(du -sb "$pack" | cut -f1)))
echo "gpu-pack.sh: $pack: SmolLM2 cut to $layers of $total_layers blocks; working tree + pack = $((total / 1024 / 1024)) MiB of the 64 MiB a call carries" >&2
cat <<EOF
device call (the run tool), timeout_s 560:
  command: bash scripts/gpu-check.sh --deadline 500
  carry:   [".gpu-pack"]
EOF
