#!/usr/bin/env python3
"""End to end: `kvscope attach` against publish.py (the engines' framing, from Python).

  1. e2e: two DP ranks (vLLM map layout with bytes hashes; SGLang array layout with int64
     hashes), history fetched by replay, dropped batches recovered by replay, a payload that is
     not msgpack, unknown event types and fields, a restart: the --json counts must equal what
     publish.py computed, and DIR must hold recording.kvr, trace.json, report.md, summary.json.
  2. Ctrl-C: attach with no --batches, SIGINT after the first batch: exit 0, DIR still written.
  3. no publisher: exit 1 within the duration, stderr says nothing is listening.
  4. topic: a wrong --topic gets nothing and says which topic the batches were on; the right
     one gets them.
Usage: check_attach.py KVSCOPE WORKDIR
"""

import json
import os
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, free_ports  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLISH = os.path.join(HERE, "publish.py")
check = Checks()






def read_line(stream, deadline_s, what):
    """One line from a pipe within the deadline (select, so a silent process cannot hang us)."""
    end = time.monotonic() + deadline_s
    buf = b""
    fd = stream.fileno()
    while not buf.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no {what} within {deadline_s} s (got {buf!r})")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 1)
            if not chunk:
                raise EOFError(f"the stream ended before {what} (got {buf!r})")
            buf += chunk
    return buf.decode()


def start_publisher(*args):
    return subprocess.Popen([sys.executable, PUBLISH, *args], stdout=subprocess.PIPE,
                            stderr=None)


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_outputs(out_dir, label):
    with open(os.path.join(out_dir, "recording.kvr"), "rb") as f:
        check(f.read(8) == b"KVSCOPER", f"{label}: recording.kvr is a kvscope recording")
    with open(os.path.join(out_dir, "trace.json")) as f:
        trace = json.load(f)
    check(isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list),
          f"{label}: trace.json is a Chrome trace")
    with open(os.path.join(out_dir, "report.md")) as f:
        report = f.read()
    check("## Per rank" in report and "prefix-cache hits" in report,
          f"{label}: report.md has the per-rank table and what the stream cannot tell")
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)


def e2e(kvscope, work, replay_frames=3):
    name = "e2e" if replay_frames == 3 else f"e2e{replay_frames}"
    base = free_ports(4, "check_attach.py")  # publishers at base, base+1; replay at base+2, base+3
    pub = start_publisher("--scenario", "e2e", "--dp", "2",
                          "--endpoint", f"tcp://127.0.0.1:{base}",
                          "--replay", f"tcp://127.0.0.1:{base + 2}", "--run-for", "90",
                          "--replay-frames", str(replay_frames))
    try:
        expected = json.loads(read_line(pub.stdout, 30, "the expected counts"))
        out_dir = os.path.join(work, name)
        run = subprocess.run([kvscope, "attach", f"tcp://127.0.0.1:{base}",
                              "--replay", f"tcp://127.0.0.1:{base + 2}", "--dp", "2",
                              "--batches", str(expected["batches"]), "--duration", "60",
                              "--json", "--out", out_dir],
                             capture_output=True, text=True, timeout=120)
    finally:
        stop(pub)
    check(run.returncode == 0, f"{name}: exit 0", f"rc {run.returncode}, stderr {run.stderr}")
    try:
        got = json.loads(run.stdout)
    except json.JSONDecodeError:
        check(False, f"{name}: --json prints JSON", run.stdout[:500])
        return
    check(got.get("replay_frames") == replay_frames, f"{name}: replay answers of {replay_frames} frames",
          f"got {got.get('replay_frames')}")
    for key, want in expected.items():
        check(got.get(key) == want, f"{name}: {key} = {json.dumps(want)}",
              f"got {json.dumps(got.get(key))}")
    summary = check_outputs(out_dir, name)
    check(summary.get("batches") == expected["batches"], f"{name}: summary.json matches --json")
    check(got["recording"]["batches"] == expected["batches"],
          f"{name}: the recording has one step per batch")


def e2e_topic_replay(kvscope, work):
    """The same plan with replay answers that carry the topic (vLLM >= 0.26, SGLang >= 0.5.22)."""
    e2e(kvscope, work, replay_frames=4)


