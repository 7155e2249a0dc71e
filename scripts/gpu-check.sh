#!/usr/bin/env bash
# The one command to run on a lent GPU machine (docs/gpu-results.md says how, and what the last
# real run measured). From the carried tree and .gpu-pack/ (scripts/gpu-pack.sh) it builds the CLI
# and the device test binary with the CUDA backend (no UI, no attach: nothing the bare machine
# lacks), then runs each step below under its own time limit, records pass/fail/timeout and its
# time, and writes gpu-check.json, gpu-check.md and gpu-check.log (every step's output) plus the
# benchmarks' JSON into --out (default $OUT, else ./gpu-check-out). The table comes last.
#
#   build           cmake + ninja: kvscope and kvscope_device_tests (CUDA backend, sm_80/sm_90)
#   device-tests    DeviceBackend.* and DeviceOps.* on the device (KVSCOPE_TEST_DEVICE=cuda)
#   golden          generate --backend cuda: stories260K's 256-step golden text, f32 and f16 GEMMs
#   smollm2         generate: SmolLM2's greedy text on the GPU equals the CPU's (f32 weights)
#   formats         generate: every K/V format, KIVI and MLA modes A and B, GPU text = CPU text
#   run             run a multi-request scenario: every request's tokens equal the CPU's
#   bench-attention decode attention, paged vs contiguous, fp16/int8/fp8, 1K-32K, batch 1-64,
#                   beside the device-copy ceiling and PyTorch SDPA
#   bench-batch     bench batch --backend cuda: the whole step vs op by op
#   bench-generate  bench generate, GPU and CPU in the same run
#   kernel-timing   trace kernel --measure: every step's attention launch of
#                   scenarios/kernel-coalescing.json timed in every format and block size the
#                   Kernel panel offers, on stories260K (and SmolLM2 at block 16)
#                   (kernel-timings.json: the panel's assets/gpu/ file)
#   memcheck        compute-sanitizer memcheck over DeviceOps.*
#   racecheck       compute-sanitizer racecheck over DeviceOps.*
#   ui              the UI's engine on --backend cuda (needs Dear ImGui, which the device lacks)
#
# --emulated runs the same steps here on --backend cuda-sim at small sizes (the release build's
# binaries, build/), ending with "gpu-check (emulated): N/N steps passed": CI runs it so the
# script cannot rot between the sessions that have a GPU. Its times say nothing about a GPU.
#
# Usage: scripts/gpu-check.sh [--emulated] [--out DIR] [--build DIR] [--deadline SECONDS]
#                             [--only STEP,STEP,...]
# --deadline: no step starts after this many seconds from the start, and none runs past it
# (default 500, so that a device call's 600-second limit is never what stops it).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

emulated=0
out=${OUT:-}
build=""
deadline=500
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --emulated) emulated=1; shift ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --deadline) deadline=${2:?--deadline needs seconds}; shift 2 ;;
    --only) only=${2:?--only needs step names}; shift 2 ;;
    -h|--help) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case "$deadline" in ''|*[!0-9]*) echo "gpu-check.sh: --deadline: expected whole seconds, got '$deadline'" >&2; exit 2 ;; esac
