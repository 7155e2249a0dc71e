#!/usr/bin/env bash
# Regenerates the guided tour's material: for every scenario of docs/tour.md, a headless run
# (report.md, plots, metrics under build/tour/NAME) and a UI screenshot under Xvfb
# (docs/images/tour/NAME.png). Usage: scripts/tour.sh [BUILD_DIR]   (default: build)
# Every stop but 8, 10, 11 and 12 runs on SmolLM2-135M-Instruct (scripts/models.sh fetches it).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kvscope="$build/cli/kvscope"
ui="$build/app/kvscope-ui"
for bin in "$kvscope" "$ui"; do
  [[ -x $bin ]] || { echo "tour.sh: $bin not built (cmake --build $build)" >&2; exit 2; }
done
command -v xvfb-run >/dev/null || { echo "tour.sh: xvfb-run missing (apt-get install xvfb)" >&2; exit 2; }
mkdir -p docs/images/tour "$build/tour"

# name  step-for-the-screenshot  workspace  model (-: the scenario's own)
shots=(
  "naive-vs-paged 60 compare smollm2"
  "block-size 80 pool smollm2"
  "shared-system-prompt 8 prefix smollm2"
  "multi-turn-chat 120 prefix smollm2"
  "parallel-sampling 20 pool smollm2"
  "memory-pressure 160 compare smollm2"
  "quantization-ladder 90 compare smollm2"
  "past-context 250 attention -"
  "eviction-budget 150 attention smollm2"
  "mla-rank-sweep 120 pool -"
  "mooncake-replay 3000 pool -"
  "memory-wall 200 pool -"
  "smollm2-chat 16 prefix -"
  "smollm2-multi-turn 80 prefix -"
  "smollm2-quantization-ladder 10 compare -"
  "smollm2-sinks 100 attention -"
)
for entry in "${shots[@]}"; do
  read -r name step view model <<<"$entry"
  on=()
  [[ $model == - ]] || on=(--model "$model")
  echo "== $name${on[*]:+ (${on[*]})}" >&2
  "$kvscope" run "scenarios/$name.json" "${on[@]}" --out "$build/tour/$name" --quiet
  timeout 600 xvfb-run -a -s "-screen 0 1600x1000x24" "$ui" "scenarios/$name.json" "${on[@]}" \
    --screenshot "docs/images/tour/$name.png" --frames 60 --step "$step" --view "$view"
done