def ctrl_c(kvscope, work):
    base = free_ports(2, "check_attach.py")
    pub = start_publisher("--scenario", "stream", "--endpoint", f"tcp://127.0.0.1:{base}",
                          "--replay", f"tcp://127.0.0.1:{base + 1}", "--interval", "0.05",
                          "--run-for", "60")
    out_dir = os.path.join(work, "ctrl_c")
    try:
        att = subprocess.Popen([kvscope, "attach", f"tcp://127.0.0.1:{base}", "--replay",
                                f"tcp://127.0.0.1:{base + 1}", "--json", "--out", out_dir],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = ""
            while "first batch" not in line:
                line = read_line(att.stderr, 30, "kvscope's first-batch line")
            att.send_signal(signal.SIGINT)
            out, err = att.communicate(timeout=30)
        finally:
            stop(att)
    finally:
        stop(pub)
    check(att.returncode == 0, "ctrl-c: exit 0", f"rc {att.returncode}, stderr {err!r}")
    check(b"stopped (signal)" in err, "ctrl-c: says it stopped on the signal", repr(err))
    summary = check_outputs(out_dir, "ctrl-c")
    check(summary["batches"] >= 1 and json.loads(out)["batches"] == summary["batches"],
          "ctrl-c: the summary counts the batches received before the signal",
          f"summary {summary['batches']}")


def no_publisher(kvscope, work):
    base = free_ports(2, "check_attach.py")
    started = time.monotonic()
    run = subprocess.run([kvscope, "attach", f"tcp://127.0.0.1:{base}", "--replay",
                          f"tcp://127.0.0.1:{base + 1}", "--duration", "1", "--out",
                          os.path.join(work, "none")], capture_output=True, text=True,
                         timeout=30)
    took = time.monotonic() - started
    check(run.returncode == 1, "no publisher: exit 1", f"rc {run.returncode}")
    check(took < 10, "no publisher: returns after --duration, not later", f"{took:.1f} s")
    check("not connected (no publisher listening?)" in run.stderr,
          "no publisher: stderr says nothing is listening", run.stderr)


def topic(kvscope, work):
    base = free_ports(2, "check_attach.py")
    pub = start_publisher("--scenario", "stream", "--endpoint", f"tcp://127.0.0.1:{base}",
                          "--replay", "", "--topic", "kv-events", "--interval", "0.05",
                          "--run-for", "60")
    try:
        wrong = subprocess.run([kvscope, "attach", f"tcp://127.0.0.1:{base}", "--topic", "other",
                                "--duration", "2", "--out", os.path.join(work, "topic_wrong")],
                               capture_output=True, text=True, timeout=30)
        right = subprocess.run([kvscope, "attach", f"tcp://127.0.0.1:{base}", "--topic",
                                "kv-events", "--batches", "5", "--duration", "30", "--json",
                                "--out", os.path.join(work, "topic_right")],
                               capture_output=True, text=True, timeout=60)
    finally:
        stop(pub)
    check(wrong.returncode == 1 and 'on topic "kv-events", not the subscribed topic "other"' in wrong.stderr,
          "topic: a wrong --topic gets nothing and names the topic seen",
          f"rc {wrong.returncode}, stderr {wrong.stderr}")
    check(right.returncode == 0 and json.loads(right.stdout or "{}").get("batches") == 5,
          "topic: the right --topic gets the batches", f"rc {right.returncode} {right.stderr}")


def bind(kvscope, work):
    """An engine whose endpoint names kvscope's host connects: kvscope binds (--bind)."""
    base = free_ports(1, "check_attach.py")
    att = subprocess.Popen([kvscope, "attach", f"tcp://*:{base}", "--bind", "--batches", "20",
                            "--duration", "60", "--json", "--out", os.path.join(work, "bind")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pub = start_publisher("--scenario", "stream", "--endpoint", f"tcp://127.0.0.1:{base}",
                              "--replay", "", "--connect", "--interval", "0.02",
                              "--run-for", "60")
        try:
            out, err = att.communicate(timeout=90)
        finally:
            stop(pub)
    finally:
        stop(att)
    check(att.returncode == 0, "bind: exit 0", f"rc {att.returncode}, stderr {err}")
    got = json.loads(out or "{}")
    check(got.get("batches") == 20 and got.get("bind") is True,
          "bind: 20 batches from an engine that connected", out[:300])
    check(got.get("ranks", [{}])[0].get("connection") == "connected",
          "bind: the rank shows the engine connected", out[:600])


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    kvscope, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for test in (e2e, e2e_topic_replay, ctrl_c, no_publisher, topic, bind):
        try:
            test(kvscope, work)
        except Exception as e:  # a hang or crash in one scenario is a failure, not a traceback
            check(False, test.__name__, f"{type(e).__name__}: {e}")
    check.finish()


if __name__ == "__main__":
    main()
