#!/usr/bin/env bash
# kvscope in the browser (docs/web.md): builds kvscope-ui for WebAssembly with Debian's Emscripten
# into build-web/ (index.html, index.js, index.wasm, index.worker.js and index.data with the
# scenarios, stories260K and its tokenizer), and serves or tests it.
#
#   bash scripts/web.sh            build build-web/
#   bash scripts/web.sh --serve    build, then serve it on http://127.0.0.1:8765/ (--port N), with
#                                  SmolLM2 beside it where scripts/models.sh fetched it
#   bash scripts/web.sh --test     build, then run the page in headless Chromium (tests/web/)
#
# Dear ImGui's sources come from Debian's imgui source package (1.86, the version the desktop
# build links), fetched with apt-get into a cache outside the checkout and checked by SHA-256.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {  # the comment above, up to `set`
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}

serve=0
test=0
port=8765
while [ $# -gt 0 ]; do
  case "$1" in
    --serve) serve=1 ;;
    --test) test=1 ;;
    --port)
      [ $# -ge 2 ] || { echo "web.sh: --port: expected a port number" >&2; exit 2; }
      port="$2"
      shift
      ;;
    -h | --help) usage; exit 0 ;;
    *) echo "web.sh: unknown option '$1' (expected --serve, --test, --port N or --help)" >&2; exit 2 ;;
  esac
  shift
done
if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
  echo "web.sh: --port: expected 1..65535, got '$port'" >&2
  exit 2
fi

packages=(emscripten cmake ninja-build nlohmann-json3-dev libstb-dev fonts-dejavu-core)
if [ "$test" = 1 ]; then packages+=(googletest chromium python3-websocket python3-pil); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "web.sh: missing packages; run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "web.sh: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null
fi

# Debian's Emscripten runs its JavaScript tools with `node`, and finds their modules (acorn) in
# Debian's folder for them; a Node.js from elsewhere does not look there by itself.
export NODE_PATH="/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}"

# Dear ImGui 1.86 from Debian's source package (bookworm's imgui 1.86+ds-1), with a private
# apt list of source packages (the system's sources are left as they are).
imgui_version=1.86
imgui_orig=imgui_1.86+ds.orig.tar.xz
imgui_sha256=0dace0e8e57d298eb6e93af12dc19420cb96330832f6495c733b90aeeef11f64
cache="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope"
imgui_dir="$cache/imgui-$imgui_version"
if [ ! -f "$imgui_dir/imgui.cpp" ]; then
  echo "web.sh: fetching Dear ImGui $imgui_version (Debian's source package)" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/lists/partial" "$work/dl"
  cat >"$work/src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt_opts=(-o "Dir::Etc::SourceList=$work/src.sources" -o "Dir::Etc::SourceParts=/nonexistent"
            -o "Dir::State::Lists=$work/lists" -o "APT::Sandbox::User=$(id -un)")
  apt-get "${apt_opts[@]}" -qq update
  (cd "$work/dl" && apt-get "${apt_opts[@]}" -qq source --download-only "imgui=$imgui_version+ds-1")
  echo "$imgui_sha256  $work/dl/$imgui_orig" | sha256sum --check --quiet || {
    echo "web.sh: $imgui_orig: SHA-256 differs from the pinned $imgui_sha256" >&2
    exit 1
  }
  mkdir -p "$cache"
  rm -rf "$imgui_dir.tmp"
  mkdir "$imgui_dir.tmp"
  tar -xJf "$work/dl/$imgui_orig" -C "$imgui_dir.tmp" --strip-components=1
  rm -rf "$imgui_dir"
  mv "$imgui_dir.tmp" "$imgui_dir"
fi

# Header-only dependencies, linked one by one (the desktop include directory would bring glibc's
# headers into a WebAssembly build).
obj=build-web-obj
mkdir -p "$obj/include"
ln -sfn /usr/include/nlohmann "$obj/include/nlohmann"
ln -sfn /usr/include/stb "$obj/include/stb"

# --test also builds part of the suite for WebAssembly, with Debian's GoogleTest sources.
gtest=""
[ "$test" = 1 ] && gtest=/usr/src/googletest
shared="${KVSCOPE_SHARED:-$(cd .. && pwd)/shared}"
traces=""
[ -f "$shared/traces/mooncake/conversation_trace.jsonl" ] && traces="$shared/traces"
echo "== browser build (Emscripten $(emcc --version | head -1 | grep -o '[0-9]*\.[0-9]*\.[0-9]*' | head -1)) ==" >&2
emcmake cmake -S . -B "$obj" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVSCOPE_WERROR=ON \
  -DKVSCOPE_WEB_INCLUDE="$PWD/$obj/include" -DKVSCOPE_IMGUI_SOURCE="$imgui_dir" \
  -DKVSCOPE_WEB_MODELS="$shared/models" -DKVSCOPE_WEB_TRACES="$traces" \
  -DKVSCOPE_WEB_OUT="$PWD/build-web" -DKVSCOPE_GTEST_SOURCE="$gtest" >/dev/null
cmake --build "$obj" -j "$(nproc)" --target kvscope-ui ${gtest:+kvscope_wasm_tests kvscope_wasm_bench}
echo "web.sh: build-web/ holds $(du -sh build-web | cut -f1):" >&2
(cd build-web && ls -l | awk 'NR > 1 {printf "  %-18s %8.1f KiB\n", $9, $5 / 1024}') >&2

if [ "$test" = 1 ]; then
  echo "== the engine's tests compiled for WebAssembly, under Node.js ==" >&2
  # This Emscripten fetches its .wasm with fetch() where there is one, which Node.js 18+ has but
  # cannot use on a file path: without it, the loader reads the file.
  node --no-experimental-fetch "$obj/tests/web/kvscope_wasm_tests.js"
  echo "== the page in headless Chromium ==" >&2
  /usr/bin/python3 tests/web/web_test.py build-web  # Debian's Python, with Debian's modules
fi
if [ "$serve" = 1 ]; then
  # SmolLM2, where scripts/models.sh fetched it, is served beside the page (not packaged in it).
  smollm2=assets/models/SmolLM2-135M-Instruct.Q4_1.gguf
  extra=()
  if [ -f "$smollm2" ]; then extra=(--model "$smollm2"); fi
  exec python3 scripts/web_serve.py build-web --port "$port" "${extra[@]}"
fi
