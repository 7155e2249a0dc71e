#!/usr/bin/env bash
# Decode speed and greedy output of `kvscope generate` against llama2.c's `run` on one model, same
# threads and steps, runs interleaved (kvscope, run, kvscope, run, ...) so that load changes on
# the machine hit both alike. Both programs time decoding the same way (from the second token on).
# Bring your own `run`, built from https://github.com/karpathy/llama2.c with
#   gcc -Ofast -march=native -fopenmp run.c -lm -o run     (kvscope does not ship run.c)
#
# Usage: scripts/vs_llama2c.sh RUN MODEL.bin TOKENIZER.bin [THREADS] [STEPS] [ROUNDS] [PROMPT]
#   defaults: 1 thread, 256 steps, 11 rounds, no prompt. Prints each program's median and best
#   tokens/s, the ratios kvscope / run, and whether the two outputs were byte-identical.
#   KVSCOPE_ARGS adds flags to kvscope generate (e.g. KVSCOPE_ARGS="--weights copy").
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -lt 3 ]]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
run=$1 model=$2 tok=$3 threads=${4:-1} steps=${5:-256} rounds=${6:-11} prompt=${7:-}
kvscope=${KVSCOPE:-build/cli/kvscope}
for f in "$run" "$kvscope"; do
  [[ -x $f ]] || { echo "vs_llama2c.sh: $f is not an executable program" >&2; exit 2; }
done
for f in "$model" "$tok"; do
  [[ -f $f ]] || { echo "vs_llama2c.sh: $f: no such file" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ours=() theirs=() same=1
for ((r = 1; r <= rounds; ++r)); do
  "$kvscope" generate --model "$model" --tokenizer "$tok" --steps "$steps" --threads "$threads" \
    --prompt "$prompt" ${KVSCOPE_ARGS:-} >"$tmp/ours.txt" 2>"$tmp/ours.err"
  OMP_NUM_THREADS=$threads "$run" "$model" -z "$tok" -n "$steps" -t 0 -i "$prompt" \
    >"$tmp/theirs.txt" 2>"$tmp/theirs.err"
  o=$(sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p' "$tmp/ours.err" | tail -1)
  t=$(sed -n 's/^achieved tok\/s: \([0-9.]*\).*/\1/p' "$tmp/theirs.err" | tail -1)
  [[ -n $o && -n $t ]] || { echo "vs_llama2c.sh: no tokens/s in round $r:" >&2; cat "$tmp"/*.err >&2; exit 1; }
  cmp -s "$tmp/ours.txt" "$tmp/theirs.txt" || same=0
  ours+=("$o") theirs+=("$t")
  printf '\rround %d/%d: kvscope %.1f, run %.1f tokens/s' "$r" "$rounds" "$o" "$t" >&2
done
echo >&2
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {printf "%s %s", v[int((NR+1)/2)], v[NR]}'; }
read -r om ob <<<"$(stats "${ours[@]}")"
read -r tm tb <<<"$(stats "${theirs[@]}")"
printf '%s, %d threads, %d steps, %d rounds interleaved%s\n' "$(basename "$model")" "$threads" \
  "$steps" "$rounds" "${KVSCOPE_ARGS:+, kvscope $KVSCOPE_ARGS}"
printf '  kvscope  median %8.1f  best %8.1f tokens/s\n' "$om" "$ob"
printf '  run      median %8.1f  best %8.1f tokens/s\n' "$tm" "$tb"
awk -v a="$om" -v b="$tm" -v c="$ob" -v d="$tb" 'BEGIN {printf "  kvscope / run: %.3f (median), %.3f (best)\n", a / b, c / d}'
if ((same)); then echo "  greedy output: byte-identical in every round"; else echo "  greedy output: DIFFERS"; exit 1; fi
