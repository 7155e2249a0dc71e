"""What the attach end-to-end checks share: pass/fail lines, free loopback ports, running
`kvscope attach --json` and checking its summary, the engines' Python environment, and the
recordings of engine streams (tests/data/engines/). Standard library only."""
import base64
import json
import os
import socket
import subprocess
import sys


class Checks:
    """Prints "ok    what" or "FAIL  what: detail" per check and counts them."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def __call__(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"ok    {what}")
        else:
            self.failed += 1
            print(f"FAIL  {what}" + (f": {detail}" if detail else ""))

    def finish(self):
        """The closing line CTest's output shows, and the exit status."""
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def free_ports(n, who):
    """n consecutive free loopback ports (the engines number DP ranks port + rank)."""
    for _ in range(200):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
        probe.close()
        if base + n > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    sys.exit(f"{who}: no run of free ports")


def attach(kvscope, base, dp, batches, out, topic, extra=()):
    """`kvscope attach --json` on dp ranks at base + rank (replay sockets at base + dp + rank),
    stopping after `batches` batches (60 s at most); `extra`: more flags (--lookup FILE)."""
    return subprocess.Popen(
        [kvscope, "attach", f"tcp://127.0.0.1:{base}", "--replay", f"tcp://127.0.0.1:{base + dp}",
         "--dp", str(dp), "--topic", topic, "--batches", str(batches), "--duration", "60",
         "--json", "--out", out, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(check, proc, name):
    """Waits for an attach() run; its --json summary ({} when there is none, a failed check)."""
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    check(proc.returncode == 0, f"{name}: exit 0", f"rc {proc.returncode}: {err.strip()[-300:]}")
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        check(False, f"{name}: --json prints JSON", out[:300])
        return {}


def expect(check, name, got, want):
    """One check per key of `want` against the summary `got`: a dotted key reaches into it
    ("lost_by_cause.replay_expired"), "ranks" is a list of per-rank dicts checked key by key.
    A failed check shows what came and, when a batch did not decode, why."""
    why = (f" (last_decode_error: {got.get('last_decode_error')})"
           if got.get("decode_errors") else "")
    for key, value in want.items():
        if key == "ranks":
            for r, rank_want in enumerate(value):
                rank_got = (got.get("ranks") or [{}] * len(value))[r]
                for k, v in rank_want.items():
                    check(rank_got.get(k) == v, f"{name}: ranks[{r}].{k} = {v}",
                          f"got {rank_got.get(k)}{why}")
            continue
        have = got
        for part in key.split("."):
            have = have.get(part) if isinstance(have, dict) else None
        check(have == value, f"{name}: {key} = {value}", f"got {have}{why}")


def expect_lookup(check, name, got, want):
    """One check per field of each expected lookup row (`want`, as a recording's header has them)
    against the rows `got` (`kvscope lookup --json`'s, or attach --lookup's), the row found by
    its rank, medium and group. other_namespace is checked to contain the expected words (the
    engine's LoRA name, "extra keys" or "cache salt"); every other field to be equal."""
    by_key = {(r.get("rank"), r.get("medium"), r.get("group")): r for r in got}
    for row in want:
        key = (row["rank"], row["medium"], row["group"])
        what = f"{name}: rank {key[0]} {key[1]} group {key[2]}"
        have = by_key.get(key)
        check(have is not None, f"{what}: a row",
              f"rows for {sorted(by_key, key=str)}")
        if have is None:
            continue
        for k, v in row.items():
            if k in ("rank", "medium", "group"):
                continue
            ok = (isinstance(have.get(k), str) and v in have[k] if k == "other_namespace"
                  else have.get(k) == v)
            check(ok, f"{what}: {k} = {v!r}", f"got {have.get(k)!r} ({have.get('text')})")


# Where scripts/engine_publishers.sh keeps the engines' publisher modules and their environment.
ENGINE_CACHE = os.environ.get("KVSCOPE_ENGINE_CACHE", os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kvscope", "engines"))


def engine_python(me):
    """Runs this script again under the Python environment scripts/engine_publishers.sh makes
    (pyzmq, msgspec, pydantic), once; returns when already there."""
    if os.environ.get("KVSCOPE_ENGINE_PYTHON"):
        return
    python = os.path.join(ENGINE_CACHE, "venv", "bin", "python")
    if not os.path.exists(os.path.join(ENGINE_CACHE, "venv", ".complete")):
        sys.exit(f"{me}: {python}: missing: run scripts/engine_publishers.sh")
    os.environ["KVSCOPE_ENGINE_PYTHON"] = python
    os.execv(python, [python, *sys.argv])


# A recording (scripts/record_engine_events.py writes them, tests/attach/replay_recording.py
# serves them): JSON lines, the first a header (engine, version, scenario, expected totals, ...),
# then one per message a subscriber received: {"rank": r, "socket": "pub" | "replay",
# "frames": [base64, ...]}, replay answers with the "request" (start_seq) they answer.
def write_recording(path, header, messages):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header, sort_keys=True) + "\n")
        for m in messages:
            line = dict(m, frames=[base64.b64encode(x).decode("ascii") for x in m["frames"]])
            f.write(json.dumps(line, sort_keys=True) + "\n")


def read_recording(path):
    """(header, messages) with the frames as bytes."""
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f if line.strip()]
    if not lines or "engine" not in lines[0]:
        sys.exit(f"{path}: not a recording (no header line): "
                 "regenerate with scripts/record_engine_events.py")
    for m in lines[1:]:
        m["frames"] = [base64.b64decode(x) for x in m["frames"]]
    return lines[0], lines[1:]
