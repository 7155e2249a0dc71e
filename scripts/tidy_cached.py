#!/usr/bin/env python3
"""clang-tidy over the given sources, skipping those it found clean before with the same input.

Usage: scripts/tidy_cached.py BUILD_DIR FILE...   (scripts/lint.sh runs it)

A file's input is everything its findings can depend on: clang-tidy's version, .clang-tidy, the
file's compile command, and the file after preprocessing with that command (so every header it
includes, the macros -march=native defines, ...), with the checkout's path taken out so that
two clones share results. A clean run leaves a stamp named by the hash of that input in
$XDG_CACHE_HOME/kvscope/clang-tidy (~/.cache by default); a file with a stamp is not run again.
Findings are never cached: a file with findings runs again next time. Where preprocessing fails,
the file simply runs. Prints the findings as clang-tidy does; exit 1 if any, 0 if none.
"""
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys

FINDING = re.compile(r"(warning|error):")


def preprocess_command(entry):
    """The compile command with -E instead of -c, to stdout, compiled by clang (clang-tidy's
    own front end) so that its view of the preprocessor is the one hashed."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out = ["clang++"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a == "-c":
            continue
        out.append(a)
    return out + ["-E", "-P", "-Wno-unknown-warning-option", "-o", "-"]


def input_hash(entry, root, common):
    try:
        pre = subprocess.run(preprocess_command(entry), cwd=entry["directory"],
                             capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if pre.returncode != 0:
        return None
    h = hashlib.sha256(common)
    h.update(entry.get("command", " ".join(entry.get("arguments", []))).replace(root, ".").encode())
    h.update(b"\0")
    h.update(pre.stdout.replace(root.encode(), b"."))
    return h.hexdigest()


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    build, files = sys.argv[1], sys.argv[2:]
    root = os.getcwd()
    db_path = os.path.join(build, "compile_commands.json")
    entries = {os.path.realpath(e["file"]): e for e in json.load(open(db_path))}
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True).stdout
    common = version + b"\0" + open(".clang-tidy", "rb").read() + b"\0"
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "kvscope", "clang-tidy")
    os.makedirs(cache, exist_ok=True)
    jobs = os.cpu_count() or 2

    def key_of(f):
        e = entries.get(os.path.realpath(f))
        return input_hash(e, root, common) if e else None

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        keys = dict(zip(files, pool.map(key_of, files)))
    todo = [f for f in files if not (keys[f] and os.path.exists(os.path.join(cache, keys[f])))]
    print(f"clang-tidy: {len(files) - len(todo)} of {len(files)} files unchanged since a clean "
          f"run ({cache}); running {len(todo)}", file=sys.stderr)

    def tidy(f):
        r = subprocess.run(["clang-tidy", "-p", build, "--quiet", f], capture_output=True,
                           text=True)
        out = r.stdout + r.stderr
        clean = r.returncode == 0 and not FINDING.search(out)
        if clean and keys[f]:
            open(os.path.join(cache, keys[f]), "w").close()
        return clean, out

    findings = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for f, (clean, out) in zip(todo, pool.map(tidy, todo)):
            if not clean:
                lines = sorted({ln for ln in out.splitlines() if FINDING.search(ln)})
                findings.extend(lines or [f"{f}: clang-tidy failed:\n{out}"])
    if findings:
        print("\n".join(sorted(set(findings))), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
