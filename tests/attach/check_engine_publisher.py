#!/usr/bin/env python3
"""`kvscope attach` against the engines' own publisher code (not kvscope's test publishers).

Runs an engine's ZmqEventPublisher unmodified for two data-parallel ranks (tests/attach/engines.py
loads it from the cache scripts/engine_publishers.sh fills and drives it through a workload of
that engine's events and fields) and checks that `kvscope attach --json` reports what was
published: batches, events by type, blocks stored, removed, cleared (and the clears' scope),
live in all / per rank / per medium / per KV-cache group / per ownership, placeholder blocks,
unknown parents and removals, churn, decode errors, the fields kvscope does not know
(skipped_fields, each named in the output), and lost batches by cause. The expected values are
folded from what each scenario published (engines.Engine.expected). Scenarios:

  before    40 batches per rank published before kvscope attaches (recovered by replay, in the
            engine's own framing: 3 frames in vLLM 0.23 / 0.25, 4 in vLLM 0.33 and SGLang), then
            10 live per rank
  first     kvscope started before the engine: every batch live or by replay, none lost
  restart   rank 0's publisher shut down and started again on the same sockets (sequence from
            0): one restart, rank 0's blocks before it dropped
  nobuffer  the engine's replay buffer kept 5 batches of 20 published before attach: 15 lost,
            counted as gone from the replay buffer
  malformed a batch whose block hash is a float, once before attach (so by replay) and once live:
            two decode errors, nothing else lost or changed

ENGINE is sglang-0.5.23 (every scenario) or vllm (vllm-0.33.0: every scenario; vllm-0.25.0 and
vllm-0.23.0, the older framing and layouts: before).

usage: check_engine_publisher.py KVSCOPE WORK_DIR ENGINE
(run with any python3; it re-runs itself under the environment scripts/engine_publishers.sh
makes). Prints "N passed, M failed"; exit 1 on any failure.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, attach, engine_python, expect, finish, free_ports  # noqa: E402

ME = "check_engine_publisher.py"
KVSCOPE = engines = None  # set by main()
LOADED = {}  # engine -> its publisher module
check = Checks()


def run(engine, name, work, batches, publish_before, publish_live, buffer_steps=10_000,
        kvscope_first=False):
    """One scenario: an Engine on fresh ports, publish_before(engine) before kvscope attaches
    (or, kvscope_first, once it is waiting for the engine), publish_live(engine) after, kvscope
    stopping at `batches`; returns (summary, engine)."""
    base = free_ports(4, ME)
    out = os.path.join(work, name.replace(" ", "-"))
    proc = e = None
    try:
        if kvscope_first:
            proc = attach(KVSCOPE, base, 2, batches, out, "kv")
            time.sleep(1.0)  # kvscope is up and asking before the engine exists
        e = engines.Engine(engine, LOADED[engine], base, buffer_steps=buffer_steps)
        publish_before(e)
        e.wait_sent()
        if proc is None:
            proc = attach(KVSCOPE, base, 2, batches, out, "kv")
        time.sleep(1.5)  # its subscription reaches the publishers (a PUB drops before that)
        publish_live(e)
        return finish(check, proc, name), e
    finally:
        if e is not None:
            e.close()
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


def totals(ledger, **more):
    """What the summary must say: the ledger's totals, and more (lost, restarts, ...)."""
    return dict(ledger.totals(), bad_frames=0, replay_timeouts=0, other_topics=0, **more)


def skipped(name, ledger):
    """Names the fields kvscope skipped, so a reader of the output sees which."""
    fields = ", ".join(f"{k} x{n}" for k, n in sorted(ledger.skipped.items())) or "none"
    print(f"note  {name}: fields kvscope does not know (skipped_fields): {fields}")


def before(engine, work):
    name = f"{engine} before"
    got, e = run(engine, name, work, 100, lambda e: [e.publish(r, 40) for r in range(2)],
                 lambda e: e.publish_interleaved(10, 0.02))
    ledger = e.expected()
    expect(check, name, got, totals(ledger, lost=0, restarts=0,
                                    replay_frames=engines.ENGINES[engine].replay_frames))
    check(got.get("replayed", 0) >= 80, f"{name}: the 80 batches before attach came by replay",
          f"replayed {got.get('replayed')}")
    skipped(name, ledger)


def first(engine, work):
    name = f"{engine} first"
    got, e = run(engine, name, work, 60, lambda e: None,
                 lambda e: e.publish_interleaved(30, 0.01), kvscope_first=True)
    expect(check, name, got, totals(e.expected(), lost=0, restarts=0))


def restart(engine, work):
    def live(e):
        for r in range(2):
            e.publish(r, 10)
        time.sleep(0.5)
        e.restart(0)
        time.sleep(1.5)  # kvscope's subscription reaches the new rank-0 publisher
        for r in range(2):
            e.publish(r, 10)
        e.publish(0, 10)

    name = f"{engine} restart"
    got, e = run(engine, name, work, 50, lambda e: None, live)
    expect(check, name, got, totals(e.expected(), lost=0, restarts=1))


def nobuffer(engine, work):
    def history(e):
        e.publish(0, 20)
        e.publish(1, 5)

    name = f"{engine} nobuffer"
    got, e = run(engine, name, work, 5 + 5 + 2, history,  # rank 0's last 5, rank 1's, live
                 lambda e: [e.publish(r, 1) for r in range(2)], buffer_steps=5)
    gone = 20 - 5  # rank 0's batches the buffer no longer had
    expect(check, name, got, totals(e.expected(lost={(0, s) for s in range(gone)}), lost=gone,
                                    **{"lost_by_cause.replay_expired": gone,
                                       "lost_by_cause.before_attach": 0}))


def malformed(engine, work):
    def history(e):
        for r in range(2):
            e.publish(r, 7)
        e.publish_malformed(0)
        for r in range(2):
            e.publish(r, 12)

    def live(e):
        e.publish_interleaved(3, 0.02)
        e.publish_malformed(1)
        e.publish_interleaved(5, 0.02)

    name = f"{engine} malformed"
    got, e = run(engine, name, work, 2 * (7 + 12 + 8) + 2, history, live)  # and the 2 malformed
    expect(check, name, got, totals(e.expected(), lost=0, restarts=0, decode_errors=2))
    check("block_hashes[0]: expected an integer or bytes hash, got a float"
          in got.get("last_decode_error", ""), f"{name}: last_decode_error names the float hash",
          f"got {got.get('last_decode_error')!r}")


SCENARIOS = {
    "sglang-0.5.23": (before, first, restart, nobuffer, malformed),
    "vllm-0.33.0": (before, first, restart, nobuffer, malformed),
    "vllm-0.25.0": (before,),
    "vllm-0.23.0": (before,),
}
RUNS = {"sglang-0.5.23": ("sglang-0.5.23",), "vllm": ("vllm-0.33.0", "vllm-0.25.0", "vllm-0.23.0")}


def main():
    global KVSCOPE, engines
    if len(sys.argv) != 4 or sys.argv[3] not in RUNS:
        sys.exit(__doc__)
    engine_python(ME)
    import engines  # the engines' environment has its msgspec and pydantic

    KVSCOPE, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for engine in RUNS[sys.argv[3]]:
        LOADED[engine] = engines.load(engine)
        for scenario in SCENARIOS[engine]:
            try:
                scenario(engine, work)
            except Exception as e:  # noqa: BLE001 (a crash in one scenario is a failure)
                check(False, f"{engine} {scenario.__name__}", f"{type(e).__name__}: {e}")
    check.finish()


if __name__ == "__main__":
    main()
