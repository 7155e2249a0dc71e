#!/usr/bin/env python3
"""Records what a subscriber receives from the engines' own KV-event publishers, byte for byte,
into tests/data/engines/<engine>.jsonl, which tests/attach/replay_recording.py serves to
`kvscope attach` (CTest attach.recorded_*) without the engines' code or any download.

For each ENGINE (default: vllm-0.33.0 vllm-0.25.0 sglang-0.5.23) it runs that engine's
ZmqEventPublisher unmodified (tests/attach/engines.py loads it and publishes its workload: the
engine's media, hash forms, KV-cache groups, LoRA, extra keys and newer fields) for 2
data-parallel ranks on topic "kv-events", through a fixed scenario:
  1. 10 batches per rank before anyone subscribes (only the engine's replay buffer has them);
  2. a subscriber as kvscope's: per rank a SUB socket on the publisher and a DEALER on the
     replay socket;
  3. one live batch per rank, and on it a replay request ["", start_seq 0 (8 bytes big-endian)],
     answered with the 11 batches so far, then the end marker (in the engine's framing: 3 frames
     in vLLM 0.25, 4 in vLLM 0.33 and SGLang 0.5.23);
  4. 4 more live batches per rank, interleaved;
  5. a replay request from the second live batch on (as a sequence gap asks), answered with the
     4 live batches after the first and the end marker.
Every message received is kept in that order (frames base64), after a header line: engine,
version, scenario, topic, dp, replay_frames, batches before attach and live per rank, and the
totals kvscope must report, folded from what was published (engines.Engine.expected: batches,
events by type, blocks stored, removed, cleared, live in all / per rank / per medium, unknown
parents and removals, churn, skipped fields, with the skipped fields' names), and the lookup
requests the workload made (engines.Engine.lookup_requests): per request its name, rank, LoRA,
prompt token ids and the rows `kvscope lookup --json` must print for it (rank, medium, group,
prompt and matched blocks and tokens, by_hash, reason, and removed_seq / removed_by /
removed_ts or other_namespace where they apply), from what the engine stored and what became of
it in which batch, never from kvscope. The timestamps, hashes and workload are fixed, so the
same engine code records the same bytes.

Regenerate (after scripts/engine_publishers.sh; it re-runs itself under that environment):
  scripts/record_engine_events.py [ENGINE...]
"""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "attach"))
from harness import engine_python, free_ports, write_recording  # noqa: E402

ME = "record_engine_events.py"
OUT = os.path.join(ROOT, "tests", "data", "engines")
TOPIC = "kv-events"
DP, BEFORE, LIVE = 2, 10, 5
EPOCH = 1767225600.0  # 2026-01-01 00:00 UTC: the first batch's ts (each next one 0.25 s on)
END_SEQ = b"\xff" * 8


def receive(zmq, sock, what):
    if not sock.poll(5000, zmq.POLLIN):
        sys.exit(f"{ME}: no {what} within 5 s (a busy machine?); "
                 "rerun: scripts/record_engine_events.py")
    return sock.recv_multipart()


def seq_of(frames):
    return int.from_bytes(frames[-2], "big")


def record(engine, zmq, engines):
    base = free_ports(2 * DP, ME)
    e = engines.Engine(engine, engines.load(engine), base, dp=DP, topic=TOPIC, epoch=EPOCH)
    ctx = zmq.Context.instance()
    subs, dealers, messages = [], [], []
    try:
        for r in range(DP):
            e.publish(r, BEFORE)
        e.wait_sent()
        for r in range(DP):
            subs.append(ctx.socket(zmq.SUB))
            subs[r].setsockopt(zmq.SUBSCRIBE, b"")
            subs[r].connect(f"tcp://127.0.0.1:{base + r}")
            dealers.append(ctx.socket(zmq.DEALER))
            dealers[r].connect(f"tcp://127.0.0.1:{base + DP + r}")
        time.sleep(1.0)  # the subscriptions reach the publishers (a PUB drops before that)

        def live(r):
            messages.append({"rank": r, "socket": "pub",
                             "frames": receive(zmq, subs[r], f"live batch from rank {r}")})

        def replay(r, start):
            dealers[r].send_multipart([b"", start.to_bytes(8, "big")])
            while True:
                frames = receive(zmq, dealers[r], f"replay answer from rank {r}")
                messages.append({"rank": r, "socket": "replay", "request": start, "frames": frames})
                if frames[-2] == END_SEQ:
                    return

        for r in range(DP):
            e.publish(r, 1)
            live(r)
            replay(r, 0)
        for _ in range(LIVE - 1):
            for r in range(DP):
                e.publish(r, 1)
                live(r)
        for r in range(DP):
            replay(r, BEFORE + 1)
    finally:
        e.close()
        for s in subs + dealers:
            s.close(linger=0)
    verify(engine, engines.ENGINES[engine], messages)
    ledger = e.expected()
    lookups = lookup_cases(engine, e, ledger)
    profile = engines.ENGINES[engine]
    header = {
        "engine": profile.package, "version": profile.version, "topic": TOPIC, "dp": DP,
        "replay_frames": profile.replay_frames, "before_attach": [BEFORE] * DP,
        "live": [LIVE] * DP, "expected": ledger.totals(), "skipped_field_names": ledger.skipped,
        "lookups": lookups,
        "scenario": f"{BEFORE} batches per rank before a subscriber (replay only), then "
                    f"{LIVE} live per rank; replay answers from 0 on the first live batch and "
                    f"from {BEFORE + 1} at the end",
        "regenerate": "scripts/record_engine_events.py " + engine,
    }
    path = os.path.join(OUT, f"{engine}.jsonl")
    write_recording(path, header, messages)
    print(f"{ME}: {os.path.relpath(path, ROOT)}: {len(messages)} messages, "
          f"{os.path.getsize(path) // 1024} KB")


