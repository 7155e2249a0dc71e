#!/usr/bin/env python3
"""`kvscope attach` against an engine's own publisher code (not kvscope's test publishers).

Loads SGLang 0.5.23's sglang/srt/disaggregation/kv_events.py from its wheel (in the cache
scripts/engine_publishers.sh fills; only the module's two imports from the rest of SGLang are
stubbed), runs its ZmqEventPublisher unmodified for two data-parallel ranks, and checks what
`kvscope attach --json` reports against what was published:

  before   40 batches per rank published before kvscope attaches (recovered by replay, which
           this SGLang answers in four frames), then 10 live per rank
  first    kvscope started before the engine: every batch live or by replay, none lost
  restart  rank 0's publisher shut down and started again on the same sockets (sequence from 0):
           one restart, rank 0's blocks before it dropped
  nobuffer the engine's replay buffer kept 5 batches of 20 published before attach: 15 lost,
           counted as gone from the replay buffer

usage: check_engine_publisher.py PYTHON_WITH_DEPS|auto KVSCOPE WORK_DIR
(run with any python3; it re-runs itself under PYTHON_WITH_DEPS, the environment
scripts/engine_publishers.sh prints; auto: that script's default place). Prints "N passed,
M failed"; exit 1 on any failure.
"""
import glob
import json
import os
import subprocess
import sys
import time
import types
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, free_ports  # noqa: E402

CACHE = os.environ.get("KVSCOPE_ENGINE_CACHE",
                       os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                    "kvscope", "engines"))
check = Checks()




