"""The engines' own KV-event publishers, driven through a workload, and what kvscope must report.

load(ENGINE) runs a publisher module that scripts/engine_publishers.sh keeps in its cache,
unmodified: SGLang 0.5.23's sglang/srt/disaggregation/kv_events.py, or vLLM 0.33.0's, 0.25.0's
or 0.23.0's vllm/distributed/kv_events.py with the vllm/config/kv_events.py it imports. Only
their imports from the rest of the engine are stubbed: SGLang's get_parallel and NetworkAddress;
vLLM's init_logger, the network helpers only a tcp://*:0 endpoint uses, ExternalBlockHash
(bytes | int, as vllm/v1/core/kv_cache_utils.py has it) and vllm/config/utils.py's @config (a
pydantic dataclass forbidding extra fields, as there).

Engine runs that module's ZmqEventPublisher for each data-parallel rank and publishes a
deterministic workload (seeded per engine and rank) in the engine's own vocabulary, as its cache
code fills the fields:
  vLLM    requests' prompts stored on the GPU as chains extending cached prefixes, in KV-cache
          groups 0 (full attention, 16 tokens a block), 1 (sliding window of 1024, 16) and 2
          (a hybrid model's mamba group, 528 tokens a block), with their kv_cache_spec_kind;
          rank 0 with sha256 digests as hashes (32 bytes, vLLM's default), rank 1 with their
          integer form (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: uint64, half of them above 2^63);
          LoRA ids and names, extra_keys (LoRA name, (mm identifier, offset), cache salt, prompt
          embedding digest), session_id and lookahead_token_ids where the version has them;
          blocks offloaded to "CPU" (and "STORAGE" in 0.33) by the offloading connector, as
          placeholders (token_ids [], block_size 0, no parent) or self-describing copies, with
          locality "LOCAL" / "REMOTE" and ownership, and removed from there as stored; GPU
          evictions; AllBlocksCleared on rank 1 (a reset of the GPU prefix cache).
  SGLang  the same shape with signed int64 hashes (half negative), media "GPU" (or absent),
          "CPU_PINNED", "DISK", "EXTERNAL" (HiCache tiers), cache_salt, session_id, lora_name;
          its AllBlocksCleared empties every tier.
publish_malformed() sends, through the same publisher, a batch whose block hash is a float:
valid msgpack that no decoder can read as a hash.

Besides, the workload makes a few lookup requests (Engine.lookup_requests: prompts held in full,
evicted from the GPU but kept by vLLM's placeholder tier, stored under a LoRA or with extra keys
or a cache salt, cleared, never stored), left alone by its random part; Engine.lookup_cases()
gives, from what the workload stored and what became of it, the rows `kvscope lookup` must print
for each ("why did my prefix miss?", docs/attach.md).

Engine.expected() folds what each rank published, in sequence order, into the totals `kvscope
attach --json` must report (the summary's keys, docs/attach.md), leaving out the batches a
scenario says kvscope cannot get. Needs the cache's Python environment (pyzmq, msgspec,
pydantic), the one scripts/engine_publishers.sh prints.
"""
import atexit
import collections
import dataclasses
import hashlib
import logging
import os
import random
import sys
import threading
import time
import types
import typing

import msgspec
import pydantic
from harness import ENGINE_CACHE


@dataclasses.dataclass(frozen=True)
class Profile:
    package: str
    version: str
    replay_frames: int  # the replay answer's frames, as its ZmqEventPublisher._service_replay sends
    tiers: tuple        # the media besides the GPU that its offloading code names
    hashes: tuple       # per rank: "sha256" (32 bytes), "uint64" or "int64"
    block_sizes: tuple  # per KV-cache group: tokens a block
    spec_kinds: tuple   # per KV-cache group: kv_cache_spec_kind (vLLM)


_VLLM_GROUPS = {"block_sizes": (16, 16, 528),
                "spec_kinds": ("full_attention", "sliding_window", "mamba")}
ENGINES = {
    "vllm-0.33.0": Profile("vllm", "0.33.0", 4, ("CPU", "STORAGE"), ("sha256", "uint64"),
                           **_VLLM_GROUPS),
    "vllm-0.25.0": Profile("vllm", "0.25.0", 3, ("CPU",), ("sha256", "uint64"), **_VLLM_GROUPS),
    "vllm-0.23.0": Profile("vllm", "0.23.0", 3, ("CPU",), ("sha256", "uint64"), **_VLLM_GROUPS),
    "sglang-0.5.23": Profile("sglang", "0.5.23", 4, ("CPU_PINNED", "DISK", "EXTERNAL"),
                             ("int64", "int64"), block_sizes=(16,), spec_kinds=(None,)),
}
SLIDING_WINDOW = 1024  # kv_cache_spec_sliding_window of the sliding-window group
VOCAB = 32_000  # token ids below it
LORA = (7, "sql-lora")  # lora_id and lora_name of the workload's LoRA requests

