#!/usr/bin/env python3
"""Golden greedy continuations and logits of SmolLM2-135M-Instruct from llama.cpp.

llama.cpp (through llama-cpp-python, which builds its vendored llama.cpp from source) is the
reference nobody on this project wrote. This script runs it on the same GGUF file kvscope loads
and writes tests/data/smollm2_golden.json: for each prompt, the prompt's token ids, 64 greedy
tokens, and at every position the reference's top-k token ids and logits. Optional, never in CI's
critical path:

    pip install llama-cpp-python gguf   # builds llama.cpp from source (about 15 min on 2 cores)
    bash scripts/models.sh && python3 scripts/smollm2_reference.py

llama.cpp runs Q4_1 weight rows against activations it quantizes to 8 bits (Q8_1), so its logits
differ slightly from kvscope's fp32 forward pass over the same dequantized weights; the tests
state the tolerance and check that any greedy divergence happens at a near-tie. To separate that
rounding from a real difference, the script also writes an F32 copy of the model (every tensor
dequantized by the gguf package) and records llama.cpp's logits on it for the same tokens
("f32_positions"): there both engines multiply fp32 by fp32 and must agree closely.
"""
import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "assets", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests", "data", "smollm2_golden.json")

CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little robot who",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "The GNU General Public License is a free, copyleft license for",
    CHATML.format("What is a KV cache in a transformer? Answer in two sentences."),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_f32_copy(src, dst):
    """The same model with every tensor dequantized to F32 by the gguf package."""
    import gguf
    import numpy as np
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub)
    for t in r.tensors:
        data = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w.add_tensor(t.name, data.reshape([int(d) for d in reversed(t.shape)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def top_k(llm, k):
    import numpy as np
    logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    order = np.argsort(-logits, kind="stable")[:k]
    return {"top_ids": [int(i) for i in order],
            "top_logits": [round(float(logits[i]), 5) for i in order]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.environ.get("KVSCOPE_SMOLLM2", MODEL))
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--steps", type=int, default=64, help="greedy tokens per prompt")
    ap.add_argument("--top-k", type=int, default=8, help="logits kept per position")
    args = ap.parse_args()

    import llama_cpp

    llm = llama_cpp.Llama(model_path=args.model, n_ctx=512, n_batch=512, logits_all=True,
                          n_threads=os.cpu_count(), seed=0, verbose=False)
    cases = []
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        greedy, positions = [], []
        # positions[i]: the logits after feeding tokens[0..len(ids) + i) (the last prompt token,
        # then each greedy token).
        for step in range(args.steps):
            positions.append(top_k(llm, args.top_k))
            nxt = positions[-1]["top_ids"][0]
            greedy.append(nxt)
            if step + 1 < args.steps:
                llm.eval([nxt])
        cases.append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": greedy,
                      "positions": positions,
                      "text": llm.detokenize(greedy).decode("utf-8", "replace")})
        print(f"{prompt[:40]!r}: {len(ids)} prompt tokens -> {cases[-1]['text'][:60]!r}",
              file=sys.stderr)
    # The same token sequences through llama.cpp on the F32 copy, teacher-forced.
    f32_path = args.out + ".f32.gguf"
    write_f32_copy(args.model, f32_path)
    try:
        f32 = llama_cpp.Llama(model_path=f32_path, n_ctx=512, n_batch=512, logits_all=True,
                              n_threads=os.cpu_count(), seed=0, verbose=False)
        for case in cases:
            f32.reset()
            f32.eval(case["prompt_ids"])
            case["f32_positions"] = []
            for step, tok in enumerate(case["greedy_ids"]):
                case["f32_positions"].append(top_k(f32, args.top_k))
                if step + 1 < len(case["greedy_ids"]):
                    f32.eval([tok])
    finally:
        os.remove(f32_path)
    out = {
        "what": "SmolLM2-135M-Instruct Q4_1 greedy continuations and top-k logits from llama.cpp",
        "generator": "scripts/smollm2_reference.py",
        "llama_cpp_python": llama_cpp.__version__,
        "model_sha256": sha256(args.model),
        "cases": cases,
    }
    with open(args.out + ".tmp", "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")
    os.replace(args.out + ".tmp", args.out)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
