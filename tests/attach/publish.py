#!/usr/bin/env python3
"""Publishes KV-cache event batches over ZeroMQ as vLLM and SGLang do, for `kvscope attach`.

Per data-parallel rank r it binds a publisher at port + r and a replay socket at replay port + r
and speaks the engines' framing: [topic, seq (8 bytes big-endian, from 0), msgpack EventBatch] on
the publisher; on the replay socket [identity, "", start_seq] is answered with
[identity, "", seq, payload] per buffered batch from start_seq on, then
[identity, "", 0xFF x 8, ""] (vLLM <= 0.25, SGLang <= 0.5.21), or with --replay-frames 4 with
[identity, "", topic, seq, payload]... then [identity, "", "", 0xFF x 8, ""] (vLLM >= 0.26,
SGLang >= 0.5.22).

Scenarios:
  e2e     a fixed plan the CTest attach.python_publisher_e2e checks kvscope against: rank 0 in
          newer vLLM's layout (maps, sha256 bytes hashes, GPU and CPU media), rank 1 in SGLang's
          (positional arrays, signed int64 hashes); history published before anyone subscribed
          (kvscope fetches it by replay), batches dropped on purpose (kept for replay), a payload
          that is not msgpack, an event type and a field kvscope does not know, a block removal of
          a hash never stored, AllBlocksCleared, and a restart (rank 1's sequence back to 0).
          Prints one JSON line first: the counts kvscope must report.
  stream  a demo stream for kvscope-ui's Live attach view: one batch per rank every --interval
          seconds until --run-for ends, from a toy prefix cache per rank (shared system prompts,
          two of them under LoRA adapters, conversations that extend their own turns, LRU
          eviction of leaves with half of them offloaded to a CPU tier, and now and then a block
          stored and dropped at once: churn).

--connect makes the publisher connect to --endpoint instead of binding it, as vLLM does when its
endpoint names a host (no `*`): the subscriber binds (`kvscope attach --bind`).

The publisher is an XPUB socket so that it can wait for a subscriber before publishing live
batches (a PUB drops what it sends before the subscription arrives, and the test must know what
was dropped); on the wire XPUB and PUB are the same to a subscriber.

Usage: publish.py [--endpoint tcp://127.0.0.1:5557] [--replay tcp://127.0.0.1:5567] [--dp N]
                  [--topic T] [--scenario e2e|stream] [--interval S] [--run-for S] [--connect]
                  [--replay-frames 3|4]
Needs python3-zmq and python3-msgpack (Debian).
"""

import argparse
import collections
import hashlib
import json
import random
import sys
import time

try:
    import msgpack
    import zmq
except ImportError as e:  # pragma: no cover - a clear line instead of a traceback
    sys.exit(f"publish.py: {e}; apt-get install python3-zmq python3-msgpack")

END_SEQ = b"\xff" * 8
REPLAY_FRAMES = 3  # --replay-frames
BLOCK_SIZE = 16


def rank_endpoint(base, rank):
    """The engines' numbering: tcp port + rank, otherwise a _dp<rank> suffix."""
    if rank == 0:
        return base
    if base.startswith("tcp://"):
        host, port = base.rsplit(":", 1)
        return f"{host}:{int(port) + rank}"
    return f"{base}_dp{rank}"


