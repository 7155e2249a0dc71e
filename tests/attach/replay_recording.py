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
framing, and exactly the history (plus the gaps) replayed. Needs python3-zmq only: no engine
code, no download.

usage: replay_recording.py KVSCOPE RECORDING WORK_DIR
Prints "N passed, M failed"; exit 1 on any failure.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, attach, expect, finish, free_ports, read_recording  # noqa: E402

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


def run(kvscope, header, messages, work, name, dropped):
    """Serves the recording to `kvscope attach`, the live messages of `dropped` (rank, seq)
    published but kept off the wire; returns its summary."""
    base = free_ports(2 * header["dp"], ME)
    server = Server(header, messages, base)
    proc = attach(kvscope, base, header["dp"], header["expected"]["batches"],
                  os.path.join(work, name.replace(" ", "-")), header["topic"])
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


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    kvscope, path, work = sys.argv[1:]
    header, messages = read_recording(path)
    recording = f"{header['engine']}-{header['version']}"
    os.makedirs(work, exist_ok=True)
    history = sum(header["before_attach"])
    third_live = {(r, n + 2) for r, n in enumerate(header["before_attach"])}
    for case, dropped in (("replay", set()), ("gap", third_live)):
        name = f"{recording} {case}"
        got = run(kvscope, header, messages, work, name, dropped)
        expect(check, name, got, dict(
            header["expected"], lost=0, gaps=len(dropped), replayed=history + len(dropped),
            replay_frames=header["replay_frames"], restarts=0, bad_frames=0, replay_timeouts=0,
            duplicates=0, other_topics=0))
    fields = ", ".join(f"{k} x{n}" for k, n in sorted(header["skipped_field_names"].items()))
    print(f"note  {recording}: fields kvscope does not know (skipped_fields): {fields or 'none'}")
    check.finish()


if __name__ == "__main__":
    main()
