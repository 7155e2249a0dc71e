#!/usr/bin/env python3
"""`kvscope attach --lookup` and `kvscope lookup` end to end: "why did my prefix miss?" through the
real binary, sockets and files, on a stream built so that each answer is known.

One rank publishes (vLLM 0.33's encoding: tagged maps, sha256 bytes hashes, block size 16):
  batch 0  a chain of 3 GPU blocks holding prompt A's first 48 tokens
  batch 1  the CPU offload tier's placeholders for the same 3 hashes (token_ids [], block_size 0)
  batch 2  BlockRemoved of the chain's third block from the GPU
  batch 3  prompt B's first block under the LoRA adapter "sql"
  batch 4  prompt C's blocks (stories260K's tokens of a sentence), so a text prompt can match

Checked: prompt A (a JSON array, 56 tokens) -> GPU 2 of 3 blocks, block 3 removed in batch 2;
CPU 3 of 3 by hash. Prompt B (the engine's /tokenize answer) -> another namespace; with --lora sql
1 of 2 held, the second block never stored. Prompt C as text with --model stories260K -> all held. `kvscope lookup` on the attach's
directory, its stream.kvj and its recording.kvr gives the rows attach gave. Bad prompts (binary,
text without a tokenizer, a negative id) -> exit 2 and one line naming the file.

usage: check_lookup.py KVSCOPE WORK_DIR     (python3 with python3-zmq and python3-msgpack)
Prints "N passed, M failed"; exit 1 on any failure.
"""
import hashlib
import json
import os
import subprocess
import sys
import time

import msgpack
import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, free_ports  # noqa: E402

check = Checks()
BLOCK = 16


def h(n):
    return hashlib.sha256(f"lookup {n}".encode()).digest()


def stored(hashes, parent, tokens, medium="GPU", lora_name=None):
    ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
          "token_ids": tokens, "block_size": BLOCK if tokens else 0, "lora_id": None,
          "medium": medium, "lora_name": lora_name}
    return ev


