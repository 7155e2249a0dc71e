#!/usr/bin/env bash
# Installs what is missing, builds kvscope with warnings as errors, and runs every test: the
# release build and its suite, the GPU check on the emulated device (scripts/gpu-check.sh
# --emulated), clang-format + clang-tidy (scripts/lint.sh), the browser build and its test in
# headless Chromium (scripts/web.sh --test; KVSCOPE_SKIP_WEB=1 skips it), the whole suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer (the SIMT emulator's fiber mode), the
# emulator's thread mode and the real kernels under ThreadSanitizer (kvscope_simt_tests and the
# missing-barrier demo TSan must flag), then the libFuzzer targets for 30 s each
# (KVSCOPE_SKIP_FUZZ=1 skips them; see scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
kvscope_install_deps
# SmolLM2 (GGUF) for the real-model tests: a missing model fails the run, it does not skip tests.
bash scripts/models.sh
# SGLang's and vLLM's own KV-event publisher code and a Python environment for it, for the attach
# tests against them (outside the repository; a failure to fetch fails the run, it does not skip
# tests).
bash scripts/engine_publishers.sh --quiet >/dev/null

jobs=$(nproc)
echo "== release build (warnings as errors) ==" >&2
cmake --preset release -G Ninja >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"
# The GPU check's every step on the emulated device, so that scripts/gpu-check.sh cannot rot
# between the sessions that are lent a GPU (docs/gpu-results.md).
bash scripts/gpu-check.sh --emulated --out build/gpu-check-emulated
bash scripts/lint.sh
# The browser build, and the page in headless Chromium (docs/web.md).
if [ "${KVSCOPE_SKIP_WEB:-0}" != "1" ]; then
  bash scripts/web.sh --test
fi

if [ "${KVSCOPE_SKIP_ASAN:-0}" != "1" ]; then
  echo "== ASan + UBSan build ==" >&2
  cmake --preset asan -G Ninja >/dev/null
  cmake --build --preset asan -j "$jobs"
  # Minus the tests listed in tests/release_only.txt (each says why); every line there must
  # still name a test of the release suite.
  release_only=()
  while read -r pattern _; do
    [ -z "$pattern" ] || [ "${pattern:0:1}" = "#" ] && continue
    if ! ctest --preset release -N -R "^($pattern)( |\$)" | grep -q "Total Tests: [1-9]"; then
      echo "tests/release_only.txt: '$pattern' matches no test of the release suite" >&2
      exit 1
    fi
    release_only+=("$pattern")
  done < tests/release_only.txt
  excluded="^($(IFS="|"; echo "${release_only[*]}"))( |\$)"
  echo "ASan: $(ctest --preset release -N -R "$excluded" | grep -o 'Total Tests: [0-9]*' | grep -o '[0-9]*') tests run in the release suite only (tests/release_only.txt)" >&2
  ctest --preset asan -j "$jobs" -E "$excluded"
fi

if [ "${KVSCOPE_SKIP_TSAN:-0}" != "1" ]; then
  echo "== ThreadSanitizer: the SIMT emulator's thread mode ==" >&2
  cmake --preset tsan -G Ninja >/dev/null
  cmake --build --preset tsan -j "$jobs"
  ctest --preset tsan -j "$jobs"
fi

if [ "${KVSCOPE_SKIP_FUZZ:-0}" != "1" ]; then
  scripts/fuzz.sh 30
fi
