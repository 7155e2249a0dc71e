#!/usr/bin/env python3
"""Writes tests/data/ggml_dequant_golden.json: ggml blocks dequantized by PyPI's `gguf` package.

The C++ dequantizer (engine/model/ggml_types.cpp) must reproduce these floats bit for bit, and its
type table must agree with gguf.constants.GGML_QUANT_SIZES. Regenerate with:
    python3 scripts/gen_ggml_dequant_golden.py
"""

import json
import pathlib

import numpy as np

import gguf
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

SEED = 20240917
OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "ggml_dequant_golden.json"


def f16_scales(rng: np.random.Generator, count: int) -> np.ndarray:
    """`count` finite, moderate fp16 scales (|x| in [2^-8, 4], random sign) as raw bytes [count*2]."""
    mag = np.exp2(rng.uniform(-8.0, 2.0, size=count))
    sign = np.where(rng.random(count) < 0.25, -1.0, 1.0)
    return (sign * mag).astype(np.float16).view(np.uint8)


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    """Random block bytes [n_blocks, type_size] whose fp16 scale fields are finite and moderate."""
    _, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    # Byte offsets of each block's fp16 scale fields.
    scale_offsets = {
        T.Q4_0: [0],
        T.Q4_1: [0, 2],  # d, m
        T.Q8_0: [0],
        T.Q4_K: [0, 2],  # d, dmin
        T.Q6_K: [208],  # d, after ql[128] qh[64] scales[16]
    }[qtype]
    for off in scale_offsets:
        blocks[:, off:off + 2] = f16_scales(rng, n_blocks).reshape(n_blocks, 2)
    return blocks


def case(name: str, qtype: T, raw: np.ndarray) -> dict:
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    values = np.asarray(dequantize(raw, qtype), dtype=np.float32).reshape(-1)
    block_elems, type_size = GGML_QUANT_SIZES[qtype]
    assert values.size == raw.size // type_size * block_elems
    return {
        "name": name,
        "type": qtype.name,
        "type_id": int(qtype),
        "n": int(values.size),
        "bytes_hex": raw.tobytes().hex(),
        "expected_f32_le_hex": values.astype("<f4").tobytes().hex(),
    }


def main() -> None:
    rng = np.random.default_rng(SEED)
    cases = []

    # Plain floats: every bit pattern is fair game (NaNs, infinities, subnormals included).
    cases.append(case("f32_random_bits", T.F32, rng.integers(0, 256, size=16 * 4, dtype=np.uint8)))
    f16_special = np.array([0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
                            0x7E00, 0x7C01, 0xFE55, 0x3C00, 0x3555, 0xC000, 0x1234], dtype="<u2")
    cases.append(case("f16_special", T.F16, f16_special.view(np.uint8)))
    cases.append(case("f16_random_bits", T.F16, rng.integers(0, 256, size=48 * 2, dtype=np.uint8)))
    bf16_special = np.array([0x0000, 0x8000, 0x0001, 0x807F, 0x0080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
                             0x7FC0, 0x7F81, 0xFFD5, 0x3F80, 0x4049, 0xC000, 0x1234], dtype="<u2")
    cases.append(case("bf16_special", T.BF16, bf16_special.view(np.uint8)))
    cases.append(case("bf16_random_bits", T.BF16, rng.integers(0, 256, size=48 * 2, dtype=np.uint8)))

    # Quantized types: random payloads with moderate scales, several blocks per row.
    for qtype, n_blocks in [(T.Q4_0, 4), (T.Q4_1, 4), (T.Q8_0, 4), (T.Q4_K, 3), (T.Q6_K, 3)]:
        cases.append(case(f"{qtype.name.lower()}_random", qtype, random_blocks(rng, qtype, n_blocks)))

    # Realistic blocks: gguf's own quantizers applied to Gaussian data (for the types it can
    # quantize), so payloads look like what llama.cpp writes.
    for qtype in [T.Q4_0, T.Q4_1, T.Q8_0]:
        block_elems, _ = GGML_QUANT_SIZES[qtype]
        x = rng.normal(0.0, 0.05, size=(1, 2 * block_elems)).astype(np.float32)
        cases.append(case(f"{qtype.name.lower()}_quantized_normal", qtype, quantize(x, qtype)))

    quant_sizes = [{"type": t.name, "type_id": int(t), "block_elems": be, "block_bytes": bb}
                   for t, (be, bb) in sorted(GGML_QUANT_SIZES.items(), key=lambda kv: int(kv[0]))]

    doc = {
        "about": "ggml blocks dequantized by PyPI gguf.quants; regenerate with "
                 "scripts/gen_ggml_dequant_golden.py",
        "gguf_version": getattr(gguf, "__version__", None) or _package_version(),
        "seed": SEED,
        "quant_sizes": quant_sizes,
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(cases)} cases)")


def _package_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("gguf")
    except Exception:  # noqa: BLE001 - the version is informational only
        return None


if __name__ == "__main__":
    main()
