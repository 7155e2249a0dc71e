#!/usr/bin/env python3
"""gpu-check's record: gpu-check.json and gpu-check.md from the steps' results and the
benchmarks' JSON, and the short table printed last. Called by scripts/gpu-check.sh.

Exit status: 0 when every step that ran passed (steps that could not run here are listed, never
counted as passed), 1 otherwise."""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def commit_of(pack):
    """The commit the pack was made from (the device's copy of the tree may carry a stale .git),
    else the checkout's."""
    manifest = os.path.join(pack, "MANIFEST") if pack else ""
    if manifest and os.path.exists(manifest):
        first = open(manifest).readline().split()
        if len(first) >= 2 and first[-2] == "from":
            return first[-1]
    return sh("git", "rev-parse", "--short", "HEAD") or "unknown"


def kernel_timing_figures(t):
    """kernel-timings.json summed up per format and block size: medians over the steps."""
    med = lambda v: sorted(v)[len(v) // 2]
    groups = {}
    for l in t["launches"]:
        heads = f"{l['n_heads']}/{l['kv_heads']} heads of {l['head_dim']}"
        groups.setdefault((heads, l["k_format"], l["block_size"]), []).append(l)
    by_config = []
    for (heads, fmt, block), ls in sorted(groups.items()):
        by_config.append({
            "heads": heads, "format": fmt, "block_size": block, "launches": len(ls),
            "median_us": med([l["ms"] * 1e3 for l in ls]),
            "median_kv_bytes": med([l["kv_bytes"] for l in ls]),
            "median_gb_per_s": med([l["kv_bytes"] / l["ms"] / 1e6 for l in ls if l["ms"] > 0] or [0])})
    return {"scenario": t["scenario"], "device": t["device"], "launches": len(t["launches"]),
            "copy_gb_per_s": t["copy_gb_per_s"], "by_config": by_config}


def attention_figures(rows):
    """The issue's targets from bench attention's rows: bandwidth as a share of the copy,
    paged / contiguous, int8 and fp8 speed over fp16, kvscope fp16 / SDPA."""
    if not rows:
        return {}
    by = {(r["format"], r["context"], r["batch"], r["layout"]): r for r in rows if "ms" in r}
    out = {"rows": len(rows)}
    contexts = sorted({r["context"] for r in rows})
    batches = sorted({r["batch"] for r in rows})
    lines = []
    for ctx in contexts:
        for b in batches:
            fp16 = by.get(("fp16", ctx, b, "paged"))
            fp16c = by.get(("fp16", ctx, b, "contiguous"))
            if not fp16:
                continue
            line = {"context": ctx, "batch": b, "fp16_paged_ms": fp16["ms"],
                    "fp16_paged_of_copy": fp16.get("of_copy")}
            if fp16c:
                line["paged_over_contiguous_time"] = fp16["ms"] / fp16c["ms"]
            for fmt in ("int8", "fp8-e4m3"):
                other = by.get((fmt, ctx, b, "paged"))
                if other:
                    line[f"{fmt}_speedup_over_fp16"] = fp16["ms"] / other["ms"]
            sdpa = by.get(("sdpa-fp16", ctx, b, "contiguous"))
            if sdpa and fp16c:
                line["kvscope_fp16_over_sdpa_time"] = fp16c["ms"] / sdpa["ms"]
            lines.append(line)
    out["by_shape"] = lines
    errors = [r for r in rows if "error" in r]
    if errors:
        out["sdpa_errors"] = sorted({r["error"] for r in errors})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", required=True)
    ap.add_argument("--steps", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pack", default="")
    ap.add_argument("--elapsed", type=int, default=0)
    a = ap.parse_args()

    steps = []
    with open(a.steps) as f:
        for line in f:
            name, status, secs, note = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
            steps.append({"name": name, "status": status, "seconds": float(secs or 0), "note": note})

    emulated = a.mode == "emulated"
    gpu = "" if emulated else sh("nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                 "--format=csv,noheader")
    record = {
        "mode": a.mode,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit_of(a.pack),
        "command": "bash scripts/gpu-check.sh" + (" --emulated" if emulated else ""),
        "host": platform.node(),
        "gpu": gpu or ("none: the SIMT emulator (times say nothing about a GPU)" if emulated else "unknown"),
        "nvcc": (sh("nvcc", "--version").splitlines() or [""])[-1],
        "cpu_cores": os.cpu_count(),
        "elapsed_s": a.elapsed,
        "steps": steps,
    }
    if a.pack and os.path.exists(os.path.join(a.pack, "MANIFEST")):
        record["pack"] = open(os.path.join(a.pack, "MANIFEST")).read().strip().splitlines()
    tests = load(os.path.join(a.out, "device-tests.json"))
    if tests:
        record["device_tests"] = {
            "tests": tests.get("tests"), "failures": tests.get("failures"),
            "failed": [f"{s['name']}.{t['name']}" for s in tests.get("testsuites", [])
                       for t in s.get("testsuite", []) if t.get("failures")]}
    att = attention_figures(load(os.path.join(a.out, "bench-attention.json")))
    if att:
        record["attention"] = att
    batch = load(os.path.join(a.out, "bench-batch.json"))
    if batch:
        record["batch"] = [{"seqs": r["seqs"], "tokens_per_s": r["tokens_per_s"],
                            "op_by_op_tokens_per_s": r.get("op_by_op", {}).get("tokens_per_s")}
                           for r in batch]
    gen = load(os.path.join(a.out, "bench-generate.json"))
    if gen and len(gen) == 2:
        record["generate"] = {
            "model": gen[0]["model"], "random_weights": gen[0]["random_weights"],
            "device_decode_tokens_per_s": gen[0]["decode_tokens_per_s"],
            "device_prefill_tokens_per_s": gen[0]["prefill_tokens_per_s"],
            "cpu_decode_tokens_per_s": gen[1]["decode_tokens_per_s"],
            "cpu_prefill_tokens_per_s": gen[1]["prefill_tokens_per_s"],
            "cpu_threads": gen[1]["threads"]}

    timings = load(os.path.join(a.out, "kernel-timings.json"))
    if timings and timings.get("launches"):
        record["kernel_timing"] = kernel_timing_figures(timings)

    ran = [s for s in steps if s["status"] != "not run"]
    passed = [s for s in ran if s["status"] == "pass"]
    record["passed"], record["ran"] = len(passed), len(ran)
    with open(os.path.join(a.out, "gpu-check.json"), "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")

    md = [f"# gpu-check ({a.mode})", "",
          f"{record['date']}, commit {record['commit']}, `{record['command']}`", "",
          f"- device: {record['gpu']}", f"- nvcc: {record['nvcc']}",
          f"- {record['cpu_cores']} CPU cores; {a.elapsed} s in all", ""]
    if "pack" in record:
        md += [f"- pack: {line}" for line in record["pack"]] + [""]
    md += ["| step | result | seconds | note |", "|---|---|---:|---|"]
    md += [f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | {s['note']} |" for s in steps]
    if "device_tests" in record:
        d = record["device_tests"]
        md += ["", f"device tests: {d['tests']} run, {d['failures']} failed"
               + (": " + ", ".join(d["failed"]) if d["failed"] else "")]
    if att.get("by_shape"):
        md += ["", "## decode attention (Llama-3-8B's 32/8 heads of 128, block 16)", "",
               "| context | batch | fp16 paged ms | of copy | paged/contig time | int8 speedup | fp8 speedup | fp16/SDPA time |",
               "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        fmt = lambda v, p="{:.2f}": "-" if v is None else p.format(v)
        for l in att["by_shape"]:
            md.append(f"| {l['context']} | {l['batch']} | {l['fp16_paged_ms']:.3f} | "
                      f"{fmt(l.get('fp16_paged_of_copy'), '{:.0%}')} | "
                      f"{fmt(l.get('paged_over_contiguous_time'))} | "
                      f"{fmt(l.get('int8_speedup_over_fp16'))} | "
                      f"{fmt(l.get('fp8-e4m3_speedup_over_fp16'))} | "
                      f"{fmt(l.get('kvscope_fp16_over_sdpa_time'))} |")
        if att.get("sdpa_errors"):
            md += ["", "SDPA: " + "; ".join(att["sdpa_errors"])]
    if "batch" in record:
        md += ["", "## bench batch (whole step vs op by op)", "",
               "| sequences | tokens/s | op by op tokens/s |", "|---:|---:|---:|"]
        md += [f"| {r['seqs']} | {r['tokens_per_s']:.1f} | "
               f"{'-' if r['op_by_op_tokens_per_s'] is None else format(r['op_by_op_tokens_per_s'], '.1f')} |"
               for r in record["batch"]]
    if "generate" in record:
        g = record["generate"]
        md += ["", f"## bench generate ({g['model']}{', random weights' if g['random_weights'] else ''})", "",
               f"- device: decode {g['device_decode_tokens_per_s']:.1f} tokens/s, prefill "
               f"{g['device_prefill_tokens_per_s']:.1f} tokens/s",
               f"- CPU ({g['cpu_threads']} threads), same run: decode {g['cpu_decode_tokens_per_s']:.1f} "
               f"tokens/s, prefill {g['cpu_prefill_tokens_per_s']:.1f} tokens/s"]
    if "kernel_timing" in record:
        k = record["kernel_timing"]
        md += ["", f"## kernel timing ({k['scenario']}: {k['launches']} launches timed; "
               f"device copy {k['copy_gb_per_s']:.0f} GB/s)", "",
               "| heads | format | block | launches | median us | K/V read (median) | GB/s (median) |",
               "|---|---|---:|---:|---:|---:|---:|"]
        md += [f"| {r['heads']} | {r['format']} | {r['block_size']} | {r['launches']} | {r['median_us']:.1f} | "
               f"{r['median_kv_bytes']:,} B | {r['median_gb_per_s']:.2f} |" for r in k["by_config"]]
    with open(os.path.join(a.out, "gpu-check.md"), "w") as f:
        f.write("\n".join(md) + "\n")

    # The short table, last.
    print()
    print(f"{'step':<16} {'result':<8} {'seconds':>8}  note")
    for s in steps:
        print(f"{s['name']:<16} {s['status']:<8} {s['seconds']:>8.1f}  {s['note'][:90]}")
    if emulated:
        print("(emulated: times are the SIMT emulator's on this CPU and say nothing about a GPU)")
    print(f"gpu-check ({a.mode}): {len(passed)}/{len(ran)} steps passed"
          + (f", {len(steps) - len(ran)} not run" if len(steps) > len(ran) else ""))
    return 0 if len(passed) == len(ran) and ran else 1


if __name__ == "__main__":
    sys.exit(main())