class RankPublisher:
    """One rank: an XPUB publisher, a ROUTER replay socket and the replay buffer."""

    BUFFER_STEPS = 10_000  # the engines' default replay buffer

    def __init__(self, ctx, endpoint, replay_endpoint, topic, connect=False):
        self.ctx = ctx
        self.topic = topic.encode()
        self.seq = 0
        self.buffer = collections.deque(maxlen=self.BUFFER_STEPS)  # (seq, payload)
        self.pub = ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.SNDHWM, 100_000)
        self.pub.setsockopt(zmq.LINGER, 1000)
        if connect:
            self.pub.connect(endpoint)
        else:
            self.pub.bind(endpoint)
        self.subscribed = False
        self.router = None
        if replay_endpoint:
            self.router = ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 1000)
            self.router.bind(replay_endpoint)
        self.replay_requests = 0

    def publish(self, payload, send=True):
        """Numbers and buffers a batch; send=False drops it on the wire (replay still has it)."""
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, payload))
        if send:
            self.pub.send_multipart([self.topic, seq.to_bytes(8, "big"), payload])
        return seq

    def restart(self):
        """A new engine process: the sequence starts again at 0 and the replay buffer is empty."""
        self.seq = 0
        self.buffer.clear()

    def service(self):
        """Answers waiting replay requests and notes subscriptions; never blocks."""
        while self.pub.poll(0):
            msg = self.pub.recv()
            if msg[:1] == b"\x01":
                self.subscribed = True
        while self.router is not None and self.router.poll(0):
            frames = self.router.recv_multipart()
            if len(frames) != 3:
                continue
            ident, _, start = frames
            start_seq = int.from_bytes(start, "big")
            self.replay_requests += 1
            # Four frames (with the topic) as vLLM >= 0.26 and SGLang >= 0.5.22 answer; three as
            # the older ones do.
            topic = [self.topic] if REPLAY_FRAMES == 4 else []
            for seq, payload in self.buffer:
                if seq >= start_seq:
                    self.router.send_multipart([ident, b"", *topic, seq.to_bytes(8, "big"), payload])
            self.router.send_multipart([ident, b"", *([b""] if topic else []), END_SEQ, b""])

    def close(self):
        self.pub.close()
        if self.router is not None:
            self.router.close()


def service_until(pubs, done, deadline_s, what):
    """Services every rank until done() or the deadline (a poll, not a sleep)."""
    deadline = time.monotonic() + deadline_s
    while not done():
        if time.monotonic() > deadline:
            sys.exit(f"publish.py: timed out waiting for {what}")
        for p in pubs:
            p.service()
        time.sleep(0.005)


# ---- payloads in each engine's layout ---------------------------------------------------------

def vllm_map_batch(ts, events, rank):
    """Newer vLLM: EventBatch and events encoded as maps (msgspec structs without array_like)."""
    return msgpack.packb({"ts": ts, "events": events, "data_parallel_rank": rank},
                         use_bin_type=True)


def vllm_map_stored(hashes, parent, medium, lora_id=None, lora_name=None):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": list(range(len(hashes) * BLOCK_SIZE)), "block_size": BLOCK_SIZE,
            "lora_id": lora_id, "medium": medium, "lora_name": lora_name}


def vllm_map_removed(hashes, medium):
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium}


def sglang_batch(ts, events):
    """SGLang (and vLLM before its map encoding): positional arrays, the tag first."""
    return msgpack.packb([ts, events], use_bin_type=True)


def sglang_stored(hashes, parent):
    return ["BlockStored", hashes, parent, list(range(len(hashes) * BLOCK_SIZE)), BLOCK_SIZE,
            None]


def sglang_removed(hashes):
    return ["BlockRemoved", hashes]


def bytes_hash(n):
    return hashlib.sha256(f"block {n}".encode()).digest()


def int64_hash(n):
    """A signed 64-bit hash, about half of them negative (as SGLang's are)."""
    return int.from_bytes(hashlib.sha256(f"sg {n}".encode()).digest()[:8], "big", signed=True)


# ---- the e2e plan -------------------------------------------------------------------------------

class Expect:
    """What kvscope must report, computed independently: live hashes per (rank, medium)."""

    def __init__(self, dp):
        self.batches = 0
        self.events = {"BlockStored": 0, "BlockRemoved": 0, "AllBlocksCleared": 0}
        self.blocks_stored = 0
        self.live = {}  # (rank, medium) -> set of hashes
        self.decode_errors = 0
        self.restarts = 0
        self.gaps = 0
        self.replayed = 0
        self.skipped_events = 0
        self.unknown_removals = 0
        self.dp = dp

    def stored(self, rank, medium, hashes):
        self.events["BlockStored"] += 1
        self.blocks_stored += len(hashes)
        self.live.setdefault((rank, medium), set()).update(hashes)

    def removed(self, rank, medium, hashes):
        self.events["BlockRemoved"] += 1
        live = self.live.setdefault((rank, medium), set())
        for h in hashes:
            if h in live:
                live.remove(h)
            else:
                self.unknown_removals += 1

    def cleared(self, rank):
        self.events["AllBlocksCleared"] += 1
        self.drop(rank)

    def drop(self, rank):
        for (r, _), live in self.live.items():
            if r == rank:
                live.clear()

    def summary(self):
        by_rank = {str(r): 0 for r in range(self.dp)}
        by_medium = {}
        for (r, m), live in self.live.items():
            by_rank[str(r)] += len(live)
            if live:
                by_medium[m] = by_medium.get(m, 0) + len(live)
        return {"batches": self.batches, "events": self.events,
                "blocks_stored": self.blocks_stored,
                "live_blocks": sum(by_rank.values()), "live_blocks_by_rank": by_rank,
                "live_blocks_by_medium": by_medium, "gaps": self.gaps, "replayed": self.replayed,
                "lost": 0, "decode_errors": self.decode_errors, "restarts": self.restarts,
                "skipped_events": self.skipped_events, "unknown_removals": self.unknown_removals}


