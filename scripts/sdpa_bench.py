#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention as a second baseline for `kvscope bench attention`.

Decode attention (one query token) at the benchmark's shape, Llama-3-8B's attention: 32 query
heads, 8 KV heads of 128, fp16 K/V contiguous per sequence, for every batch and context given.
Times each pass with CUDA events (one untimed pass first, then the mean of --repeat) and counts
the K/V bytes as kvscope does: each sequence's K and V once, 2 bytes an element.

Prints one JSON object on stdout:
  {"available": true, "torch": VERSION, "device": NAME, "rows": [{"batch", "context", "ms",
   "kv_gb_per_s", "gqa"}, ...]}  (a row that did not fit in memory has "error" instead of times)
  {"available": false, "reason": WHY}  when torch cannot be imported or sees no CUDA device.
Bad arguments: a one-line error on stderr, exit 2.
"""
import argparse
import json
import sys

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def int_list(flag, text, low, high):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v < low or v > high for v in values):
        print(f"sdpa_bench.py: error: {flag}: expected comma-separated integers in "
              f"[{low}, {high}], got '{text}'", file=sys.stderr)
        sys.exit(2)
    return values


def measure(torch, F, batch, context, repeat):
    dev = torch.device("cuda")
    q = torch.randn(batch, HEADS, 1, HEAD_DIM, device=dev, dtype=torch.float16)
    k = torch.randn(batch, KV_HEADS, context, HEAD_DIM, device=dev, dtype=torch.float16)
    v = torch.randn_like(k)
    try:  # grouped-query attention inside the kernel (torch 2.5 and later)
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        kwargs, gqa = {"enable_gqa": True}, "native"
    except TypeError:  # older torch: K/V repeated per query head, outside the timed passes
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        kwargs, gqa = {}, "repeated"
    F.scaled_dot_product_attention(q, k, v, **kwargs)  # untimed: kernel selection, caches
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        F.scaled_dot_product_attention(q, k, v, **kwargs)
    stop.record()
    stop.synchronize()
    ms = start.elapsed_time(stop) / repeat
    kv_bytes = 2.0 * batch * context * KV_HEADS * HEAD_DIM * 2
    return {"batch": batch, "context": context, "ms": ms,
            "kv_gb_per_s": kv_bytes / (ms * 1e6), "gqa": gqa}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", default="1,8,64")
    parser.add_argument("--contexts", default="1024,8192,32768")
    parser.add_argument("--repeat", default="20")
    args = parser.parse_args()
    batches = int_list("--batch", args.batch, 1, 256)
    contexts = int_list("--contexts", args.contexts, 1, 131072)
    repeat = int_list("--repeat", args.repeat, 1, 100000)[0]
    try:
        import torch
        import torch.nn.functional as F
    except Exception as e:  # noqa: BLE001 (any import failure means: no baseline)
        print(json.dumps({"available": False,
                          "reason": f"torch not importable ({type(e).__name__}: {e})"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"available": False,
                          "reason": f"torch {torch.__version__} sees no CUDA device"}))
        return 0
    rows = []
    for context in contexts:
        for batch in batches:
            try:
                rows.append(measure(torch, F, batch, context, repeat))
            except torch.cuda.OutOfMemoryError:
                rows.append({"batch": batch, "context": context, "error": "out of memory"})
            torch.cuda.empty_cache()
    print(json.dumps({"available": True, "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(), "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
