#!/usr/bin/env python3
"""`kvscope attach` against a recording of an engine's own publisher (tests/data/engines/*.jsonl,
made by scripts/record_engine_events.py), served again through real ZeroMQ sockets.

Per rank an XPUB socket sends the recorded live messages (on the wire a PUB; XPUB so that the
server sees kvscope's subscription before it sends), and a ROUTER answers each replay request
[identity, "", start_seq] with the recorded answer frames, byte for byte, of every batch from
start_seq on that the engine had published by then, then the recorded end marker. Cases:

  replay  the batches recorded before attach come only by replay (they were never live), the
          live ones live
  gap     the same with the third live batch of every rank kept off the wire: one gap per rank,
          filled from the recorded answers

Each must report every total of the recording's header (batches, events by type, blocks stored,
removed, cleared, live in all / per rank / per medium, unknown parents and removals, churn,
skipped fields and decode errors: what the engine published), nothing lost, the engine's replay
framing, and exactly the history (plus the gaps) replayed.

Then "why did my prefix miss?" on the real stream: for each lookup request of the header (its
prompt's token ids, the LoRA it runs with, the rows the engine's own records give: held in full,
evicted from the GPU at a known batch but kept by a tier (vLLM's placeholders, matched by hash;
SGLang's CPU_PINNED copy), stored under a LoRA or with extra keys / a cache salt, dropped by
AllBlocksCleared, never stored, shorter than a block; engines.Engine.lookup_requests),
`kvscope lookup REPLAY_OUT --prompt FILE --json [--lora NAME]` on the replay case's output, and
the gap case's `kvscope attach --lookup` of "evicted", must give every expected field of every
expected row (one check each). Needs python3-zmq only: no engine code, no download. Regenerate
the recordings: scripts/record_engine_events.py.

usage: replay_recording.py KVSCOPE RECORDING WORK_DIR
Prints "N passed, M failed"; exit 1 on any failure.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, attach, expect, expect_lookup, finish, free_ports, read_recording  # noqa: E402

try:
    import zmq
except ImportError as e:  # pragma: no cover - a clear line instead of a traceback
    sys.exit(f"replay_recording.py: {e}; apt-get install python3-zmq")

ME = "replay_recording.py"
END_SEQ = (1 << 64) - 1
check = Checks()


def seq_of(frames):
    return int.from_bytes(frames[-2], "big")


class Server:
    """The recording's sockets for dp ranks at base + rank (replay at base + dp + rank)."""

    def __init__(self, header, messages, base):
        self.dp = dp = header["dp"]
        ctx = zmq.Context.instance()
        self.pubs = [ctx.socket(zmq.XPUB) for _ in range(dp)]
        self.routers = [ctx.socket(zmq.ROUTER) for _ in range(dp)]
        for r in range(dp):
            self.pubs[r].bind(f"tcp://127.0.0.1:{base + r}")
            self.routers[r].bind(f"tcp://127.0.0.1:{base + dp + r}")
        self.answers = [{} for _ in range(dp)]  # seq -> the recorded answer frames
        self.ends = [None] * dp                 # the recorded end marker
        for m in messages:
            if m["socket"] == "replay":
                if seq_of(m["frames"]) == END_SEQ:
                    self.ends[m["rank"]] = m["frames"]
                else:
                    self.answers[m["rank"]][seq_of(m["frames"])] = m["frames"]
        self.published = list(header["before_attach"])  # per rank: seqs below it are published
        self.subscribed = set()
        self.poller = zmq.Poller()
        for s in self.pubs + self.routers:
            self.poller.register(s, zmq.POLLIN)

    def pump(self, timeout_ms):
        """Takes subscriptions and answers replay requests for up to timeout_ms."""
        for sock, _ in self.poller.poll(timeout_ms):
            if sock in self.pubs:
                if sock.recv()[:1] == b"\x01":
                    self.subscribed.add(self.pubs.index(sock))
                continue
            r = self.routers.index(sock)
            identity, _, start = sock.recv_multipart()
            start = int.from_bytes(start, "big")
            for seq in sorted(self.answers[r]):
                if start <= seq < self.published[r]:
                    sock.send_multipart([identity, *self.answers[r][seq]])
            sock.send_multipart([identity, *self.ends[r]])

    def close(self):
        for s in self.pubs + self.routers:
            s.close(linger=0)


