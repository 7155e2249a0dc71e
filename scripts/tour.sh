#!/usr/bin/env bash
# Regenerates the guided tour's material: for every scenario of docs/tour.md, a headless run
# (report.md, plots, metrics under build/tour/NAME) and two UI screenshots under Xvfb at the
# scenario's lesson caption (kvscope-ui --caption N: its step, workspace, variant and compare
# target, as a presenter reaching it with PageDown sees it): docs/images/tour/NAME.png at
# 1920x1080 and docs/images/tour/NAME-720p.png at 1280x720 in presenter mode (a projector).
# Usage: scripts/tour.sh [BUILD_DIR] [NAME...]   (default: build, every scenario)
# Every stop but 8, 10, 11, 12, 19, 20 and 21 runs on SmolLM2-135M-Instruct (scripts/models.sh fetches it).
# With pngquant installed the screenshots are stored with a 256-colour palette (a third the size).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
only=("$@")
kvscope="$build/cli/kvscope"
ui="$build/app/kvscope-ui"
for bin in "$kvscope" "$ui"; do
  [[ -x $bin ]] || { echo "tour.sh: $bin not built (cmake --build $build)" >&2; exit 2; }
done
command -v xvfb-run >/dev/null || { echo "tour.sh: xvfb-run missing (apt-get install xvfb)" >&2; exit 2; }
mkdir -p docs/images/tour "$build/tour"

# name  lesson-caption  model (-: the scenario's own)
shots=(
  "naive-vs-paged 3 smollm2"
  "block-size 3 smollm2"
  "shared-system-prompt 3 smollm2"
  "multi-turn-chat 4 smollm2"
  "parallel-sampling 3 smollm2"
  "memory-pressure 4 smollm2"
  "quantization-ladder 3 smollm2"
  "past-context 3 -"
  "eviction-budget 3 smollm2"
  "mla-rank-sweep 3 -"
  "mooncake-replay 3 -"
  "memory-wall 3 -"
  "smollm2-chat 3 -"
  "smollm2-multi-turn 3 -"
  "smollm2-quantization-ladder 3 -"
  "smollm2-sinks 3 -"
  "smollm2-sparse-recall 2 -"
  "smollm2-cache-blend 2 -"
  "kernel-coalescing 3 -"
  "disaggregated 2 -"
  "hybrid-swa 2 -"
)
shoot() {  # shoot NAME OUT.png SIZE [UI FLAGS...]
  local name=$1 out=$2 size=$3
  shift 3
  timeout 900 xvfb-run -a -s "-screen 0 1920x1080x24" "$ui" "scenarios/$name.json" "$@" \
    --size "$size" --screenshot "$out" --frames 60
  if command -v pngquant >/dev/null; then
    pngquant --force --skip-if-larger --quality 70-95 --output "$out" -- "$out" || true
  fi
}
for entry in "${shots[@]}"; do
  read -r name caption model <<<"$entry"
  if ((${#only[@]})) && [[ " ${only[*]} " != *" $name "* ]]; then continue; fi
  on=()
  [[ $model == - ]] || on=(--model "$model")
  echo "== $name, caption $caption${on[*]:+ (${on[*]})}" >&2
  "$kvscope" run "scenarios/$name.json" "${on[@]}" --out "$build/tour/$name" --quiet
  shoot "$name" "docs/images/tour/$name.png" 1920x1080 "${on[@]}" --caption "$caption"
  shoot "$name" "docs/images/tour/$name-720p.png" 1280x720 "${on[@]}" --caption "$caption" \
    --presenter
done
