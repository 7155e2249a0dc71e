#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang + ASan + UBSan) and runs each one for
# SECONDS_PER_TARGET (default 30) on a temporary copy of its seed corpus, one target per core;
# prints executions and crashes per target and exits non-zero when any target crashed, hung or ran
# out of memory (the crashing inputs are kept in build-fuzz/fuzz-artifacts/).
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
targets=(checkpoint tokenizer mooncake kv_events recording scenario gguf kv_event_stream tokenizer_json)

if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null; then
  echo "kvscope fuzz: clang is not installed (apt-get install clang libclang-rt-14-dev)" >&2
  exit 1
fi
if ! echo 'int main(){}' | clang++ -x c++ -fsanitize=fuzzer-no-link,address -o /dev/null - \
    2>/dev/null; then
  echo "kvscope fuzz: clang's sanitizer/libFuzzer runtime is missing (apt-get install libclang-rt-14-dev)" >&2
  exit 1
fi

echo "== libFuzzer build (clang, ASan + UBSan) ==" >&2
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DKVSCOPE_FUZZ=ON -DKVSCOPE_APP=OFF -DKVSCOPE_TESTS=OFF -DKVSCOPE_BENCH=OFF -DKVSCOPE_CUDA=OFF \
  >/dev/null
cmake --build build-fuzz --target kvscope_fuzzers -j "${KVSCOPE_JOBS:-$(nproc)}"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvscope-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
keep=build-fuzz/fuzz-artifacts  # crashing inputs are kept here (ignored by git)

# Runs one target; writes "EXECUTIONS CRASHES" to $work/$t/result.
run_target() {
  local t=$1 rc=0 execs crashes
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  cp tests/fuzz/corpus/"$t"/* "$work/$t/corpus/"
  OMP_NUM_THREADS=1 "build-fuzz/tests/fuzz/fuzz_$t" -max_total_time="$seconds" \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/$t/artifacts/" "$work/$t/corpus" >"$work/$t/log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t/log" | tail -n 1)
  crashes=$(find "$work/$t/artifacts" -type f | wc -l)
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi  # died without an artifact
  echo "${execs:-?} $crashes" >"$work/$t/result"
}

# Targets run side by side, one per core (KVSCOPE_FUZZ_JOBS overrides).
parallel=${KVSCOPE_FUZZ_JOBS:-$(nproc)}
echo "== fuzzing ${#targets[@]} targets, ${seconds} s each, ${parallel} at a time ==" >&2
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  run_target "$t" &
done
wait

failed=0
for t in "${targets[@]}"; do
  read -r execs crashes <"$work/$t/result"
  printf 'fuzz_%-15s executions: %10s  crashes: %s\n' "$t" "$execs" "$crashes"
  if [ "$crashes" -ne 0 ]; then
    failed=1
    mkdir -p "$keep/$t"
    cp "$work/$t/artifacts/"* "$keep/$t/" 2>/dev/null || true
    cp "$work/$t/log" "$keep/$t/log.txt"
    grep -E "ERROR|runtime error|invariant broken|SUMMARY" "$work/$t/log" | head -n 5 >&2 || true
    echo "  inputs and log kept in $keep/$t; replay: build-fuzz/tests/fuzz/fuzz_$t FILE" >&2
  fi
done
exit "$failed"
