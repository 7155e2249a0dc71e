#!/usr/bin/env bash
# kvscope against llama.cpp on the same GGUF file: decode and prefill tokens/s at each thread
# count, from alternating runs in one session (kvscope, llama.cpp, kvscope, ...), so load changes
# on the machine hit both alike. Prints a markdown table of medians and the kvscope/llama.cpp
# ratios (docs/performance.md).
#
# llama.cpp is llama-cpp-python's vendored copy, from PyPI's source distribution: this script
# downloads it into a cache directory outside the repository and builds its own benchmark,
# llama-bench, for this CPU (GGML_NATIVE=ON, as kvscope builds with -march=native). Nothing of it
# enters the repository. Optional; never in CI's path.
#
# With --batch N (default 16; 0 leaves it out) each round also decodes N sequences together:
# `kvscope bench batch --seqs N` against llama.cpp's `llama-batched-bench -npl N` (one prompt
# token each, then --tokens steps; llama.cpp's S_TG).
#
# Usage: scripts/bench_vs_llama.sh [--model PATH] [--threads 1,2] [--rounds 5] [--tokens 128]
#                                  [--batch 16] [--json FILE]
#   LLAMA_BENCH=/path/to/llama-bench skips the download and build (llama-batched-bench is looked
#   for beside it).
set -euo pipefail
cd "$(dirname "$0")/.."

model=assets/models/SmolLM2-135M-Instruct.Q4_1.gguf
threads=1,2
rounds=5
tokens=128
json_out=
batch=16
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --json) json_out=$2; shift 2 ;;
    -h|--help) sed -n 2,20p "$0"; exit 0 ;;
    *) echo "bench_vs_llama.sh: $1: unknown option; see --help" >&2; exit 2 ;;
  esac
done
[ -f "$model" ] || { echo "bench_vs_llama.sh: $model: no such file (scripts/models.sh fetches SmolLM2)" >&2; exit 2; }
kvscope=build/cli/kvscope
[ -x "$kvscope" ] || { echo "bench_vs_llama.sh: $kvscope: not built (cmake --build --preset release)" >&2; exit 2; }

version=0.3.36  # the llama-cpp-python release tests/data/smollm2_golden.json was made with
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/llama-cpp-python-$version
llama_bench=${LLAMA_BENCH:-$cache/build/bin/llama-bench}
llama_batched=$(dirname "$llama_bench")/llama-batched-bench
if [ ! -x "$llama_bench" ] || { [ "$batch" != 0 ] && [ ! -x "$llama_batched" ]; }; then
  mkdir -p "$cache"
  src=$cache/src
  if [ ! -d "$src/vendor/llama.cpp" ]; then
    echo "bench_vs_llama.sh: downloading llama-cpp-python==$version (source) into $cache" >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: -d "$cache" \
      "llama-cpp-python==$version"
    rm -rf "$src" && mkdir -p "$src"
    tar xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$src" --strip-components=1
  fi
  echo "bench_vs_llama.sh: building llama-bench (a few minutes on 2 cores)" >&2
  cmake -S "$src/vendor/llama.cpp" -B "$cache/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
    >"$cache/configure.log" 2>&1 || { echo "bench_vs_llama.sh: configure failed, see $cache/configure.log" >&2; exit 1; }
  cmake --build "$cache/build" --target llama-bench llama-batched-bench -j "$(nproc)" >"$cache/build.log" 2>&1 ||
    { echo "bench_vs_llama.sh: build failed, see $cache/build.log" >&2; exit 1; }
fi

# ggml's AMX kernels are built where the CPU reports AMX, but a virtual machine may not run them
# (this project's did not: SIGILL in tinygemm_kernel_amx). Then llama-bench runs with --repack 0,
# which keeps weights in their file layout and leaves AMX out; the table says so.
llama_extra=()
batched_extra=()
if ! "$llama_bench" -m "$model" -t 1 -p 8 -n 0 -r 1 -o json >/dev/null 2>&1; then
  if "$llama_bench" -m "$model" -t 1 -p 8 -n 0 -r 1 -o json --repack 0 >/dev/null 2>&1; then
    llama_extra=(--repack 0)
    batched_extra=(--no-repack)
    echo "bench_vs_llama.sh: llama-bench fails with its repacked/AMX weights on this machine; running it with --repack 0" >&2
  else
    echo "bench_vs_llama.sh: $llama_bench fails on $model even with --repack 0" >&2
    exit 1
  fi
fi

runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
IFS=, read -r -a thread_list <<<"$threads"
for t in "${thread_list[@]}"; do
  for r in $(seq 1 "$rounds"); do
    printf '\rbench_vs_llama.sh: %s threads, round %d/%d   ' "$t" "$r" "$rounds" >&2
    "$kvscope" bench generate --model "$model" --threads "$t" --repeat 1 --steps "$tokens" \
      --prompt-tokens "$tokens" --json >"$runs/kvscope-$t-$r.json"
    "$llama_bench" -m "$model" -t "$t" -p "$tokens" -n "$tokens" -r 1 -o json "${llama_extra[@]}" \
      >"$runs/llama-$t-$r.json" 2>/dev/null
    if [ "$batch" != 0 ]; then
      "$kvscope" bench batch --model "$model" --threads "$t" --repeat 1 --seqs "$batch" \
        --steps "$tokens" --json >"$runs/kbatch-$t-$r.json"
      "$llama_batched" -m "$model" -t "$t" -c $((batch * (tokens + 1) + 64)) -npp 1 \
        -ntg "$tokens" -npl "$batch" --output-format jsonl "${batched_extra[@]}" 2>/dev/null |
        grep "^{" | tail -n 1 >"$runs/lbatch-$t-$r.json"
    fi
  done
done
echo >&2

python3 - "$runs" "$model" "$tokens" "$json_out" "${llama_extra[*]:-}" "${thread_list[@]}" <<'PY'
import glob, json, os, statistics, sys
runs, model, tokens, json_out, llama_extra, threads = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                                       sys.argv[4], sys.argv[5], sys.argv[6:])
rows, first_k, first_l = [], None, None
for t in threads:
    k = [json.load(open(f)) for f in sorted(glob.glob(f"{runs}/kvscope-{t}-*.json"))]
    l = [json.load(open(f)) for f in sorted(glob.glob(f"{runs}/llama-{t}-*.json"))]
    first_k, first_l = first_k or k[0], first_l or l[0]
    med = statistics.median
    row = {
        "threads": int(t), "rounds": len(k),
        "kvscope_decode": med(x["decode_tokens_per_s"] for x in k),
        "llama_decode": med(y["avg_ts"] for x in l for y in x if y["n_gen"] > 0),
        "kvscope_prefill": med(x["prefill_tokens_per_s"] for x in k),
        "llama_prefill": med(y["avg_ts"] for x in l for y in x if y["n_prompt"] > 0),
        "weight_bytes_per_token": k[0]["weight_bytes_per_token"],
        "kvscope_weight_stream_gb_s": med(x["weight_stream_bytes_per_s"] for x in k) / 1e9,
        "memory_read_gb_s": med(x["memory_read_bytes_per_s"] for x in k) / 1e9,
    }
    kb = [json.load(open(f)) for f in sorted(glob.glob(f"{runs}/kbatch-{t}-*.json"))]
    lb = [json.load(open(f)) for f in sorted(glob.glob(f"{runs}/lbatch-{t}-*.json"))]
    if kb and lb:
        row["batch"] = lb[0]["pl"]
        row["kvscope_batch_decode"] = med(x[0]["tokens_per_s"] for x in kb)
        row["llama_batch_decode"] = med(x["speed_tg"] for x in lb)
    rows.append(row)
print(f"{os.path.basename(model)}, {tokens} tokens decoded from an empty context and {tokens} "
      f"prefilled, medians of alternating runs")
print(f"kvscope: {first_k['weights']}; llama.cpp: llama-bench {first_l[0]['build_commit']} "
      f"({first_l[0]['cpu_info']}, KV {first_l[0]['type_k']}"
      f"{', ' + llama_extra + ' (its AMX kernels fail on this machine)' if llama_extra else ''})")
print("Prefill: logits of the last prompt token only, in both.\n")
print("| threads | kvscope decode | llama.cpp decode | ratio | kvscope prefill | llama.cpp prefill | ratio |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print(f"| {r['threads']} | {r['kvscope_decode']:.1f} | {r['llama_decode']:.1f} | "
          f"{r['kvscope_decode'] / r['llama_decode']:.2f}x | {r['kvscope_prefill']:.1f} | "
          f"{r['llama_prefill']:.1f} | {r['kvscope_prefill'] / r['llama_prefill']:.2f}x |")
if any("batch" in r for r in rows):
    print(f"\n{rows[0]['batch']} sequences decoding together ({tokens} steps from one prompt token "
          "each; llama.cpp: llama-batched-bench's S_TG):\n")
    print("| threads | kvscope | llama.cpp | ratio |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        if "batch" in r:
            print(f"| {r['threads']} | {r['kvscope_batch_decode']:.1f} | "
                  f"{r['llama_batch_decode']:.1f} | {r['kvscope_batch_decode'] / r['llama_batch_decode']:.2f}x |")
for r in rows:
    print(f"\n{r['threads']} threads: kvscope reads {r['weight_bytes_per_token'] / 2**20:.1f} MiB of "
          f"weights per decoded token, {r['kvscope_weight_stream_gb_s']:.1f} GB/s at its median "
          f"decode speed; a 256 MiB memory read in the same runs: {r['memory_read_gb_s']:.1f} GB/s")
if json_out:
    with open(json_out, "w") as f:
        json.dump(rows, f, indent=2)
PY