def key64(h):
    """kvscope's key of a hash: bytes by their last 8 bytes big-endian, ints as 64 bits."""
    if isinstance(h, bytes):
        return int.from_bytes(h[-8:], "big")
    return h & (2**64 - 1)


def plan_rank0(exp, rng):
    """vLLM map layout on rank 0: list of (payload, phase) with phase history|live|drop."""
    out, chains, n = [], [], 0
    for i in range(10):
        ts = 1_700_000_000.0 + i
        events = []
        if i == 8:
            out.append((b"\xc1 this is not msgpack", "live"))  # counted, skipped
            exp.decode_errors += 1
            continue
        length = rng.randint(1, 4)
        parent = rng.choice(chains)[-1] if chains and rng.random() < 0.5 else None
        hashes = [bytes_hash(n + k) for k in range(length)]
        n += length
        medium = "CPU" if i % 4 == 3 else "GPU"
        events.append(vllm_map_stored(hashes, parent, medium))
        exp.stored(0, medium, [key64(h) for h in hashes])
        if medium == "GPU":
            chains.append(hashes)
        if i == 4 and chains:  # remove the tail of an earlier chain
            victim = chains[0][-1:]
            events.append(vllm_map_removed(victim, "GPU"))
            exp.removed(0, "GPU", [key64(h) for h in victim])
        if i == 7:
            ev = vllm_map_removed([bytes_hash(999_999)], "GPU")  # never stored
            ev["future_field"] = [1, 2, 3]  # a key kvscope does not know: skipped
            events.append(ev)
            exp.removed(0, "GPU", [key64(bytes_hash(999_999))])
        out.append((vllm_map_batch(ts, events, 0), "history" if i < 3 else
                    "drop" if i in (5, 6) else "live"))
    exp.gaps += 1  # 5 and 6 dropped: one jump, from 4 to 7
    exp.replayed += 3 + 2  # the history and the two dropped
    return out


def plan_rank1(exp, rng, first, count, history):
    """SGLang array layout on rank 1; hashes numbered from `first`."""
    out, chains, n = [], [], first
    for i in range(count):
        ts = 1_700_000_100.0 + i
        events = []
        length = rng.randint(1, 3)
        parent = rng.choice(chains)[-1] if chains and rng.random() < 0.5 else None
        hashes = [int64_hash(n + k) for k in range(length)]
        n += length
        events.append(sglang_stored(hashes, parent))
        exp.stored(1, "GPU", [key64(h) for h in hashes])
        chains.append(hashes)
        if i == 2:
            events.append(["KVCacheMetrics", 1, 2])  # an event type kvscope does not know
            exp.skipped_events += 1
        if i == 3:
            victim = chains[0]
            events.append(sglang_removed(victim))
            exp.removed(1, "GPU", [key64(h) for h in victim])
        if i == 5:
            events.append(["AllBlocksCleared"])
            exp.cleared(1)
            chains = []
        out.append((sglang_batch(ts, events), "history" if i < history else "live"))
    exp.replayed += history
    return out


