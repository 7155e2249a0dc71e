#!/usr/bin/env python3
"""Writes the small seed corpora under tests/fuzz/corpus/ (our own synthetic data, a few KB).
Usage: make_corpus.py [KVSCOPE_BINARY]; with a built `kvscope`, the recording seeds are remade too
(`kvscope run` on the three tiny scenarios below)."""
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

# --- GGUF v3: tiny Llama models (dim 8, 1 layer, 2 heads, 1 KV head, hidden 32, vocab 8) of
# F32/F16/Q8_0/Q4_0/Q4_1 tensors, metadata of every value type, and broken copies ---
grng = random.Random(4321)
GU8, GI8, GU16, GI16, GU32, GI32, GF32, GBOOL, GSTR, GARR, GU64, GI64, GF64 = range(13)
GGUF_FMT = {GU8: "<B", GI8: "<b", GU16: "<H", GI16: "<h", GU32: "<I", GI32: "<i", GF32: "<f",
            GBOOL: "<B", GU64: "<Q", GI64: "<q", GF64: "<d"}
F32, F16, Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 8, 12, 14, 30


def gguf_str(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_value(t, v):
    if t == GSTR:
        return gguf_str(v)
    if t == GARR:
        elem, items = v
        return struct.pack("<IQ", elem, len(items)) + b"".join(gguf_value(elem, x) for x in items)
    return struct.pack(GGUF_FMT[t], v)


def gguf_file(kvs, tensors, align=32, version=3):
    """kvs: [(key, type, value)]; tensors: [(name, dims, ggml type, data)], packed at `align`."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gguf_str(key) + struct.pack("<I", t) + gguf_value(t, v)
    data = b""
    for name, dims, ggml_type, blob in tensors:
        out += gguf_str(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ggml_type,
                                            len(data))
        data += blob + b"\0" * (-len(blob) % align)
    return out + b"\0" * (-len(out) % align) + data


def gguf_tensor(ggml_type, n):
    if ggml_type == F32:
        return struct.pack(f"<{n}f", *(grng.uniform(-1, 1) for _ in range(n)))
    if ggml_type == F16:
        return struct.pack(f"<{n}e", *(grng.uniform(-1, 1) for _ in range(n)))
    blocks = n // 32
    if ggml_type == Q8_0:
        return b"".join(struct.pack("<e32b", grng.uniform(0, 0.1),
                                    *(grng.randint(-127, 127) for _ in range(32)))
                        for _ in range(blocks))
    if ggml_type == Q4_0:
        return b"".join(struct.pack("<e", grng.uniform(0, 0.1)) + grng.randbytes(16)
                        for _ in range(blocks))
    if ggml_type == Q4_1:
        return b"".join(struct.pack("<ee", grng.uniform(0, 0.1), grng.uniform(-1, 0)) +
                        grng.randbytes(16) for _ in range(blocks))
    size = {Q5_0: 22 * blocks, Q4_K: 144 * (n // 256), Q6_K: 210 * (n // 256), BF16: 2 * n}
    return grng.randbytes(size[ggml_type])


def llama_gguf(arch="llama", down=Q8_0, output=None, align=32, extra_kvs=(), extra_tensors=()):
    dim, hidden, vocab, heads, kv_heads = 8, 32, 8, 2, 1
    kv = kv_heads * dim // heads
    kvs = [("general.architecture", GSTR, arch), ("general.alignment", GU32, align),
           (arch + ".context_length", GU32, 16), (arch + ".embedding_length", GU32, dim),
           (arch + ".block_count", GU32, 1), (arch + ".feed_forward_length", GU32, hidden),
           (arch + ".attention.head_count", GU32, heads),
           (arch + ".attention.head_count_kv", GU32, kv_heads),
           (arch + ".rope.dimension_count", GU32, dim // heads),
           (arch + ".rope.freq_base", GF32, 10000.0),
           (arch + ".attention.layer_norm_rms_epsilon", GF32, 1e-5),
           ("tokenizer.ggml.model", GSTR, "gpt2"),
           ("tokenizer.ggml.tokens", GARR, (GSTR, ["<s>", "</s>", "a", "b", "c", "ab", " ", "\n"])),
           ("tokenizer.ggml.token_type", GARR, (GI32, [3, 3, 1, 1, 1, 1, 1, 1]))] + list(extra_kvs)
    shapes = [("token_embd.weight", [dim, vocab], F16), ("blk.0.attn_norm.weight", [dim], F32),
              ("blk.0.attn_q.weight", [dim, dim], F16), ("blk.0.attn_k.weight", [dim, kv], F32),
              ("blk.0.attn_v.weight", [dim, kv], F16), ("blk.0.attn_output.weight", [dim, dim], F16),
              ("blk.0.ffn_norm.weight", [dim], F32), ("blk.0.ffn_gate.weight", [dim, hidden], F16),
              ("blk.0.ffn_down.weight", [hidden, dim], down),
              ("blk.0.ffn_up.weight", [dim, hidden], F16), ("output_norm.weight", [dim], F32)]
    if output is not None:
        shapes.append(("output.weight", [dim, vocab], output))
    shapes += list(extra_tensors)
    tensors = [(name, dims, t, gguf_tensor(t, dims[0] * (dims[1] if len(dims) > 1 else 1)))
               for name, dims, t in shapes]
    return gguf_file(kvs, tensors, align)


every_type = [("u8", GU8, 200), ("i8", GI8, -100), ("u16", GU16, 60000), ("i16", GI16, -30000),
              ("u32", GU32, 4000000000), ("i32", GI32, -2000000000), ("f32", GF32, 0.5),
              ("yes", GBOOL, 1), ("str", GSTR, "hello\n"), ("u64", GU64, 2**63 + 5),
              ("i64", GI64, -2**62), ("f64", GF64, 0.1), ("ints", GARR, (GI32, [1, -2, 3])),
              ("strs", GARR, (GSTR, ["alpha", "", "gamma"])),
              ("nested", GARR, (GARR, [(GU8, [1, 2]), (GF64, [])]))]
tied = llama_gguf()
put("gguf", "llama_tied.gguf", tied)
put("gguf", "llama_q4_separate.gguf", llama_gguf(down=Q4_1, output=F16, align=16))
put("gguf", "llama_q4_0.gguf", llama_gguf(down=Q4_0, output=F32, align=64))
put("gguf", "every_type.gguf", gguf_file(every_type, [
    ("k4", [256], Q4_K, gguf_tensor(Q4_K, 256)), ("k6", [256], Q6_K, gguf_tensor(Q6_K, 256)),
    ("bf", [4, 2, 1, 1], BF16, gguf_tensor(BF16, 8))], version=2))
put("gguf", "qwen2.gguf", llama_gguf(arch="qwen2"))
put("gguf", "rope_scaling.gguf", llama_gguf(extra_kvs=[("llama.rope.scaling.type", GSTR, "linear")]))
put("gguf", "unsupported_q5_0.gguf", llama_gguf(down=Q5_0))
put("gguf", "extra_tensor.gguf", llama_gguf(extra_tensors=[("blk.0.attn_q_norm.weight", [4], F32)]))
put("gguf", "empty_vocab.gguf", gguf_file([
    ("general.architecture", GSTR, "llama"), ("llama.context_length", GU32, 16),
    ("llama.embedding_length", GU32, 8), ("llama.block_count", GU32, 1),
    ("llama.feed_forward_length", GU32, 32), ("llama.attention.head_count", GU32, 2),
    ("tokenizer.ggml.tokens", GARR, (GSTR, []))], []))
put("gguf", "truncated.gguf", tied[:len(tied) // 3])
put("gguf", "data_cut.gguf", tied[:-40])
put("gguf", "version1.gguf", tied[:4] + struct.pack("<I", 1) + tied[8:])
deep = (GU8, [7])
for _ in range(8):
    deep = (GARR, [deep])
put("gguf", "deep_array.gguf", gguf_file([("deep", GARR, deep)], []))
overlap = gguf_file([], [("a", [8], F32, gguf_tensor(F32, 8)), ("b", [8], F32, b"")])
put("gguf", "overlap.gguf", overlap[:overlap.index(b"b") + 1 + 4 + 8 + 4] + struct.pack("<Q", 0) +
    overlap[overlap.index(b"b") + 1 + 4 + 8 + 4 + 8:])

# --- Hugging Face tokenizer.json (fuzz input = the whole file): byte-level BPE over printable
# ASCII, one file per pre-tokenizer setup the reader knows, and refused variants ---
def byte_char(b):
    """GPT-2's byte-to-unicode character of byte b."""
    kept = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    return chr(b) if b in kept else chr(256 + sum(1 for c in range(b) if c not in kept))


def tok_json(pre, merges=(("t", "h"), ("th", "e"), (" ", "t"), ("a", "b")), pairs=True,
             added=("<|endoftext|>",), extra_model=None, **parts):
    raw = [*range(0x20, 0x7F), 0x0A, 0x09, 0xC3, 0xA9, 0xE2, 0x98, 0x83]
    vocab = {byte_char(b): i for i, b in enumerate(raw)}
    enc = lambda s: "".join(byte_char(b) for b in s.encode())
    for left, right in merges:
        vocab.setdefault(enc(left + right), len(vocab))
    doc = {"version": "1.0", "added_tokens": [], "pre_tokenizer": pre,
           "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab, **(extra_model or {}),
                     "merges": [[enc(a), enc(b)] if pairs else f"{enc(a)} {enc(b)}"
                                for a, b in merges]}, **parts}
    for text in added:
        doc["added_tokens"].append({"id": len(vocab) + len(doc["added_tokens"]), "content": text,
                                    "special": True, "normalized": False})
    return json.dumps(doc, ensure_ascii=False, indent=1)


LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
          r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
no_regex = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}
put("tokenizer_json", "gpt2.json", tok_json(byte_level))
put("tokenizer_json", "gpt2_string_merges.json", tok_json(byte_level, pairs=False))
llama3 = json.loads(tok_json(
    {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
        no_regex]},
    added=("<|begin_of_text|>", "<|eot_id|>"), extra_model={"ignore_merges": True}))
bos = llama3["added_tokens"][0]["id"]
llama3["post_processor"] = {"type": "TemplateProcessing", "single": [
    {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
    {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                             "tokens": ["<|begin_of_text|>"]}}}
put("tokenizer_json", "llama3.json", json.dumps(llama3, ensure_ascii=False, indent=1))
put("tokenizer_json", "qwen2_nfc.json", tok_json(
    {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")},
         "behavior": "Isolated", "invert": False}, no_regex]},
    added=("<|im_start|>", "<|im_end|>"), normalizer={"type": "NFC"}))
put("tokenizer_json", "smollm_digits_unk.json", tok_json(
    {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                           byte_level]},
    extra_model={"unk_token": "a", "fuse_unk": True}))
wordpiece = json.loads(tok_json(byte_level))
wordpiece["model"]["type"] = "WordPiece"
put("tokenizer_json", "wordpiece.json", json.dumps(wordpiece, indent=1))
put("tokenizer_json", "truncated.json", tok_json(byte_level)[:700])
put("tokenizer_json", "bad_merge.json", tok_json(byte_level, merges=(("t", "h"), ("zz", "q"))))

