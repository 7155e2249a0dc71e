#!/usr/bin/env python3
"""Writes the small seed corpora under tests/fuzz/corpus/ (our own synthetic data, a few KB).
Usage: make_corpus.py [KVSCOPE_BINARY]; with a built `kvscope`, the recording seeds are remade too
(`kvscope run --bookkeeping` on the two tiny scenarios below)."""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
rng = random.Random(1234)


def put(target, name, data):
    os.makedirs(os.path.join(ROOT, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(ROOT, target, name), "wb") as f:
        f.write(data)


def floats(n):
    return struct.pack(f"<{n}f", *(rng.uniform(-1, 1) for _ in range(n)))


# --- checkpoints: dim 8, hidden 16, 1 layer, 2 heads, 1 kv head, vocab 16, seq_len 8 ---
dim, hidden, layers, heads, kv_heads, vocab, seq = 8, 16, 1, 2, 1, 16, 8
hd = dim // heads
kv = kv_heads * hd
sizes = {  # floats per tensor, legacy order
    "emb": vocab * dim, "rms_att": layers * dim, "wq": layers * dim * dim,
    "wk": layers * kv * dim, "wv": layers * kv * dim, "wo": layers * dim * dim,
    "rms_ffn": layers * dim, "w1": layers * hidden * dim, "w2": layers * dim * hidden,
    "w3": layers * hidden * dim, "rms_final": dim}
t = {k: floats(n) for k, n in sizes.items()}
rope = floats(seq * hd)
legacy = b"".join(t[k] for k in sizes)
hdr = lambda v: struct.pack("<7i", dim, hidden, layers, heads, kv_heads, v, seq)
put("checkpoint", "legacy_shared.bin", hdr(vocab) + legacy + rope)
put("checkpoint", "legacy_separate.bin", hdr(-vocab) + legacy + rope + floats(vocab * dim))
v1_order = ["rms_att", "rms_ffn", "rms_final", "emb", "wq", "wk", "wv", "wo", "w1", "w2", "w3"]
v1_hdr = struct.pack("<Ii7iB", 0x616B3432, 1, dim, hidden, layers, heads, kv_heads, vocab, seq, 1)
put("checkpoint", "ak42_v1.bin", v1_hdr.ljust(256, b"\0") + b"".join(t[k] for k in v1_order))
put("checkpoint", "truncated.bin", (hdr(vocab) + legacy + rope)[:-5])
put("checkpoint", "bad_heads.bin", struct.pack("<7i", 8, 16, 1, 3, 1, 16, 8) + legacy)
put("checkpoint", "ak42_v2.bin", struct.pack("<Ii", 0x616B3432, 2).ljust(256, b"\0"))

# --- tokenizers: fuzz input = u16 vocab, u8 flags, u8 text length, text, tokenizer.bin ---
def tokenizer(pieces, max_len=None):
    max_len = max_len or max(1, max(len(p) for p in pieces))
    out = struct.pack("<i", max_len)
    for i, p in enumerate(pieces):
        out += struct.pack("<fi", float(-i), len(p)) + p
    return out


def tok_input(pieces, text, flags=1, vocab=None, body=None):
    vocab = len(pieces) if vocab is None else vocab
    body = tokenizer(pieces) if body is None else body
    return struct.pack("<HBB", vocab, flags, len(text)) + text + body


full = [b"<unk>", b"\n<s>\n", b"\n</s>\n"] + [b"<0x%02X>" % b for b in range(256)]
full += [b" ", b"e", b"t", b"he", b" the", b"th", b"a", b"on", b"ce", b" once", b"up"]
put("tokenizer", "full_bytes.bin", tok_input(full, b"once the theta \xe2\x98\x83", flags=3))
put("tokenizer", "full_bytes_no_bos.bin", tok_input(full, b"\n\t\xff\xfe", flags=0))
put("tokenizer", "small_vocab.bin", tok_input([b"<unk>", b"<s>", b"</s>", b" ", b"a", b"b", b"ab"],
                                              b"ab ba", flags=1))
put("tokenizer", "wrong_vocab.bin", tok_input(full, b"x", vocab=512))
put("tokenizer", "truncated.bin", tok_input(full, b"x", body=tokenizer(full)[:-3]))
put("tokenizer", "bad_max_len.bin", tok_input(full, b"x", body=struct.pack("<i", -1)))

# --- Mooncake JSONL: first byte's bit 0 = skip_bad ---
def mc(ts, inp, out, ids):
    return json.dumps({"timestamp": ts, "input_length": inp, "output_length": out,
                       "hash_ids": ids}) + "\n"


good = mc(0, 1000, 20, [0, 1]) + mc(12.5, 1500, 7, [0, 1, 2]) + mc(30, 512, 1, [5])
put("mooncake", "good.jsonl", b"\0" + (good + "\n" + mc(31, 0, 0, [])).encode())
put("mooncake", "crlf_blank.jsonl", b"\0" + good.replace("\n", "\r\n").encode() + b"  \t\n")
bad = mc(0, 1000, 2, [0]) + '{"timestamp": -1}\nnot json\n[1,2]\n' + mc(1, 10, 2, ["x"])
put("mooncake", "bad_strict.jsonl", b"\0" + bad.encode())
put("mooncake", "bad_skip.jsonl", b"\1" + (good + bad).encode())
put("mooncake", "big_numbers.jsonl",
    b"\1" + (mc(1e308, 9223372036854775807, 18446744073709551615, [])).encode())

# --- vLLM / SGLang KV event lines ---
def stored(hashes, parent, bs=2):
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
            "token_ids": list(range(len(hashes) * bs)), "block_size": bs}


