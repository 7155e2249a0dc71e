#!/usr/bin/env python3
"""Writes a copy of a Llama-family GGUF file with only its first N transformer blocks.

The result is a valid GGUF (the same metadata, `<arch>.block_count` set to N, the tensors of
blocks N and later left out, every other tensor's bytes unchanged) that kvscope loads like any
other. scripts/gpu-pack.sh uses it to fit SmolLM2-135M into a device call's 64 MiB carry: the
GPU check compares the GPU's tokens with the CPU's on the same truncated file, which tests the
model's shape (GQA 9:3, head dim 64, a 49,152-token vocabulary), not its full depth.

usage: gguf_truncate.py IN.gguf OUT.gguf --layers N
"""
import argparse
import os
import re
import struct
import sys
import tempfile

# GGUF metadata value types and the struct format of the fixed-size ones.
FIXED = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, data, path):
        self.data, self.at, self.path = data, 0, path

    def take(self, fmt):
        size = struct.calcsize("<" + fmt)
        if self.at + size > len(self.data):
            sys.exit(f"gguf_truncate.py: {self.path}: truncated at byte {self.at}")
        value = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += size
        return value[0] if len(value) == 1 else value

    def string(self):
        n = self.take("Q")
        s = self.data[self.at:self.at + n]
        self.at += n
        return s.decode("utf-8")

    def skip_value(self, vtype):
        if vtype in FIXED:
            self.take(FIXED[vtype])
        elif vtype == STRING:
            self.string()
        elif vtype == ARRAY:
            etype, count = self.take("I"), self.take("Q")
            if etype in FIXED:
                self.at += struct.calcsize("<" + FIXED[etype]) * count
            else:
                for _ in range(count):
                    self.skip_value(etype)
        else:
            sys.exit(f"gguf_truncate.py: {self.path}: unknown metadata type {vtype} at byte {self.at}")


def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def align(n, a):
    return (n + a - 1) // a * a


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--layers", type=int, required=True, help="transformer blocks to keep (>= 1)")
    a = ap.parse_args()
    with open(a.src, "rb") as f:
        data = f.read()
    r = Reader(data, a.src)
    if data[:4] != b"GGUF":
        sys.exit(f"gguf_truncate.py: {a.src}: not a GGUF file (magic {data[:4]!r}, expected b'GGUF')")
    r.at = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version not in (2, 3):
        sys.exit(f"gguf_truncate.py: {a.src}: GGUF version {version}, expected 2 or 3")

    # Metadata: copied byte for byte, except the block count.
    out = bytearray(struct.pack("<4sIQQ", b"GGUF", version, 0, n_kv))  # tensor count patched below
    alignment, old_layers = 32, None
    for _ in range(n_kv):
        start = r.at
        key = r.string()
        vtype = r.take("I")
        value_at = r.at
        r.skip_value(vtype)
        if key.endswith(".block_count") and vtype in FIXED:
            old_layers = struct.unpack_from("<" + FIXED[vtype], data, value_at)[0]
            if not 1 <= a.layers <= old_layers:
                sys.exit(f"gguf_truncate.py: --layers: expected 1..{old_layers}, got {a.layers}")
            out += data[start:value_at] + struct.pack("<" + FIXED[vtype], a.layers)
            continue
        if key == "general.alignment":
            alignment = struct.unpack_from("<" + FIXED[vtype], data, value_at)[0]
        out += data[start:r.at]
    if old_layers is None:
        sys.exit(f"gguf_truncate.py: {a.src}: no <arch>.block_count key")

    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.take("I")
        dims = [r.take("Q") for _ in range(n_dims)]
        ttype, offset = r.take("I"), r.take("Q")
        infos.append((name, dims, ttype, offset))
    data_start = align(r.at, alignment)
    ends = sorted({o for _, _, _, o in infos} | {len(data) - data_start})

    def size_of(offset):
        return ends[ends.index(offset) + 1] - offset

    block = re.compile(r"^blk\.(\d+)\.")
    kept = [t for t in infos if not (block.match(t[0]) and int(block.match(t[0])[1]) >= a.layers)]
    struct.pack_into("<Q", out, 8, len(kept))
    offset, placed = 0, []
    for name, dims, ttype, old in kept:
        out += pack_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", ttype, offset)
        placed.append((old, size_of(old)))
        offset = align(offset + size_of(old), alignment)
    out += b"\0" * (align(len(out), alignment) - len(out))
    for i, (old, size) in enumerate(placed):
        out += data[data_start + old:data_start + old + size]
        if i + 1 < len(placed):
            out += b"\0" * (align(len(out), alignment) - len(out))

    # Written beside the destination and renamed: never a half file.
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.dst)) or ".", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(out)
    os.replace(tmp, a.dst)
    print(f"gguf_truncate.py: {a.dst}: {a.layers} of {old_layers} blocks, {len(kept)} of "
          f"{len(infos)} tensors, {len(out):,} bytes")


if __name__ == "__main__":
    main()