def run_e2e(pubs, exp_dp):
    rng = random.Random(21)
    exp = Expect(exp_dp)
    rank0 = plan_rank0(exp, rng)
    rank1_first = plan_rank1(exp, rng, 0, 7, history=2)
    exp.batches = len(rank0) + len(rank1_first)
    # After the restart: the new process's blocks (the old ones are gone with it).
    exp_restart = Expect(exp_dp)
    rank1_after = plan_rank1(exp_restart, rng, 1000, 4, history=0)
    exp.batches += len(rank1_after)
    exp.restarts += 1
    exp.drop(1)
    for k, v in exp_restart.events.items():
        exp.events[k] += v
    exp.blocks_stored += exp_restart.blocks_stored
    for key, live in exp_restart.live.items():
        exp.live.setdefault(key, set()).update(live)
    exp.skipped_events += exp_restart.skipped_events
    exp.unknown_removals += exp_restart.unknown_removals

    # History: published before anyone listens (lost on the wire, kept for replay).
    for pub, plan in ((pubs[0], rank0), (pubs[1], rank1_first)):
        for payload, phase in plan:
            if phase == "history":
                pub.publish(payload)
    print(json.dumps(exp.summary()), flush=True)  # the checker starts kvscope now
    # Live batches go out once kvscope subscribed and its catch-up replay was answered from the
    # history (so what it gets by replay and what live is fixed, whatever the timing).
    service_until(pubs, lambda: all(p.subscribed and p.replay_requests > 0 for p in pubs), 30,
                  "a subscriber and its replay request")
    for pub, plan in ((pubs[0], rank0), (pubs[1], rank1_first)):
        for payload, phase in plan:
            if phase != "history":
                pub.publish(payload, send=phase != "drop")
            pub.service()
    # Rank 1 restarts (on the same sockets, so the subscriber gets the old batches first, then
    # sees the sequence go back to 0).
    pubs[1].restart()
    for payload, _ in rank1_after:
        pubs[1].publish(payload)
    print("published", flush=True)


class ToyPrefixCache:
    """One rank's prefix cache for the demo stream, emitting the events an engine would."""

    PROMPTS = [  # (system prompt length in blocks, popularity, LoRA adapter (id, name) or None)
        (6, 5, None), (4, 3, None), (5, 2, (1, "sql-lora")), (3, 1, (2, "chat-lora"))]

    def __init__(self, rank, gpu_blocks=384, cpu_blocks=192):
        self.rng = random.Random(100 + rank)
        self.rank = rank
        self.gpu_blocks, self.cpu_blocks = gpu_blocks, cpu_blocks
        self.nodes = {}  # GPU: hash -> {"parent", "kids", "used", "prompt"}
        self.cpu = collections.OrderedDict()  # CPU tier: hash -> None, oldest first
        self.tips = [[] for _ in self.PROMPTS]  # per prompt: conversation leaf hashes
        self.tick = 0
        self.counter = 0
        self.pending_churn = []  # blocks stored last batch, removed this one

    def new_hash(self):
        self.counter += 1
        return bytes_hash(f"r{self.rank} {self.counter}")

    def store_chain(self, events, parent, hashes, prompt):
        lora = self.PROMPTS[prompt][2]
        for h in hashes:
            self.nodes[h] = {"parent": parent, "kids": 0, "used": self.tick, "prompt": prompt}
            if parent is not None:
                self.nodes[parent]["kids"] += 1
            parent = h
        events.append(vllm_map_stored(hashes, events_parent(hashes, self.nodes), "GPU",
                                      *(lora or (None, None))))

    def touch(self, h):
        while h is not None and h in self.nodes:
            self.nodes[h]["used"] = self.tick
            h = self.nodes[h]["parent"]

    def system_prompt(self, events, prompt):
        """The prompt's chain of blocks (stored again where evicted); returns its last hash."""
        parent = None
        missing = []
        for k in range(self.PROMPTS[prompt][0]):
            h = bytes_hash(f"r{self.rank} prompt {prompt} block {k}")
            if h in self.nodes and not missing:
                parent = h
                continue
            missing.append(h)
        if missing:
            self.store_chain(events, parent, missing, prompt)
        return missing[-1] if missing else parent

    def evict(self, events, keep):
        while len(self.nodes) > self.gpu_blocks:
            leaves = [h for h, n in self.nodes.items() if n["kids"] == 0 and h not in keep]
            if not leaves:
                return
            victim = min(leaves, key=lambda h: self.nodes[h]["used"])
            node = self.nodes.pop(victim)
            if node["parent"] in self.nodes:
                self.nodes[node["parent"]]["kids"] -= 1
            for tips in self.tips:
                if victim in tips:
                    tips.remove(victim)
                    if node["parent"] in self.nodes and node["parent"] not in tips:
                        tips.append(node["parent"])
            events.append(vllm_map_removed([victim], "GPU"))
            if self.rng.random() < 0.5:  # offloaded to the CPU tier
                self.cpu[victim] = None
                events.append(vllm_map_stored([victim], None, "CPU"))
                if len(self.cpu) > self.cpu_blocks:
                    old, _ = self.cpu.popitem(last=False)
                    events.append(vllm_map_removed([old], "CPU"))

    def step(self):
        """One batch of events: a request's blocks, evictions, churn."""
        self.tick += 1
        events = []
        if self.pending_churn:
            events.append(vllm_map_removed(self.pending_churn, "GPU"))
            for h in self.pending_churn:
                node = self.nodes.pop(h, None)
                if node and node["parent"] in self.nodes:
                    self.nodes[node["parent"]]["kids"] -= 1
            self.pending_churn = []
        prompt = self.rng.choices(range(len(self.PROMPTS)),
                                  weights=[p[1] for p in self.PROMPTS])[0]
        root_tip = self.system_prompt(events, prompt)
        tips = self.tips[prompt]
        if tips and self.rng.random() < 0.55:  # the next turn of a conversation
            parent = self.rng.choice(tips)
            tips.remove(parent)
        else:  # a new conversation on the shared system prompt
            parent = root_tip
        new = [self.new_hash() for _ in range(self.rng.randint(1, 4))]
        self.store_chain(events, parent, new, prompt)
        tips.append(new[-1])
        self.touch(new[-1])
        if self.rng.random() < 0.12:  # a block stored and dropped at once (aborted request)
            h = self.new_hash()
            self.store_chain(events, new[-1], [h], prompt)
            self.pending_churn.append(h)
        keep = set()
        h = new[-1]
        while h is not None:
            keep.add(h)
            h = self.nodes.get(h, {}).get("parent")
        keep.update(self.pending_churn)
        self.evict(events, keep)
        return events