# The event fields kvscope's decoder knows (engine/trace/kv_event_stream.h): positional in this
# order after the tag, or map keys, which may also be vLLM 0.33's and SGLang 0.5.23's newer ones.
# Any other field an engine sends must show in the summary's skipped_fields.
KVSCOPE_FIELDS = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
                    "kv_cache_spec_sliding_window"),
    "BlockRemoved": ("block_hashes", "medium", "group_idx"),
    "AllBlocksCleared": (),
}
KVSCOPE_MAP_FIELDS = {
    "BlockStored": ("locality", "ownership", "session_id", "lookahead_token_ids", "cache_salt"),
    "BlockRemoved": ("locality", "ownership"),
    "AllBlocksCleared": (),
}
EVENT_TYPES = tuple(KVSCOPE_FIELDS)


def _stub(name, **attrs):
    module = sys.modules.setdefault(name, types.ModuleType(name))
    for key, value in attrs.items():
        setattr(module, key, value)


def _run_module(root, member, name):
    """Executes root/member as module `name` (registered first: msgspec resolves a Struct's
    annotations through sys.modules[cls.__module__])."""
    path = os.path.join(root, member)
    with open(path, encoding="utf-8") as f:
        source = f.read()
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 (the engine's own code)
    return module


def _tcp_port_zero(*_args, **_kwargs):
    raise RuntimeError("engines.py: stubbed: tcp://*:0 endpoints need vLLM's network helpers")


def _vllm_config(cls=None, **_kwargs):
    """vllm/config/utils.py's @config: a pydantic dataclass that forbids extra fields."""
    def decorate(c):
        return pydantic.dataclasses.dataclass(c, config=pydantic.ConfigDict(extra="forbid"))
    return decorate if cls is None else decorate(cls)


def load(engine):
    """The publisher module of ENGINE (a key of ENGINES), executed from the cache."""
    profile = ENGINES[engine]
    root = os.path.join(ENGINE_CACHE, engine)
    if not os.path.exists(os.path.join(root, ".complete")):
        sys.exit(f"engines.py: {root}: missing: run scripts/engine_publishers.sh")
    name = engine.replace("-", "_").replace(".", "_") + "_kv_events"
    if profile.package == "sglang":
        for parent in ("sglang", "sglang.srt", "sglang.srt.utils"):
            _stub(parent)
        _stub("sglang.srt.runtime_context", get_parallel=lambda *a, **k: None)
        _stub("sglang.srt.utils.network", NetworkAddress=object)
        return _run_module(root, "sglang/srt/disaggregation/kv_events.py", name)
    for parent in ("vllm", "vllm.utils", "vllm.v1", "vllm.v1.core", "vllm.config"):
        _stub(parent)
    _stub("vllm.logger", init_logger=logging.getLogger)
    _stub("vllm.utils.network_utils", get_ip=_tcp_port_zero, get_tcp_uri=_tcp_port_zero,
          is_valid_ipv6_address=_tcp_port_zero, split_zmq_path=_tcp_port_zero)
    _stub("vllm.v1.core.kv_cache_utils", ExternalBlockHash=bytes | int)
    _stub("vllm.config.utils", config=_vllm_config)
    # Each version's distributed/kv_events.py imports its own config module.
    _run_module(root, "vllm/config/kv_events.py", "vllm.config.kv_events")
    return _run_module(root, "vllm/distributed/kv_events.py", name)


def unknown_fields(event):
    """The fields of `event`, as its engine encodes it, that kvscope does not know: map keys by
    name, positional fields past the known ones by index."""
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(event))
    kind = type(event).__name__
    known = KVSCOPE_FIELDS[kind]
    if isinstance(wire, dict):
        return [k for k in wire
                if k != "type" and k not in known and k not in KVSCOPE_MAP_FIELDS[kind]]
    return [f"#{i}" for i in range(1 + len(known), len(wire))]


class Stored(typing.NamedTuple):
    """What a block the workload stored on the GPU holds (Engine.prompt's values)."""
    parent: object  # the parent block's hash; None for a chain's first block
    tokens: list
    lora: tuple     # (lora_id, lora_name), or None
    keys: tuple     # namespace_keys(): () in the base namespace or the LoRA's
    group: int      # the KV-cache group


def namespace_keys(ev, i):
    """What puts block i of a BlockStored in a namespace besides its LoRA, as the engine
    published it: its extra_keys entry (less the LoRA name vLLM puts first) and its cache_salt;
    () for none: the base namespace, or the LoRA's."""
    entry = list((getattr(ev, "extra_keys", None) or [None] * (i + 1))[i] or ())
    if entry and ev.lora_name and entry[0] == ev.lora_name:
        entry = entry[1:]
    salt = getattr(ev, "cache_salt", None)
    return tuple(entry) + ((("cache_salt", salt),) if salt else ())