def load_sglang():
    """SGLang's kv_events module, executed from the wheel; its two imports from the rest of
    SGLang (unused by the publisher) are stubbed."""
    wheels = sorted(glob.glob(os.path.join(CACHE, "wheels", "sglang-0.5.23-*.whl")))
    if not wheels:
        sys.exit("check_engine_publisher.py: no sglang 0.5.23 wheel in the cache: run scripts/engine_publishers.sh")
    member = "sglang/srt/disaggregation/kv_events.py"
    source = zipfile.ZipFile(wheels[0]).read(member).decode("utf-8")
    for name in ("sglang", "sglang.srt", "sglang.srt.runtime_context", "sglang.srt.utils",
                 "sglang.srt.utils.network"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["sglang.srt.runtime_context"].get_parallel = lambda *a, **k: None
    sys.modules["sglang.srt.utils.network"].NetworkAddress = object
    module = types.ModuleType("sglang_kv_events")
    module.__file__ = wheels[0] + "!/" + member
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module




class Engine:
    """Two ranks of SGLang's publisher and what they were made to publish."""

    def __init__(self, kv, base, dp=2, buffer_steps=10_000):
        self.kv, self.base, self.dp, self.buffer_steps = kv, base, dp, buffer_steps
        self.pubs = [self.open(r) for r in range(dp)]
        self.next_hash = [1000 * (r + 1) for r in range(dp)]
        self.live = [set() for _ in range(dp)]
        self.batches = self.stored = self.removed = 0

    def open(self, rank):
        # As an engine is configured: "tcp://*:port" binds (a host name would make SGLang's PUB
        # connect to it, for `kvscope attach --bind`).
        return self.kv.ZmqEventPublisher(
            attn_dp_rank=rank, endpoint=f"tcp://*:{self.base}",
            replay_endpoint=f"tcp://*:{self.base + self.dp}",
            buffer_steps=self.buffer_steps, topic="kv")

    def publish(self, rank, n):
        """n batches on a rank: each stores a block (tokens of 16), every third removes the
        oldest live one."""
        for _ in range(n):
            h = self.next_hash[rank]
            self.next_hash[rank] += 1
            events = [self.kv.BlockStored(block_hashes=[h], parent_block_hash=None,
                                          token_ids=list(range(h % 500, h % 500 + 16)),
                                          block_size=16, lora_id=None, medium="GPU")]
            self.live[rank].add(h)
            self.stored += 1
            if h % 3 == 0:
                old = min(self.live[rank])
                events.append(self.kv.BlockRemoved(block_hashes=[old], medium="GPU"))
                self.live[rank].discard(old)
                self.removed += 1
            self.pubs[rank].publish(self.kv.KVEventBatch(ts=time.time(), events=events))
            self.batches += 1

    def publish_interleaved(self, n, pause_s):
        """n batches on every rank, one rank after the other, pause_s apart (a live stream)."""
        for _ in range(n):
            for r in range(self.dp):
                self.publish(r, 1)
            time.sleep(pause_s)

    def live_blocks(self):
        return sum(len(s) for s in self.live)

    def restart(self, rank):
        """A new engine process on the same sockets: sequence from 0, nothing cached."""
        self.pubs[rank].shutdown()
        time.sleep(0.3)
        self.pubs[rank] = self.open(rank)
        self.live[rank].clear()

    def close(self):
        for p in self.pubs:
            p.shutdown()


def attach(kvscope, base, dp, batches, out):
    return subprocess.Popen(
        [kvscope, "attach", f"tcp://127.0.0.1:{base}", "--replay", f"tcp://127.0.0.1:{base + dp}",
         "--dp", str(dp), "--topic", "kv", "--batches", str(batches), "--duration", "60",
         "--json", "--out", out],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, name):
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


def expect(name, got, **want):
    for key, value in want.items():
        have = got
        for part in key.split("."):
            have = have.get(part, {}) if isinstance(have, dict) else None
        check(have == value, f"{name}: {key} = {value}", f"got {have}")


def before(kv, kvscope, work):
    base = free_ports(4, "check_engine_publisher.py")
    engine = Engine(kv, base)
    try:
        for r in range(2):
            engine.publish(r, 40)  # nobody subscribed: only the replay buffer has them
        time.sleep(0.5)
        proc = attach(kvscope, base, 2, 2 * 50, os.path.join(work, "before"))
        time.sleep(1.5)  # its subscription reaches the publishers (PUB drops before that)
        engine.publish_interleaved(10, 0.02)
        got = finish(proc, "before")
    finally:
        engine.close()
    expect("before", got, batches=100, lost=0, replay_frames=4, bad_frames=0, replay_timeouts=0,
           blocks_stored=engine.stored, blocks_removed=engine.removed,
           live_blocks=engine.live_blocks(), unknown_removals=0,
           **{"events.BlockStored": engine.stored})
    check(got.get("replayed", 0) >= 80, "before: the 80 batches before attach came by replay",
          f"replayed {got.get('replayed')}")


def first(kv, kvscope, work):
    base = free_ports(4, "check_engine_publisher.py")
    proc = attach(kvscope, base, 2, 2 * 30, os.path.join(work, "first"))
    time.sleep(1.0)  # kvscope is up and asking before the engine exists
    engine = Engine(kv, base)
    try:
        time.sleep(1.0)
        engine.publish_interleaved(30, 0.01)
        got = finish(proc, "first")
    finally:
        engine.close()
    expect("first", got, batches=60, lost=0, blocks_stored=engine.stored,
           live_blocks=engine.live_blocks(), unknown_removals=0)


def restart(kv, kvscope, work):
    base = free_ports(4, "check_engine_publisher.py")
    engine = Engine(kv, base)
    try:
        proc = attach(kvscope, base, 2, 2 * 20 + 10, os.path.join(work, "restart"))
        time.sleep(1.5)
        for r in range(2):
            engine.publish(r, 10)
        time.sleep(0.5)
        engine.restart(0)
        time.sleep(1.5)  # kvscope's subscription reaches the new rank-0 publisher
        for r in range(2):
            engine.publish(r, 10)
        engine.publish(0, 10)
        got = finish(proc, "restart")
    finally:
        engine.close()
    expect("restart", got, batches=50, lost=0, restarts=1,
           live_blocks=engine.live_blocks())


def nobuffer(kv, kvscope, work):
    base = free_ports(4, "check_engine_publisher.py")
    engine = Engine(kv, base, buffer_steps=5)
    try:
        engine.publish(0, 20)
        engine.publish(1, 5)
        time.sleep(0.5)
        proc = attach(kvscope, base, 2, 10 + 2, os.path.join(work, "nobuffer"))
        time.sleep(1.5)
        for r in range(2):
            engine.publish(r, 1)
        got = finish(proc, "nobuffer")
    finally:
        engine.close()
    expect("nobuffer", got, batches=12, lost=15, **{"lost_by_cause.replay_expired": 15})


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    python, kvscope, work = sys.argv[1:]
    if python == "auto":
        python = os.path.join(CACHE, "venv", "bin", "python")
        if not os.path.exists(os.path.join(CACHE, "venv", ".complete")):
            sys.exit(f"check_engine_publisher.py: {python}: missing: run scripts/engine_publishers.sh")
    if not os.environ.get("KVSCOPE_ENGINE_PYTHON"):  # once, under the environment with the deps
        os.environ["KVSCOPE_ENGINE_PYTHON"] = python
        os.execv(python, [python, *sys.argv])
    os.makedirs(work, exist_ok=True)
    kv = load_sglang()
    for test in (before, first, restart, nobuffer):
        try:
            test(kv, kvscope, work)
        except Exception as e:  # a hang or crash in one scenario is a failure, not a traceback
            check(False, test.__name__, f"{type(e).__name__}: {e}")
    check.finish()


if __name__ == "__main__":
    main()