lines = [stored([11, 12], None), stored(["ab", "cd"], 12),
         {"type": "BlockRemoved", "block_hashes": [12, 99]}, {"type": "AllBlocksCleared"}]
put("kv_events", "single.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
put("kv_events", "batch.jsonl", json.dumps({"ts": 1.5, "events": lines}) + "\n" +
    json.dumps({"ts": 2, "events": [stored([11], None, 1), {"type": "BlockRemoved",
                                                            "block_hashes": [11]}]}) + "\n")
put("kv_events", "bad_token_count.jsonl",
    json.dumps({**stored([1, 2], None), "token_ids": [1, 2, 3]}) + "\n")
put("kv_events", "bad_type.jsonl", '{"type": "BlockMoved"}\n{"events": 3}\n')
put("kv_events", "huge_block_size.jsonl",
    json.dumps({**stored([1], None), "block_size": 4611686018427387904, "token_ids": []}) + "\n")

# --- scenarios (docs/scenario-format.md; the tiny ones are also the inputs of the recording seeds) ---
tiny = {"format_version": 1, "title": "fuzz seed: two requests in a four-block pool",
        "cache": {"block_size": 4, "num_blocks": 4, "allocator": "paged", "preemption": "recompute"},
        "workload": {"requests": [
            {"arrival_step": 0, "prompt_tokens": [1, 5, 6, 7, 8], "max_new_tokens": 4},
            {"arrival_step": 1, "prompt_tokens": [1, 5, 6, 9], "max_new_tokens": 6}]}}
tiny_swap = {"format_version": 1, "title": "fuzz seed: contiguous with swap",
             "cache": {"block_size": 2, "num_blocks": 6, "allocator": "contiguous",
                       "max_seq_len": 8, "preemption": "swap", "host_blocks": 4},
             "workload": {"requests": [
                 {"arrival_step": 0, "prompt_tokens": [1, 2, 3], "max_new_tokens": 3,
                  "priority": 1},
                 {"arrival_step": 0, "prompt_tokens": [1, 4], "max_new_tokens": 5}]}}
pooled = {"format_version": 1, "title": "pool bytes, text prompt, scheduler",
          "cache": {"block_size": 16, "pool_bytes": 1000000, "victim": "longest",
                    "kv_dtype": "int8"},
          "scheduler": {"max_tokens_per_step": 64, "max_running": 2},
          "workload": {"requests": [{"prompt": "Once upon a time", "max_new_tokens": 8}]}}
generators = {
    "format_version": 1, "title": "generators, prefixes, captions, compare", "description": "d",
    "model": {"synthetic": "stories15m,vocab=512", "bookkeeping": True},
    "cache": {"block_size": 8, "num_blocks": 64, "k_dtype": "int4", "v_dtype": "fp16",
              "prefix_caching": True, "prefix_index": "radix", "cached_block_eviction": "lfu"},
    "sampler": {"temperature": 0.8, "top_p": 0.9, "seed": 3},
    "workload": {
        "prefixes": {"sys": "You are kind."},
        "requests": [{"prompt": {"prefix": "sys", "suffix": "hi"}, "max_new_tokens": 2, "n": 2}],
        "generators": [
            {"type": "shared_prefix", "prefix": "sys", "count": 3, "suffix_tokens": 4,
             "max_new_tokens": {"dist": "uniform", "min": 1, "max": 5}, "arrival": {"every": 2}},
            {"type": "chat", "conversations": 2, "turns": 3, "user_tokens": 3,
             "max_new_tokens": 2, "turn_gap": 5, "seed": 9},
            {"type": "random", "count": 4, "max_new_tokens": 3, "prompt_tokens": {
                "dist": "lognormal", "median": 10, "sigma": 0.5, "min": 2, "max": 40}}]},
    "steps": 50, "captions": [{"step": 0, "caption": "a"}, {"step": 4, "caption": "b"}],
    "compare": {"paged1": {"block_size": 1}, "h2o": {"token_eviction": {
        "policy": "h2o", "budget": 16, "recent": 4}}, "mla": {"mla": {"rank": 8}}}}
put("scenario", "tiny.json", json.dumps(tiny, indent=1))
put("scenario", "tiny_swap.json", json.dumps(tiny_swap))
put("scenario", "pooled_text.json", json.dumps(pooled))
put("scenario", "generators.json", json.dumps(generators))
put("scenario", "unknown_key.json",
    '{"format_version": 1, "cache": {"num_blocks": 4, "colour": 1}, "workload": {}}')
put("scenario", "both_sizes.json", '{"format_version": 1, "cache": {"num_blocks": 4, '
    '"pool_bytes": 9}, "workload": {"requests": [{"prompt_tokens": [1], "max_new_tokens": 0}]}}')
put("scenario", "trace_missing.json", '{"format_version": 1, "cache": {"num_blocks": 4}, '
    '"workload": {"trace": {"mooncake": "no/such.jsonl", "first": 1, "time_scale": 2}}}')
put("scenario", "not_json.json", '{"cache": [1, 2,')

# --- recordings: run the tiny scenarios with kvscope (bookkeeping only), then broken copies ---
if len(sys.argv) > 1:
    with tempfile.TemporaryDirectory() as tmp:
        for name, scenario in (("tiny", tiny), ("tiny_swap", tiny_swap)):
            src = os.path.join(tmp, name + ".json")
            with open(src, "w") as f:
                json.dump(scenario, f)
            out = os.path.join(tmp, name)
            subprocess.run([sys.argv[1], "run", src, "--bookkeeping", "--quiet", "--steps", "30",
                            "--out", out], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(out, "recording.kvr"), "rb") as f:
                rec = f.read()
            put("recording", name + ".kvr", rec)
            if name == "tiny":
                put("recording", "truncated.kvr", rec[:-40])
                put("recording", "bad_magic.kvr", b"KVSCOPEX" + rec[8:])
                put("recording", "version2.kvr", rec[:8] + struct.pack("<I", 2) + rec[12:])