@dataclasses.dataclass
class Block:
    stored_ts: float
    locality: str
    ownership: str


class Ledger:
    """The blocks each rank holds and the counters of kvscope's summary, folded from events with
    their engine's meaning, in kvscope's view (docs/attach.md, engine/trace/kv_event_model.h):

      - a block is keyed by rank, medium, KV-cache group and hash, an absent medium being "GPU"
        and a block its engine calls REMOTE counted under "<medium> (remote)";
      - AllBlocksCleared drops what the engine's clear drops: vLLM's comes from its GPU block
        pool (the offload tiers keep theirs), SGLang's empties every tier; a restart drops all;
      - hashes are kept as published (bytes or int), so that two blocks kvscope's 64-bit keys
        would confuse stay two here;
      - a block that left is remembered with the batch that dropped it (its sequence number,
        given to apply, and ts) and how: "BlockRemoved", "AllBlocksCleared" or "a restart"."""

    COUNTERS = ("batches", "decode_errors", "blocks_stored", "blocks_removed", "blocks_cleared",
                "restored", "unknown_parents", "unknown_removals", "short_lived",
                "skipped_fields", "placeholder_blocks", "clears_gpu_only", "clears_all")

    def __init__(self, dp, package):
        self.package = package
        self.blocks = {}  # (rank, medium, group, hash) -> Block
        self.counts = [collections.Counter() for _ in range(dp)]
        self.peak = [0] * dp
        self.skipped = collections.Counter()  # unknown field name -> times sent
        self.groups = {}  # group -> {"kind", "sliding_window", "block_size", "stored"}
        self.gone = {}  # (rank, medium, group, hash) -> (seq, how, ts): the last time it left
        self.with_tokens = set()  # (rank, medium, group) that a store with token ids reached

    @staticmethod
    def medium(event):
        medium = getattr(event, "medium", None) or "GPU"
        return medium + " (remote)" if getattr(event, "locality", None) == "REMOTE" else medium

    def key(self, rank, event, block_hash):
        return (rank, self.medium(event), getattr(event, "group_idx", None) or 0, block_hash)

    def held(self, rank, medium, group=0):
        """(hash, Block) of what the rank holds in a medium (kvscope's name) and group."""
        return [(k[3], b) for k, b in self.blocks.items() if k[:3] == (rank, medium, group)]

    def live(self, rank):
        return sum(1 for k in self.blocks if k[0] == rank)

    def apply(self, rank, ts, events, seq=None):
        """One batch of the rank (seq: its sequence number, kept for the blocks it drops)."""
        c = self.counts[rank]
        c["batches"] += 1
        for ev in events:
            kind = type(ev).__name__
            c[kind] += 1
            for name in unknown_fields(ev):
                c["skipped_fields"] += 1
                self.skipped[name] += 1
            if kind == "AllBlocksCleared":
                gpu_only = self.package == "vllm"
                c["clears_gpu_only" if gpu_only else "clears_all"] += 1
                self.clear(rank, gpu_only, seq, kind, ts)
            elif kind == "BlockStored":
                self.stored(rank, ts, ev)
            else:
                for h in ev.block_hashes:
                    block = self.blocks.pop(self.key(rank, ev, h), None)
                    if block is None:
                        c["unknown_removals"] += 1
                    else:
                        self.gone[self.key(rank, ev, h)] = (seq, kind, ts)
                        c["blocks_removed"] += 1
                        c["short_lived"] += ts - block.stored_ts < 1.0

    def stored(self, rank, ts, ev):
        c = self.counts[rank]
        group = self.groups.setdefault(getattr(ev, "group_idx", None) or 0, {
            "kind": "", "sliding_window": None, "block_size": 0, "stored": 0})
        group["kind"] = getattr(ev, "kv_cache_spec_kind", None) or group["kind"]
        group["sliding_window"] = (getattr(ev, "kv_cache_spec_sliding_window", None)
                                   or group["sliding_window"])
        group["block_size"] = ev.block_size or group["block_size"]
        if ev.token_ids:
            self.with_tokens.add(self.key(rank, ev, None)[:3])
        parent = ev.parent_block_hash
        if parent is not None and self.key(rank, ev, parent) not in self.blocks:
            c["unknown_parents"] += 1
        for h in ev.block_hashes:
            c["blocks_stored"] += 1
            c["placeholder_blocks"] += not ev.token_ids
            group["stored"] += 1
            if self.key(rank, ev, h) in self.blocks:
                c["restored"] += 1
            else:
                self.blocks[self.key(rank, ev, h)] = Block(
                    ts, getattr(ev, "locality", None), getattr(ev, "ownership", None))
        self.peak[rank] = max(self.peak[rank], self.live(rank))

    def undecodable(self, rank):
        self.counts[rank]["batches"] += 1
        self.counts[rank]["decode_errors"] += 1

    def clear(self, rank, gpu_only=False, seq=None, how="a restart", ts=None):
        """The rank's blocks dropped: its GPU pool's, or all (a restart: the new process holds
        nothing)."""
        for k in [k for k in self.blocks if k[0] == rank and (not gpu_only or k[1] == "GPU")]:
            del self.blocks[k]
            self.gone[k] = (seq, how, ts)
            self.counts[rank]["blocks_cleared"] += 1

    def by(self, field, rank=None):
        return dict(collections.Counter(field(k, b) for k, b in self.blocks.items()
                                        if (rank is None or k[0] == rank) and field(k, b)))

    def totals(self):
        """The summary's keys and values, as `kvscope attach --json` prints them."""
        t = sum(self.counts, collections.Counter())
        out = {k: t[k] for k in self.COUNTERS if not k.startswith("clears")}
        live_by_group = self.by(lambda k, b: str(k[2]))
        out.update(
            events={k: t[k] for k in EVENT_TYPES}, live_blocks=len(self.blocks),
            live_blocks_by_rank={str(r): self.live(r) for r in range(len(self.counts))},
            live_blocks_by_medium=self.by(lambda k, b: k[1]),
            live_blocks_by_ownership=self.by(lambda k, b: b.ownership),
            live_blocks_by_group={str(g): dict(info, live=live_by_group.get(str(g), 0))
                                  for g, info in self.groups.items()},
            skipped_events=0,
            **{"clear_scope.clears_gpu_only": t["clears_gpu_only"],
               "clear_scope.clears_all": t["clears_all"]})
        out["ranks"] = [{"rank": r, "batches": c["batches"], "decode_errors": c["decode_errors"],
                         "events": {k: c[k] for k in EVENT_TYPES},
                         "blocks_stored": c["blocks_stored"], "blocks_removed": c["blocks_removed"],
                         "live_blocks": self.live(r), "peak_live_blocks": self.peak[r],
                         "live_blocks_by_medium": self.by(lambda k, b: k[1], r)}
                        for r, c in enumerate(self.counts)]
        return out