def run(kvscope, header, messages, out, name, dropped, extra=()):
    """Serves the recording to `kvscope attach --out OUT [extra]`, the live messages of `dropped`
    (rank, seq) published but kept off the wire; returns its summary."""
    base = free_ports(2 * header["dp"], ME)
    server = Server(header, messages, base)
    proc = attach(kvscope, base, header["dp"], header["expected"]["batches"], out,
                  header["topic"], extra)
    try:
        deadline = time.monotonic() + 10
        while len(server.subscribed) < server.dp and proc.poll() is None:
            if time.monotonic() > deadline:
                check(False, f"{name}: kvscope subscribes within 10 s",
                      f"ranks subscribed: {sorted(server.subscribed)}")
                break
            server.pump(50)
        for m in messages:
            if m["socket"] != "pub":
                continue
            r, seq = m["rank"], seq_of(m["frames"])
            server.published[r] = seq + 1
            if (r, seq) not in dropped:
                server.pubs[r].send_multipart(m["frames"])
            server.pump(5)
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline:
            server.pump(50)
        return finish(check, proc, name)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()


def lookup_flags(case, flag):
    """`flag FILE` for a lookup request's prompt, and --lora NAME when it runs with one."""
    return [flag, case["file"], *(["--lora", case["lora"]] if case["lora"] else [])]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    kvscope, path, work = sys.argv[1:]
    header, messages = read_recording(path)
    recording = f"{header['engine']}-{header['version']}"
    os.makedirs(work, exist_ok=True)
    history = sum(header["before_attach"])
    third_live = {(r, n + 2) for r, n in enumerate(header["before_attach"])}
    if "lookups" not in header:
        sys.exit(f"{ME}: {path}: no lookup requests in its header: regenerate it with "
                 "scripts/record_engine_events.py")
    lookups = header["lookups"]
    for case in lookups:
        case["file"] = os.path.join(work, f"lookup-{case['name']}.json")
        with open(case["file"], "w", encoding="utf-8") as f:
            json.dump(case["prompt"], f)
    evicted = next(c for c in lookups if c["name"] == "evicted")
    for case, dropped, extra in (("replay", set(), ()),
                                 ("gap", third_live, lookup_flags(evicted, "--lookup"))):
        name = f"{recording} {case}"
        out = os.path.join(work, case)
        got = run(kvscope, header, messages, out, name, dropped, extra)
        expect(check, name, got, dict(
            header["expected"], lost=0, gaps=len(dropped), replayed=history + len(dropped),
            replay_frames=header["replay_frames"], restarts=0, bad_frames=0, replay_timeouts=0,
            duplicates=0, other_topics=0))
        if extra:
            expect_lookup(check, f"{name}: attach --lookup {evicted['name']}",
                          got.get("lookup", {}).get("rows", []), evicted["rows"])
    for case in lookups:
        what = f"{recording}: lookup {case['name']}"
        r = subprocess.run([kvscope, "lookup", os.path.join(work, "replay"), "--json",
                            *lookup_flags(case, "--prompt")],
                           capture_output=True, text=True, timeout=30, check=False)
        check(r.returncode == 0, f"{what}: exit 0", f"rc {r.returncode}: {r.stderr.strip()}")
        rows = json.loads(r.stdout).get("rows", []) if r.returncode == 0 else []
        expect_lookup(check, what, rows, case["rows"])
    fields = ", ".join(f"{k} x{n}" for k, n in sorted(header["skipped_field_names"].items()))
    print(f"note  {recording}: fields kvscope does not know (skipped_fields): {fields or 'none'}")
    check.finish()


if __name__ == "__main__":
    main()
