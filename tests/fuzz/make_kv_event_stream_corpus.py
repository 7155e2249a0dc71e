#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_kv_event_stream (tests/fuzz/corpus/kv_event_stream/): msgpack
EventBatch payloads in both engine layouts and every hash form, plus a few broken ones (our own
synthetic data, well under a KB each). Needs python3-msgpack.
Usage: make_kv_event_stream_corpus.py"""
import hashlib
import os

import msgpack

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "kv_event_stream")


def put(name, obj=None, raw=None):
    os.makedirs(OUT, exist_ok=True)
    data = raw if raw is not None else msgpack.packb(obj, use_bin_type=True)
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def digest(n):
    return hashlib.sha256(f"block {n}".encode()).digest()


def tokens(blocks, bs=4):
    return list(range(blocks * bs))


# SGLang / vLLM before its map encoding: positional arrays, int64 hashes (some negative).
put("sglang_array.msgpack", [1700000000.25, [
    ["BlockStored", [11, -12], None, tokens(2), 4, None],
    ["BlockStored", [13], -12, tokens(1), 4, None],
    ["BlockRemoved", [11]],
    ["AllBlocksCleared"]]])
# vLLM positional with every BlockStored field and a data-parallel rank.
put("vllm_array_full.msgpack", [1.5, [
    ["BlockStored", [2**64 - 1, 7], None, tokens(2), 4, 3, "CPU", "lora-a",
     [["mm", 1], None], 1, "full_attention", None],
    ["BlockRemoved", [7], "CPU", 1]], 2])
# Newer vLLM: maps, sha256 digests as bytes, omitted defaults, an unknown key.
put("vllm_map_bytes.msgpack", {"ts": 2.0, "data_parallel_rank": 0, "events": [
    {"type": "BlockStored", "block_hashes": [digest(1), digest(2)],
     "parent_block_hash": digest(0), "token_ids": tokens(2, 16), "block_size": 16,
     "lora_id": None, "medium": "GPU", "lora_name": None, "new_field": True},
    {"type": "BlockRemoved", "block_hashes": [digest(1)], "medium": "GPU"},
    {"type": "AllBlocksCleared"}]})
# vLLM 0.33: every field it has (locality, ownership, session_id, lookahead tokens, extra keys),
# an offload tier's placeholder store (token_ids [], block_size 0) and a hybrid model's 528-token
# attention block in group 1.
put("vllm_033_fields.msgpack", [6.0, [
    {"type": "BlockStored", "block_hashes": [digest(3), 2**63 + 5], "parent_block_hash": None,
     "token_ids": tokens(2), "block_size": 4, "lora_id": None, "medium": "GPU",
     "lora_name": "sql", "extra_keys": [["sql"], ["sql", ["img", 0], "salt"]], "group_idx": 0,
     "kv_cache_spec_kind": "full_attention", "locality": "REMOTE", "ownership": "lmcache",
     "session_id": "s1", "lookahead_token_ids": [[1], []]},
    {"type": "BlockStored", "block_hashes": [digest(3)], "parent_block_hash": None,
     "token_ids": [], "block_size": 0, "lora_id": None, "medium": "STORAGE", "lora_name": None},
    {"type": "BlockStored", "block_hashes": [7], "parent_block_hash": None,
     "token_ids": list(range(528)), "block_size": 528, "lora_id": None, "medium": "GPU",
     "lora_name": None, "group_idx": 1, "kv_cache_spec_kind": "sliding_window",
     "kv_cache_spec_sliding_window": 4096},
    {"type": "BlockRemoved", "block_hashes": [digest(3)], "medium": "GPU", "locality": "REMOTE",
     "ownership": "lmcache"},
    {"type": "AllBlocksCleared"}], 1])
# SGLang 0.5.23: tagged maps too, its media, cache_salt and session_id, negative hashes.
put("sglang_0523_fields.msgpack", [7.0, [
    {"type": "BlockStored", "block_hashes": [-3, -4], "parent_block_hash": None,
     "token_ids": tokens(2, 1), "block_size": 1, "lora_id": None, "medium": "CPU_PINNED",
     "cache_salt": "tenant", "session_id": "chat"},
    {"type": "BlockRemoved", "block_hashes": [-4], "medium": "CPU_PINNED"}], 0])
# An event type from the future, and trailing fields: skipped and counted.
put("unknown_tag.msgpack", [3.0, [["KVCacheMetrics", 1, 2], {"type": "BlockPinned"},
                                  ["BlockRemoved", [5], None, 0, "extra"]]])
# Broken: a hash of the wrong type, a missing field, not msgpack, a hostile size.
put("float_hash.msgpack", [4.0, [["BlockRemoved", [1.5]]]])
put("missing_tokens.msgpack", [5.0, [["BlockStored", [1], None]]])
put("not_msgpack.bin", raw=b"\xc1\x00\x01")
put("huge_array.bin", raw=b"\x92\xcb" + b"\x00" * 8 + b"\xdd\xff\xff\xff\xff")