def batch(ts, events):
    return msgpack.packb([ts, events, 0], use_bin_type=True)


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=120, **kw)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    kvscope, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    prompt_a = list(range(1000, 1056))  # 3 full blocks and 8 tokens over
    prompt_b = list(range(2000, 2032))
    text_c = "Once upon a time there was a little girl named Lily. She liked to play outside."
    tok = run([kvscope, "tokenize", "--model", "stories260K", "--text", text_c, "--bos", "--json"])
    check(tok.returncode == 0, "kvscope tokenize --model stories260K", tok.stderr.strip())
    prompt_c = json.loads(tok.stdout)["ids"] if tok.returncode == 0 else list(range(40))
    full_c = len(prompt_c) // BLOCK
    check(full_c >= 1, "prompt C fills a block", f"{len(prompt_c)} tokens")

    files = {}
    for name, content in [("a.json", json.dumps(prompt_a)),
                          ("b.json", json.dumps({"count": len(prompt_b), "max_model_len": 4096,
                                                 "tokens": prompt_b})),
                          ("c.txt", text_c),
                          ("binary.bin", "\x00\x01\x02"),
                          ("negative.json", "[1, -2]")]:
        files[name] = os.path.join(work, name)
        with open(files[name], "w", encoding="utf-8") as f:
            f.write(content)

    base = free_ports(2, "check_lookup.py")
    out = os.path.join(work, "attach")
    proc = subprocess.Popen(
        [kvscope, "attach", f"tcp://127.0.0.1:{base}", "--batches", "5", "--duration", "30",
         "--json", "--out", out, "--lookup", files["a.json"]],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ctx = zmq.Context()
    pub = ctx.socket(zmq.XPUB)
    pub.bind(f"tcp://127.0.0.1:{base}")
    deadline = time.monotonic() + 20
    while not pub.poll(100):  # kvscope's subscription
        if time.monotonic() > deadline:
            proc.kill()
            sys.exit("check_lookup.py: kvscope never subscribed")
    pub.recv()
    chain = [h(1), h(2), h(3)]
    payloads = [
        batch(1.0, [stored(chain, None, prompt_a[:48])]),
        batch(1.5, [stored(chain, None, [], medium="CPU")]),
        batch(2.0, [{"type": "BlockRemoved", "block_hashes": [h(3)], "medium": "GPU"}]),
        batch(2.5, [stored([h(10)], None, prompt_b[:16], lora_name="sql")]),
        batch(3.0, [stored([h(20 + i) for i in range(full_c)], None, prompt_c[:full_c * BLOCK])]),
    ]
    for seq, payload in enumerate(payloads):
        pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
    got, err = proc.communicate(timeout=60)
    pub.close()
    ctx.term()
    check(proc.returncode == 0, "attach --lookup: exit 0", err.strip()[-300:])
    summary = json.loads(got) if proc.returncode == 0 else {}
    rows = {(r["rank"], r["medium"]): r for r in summary.get("lookup", {}).get("rows", [])}
    gpu, cpu = rows.get((0, "GPU"), {}), rows.get((0, "CPU"), {})
    check(summary.get("lookup", {}).get("prompt_tokens") == 56, "attach: the prompt's 56 tokens")
    check((gpu.get("matched_blocks"), gpu.get("prompt_blocks"), gpu.get("reason")) ==
          (2, 3, "removed"), "attach: GPU holds 2 of 3 blocks, block 3 removed", str(gpu))
    check(gpu.get("removed_seq") == 2 and gpu.get("removed_by") == "BlockRemoved",
          "attach: the removal was batch 2's BlockRemoved", str(gpu))
    check((cpu.get("matched_blocks"), cpu.get("by_hash"), cpu.get("reason")) ==
          (3, True, "all_held"), "attach: the CPU tier holds all 3 (matched by hash)", str(cpu))
    check(summary.get("placeholder_blocks") == 3, "attach: 3 placeholder blocks counted",
          str(summary.get("placeholder_blocks")))
    check(summary.get("clear_scope", {}).get("engine") == "vllm",
          "attach: the stream looks like vLLM's (medium CPU)", str(summary.get("clear_scope")))
    report = open(os.path.join(out, "report.md"), encoding="utf-8").read()
    check("block 3 was stored, then dropped by BlockRemoved in batch 2" in report,
          "report.md says why the prefix missed")

    def lookup(source, *extra):
        r = run([kvscope, "lookup", source, "--json", *extra])
        check(r.returncode == 0, f"lookup {os.path.basename(source)} {' '.join(extra)}: exit 0",
              r.stderr.strip())
        return json.loads(r.stdout) if r.returncode == 0 else {}

    for source in (out, os.path.join(out, "stream.kvj"), os.path.join(out, "recording.kvr")):
        again = lookup(source, "--prompt", files["a.json"])
        check(again.get("rows") == summary.get("lookup", {}).get("rows"),
              f"lookup {os.path.basename(source)}: the rows attach gave")
    b = {r["medium"]: r for r in lookup(out, "--prompt", files["b.json"]).get("rows", [])}
    check(b.get("GPU", {}).get("reason") == "other_namespace" and
          b["GPU"].get("other_namespace") == "LoRA 'sql'",
          "prompt B (/tokenize's answer): held under LoRA 'sql'", str(b.get("GPU")))
    b = {r["medium"]: r for r in lookup(out, "--prompt", files["b.json"], "--lora", "sql")
         .get("rows", [])}
    check((b.get("GPU", {}).get("matched_blocks"), b.get("GPU", {}).get("reason")) ==
          (1, "never_stored"), "prompt B with --lora sql: its first block held, the second never "
          "stored", str(b.get("GPU")))
    c = {r["medium"]: r for r in lookup(out, "--prompt", files["c.txt"], "--model",
                                         "stories260K").get("rows", [])}
    check(c.get("GPU", {}).get("matched_blocks") == full_c and c["GPU"]["reason"] == "all_held",
          "prompt C as text, tokenized by stories260K's tokenizer: held", str(c.get("GPU")))

    for name, want in [("binary.bin", "expected UTF-8 text or a JSON array of token ids"),
                       ("c.txt", "a text prompt needs the engine's tokenizer"),
                       ("negative.json", "[1]: expected a token id (an integer >= 0), got -2")]:
        r = run([kvscope, "lookup", out, "--prompt", files[name]])
        line = r.stderr.strip()
        check(r.returncode == 2 and want in line and files[name] in line and "\n" not in line,
              f"lookup --prompt {name}: exit 2, one line naming the file", f"rc {r.returncode}: {line}")
    r = run([kvscope, "lookup", files["a.json"], "--prompt", files["a.json"]])
    check(r.returncode == 2 and "expected a KV-event journal" in r.stderr,
          "lookup of a file that is not a journal: exit 2", r.stderr.strip())
    check.finish()


if __name__ == "__main__":
    main()