steps_known=",build,device-tests,golden,smollm2,formats,run,memcheck,racecheck,bench-attention,bench-batch,bench-generate,kernel-timing,ui,"
for s in ${only//,/ }; do
  [[ "$steps_known" == *",$s,"* ]] || {
    echo "gpu-check.sh: --only: expected steps among ${steps_known:1:${#steps_known}-2}, got '$s'" >&2
    exit 2
  }
done
[ -n "$out" ] || out=$root/gpu-check-out
mkdir -p "$out" || { echo "gpu-check.sh: --out: cannot create '$out'" >&2; exit 2; }
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
steps_tsv=$work/steps.tsv
: >"$steps_tsv"
: >"$out/gpu-check.log"

if [ "$emulated" = 1 ]; then
  backend=cuda-sim
  mode=emulated
  [ -n "$build" ] || build=$root/build
  pack=""
  export KVSCOPE_TEST_DEVICE=cuda-sim
else
  backend=cuda
  mode=device
  [ -n "$build" ] || build=$root/build-gpu
  pack=$root/.gpu-pack
  if [ ! -f "$pack/MANIFEST" ]; then
    echo "gpu-check.sh: $pack/MANIFEST: missing; run scripts/gpu-pack.sh here and carry .gpu-pack" >&2
    exit 2
  fi
  export KVSCOPE_TEST_DEVICE=cuda
  export KVSCOPE_MODELS=$pack/models
  export KVSCOPE_SHARED_MODELS=$pack/models
fi
golden=${KVSCOPE_SHARED_MODELS:-$root/../shared/models}/golden/stories260K_greedy256.txt
jobs=$(nproc)
kv=$build/cli/kvscope
dt=$build/tests/kvscope_device_tests
log() { echo "gpu-check: $*" >&2; }

# step NAME LIMIT FUNCTION: runs FUNCTION under `timeout`, its output to the step's log, and
# records pass (exit 0), fail, timeout, or "not run" (out of time, or --only left it out).
step() {
  local name=$1 limit=$2 fn=$3 now left rc status t0 t1
  if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then return 0; fi
  now=$(date +%s)
  left=$((deadline - (now - started)))
  if [ "$left" -le 5 ]; then
    printf '%s\tnot run\t0\tout of time (--deadline %s)\n' "$name" "$deadline" >>"$steps_tsv"
    log "$name: not run (out of time)"
    return 0
  fi
  [ "$limit" -le "$left" ] || limit=$left
  log "$name (limit ${limit}s) ..."
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" bash -c "$fn" >"$work/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  case $rc in
    0) status=pass ;;
    124|137) status=timeout ;;
    *) status=fail ;;
  esac
  local note=""
  [ -f "$work/$name.note" ] && note=$(tr '\t\n' '  ' <"$work/$name.note")
  [ "$status" = timeout ] && note="stopped at its ${limit}s limit${note:+; $note}"
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")" \
    "$note" >>"$steps_tsv"
  {
    echo "===== $name: $status (exit $rc) ====="
    if [ "$(wc -l <"$work/$name.log")" -gt 400 ]; then
      head -n 100 "$work/$name.log"
      echo "[... $(($(wc -l <"$work/$name.log") - 400)) lines cut ...]"
      tail -n 300 "$work/$name.log"
    else
      cat "$work/$name.log"
    fi
  } >>"$out/gpu-check.log"
  log "$name: $status"
}
# A step that does not apply here, recorded as such (never counted as passed).
skip() {
  if [ -n "$only" ] && [[ ",$only," != *",$1,"* ]]; then return 0; fi
  printf '%s\tnot run\t0\t%s\n' "$1" "$2" >>"$steps_tsv"
  log "$1: not run ($2)"
}

# --- the steps -----------------------------------------------------------------------------

s_build() {
  set -e
  if [ "$emulated" = 1 ]; then
    [ -f "$build/CMakeCache.txt" ] || { echo "no build in $build (run the release build first, or --build DIR)"; exit 1; }
  else
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    nvcc --version | tail -n 2
    cmake --version | head -n 1
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_CUDA=ON \
      -DKVSCOPE_APP=OFF -DKVSCOPE_ATTACH=OFF -DKVSCOPE_BENCH=OFF -DKVSCOPE_TESTS=ON \
      -DKVSCOPE_GTEST_SOURCE="$pack/googletest" -DCMAKE_PREFIX_PATH="$pack/prefix"
  fi
  cmake --build "$build" -j "$jobs" --target kvscope kvscope_device_tests
}

s_device_tests() {
  local filter='DeviceBackend.*:DeviceOps.*'
  # The emulator runs every GPU thread on this CPU: there, the kernels and one model run.
  [ "$emulated" = 1 ] && filter='DeviceOps.*:DeviceBackend.GreedyTokensAndLogitsMatchTheCpuOnTheRealModel'
  "$dt" --gtest_filter="$filter" --gtest_output="json:$out/device-tests.json"
}

# generate on both backends with the same flags: the texts must be equal (greedy).
same_text() {
  local what=$1; shift
  local cpu gpu
  cpu=$("$kv" generate --backend cpu "$@" 2>/dev/null) || { echo "FAIL $what: the CPU run failed"; return 1; }
  gpu=$("$kv" generate --backend "$backend" "$@" 2>"$work/gen.err") ||
    { echo "FAIL $what: the $backend run failed: $(tail -n 1 "$work/gen.err")"; return 1; }
  if [ "$cpu" = "$gpu" ]; then
    echo "ok   $what: $(printf '%s' "$gpu" | wc -c) bytes of text equal"
  else
    echo "FAIL $what: the texts differ"
    echo "  cpu: $(printf '%s' "$cpu" | head -c 300)"
    echo "  $backend: $(printf '%s' "$gpu" | head -c 300)"
    return 1
  fi
}