class Engine:
    """dp ranks of ENGINE's ZmqEventPublisher, the workload they publish, and what they held."""

    LOOKUP_OFFLOAD_STEP, LOOKUP_EVICT_STEP = 9, 12  # of the lookup request "evicted" (rank 0)

    def __init__(self, engine, kv, base, dp=2, topic="kv", buffer_steps=10_000, epoch=None):
        self.engine, self.kv, self.base, self.dp = engine, kv, base, dp
        self.profile = ENGINES[engine]
        self.topic, self.buffer_steps = topic, buffer_steps
        self.epoch = time.time() if epoch is None else epoch
        self.pubs = [self.open(r) for r in range(dp)]
        self.rng = [random.Random(f"{engine}/{r}") for r in range(dp)]
        self.lookup_rng = [random.Random(f"{engine}/{r}/lookups") for r in range(dp)]
        self.lookup_chains = {}  # (rank, lookup request) -> its GPU chain's hashes
        self.steps = [0] * dp      # batches made per rank (their ts: epoch + 0.25 s each)
        self.made = [0] * dp       # hashes made per rank
        self.seq = [0] * dp        # the publisher's next sequence number
        self.history = [[] for _ in range(dp)]  # (seq, ts, events | None), or None: a restart
        # What each rank holds, which the workload picks from; the prompts behind its blocks.
        self.cache = Ledger(dp, self.profile.package)
        self.prompt = {}  # (rank, hash) -> Stored: what each block the workload stored holds
        self.pinned = set()  # (rank, hash) of the lookup requests' blocks: no random pick of them
        self.lookups = []  # lookup requests: {"name", "rank", "lora", "prompt", "reason"}
        self.lookup_tier = {}  # rank -> the placeholder medium their offloaded blocks went to

    def open(self, rank):
        # As an engine is configured: "tcp://*:port" binds (a host name would make the PUB
        # connect to it, for `kvscope attach --bind`).
        rank_kw = "attn_dp_rank" if self.profile.package == "sglang" else "data_parallel_rank"
        return self.kv.ZmqEventPublisher(
            **{rank_kw: rank}, endpoint=f"tcp://*:{self.base}",
            replay_endpoint=f"tcp://*:{self.base + self.dp}",
            buffer_steps=self.buffer_steps, topic=self.topic)

    # ---- the workload ---------------------------------------------------------------------

    def new_hash(self, rank, label=None):
        """The rank's next block hash (the workload's series), or the one named `label`."""
        if label is None:
            self.made[rank] += 1
        name = f"{self.engine}/{rank}/{self.made[rank] if label is None else label}"
        digest = hashlib.sha256(name.encode()).digest()
        form = self.profile.hashes[rank % len(self.profile.hashes)]
        if form == "sha256":
            return digest
        if form == "uint64":  # vLLM's maybe_convert_block_hash
            return int.from_bytes(digest, "big") & ((1 << 64) - 1)
        return int.from_bytes(digest[:8], "big", signed=True)

    def event(self, cls_name, **fields):
        """One of the engine's events, given the fields its version has (the others dropped)."""
        cls = getattr(self.kv, cls_name)
        return cls(**{k: v for k, v in fields.items() if k in cls.__struct_fields__})

    def group_spec(self, group):
        kind = self.profile.spec_kinds[group]
        return {"group_idx": group if kind else None, "kv_cache_spec_kind": kind,
                "kv_cache_spec_sliding_window": SLIDING_WINDOW if kind == "sliding_window"
                else None}

    def prompt_store(self, rank, rng, group):
        """A request's new blocks on the GPU, extending a cached prefix of the group or not."""
        cached = [h for h, _ in self.held(rank, "GPU", group)]
        parent = rng.choice(cached) if cached and rng.random() < 0.6 else None
        size = self.profile.block_sizes[group]
        n = 1 if size > 16 else rng.randint(1, 3)
        hashes = [self.new_hash(rank) for _ in range(n)]
        tokens = [rng.randrange(VOCAB) for _ in range(n * size)]
        lora = rng.choice([None, None, LORA])
        salt = rng.choice([None, "tenant-a"])
        extra = [(*([lora[1]] if lora else []), (f"img-{rng.getrandbits(32):08x}", 0), *(
            [salt] if salt else []), hashlib.sha256(bytes(i)).digest()[:8]) for i in range(n)]
        sglang = self.profile.package == "sglang"
        ev = self.event(
            "BlockStored", block_hashes=hashes, parent_block_hash=parent, token_ids=tokens,
            block_size=size, lora_id=lora and lora[0], lora_name=lora and lora[1],
            medium=rng.choice(["GPU", None]) if sglang else "GPU",
            extra_keys=extra if rng.random() < 0.5 else None, cache_salt=salt,
            session_id=rng.choice([None, f"sess-{rank}-{rng.randrange(4)}"]),
            lookahead_token_ids=[[rng.randrange(VOCAB)] for _ in hashes]
            if rng.random() < 0.3 else None, **self.group_spec(group))
        prev = parent
        for i, h in enumerate(hashes):
            self.prompt[(rank, h)] = Stored(prev, tokens[i * size:(i + 1) * size], lora,
                                            namespace_keys(ev, i), group)
            prev = h
        return ev

    def held(self, rank, medium, group):
        """(hash, Block) the rank holds in a medium and group, less the lookup requests' blocks
        (which the random workload leaves alone)."""
        return [(h, b) for h, b in self.cache.held(rank, medium, group)
                if (rank, h) not in self.pinned]

    def in_tier(self, rank, tier, group):
        """(hash, Block) of the rank's blocks in a tier, LOCAL or REMOTE."""
        return self.held(rank, tier, group) + self.held(rank, tier + " (remote)", group)

    def offload(self, rank, rng, tier, group):
        """A GPU block copied to another tier (LOCAL or REMOTE, by its own or a secondary
        tier): a placeholder (vLLM's offloading connector without self-describing events) or
        the block's own payload."""
        there = {h for h, _ in self.in_tier(rank, tier, group)}
        gpu = [h for h, _ in self.held(rank, "GPU", group) if h not in there]
        if not gpu:
            return []
        h = rng.choice(gpu)
        parent, tokens, lora = self.prompt[(rank, h)][:3]
        where = {"medium": tier, "locality": rng.choice(["LOCAL", "REMOTE"]),
                 "ownership": rng.choice([None, "tier-peer-3"]), **self.group_spec(group)}
        if self.profile.package == "vllm" and rng.random() < 0.5:
            return [self.event("BlockStored", block_hashes=[h], parent_block_hash=None,
                               token_ids=[], block_size=0, lora_id=None, lora_name=None, **where)]
        return [self.event("BlockStored", block_hashes=[h], parent_block_hash=parent,
                           token_ids=tokens, block_size=self.profile.block_sizes[group],
                           lora_id=lora and lora[0], lora_name=lora and lora[1], **where)]

    def evict(self, rank, rng, group, most):
        """Up to `most` GPU blocks of the group evicted."""
        held = [h for h, _ in self.held(rank, "GPU", group)]
        if not held:
            return []
        return [self.event("BlockRemoved", block_hashes=rng.sample(held, min(most, len(held))),
                           medium="GPU", **self.group_spec(group))]

    def evict_tier(self, rank, rng, tier, group):
        """A block dropped from a tier, named as the tier stored it."""
        held = self.in_tier(rank, tier, group)
        if not held:
            return []
        h, block = rng.choice(held)
        return [self.event("BlockRemoved", block_hashes=[h], medium=tier, locality=block.locality,
                           ownership=block.ownership, **self.group_spec(group))]

    def workload(self, rank):
        """The events of the rank's next batch (from its own seeded generator)."""
        rng, step, p = self.rng[rank], self.steps[rank], self.profile
        events = [self.prompt_store(rank, rng, 0)]
        if len(p.block_sizes) > 1 and step % 4 in (1, 3):
            events.append(self.prompt_store(rank, rng, 2 if step % 8 == 3 else 1))
        if step % 3 == 2:
            events += self.offload(rank, rng, p.tiers[step // 3 % len(p.tiers)], 0)
        if step % 4 == 3:
            events += self.evict(rank, rng, 0, 2)
        if step % 6 == 5:
            events += self.evict_tier(rank, rng, p.tiers[step // 6 % len(p.tiers)], 0)
        if rank == 1 and step == 13:
            events.append(self.event("AllBlocksCleared"))
        return events + self.lookup_requests(rank, step, events)

    # ---- requests with known lookups -----------------------------------------------------------

    def lookup_requests(self, rank, step, batch):
        """The events of the lookup requests (requests whose lookups lookup_cases() answers) in
        the batch of `step`, after its workload events. Their blocks are pinned: the random
        workload neither extends, offloads nor evicts them. All on the GPU, KV-cache group 0:
          step 0, rank 0   stored, each one chain from the root: "held", 3 blocks (its prompt
                           has 5 tokens more); "evicted", 4 blocks; "lora", 3 blocks under LORA
                           (looked up without the adapter, and with it as "lora_with_lora");
                           "extra", vLLM: 3 blocks, the 2nd and 3rd with an image's extra keys,
                           SGLang: 2 blocks with a cache_salt. Never stored: "never" (2 blocks
                           and 3 tokens) and "short" (10 tokens)
          step 0, rank 1   "cleared", 3 blocks, dropped by the rank's AllBlocksCleared (step 13)
          step 9, rank 0   "evicted" copied to a tier (lookup_tier): by vLLM's offloading
                           connector as placeholders, to the first tier medium that has had only
                           placeholders; by SGLang's HiCache with its tokens, to CPU_PINNED
          step 12, rank 0  the GPU evicts "evicted"'s 3rd block
        (scripts/record_engine_events.py: step 9 is a rank's last batch before attach, step 12
        its batch kept off the wire in replay_recording.py's gap case.)"""
        events = []
        if step == 0 and rank == 0:
            events += [self.request(rank, "held", "all_held", 3, tail=5),
                       self.request(rank, "evicted", "removed", 4),
                       self.request(rank, "lora", "other_namespace", 3, lora=LORA)]
            self.lookups.append(dict(self.lookups[-1], name="lora_with_lora", lora=LORA[1],
                                     reason="all_held"))
            if self.profile.package == "vllm":
                image = ("img-00c0ffee", 0)
                events.append(self.request(rank, "extra", "other_namespace", 3,
                                           extra_keys=[None, (image,), (image,)]))
            else:
                events.append(self.request(rank, "extra", "other_namespace", 2,
                                           cache_salt="tenant-b"))
            self.request(rank, "never", "never_stored", 2, tail=3, store=False)
            self.request(rank, "short", "shorter_than_block", 0, tail=10, store=False)
        elif step == 0 and rank == 1:
            events.append(self.request(rank, "cleared", "removed", 3))
        elif step == self.LOOKUP_OFFLOAD_STEP and rank == 0:
            events += self.offload_lookup(rank, self.lookup_chains[(rank, "evicted")], batch)
        elif step == self.LOOKUP_EVICT_STEP and rank == 0:
            events.append(self.event("BlockRemoved", medium="GPU", **self.group_spec(0),
                                     block_hashes=[self.lookup_chains[(rank, "evicted")][2]]))
        return events

    def request(self, rank, name, reason, blocks, tail=0, lora=None, store=True, **fields):
        """A lookup request `name`, made to end with `reason` on the GPU: a prompt of `blocks`
        full blocks of group 0 and `tail` tokens over (from the rank's own seeded generator),
        and unless store=False the BlockStored of its full blocks, one chain from the root,
        pinned."""
        rng, size = self.lookup_rng[rank], self.profile.block_sizes[0]
        prompt = [rng.randrange(VOCAB) for _ in range(blocks * size + tail)]
        self.lookups.append({"name": name, "rank": rank, "lora": None, "prompt": prompt,
                             "reason": reason})
        if not store:
            return None
        hashes = [self.new_hash(rank, f"lookup/{name}/{i}") for i in range(blocks)]
        self.lookup_chains[(rank, name)] = hashes
        ev = self.event("BlockStored", block_hashes=hashes, parent_block_hash=None,
                        token_ids=prompt[:blocks * size], block_size=size,
                        lora_id=lora and lora[0], lora_name=lora and lora[1], medium="GPU",
                        **fields, **self.group_spec(0))
        for i, h in enumerate(hashes):
            self.prompt[(rank, h)] = Stored(hashes[i - 1] if i else None,
                                            prompt[i * size:(i + 1) * size], lora,
                                            namespace_keys(ev, i), 0)
            self.pinned.add((rank, h))
        return ev

    def offload_lookup(self, rank, chain, batch):
        """A lookup request's chain copied to a tier (lookup_tier[rank] its medium), pinned. SGLang:
        HiCache's copy to its first tier, as the GPU stored it (tokens, parent, no cache_salt).
        vLLM: the offloading connector's placeholders (token_ids [], block_size 0, no parent) in
        the first tier medium (LOCAL, then REMOTE, where the version has locality) that no store
        with token ids has reached so far, this batch included, in group 0; no copy when there is
        no such medium."""
        if self.profile.package == "sglang":
            tier, size = self.profile.tiers[0], self.profile.block_sizes[0]
            self.lookup_tier[rank] = tier
            self.pinned.update((rank, h) for h in chain)
            return [self.event("BlockStored", block_hashes=list(chain), parent_block_hash=None,
                               token_ids=[t for h in chain for t in self.prompt[(rank, h)].tokens],
                               block_size=size, lora_id=None, lora_name=None, medium=tier)]
        with_tokens = {k[1] for k in self.cache.with_tokens if k[0] == rank and k[2] == 0}
        with_tokens |= {Ledger.medium(ev) for ev in batch if type(ev).__name__ == "BlockStored"
                        and ev.token_ids and (getattr(ev, "group_idx", None) or 0) == 0}
        localities = (("LOCAL", "REMOTE") if "locality" in self.kv.BlockStored.__struct_fields__
                      else (None,))
        for tier in self.profile.tiers:
            for locality in localities:
                ev = self.event("BlockStored", block_hashes=list(chain), parent_block_hash=None,
                                token_ids=[], block_size=0, lora_id=None, lora_name=None,
                                medium=tier, locality=locality, **self.group_spec(0))
                if Ledger.medium(ev) not in with_tokens:
                    self.lookup_tier[rank] = Ledger.medium(ev)
                    self.pinned.update((rank, h) for h in chain)
                    return [ev]
        return []

    def lookup_cases(self, ledger):
        """The lookup requests with the rows `kvscope lookup --json` must print for each, by
        lookup_rows(); `ledger` is what kvscope receives (expected())."""
        return [dict(case, rows=self.lookup_rows(ledger, case)) for case in self.lookups]

    def lookup_rows(self, ledger, case):
        """A lookup request's rows, from what the workload stored (self.prompt: each GPU block's
        tokens, parent and namespace) and what `ledger` says became of it (held, or gone: in
        which batch, when, how), by the rules of docs/attach.md "Why did my prefix miss?": the
        rank's GPU row of group 0 (matched by token ids along the parent chain, in the
        request's namespace) and, where lookup_tier names one for the rank, that tier medium's:
        by token ids too, or where it has had only placeholders, by hash (the prompt's chain as
        the engine stored it)."""
        rank, lora, prompt = case["rank"], case["lora"], case["prompt"]
        size = self.profile.block_sizes[0]
        blocks = [prompt[i:i + size] for i in range(0, len(prompt) - size + 1, size)]
        tier = self.lookup_tier.get(rank)
        by_hash = (rank, tier, 0) not in ledger.with_tokens  # a tier of placeholders only

        def stored(prev, tokens):
            return [h for (r, h), s in self.prompt.items()
                    if r == rank and s.group == 0 and s.parent == prev and s.tokens == tokens]

        def mine(h):
            s = self.prompt[(rank, h)]
            return (s.lora and s.lora[1]) == lora and not s.keys

        def row(medium, matched, reason, gone=None, **more):
            out = {"rank": rank, "medium": medium, "group": 0, "prompt_tokens": len(prompt),
                   "prompt_blocks": len(blocks), "matched_blocks": matched,
                   "matched_tokens": matched * size, "reason": reason, **more}
            if reason == "removed":
                out.update(removed_seq=gone[0], removed_by=gone[1], removed_ts=gone[2])
            return out

        if not blocks:
            return [row(m, 0, "shorter_than_block", by_hash=m == tier and by_hash)
                    for m in ("GPU", tier) if m]

        def live(medium, h):
            return (rank, medium, 0, h) in ledger.blocks

        def by_tokens(medium):
            """The row of a medium whose stores carry token ids (the lookup requests' copies in
            a tier keep their GPU blocks' parents, tokens and namespace)."""
            prev, d = None, 0
            while d < len(blocks):
                held = [h for h in stored(prev, blocks[d]) if mine(h) and live(medium, h)]
                if not held:
                    break
                prev, d = held[0], d + 1
            if d == len(blocks):
                return row(medium, d, "all_held", by_hash=False)
            here = stored(prev, blocks[d])
            other = [self.prompt[(rank, h)] for h in here if not mine(h) and live(medium, h)]
            gone = [ledger.gone[(rank, medium, 0, h)] for h in here
                    if mine(h) and (rank, medium, 0, h) in ledger.gone]
            if other:
                o = other[0]
                name = o.lora and o.lora[1]
                ns = (f"LoRA '{name or 'base'}'" if name != lora else
                      "cache salt" if any(k[0] == "cache_salt" for k in o.keys) else "extra keys")
                return row(medium, d, "other_namespace", other_namespace=ns, by_hash=False)
            if gone:
                return row(medium, d, "removed", max(gone, key=lambda g: g[0]), by_hash=False)
            return row(medium, d, "never_stored", by_hash=False)

        rows = [by_tokens("GPU")]
        if tier and not by_hash:
            rows.append(by_tokens(tier))
        elif tier:
            chain, prev = [], None
            for tokens in blocks:
                mine_here = [h for h in stored(prev, tokens) if mine(h)]
                if not mine_here:
                    break
                prev = mine_here[0]
                chain.append(prev)
            d = 0
            while d < len(chain) and live(tier, chain[d]):
                d += 1
            key = (rank, tier, 0, chain[d]) if d < len(chain) else None
            rows.append(row(tier, d, "all_held" if d == len(blocks) else
                            "no_tokens" if d == len(chain) else
                            "removed" if key in ledger.gone else "never_stored",
                            ledger.gone.get(key), by_hash=True))
        return rows

    # ---- publishing -------------------------------------------------------------------------

    def send(self, rank, events, readable=True):
        """One batch through the rank's publisher, kept in its history (None for the events of
        a batch no decoder can read)."""
        ts = self.epoch + 0.25 * self.steps[rank]
        self.steps[rank] += 1
        self.pubs[rank].publish(self.kv.KVEventBatch(ts=ts, events=events))
        self.history[rank].append((self.seq[rank], ts, events if readable else None))
        self.seq[rank] += 1
        return ts

    def publish(self, rank, n):
        """n workload batches on a rank."""
        for _ in range(n):
            events = self.workload(rank)
            self.cache.apply(rank, self.send(rank, events), events, self.seq[rank] - 1)

    def wait_sent(self):
        """Returns once every publisher thread has sent what was published to it (it marks each
        batch of its queue done after sending it)."""
        for p in self.pubs:
            p._event_queue.join()

    def publish_interleaved(self, n, pause_s):
        """n batches on every rank, one rank after the other, pause_s apart (a live stream)."""
        for _ in range(n):
            for r in range(self.dp):
                self.publish(r, 1)
            time.sleep(pause_s)

    def publish_malformed(self, rank):
        """A batch kvscope must count as a decode error: a float block hash."""
        self.send(rank, [self.event("BlockStored", block_hashes=[0.5], parent_block_hash=None,
                                    token_ids=[1], block_size=1, lora_id=None, medium="GPU",
                                    lora_name=None)], readable=False)

    def restart(self, rank):
        """A new engine process on the same sockets: sequence from 0, nothing cached."""
        atexit.unregister(self.pubs[rank].shutdown)
        self.pubs[rank].shutdown()
        time.sleep(0.3)
        self.pubs[rank] = self.open(rank)
        self.seq[rank] = 0
        self.cache.clear(rank)
        self.history[rank].append(None)

    def close(self):
        """Shuts every rank's publisher down at once (each may wait out its 1 s timeout), and
        drops SGLang's atexit call of it (which would wait that second again, for nothing)."""
        for p in self.pubs:
            atexit.unregister(p.shutdown)
        threads = [threading.Thread(target=p.shutdown) for p in self.pubs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def expected(self, lost=()):
        """The Ledger of what kvscope receives: every published batch in each rank's order,
        except the (rank, seq) in `lost` (seq of the publisher process that was current then)."""
        ledger = Ledger(self.dp, self.profile.package)
        for rank, entries in enumerate(self.history):
            for entry in entries:
                if entry is None:
                    ledger.clear(rank)
                    lost = {x for x in lost if x[0] != rank}  # later seqs are the new process's
                elif (rank, entry[0]) in lost:
                    continue
                elif entry[2] is None:
                    ledger.undecodable(rank)
                else:
                    ledger.apply(rank, entry[1], entry[2], entry[0])
        return ledger