def lookup_cases(engine, e, ledger):
    """The engine's lookup requests with their expected rows (engines.Engine.lookup_cases), each
    checked to end as its request was made to (the GPU row's reason; the tier copy of "evicted"
    held in full: by hash in vLLM's placeholder tier, by tokens in SGLang's)."""
    cases = e.lookup_cases(ledger)
    for case in cases:
        gpu = case["rows"][0]
        if gpu["reason"] != case["reason"]:
            sys.exit(f"{ME}: {engine}: lookup {case['name']}: GPU row {gpu}, expected reason "
                     f"{case['reason']} (the workload changed? see engines.Engine.lookup_requests)")
    tier = next(c for c in cases if c["name"] == "evicted")["rows"][-1]
    if tier["medium"] == "GPU" or tier["reason"] != "all_held" or (
            tier["by_hash"] != (e.profile.package == "vllm")):
        sys.exit(f"{ME}: {engine}: lookup evicted: {tier}, expected a tier holding all of it, "
                 "by hash in vLLM (engines.Engine.offload_lookup)")
    return [{k: v for k, v in case.items() if k != "reason"} for case in cases]


def verify(engine, profile, messages):
    """Every batch came, live or by replay, in the engine's framing, the same bytes both ways."""
    def fail(why):
        sys.exit(f"{ME}: {engine}: {why}; rerun: scripts/record_engine_events.py {engine}")

    for r in range(DP):
        pub = {seq_of(m["frames"]): m["frames"] for m in messages
               if m["rank"] == r and m["socket"] == "pub"}
        if sorted(pub) != list(range(BEFORE, BEFORE + LIVE)):
            fail(f"rank {r}: live batches {sorted(pub)}, expected {BEFORE}..{BEFORE + LIVE - 1}")
        for start, seqs in ((0, range(BEFORE + 1)), (BEFORE + 1, range(BEFORE + 1, BEFORE + LIVE))):
            answer = [m["frames"] for m in messages if m["rank"] == r and m.get("request") == start]
            if [seq_of(f) for f in answer] != [*seqs, int.from_bytes(END_SEQ, "big")]:
                fail(f"rank {r}: the replay from {start} answered {[seq_of(f) for f in answer]}")
            if any(len(f) != profile.replay_frames for f in answer):
                fail(f"rank {r}: replay answers of {sorted({len(f) for f in answer})} frames, "
                     f"engines.py says {profile.replay_frames}")
            if any(f[-1] != pub[seq_of(f)][-1] for f in answer if seq_of(f) in pub):
                fail(f"rank {r}: a replayed payload differs from the one published live")


def main():
    engine_python(ME)
    import engines  # the engines' environment has its msgspec and pydantic
    import zmq

    wanted = sys.argv[1:] or ["vllm-0.33.0", "vllm-0.25.0", "sglang-0.5.23"]
    unknown = [x for x in wanted if x not in engines.ENGINES]
    if unknown:
        sys.exit(f"{ME}: unknown engine {unknown[0]} "
                 f"(expected one of {', '.join(engines.ENGINES)})")
    os.makedirs(OUT, exist_ok=True)
    for engine in wanted:
        record(engine, zmq, engines)


if __name__ == "__main__":
    main()