# --- recordings: run the tiny scenarios with kvscope (bookkeeping only: no token text; tiny_text
# on stories260K: a token-text section, docs/recording-format.md), then broken copies, and the
# version 1 recording kept in tests/data ---
tiny_text = {"format_version": 1, "title": "fuzz seed: token text",
             "cache": {"block_size": 4, "num_blocks": 8},
             "workload": {"requests": [
                 {"arrival_step": 0, "prompt": "Once upon a time", "max_new_tokens": 3},
                 {"arrival_step": 1, "prompt": "Lily", "max_new_tokens": 2, "n": 2}]}}
if len(sys.argv) > 1:
    with tempfile.TemporaryDirectory() as tmp:
        for name, scenario in (("tiny", tiny), ("tiny_swap", tiny_swap), ("tiny_text", tiny_text)):
            src = os.path.join(tmp, name + ".json")
            with open(src, "w") as f:
                json.dump(scenario, f)
            out = os.path.join(tmp, name)
            bookkeeping = [] if name == "tiny_text" else ["--bookkeeping"]
            subprocess.run([sys.argv[1], "run", src, *bookkeeping, "--quiet", "--steps", "30",
                            "--no-report", "--out", out], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(out, "recording.kvr"), "rb") as f:
                rec = f.read()
            put("recording", name + ".kvr", rec)
            if name == "tiny":
                put("recording", "truncated.kvr", rec[:-40])
                put("recording", "bad_magic.kvr", b"KVSCOPEX" + rec[8:])
                put("recording", "version9.kvr", rec[:8] + struct.pack("<I", 9) + rec[12:])
            if name == "tiny_text":
                put("recording", "text_truncated.kvr", rec[:-30])  # inside the text section
    with open(os.path.join(os.path.dirname(ROOT), "..", "data", "recording_v1.kvr"), "rb") as f:
        put("recording", "version1.kvr", f.read())