s_golden() {
  local steps=256 bad=0 w text
  [ "$emulated" = 1 ] && steps=24
  for w in f32 f16; do
    text=$("$kv" generate --backend "$backend" --device-weights $w --steps $steps) || { bad=1; continue; }
    if [ "$(head -c "${#text}" "$golden")" = "$text" ] && [ "${#text}" -gt 20 ]; then
      echo "ok   $w GEMMs: $steps steps, ${#text} characters equal the golden text"
    else
      echo "FAIL $w GEMMs: the text is not the golden one"
      echo "  got:    $(printf '%s' "$text" | head -c 300)"
      echo "  golden: $(head -c 300 "$golden")"
      bad=1
    fi
  done
  return $bad
}

s_smollm2() {
  local steps=72
  [ "$emulated" = 1 ] && steps=12
  [ -n "$pack" ] && grep '^smollm2_layers' "$pack/MANIFEST" | tee "$work/smollm2.note"
  same_text "SmolLM2 greedy, f32 device weights, $steps positions" --model smollm2 \
    --weight-format f32 --device-weights f32 --prompt "The capital of France is" --steps $steps
}

s_formats() {
  local steps=160 bad=0 f
  [ "$emulated" = 1 ] && steps=12
  for f in fp16 bf16 int8 fp8-e4m3 fp8-e5m2 int4 int2-g8 kivi2 kivi4; do
    same_text "K/V $f, $steps positions" --device-weights f32 --kv-dtype $f --allocator paged \
      --steps $steps || bad=1
  done
  same_text "MLA mode A, rank 16" --device-weights f32 --mla-rank 16 --mla-mode a \
    --allocator paged --steps $steps || bad=1
  same_text "MLA mode B, rank 24, int8 latents" --device-weights f32 --mla-rank 24 --mla-mode b \
    --kv-dtype int8 --allocator paged --steps $steps || bad=1
  return $bad
}

s_run() {
  local scenario=$root/scenarios/mixed-lengths.json extra=()
  [ "$emulated" = 1 ] && extra=(--steps 12)
  set -e
  "$kv" run "$scenario" --backend cpu --threads "$jobs" --device-weights f32 --quiet \
    --out "$work/run-cpu" "${extra[@]}"
  "$kv" run "$scenario" --backend "$backend" --device-weights f32 --quiet \
    --out "$work/run-gpu" "${extra[@]}"
  python3 - "$work/run-cpu/report.json" "$work/run-gpu/report.json" <<'PY'
import json, sys
cpu, gpu = (json.load(open(p))["requests"] for p in sys.argv[1:])
bad = [c["id"] for c, g in zip(cpu, gpu) if c["output_tokens"] != g["output_tokens"]]
n = sum(len(c["output_tokens"]) for c in cpu)
print(f"{len(cpu)} requests, {n} generated tokens; {len(bad)} requests differ {bad[:10]}")
sys.exit(1 if bad or len(cpu) != len(gpu) or n == 0 else 0)
PY
}

s_bench_attention() {
  if [ "$emulated" = 1 ]; then
    "$kv" bench attention --backend cuda-sim --batch 1 --contexts 64 --sdpa off --json \
      >"$out/bench-attention.json"
  else
    "$kv" bench attention --backend cuda --batch 1,8,64 --contexts 1024,8192,32768 \
      --formats fp16,int8,fp8-e4m3 --json >"$out/bench-attention.json"
  fi
}

s_bench_batch() {
  if [ "$emulated" = 1 ]; then
    "$kv" bench batch --backend cuda-sim --model stories260K.bin --seqs 1,2 --steps 2 --repeat 1 \
      --device-weights f32 --json >"$out/bench-batch.json"
  else
    "$kv" bench batch --backend cuda --seqs 1,8,64 --steps 16 --repeat 2 --json \
      >"$out/bench-batch.json"
  fi
}

s_bench_generate() {
  local model=synthetic:smollm2-135m steps=64 repeat=3 threads=$jobs
  [ "$emulated" = 1 ] && model=stories260K.bin steps=4 repeat=1
  set -e
  echo "[" >"$out/bench-generate.json"
  "$kv" bench generate --backend "$backend" --model $model --steps $steps --repeat $repeat \
    --prompt-tokens 32 --json >>"$out/bench-generate.json"
  echo "," >>"$out/bench-generate.json"
  "$kv" bench generate --backend cpu --threads "$threads" --model $model --steps $steps \
    --repeat $repeat --prompt-tokens 32 --json >>"$out/bench-generate.json"
  echo "]" >>"$out/bench-generate.json"
  python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$out/bench-generate.json"
}

s_kernel_timing() {
  set -e
  local commit="" f b file="$out/kernel-timings.json" scenario=scenarios/kernel-coalescing.json
  [ -n "${pack:-}" ] && [ -f "$pack/MANIFEST" ] && commit=$(head -n 1 "$pack/MANIFEST" | awk '{print $NF}')
  [ -n "$commit" ] || commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  rm -f "$file"
  if [ "$emulated" = 1 ]; then
    "$kv" trace kernel $scenario --step 8 --measure --backend cuda-sim --repeats 1 --rounds 1 \
      --timings "$file" --commit "$commit"
  else
    for f in fp32 fp16 bf16 int8 fp8-e4m3 int4 int2; do
      for b in 1 4 8 16 32 64; do
        "$kv" trace kernel $scenario --all-steps --measure --kv-format $f --block-size $b \
          --timings "$file" --commit "$commit"
      done
    done
    for f in fp32 fp16 bf16 int8 fp8-e4m3 int4 int2; do  # SmolLM2's heads: 9 over 3, of 64
      "$kv" trace kernel $scenario --all-steps --measure --model smollm2 --kv-format $f \
        --timings "$file" --commit "$commit"
    done
  fi
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['launches']" "$file"
}

s_memcheck() {
  KVSCOPE_DEVICE_TESTS_QUICK=1 compute-sanitizer --tool memcheck --error-exitcode 9 --leak-check full "$dt" \
    --gtest_filter='DeviceOps.*'
}

s_racecheck() {
  KVSCOPE_DEVICE_TESTS_QUICK=1 compute-sanitizer --tool racecheck --error-exitcode 9 "$dt" --gtest_filter='DeviceOps.*'
}

# --- run them ------------------------------------------------------------------------------
export root build kv dt backend mode pack golden jobs work out emulated
export -f log same_text s_build s_device_tests s_golden s_smollm2 s_formats s_run \
  s_bench_attention s_bench_batch s_bench_generate s_kernel_timing s_memcheck s_racecheck
log "mode $mode, backend $backend, build $build, out $out, deadline ${deadline}s"
if [ "$emulated" = 1 ]; then
  step build 900 s_build
else
  step build 330 s_build
fi
if [ ! -x "$kv" ] || [ ! -x "$dt" ]; then
  log "no binaries in $build: every later step is not run"
  for s in device-tests golden smollm2 formats run memcheck racecheck bench-attention bench-batch \
    bench-generate kernel-timing; do
    skip "$s" "the build failed"
  done
else
  step device-tests 240 s_device_tests
  step golden 60 s_golden
  step smollm2 120 s_smollm2
  step formats 180 s_formats
  step run 150 s_run
  if [ "$emulated" = 1 ]; then
    skip memcheck "compute-sanitizer needs a GPU (the emulator runs under ASan and TSan in CI)"
    skip racecheck "compute-sanitizer needs a GPU (the emulator runs under ASan and TSan in CI)"
  elif ! command -v compute-sanitizer >/dev/null; then
    skip memcheck "compute-sanitizer not found"
    skip racecheck "compute-sanitizer not found"
  else
    step memcheck 150 s_memcheck
    step racecheck 150 s_racecheck
  fi
  step bench-attention 180 s_bench_attention
  step bench-batch 120 s_bench_batch
  step bench-generate 120 s_bench_generate
  step kernel-timing 240 s_kernel_timing
fi
skip ui "the UI's engine (kvscope_ui_core) needs Dear ImGui, which the device machine lacks"

# --- the record ----------------------------------------------------------------------------
python3 "$root/scripts/gpu_check_report.py" --mode "$mode" --steps "$steps_tsv" --out "$out" \
  --pack "${pack:-}" --elapsed "$(($(date +%s) - started))"