def events_parent(hashes, nodes):
    """The parent hash a BlockStored of `hashes` names (the first block's)."""
    return nodes[hashes[0]]["parent"]


def run_stream(pubs, interval, run_for):
    caches = [ToyPrefixCache(r) for r in range(len(pubs))]
    deadline = time.monotonic() + run_for
    next_at = time.monotonic()
    while time.monotonic() < deadline:
        for p in pubs:
            p.service()
        if time.monotonic() < next_at:
            time.sleep(0.002)
            continue
        next_at += interval
        for r, p in enumerate(pubs):
            p.publish(vllm_map_batch(time.time(), caches[r].step(), r))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:5557")
    ap.add_argument("--replay", default="tcp://127.0.0.1:5567")
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--topic", default="")
    ap.add_argument("--replay-frames", type=int, choices=(3, 4), default=3)
    ap.add_argument("--scenario", choices=("e2e", "stream"), default="stream")
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--run-for", type=float, default=60.0,
                    help="seconds to keep publishing / answering replays, then exit")
    ap.add_argument("--connect", action="store_true",
                    help="connect the publisher to --endpoint (the subscriber binds)")
    args = ap.parse_args()
    global REPLAY_FRAMES
    REPLAY_FRAMES = args.replay_frames
    if args.scenario == "e2e" and args.dp != 2:
        sys.exit("publish.py: --scenario e2e needs --dp 2")
    ctx = zmq.Context()
    pubs = [RankPublisher(ctx, rank_endpoint(args.endpoint, r),
                          rank_endpoint(args.replay, r) if args.replay else None, args.topic,
                          connect=args.connect)
            for r in range(args.dp)]
    try:
        if args.scenario == "e2e":
            started = time.monotonic()
            run_e2e(pubs, args.dp)
            # Keep answering replays until the checker is done with us.
            service_until(pubs, lambda: time.monotonic() - started > args.run_for, 1e9, "")
        else:
            run_stream(pubs, args.interval, args.run_for)
    except KeyboardInterrupt:
        pass
    finally:
        for p in pubs:
            p.close()
        ctx.term()


if __name__ == "__main__":
    main()
