#!/usr/bin/env python3
"""Writes the tokenizer.json test data: token ids by Hugging Face `tokenizers`, not by kvscope.

The reference is the `tokenizers` library itself (what vLLM and SGLang tokenize prompts with), an
implementation independent of kvscope's. It writes, for tests/model/tokenizer_json_test.cpp:

- tests/data/tokenizer_json/tiny_*.json: three small byte-level BPE tokenizer.json files that
  `tokenizers` trained here on docs/concepts/*.md (our own text; 256 byte tokens and a few hundred
  merges) and saved: Llama-3's pre-tokenizer with BOS added by a template, GPT-2's with merges in
  the old "left right" form, Qwen2's with its NFC normalizer.
- tests/data/tokenizer_json/edge_*.json: two hand-made ones for the rules where Hugging Face and
  llama.cpp differ (overlapping added tokens, normalized added tokens, ignore_merges, unknown
  bytes fused or dropped), each with a few texts of its own.
- tests/data/tokenizer_json_golden.json: what `tokenizers` makes of every test text with each of
  those files and with five tokenizer.json files it builds from SmolLM2's full vocabulary (its
  GGUF's tokens and merges, scripts/models.sh) under SmolLM2's own pre-tokenizer (digits, then
  GPT-2's pattern) and four others: ids, the decoded text where it differs, ids with the special
  tokens the file adds; the pieces its pre-tokenizers alone cut each text into; and Python's NFC
  of a few stress strings. The SmolLM2 files are several MB, so only what `tokenizers` wrote
  besides the vocabulary and merges (their "config") is kept; the test puts the GGUF's tokens and
  merges back in and checks a fingerprint of them first.

Regenerate (makes a Python environment with `tokenizers` and `gguf` in
~/.cache/kvscope/tokenizers-venv on first use, outside the repository):
    python3 scripts/tokenizer_json_reference.py
"""

import hashlib
import json
import os
import pathlib
import subprocess
import sys
import unicodedata

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "assets" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
FIXTURES = ROOT / "tests" / "data" / "tokenizer_json"
GOLDEN = ROOT / "tests" / "data" / "tokenizer_json_golden.json"
VENV = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / \
    "kvscope" / "tokenizers-venv"
PACKAGES = ["tokenizers==0.23.3", "gguf==0.19.0"]

GPT2_REGEX = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
                r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Beyond scripts/smollm2_tokenizer_reference.py's texts: what the other pre-tokenizers and NFC
# treat differently.
EXTRA_CASES = [
    # NFC: composition, canonical order, singletons, exclusions, Hangul, a leading mark
    "e\u0301 \u00e9 A\u030a \u212b \u2126 \ufb01",
    "a\u0302\u0323 a\u0323\u0302 q\u0307\u0323 \u1e0b\u0323",
    "\u1100\u1161\u11a8 \uac00\u11a8 \u1100\u1161 \u1100",
    "\u0958 \u0915\u093c \uf900 \u0344 \u0f73",
    "\u0301leading mark",
    # contractions: case-insensitive for Llama-3 and Qwen2
    "'S 'T 'RE 'VE 'M 'LL 'D 's 'Re DON'T Don'T",
    "'\u017ftar x'\u017fTAR '\u017f \u017f",
    # digit runs, three at a time for Llama-3
    "1234567 12 1 123456789012 a1b22c333d4444",
    # newlines after punctuation and whitespace runs
    "hello\r\n\r\n  world\n \n\tx",
    "!!!\n\n??? \n...\r\n",
    "\tword \u00a0word \u3000word \u2003word",
    "x  \u0085 y \u2028 z",
    "a" + " " * 40 + "b",
    "\u200b zero width \ufeff bom",
    # added tokens back to back
    "<|endoftext|><|endoftext|> <|im_start|>",
]


def in_venv() -> None:
    """Re-runs this script in the cached environment unless `tokenizers` imports here."""
    try:
        import gguf  # noqa: F401
        import tokenizers  # noqa: F401
        return
    except ImportError:
        pass
    python = VENV / "bin" / "python"
    if not (VENV / ".complete").exists():
        print(f"making {VENV} ({', '.join(PACKAGES)})", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *PACKAGES], check=True)
        (VENV / ".complete").touch()
    os.execv(str(python), [str(python), __file__, *sys.argv[1:]])


def texts() -> list[str]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from smollm2_tokenizer_reference import CASES, gpl_paragraphs
    return CASES + EXTRA_CASES + gpl_paragraphs()


def fnv1a64(items: list[str]) -> str:
    """FNV-1a over each item's UTF-8 bytes followed by a 0 byte (the test computes the same)."""
    h = 0xCBF29CE484222325
    for item in items:
        for b in item.encode() + b"\0":
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def smollm2_vocab():
    """SmolLM2's tokens, token types and merges, as its GGUF stores them."""
    import gguf
    reader = gguf.GGUFReader(str(MODEL))

    def strings(key):
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode() for i in field.data]

    types = reader.fields["tokenizer.ggml.token_type"]
    token_types = [int(types.parts[i][0]) for i in types.data]
    return strings("tokenizer.ggml.tokens"), token_types, strings("tokenizer.ggml.merges")


def smollm2_variants(tokens, token_types, merges):
    """name -> Tokenizer over SmolLM2's vocabulary with one pre-tokenizer setup each."""
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors)
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ")) for m in merges]
    control = [t for t, kind in zip(tokens, token_types) if kind == 3]

    def make(pre, normalizer=None, post=None, **bpe):
        tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, **bpe))
        tok.normalizer = normalizer
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        if post is not None:
            tok.post_processor = post
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
        return tok

    def byte_level(use_regex):
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=use_regex)

    def split(regex):
        return pre_tokenizers.Split(Regex(regex), "isolated")

    return {
        # SmolLM2's own tokenizer.json: every digit alone, then GPT-2's pattern.
        "smollm2": make(pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level(True)]),
            post=processors.ByteLevel(trim_offsets=False)),
        # Llama-3's setup: its Split pattern, whole-word tokens first, BOS by a template.
        "llama3": make(pre_tokenizers.Sequence([split(LLAMA3_REGEX), byte_level(False)]),
                       post=processors.TemplateProcessing(
                           single="<|im_start|> $A", pair="<|im_start|> $A <|im_start|> $B:1",
                           special_tokens=[("<|im_start|>", 1)]),
                       ignore_merges=True),
        # Qwen2's: NFC, its Split pattern (single digits).
        "qwen2": make(pre_tokenizers.Sequence([split(QWEN2_REGEX), byte_level(False)]),
                      normalizer=normalizers.NFC()),
        # GPT-2's: the pattern ByteLevel carries; bytes without a token become <|endoftext|>.
        "gpt2": make(byte_level(True), unk_token="<|endoftext|>"),
        # Digit runs as pieces, GPT-2's pattern as a Split; unknown bytes fused into one.
        "digit_runs": make(pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=False), split(GPT2_REGEX), byte_level(False)]),
            unk_token="<|endoftext|>", fuse_unk=True),
    }


def tiny_fixtures():
    """file name -> (Tokenizer, JSON text to write) trained on docs/concepts/*.md."""
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
    corpus = [p.read_text() for p in sorted((ROOT / "docs" / "concepts").glob("*.md"))]

    def train(pre, vocab_size, normalizer=None, specials_first=(), **bpe):
        tok = Tokenizer(models.BPE(**bpe))
        tok.normalizer = normalizer
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                      special_tokens=list(specials_first),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus, trainer)
        return tok

    def split_then_bytes(regex):
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), "isolated"),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                 use_regex=False)])

    out = {}
    # Llama-3-like: specials after the vocabulary, BOS by a template, one non-special added token.
    llama3 = train(split_then_bytes(LLAMA3_REGEX), 520, ignore_merges=True)
    llama3.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (
        "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
        "<|eot_id|>")])
    llama3.add_tokens([AddedToken("<tool>", normalized=False)])
    llama3.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
        special_tokens=[("<|begin_of_text|>", llama3.token_to_id("<|begin_of_text|>"))])
    out["tiny_llama3.json"] = (llama3, llama3.to_str(pretty=True))

    # GPT-2-like: <|endoftext|> first (normalized, as GPT-2's is), merges in the old string form.
    gpt2 = train(pre_tokenizers.ByteLevel(add_prefix_space=False), 480,
                 specials_first=[AddedToken("<|endoftext|>", special=True, normalized=True)])
    doc = json.loads(gpt2.to_str())
    doc["model"]["merges"] = [f"{a} {b}" for a, b in doc["model"]["merges"]]
    legacy = json.dumps(doc, ensure_ascii=False, indent=2)
    out["tiny_gpt2_legacy_merges.json"] = (Tokenizer.from_str(legacy), legacy)

    # Qwen2-like: NFC, single digits, ChatML specials after the vocabulary.
    qwen2 = train(split_then_bytes(QWEN2_REGEX), 500, normalizer=normalizers.NFC())
    qwen2.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (
        "<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    out["tiny_qwen2_nfc.json"] = (qwen2, qwen2.to_str(pretty=True))
    return out


def byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode map: the character each byte stands for in a byte-level vocab."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in kept:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def edge_fixtures():
    """file name -> (Tokenizer, JSON text, texts): hand-made vocabularies for the rules where
    Hugging Face and llama.cpp differ, each shown by a few texts."""
    from tokenizers import Tokenizer
    chars = byte_chars()

    def enc(raw) -> str:
        """Byte-level text of raw bytes (a str stands for its UTF-8 bytes)."""
        return "".join(chars[b] for b in (raw.encode() if isinstance(raw, str) else raw))

    def build(missing_bytes, merges, added, extra_tokens=(), model=None, **parts):
        vocab = {}
        for b in range(256):
            if b not in missing_bytes:
                vocab[chars[b]] = len(vocab)
        for left, right in merges:
            vocab.setdefault(enc(left) + enc(right), len(vocab))
        for extra in extra_tokens:
            vocab.setdefault(enc(extra), len(vocab))
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
               "model": {"type": "BPE", "vocab": vocab, **(model or {}),
                         "merges": [[enc(a), enc(b)] for a, b in merges]},
               "decoder": {"type": "ByteLevel", "add_prefix_space": False,
                           "trim_offsets": False, "use_regex": True}, **parts}
        next_id = len(vocab)
        for content, special, normalized in added:
            token_id = vocab.get(content, next_id)
            next_id += token_id == next_id
            doc["added_tokens"].append({"id": token_id, "content": content, "single_word": False,
                                        "lstrip": False, "rstrip": False,
                                        "normalized": normalized, "special": special})
        text = json.dumps(doc, ensure_ascii=False)
        return Tokenizer.from_str(text), text

    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": True}
    out = {}
    # Added tokens overlap ("<a" and "a>>>": leftmost-longest takes "<a"), one matches only after
    # NFC (normalized), one never does (not normalized); a whole-word token the merges never
    # make (ignore_merges); bytes without a token become one <unk> per run (fuse_unk).
    tok, text = build(
        missing_bytes={0x01, 0x02},
        merges=[("a", "b"), ("ab", "c"), ("y", "z"), ("n", "o")],
        extra_tokens=["xyz", "<unk>"],
        added=[("<a", True, False), ("a>>>", True, False), ("\u00e9", False, True),
               ("\u00f1", False, False), ("<unk>", True, False)],
        model={"unk_token": "<unk>", "ignore_merges": True, "fuse_unk": True},
        normalizer={"type": "NFC"}, pre_tokenizer=byte_level)
    out["edge_nfc_unk.json"] = (tok, text, [
        "<a>>>", "x<a>>>y", "a>>>", "<<a>>>>", "e\u0301 \u00e9 n\u0303 \u00f1",
        "xyz abc xyzxyz", "a\x01\x02b \x01c\x02 d\x01", "abcab no"])
    # No unk_token: a byte without a token is dropped and its neighbours merge ("\u00e9q": byte
    # 0xA9 has no token; 0xC3 and "q" merge). A normalized added token ("abc") is matched after
    # the others, in what they leave.
    tok, text = build(
        missing_bytes={0xA9},
        merges=[(b"\xc3", "q"), ("b", "c")],
        added=[("abc", True, True), ("bc", True, False)],
        pre_tokenizer=byte_level)
    out["edge_dropped_byte.json"] = (tok, text, ["\u00e9q", "q\u00e9q", "abc", "xabcx bc"])
    return out


def nfc_cases() -> list[list[str]]:
    """[text, its NFC by Python's unicodedata] for engine/model/unicode_nfc.cpp: every fifth code
    point with a canonical decomposition, decomposed; every third one NFC does not keep
    (exclusions, singletons); marks of mixed classes in shuffled order after bases; Hangul jamo."""
    import random
    rng = random.Random(7)
    decomposable, changed, marks = [], [], []
    for cp in range(0x110000):
        ch = chr(cp)
        if unicodedata.combining(ch):
            marks.append(ch)
        mapping = unicodedata.decomposition(ch)
        if mapping and not mapping.startswith("<"):
            decomposable.append(ch)
            if unicodedata.normalize("NFC", ch) != ch:
                changed.append(ch)
    texts = [
        " ".join(unicodedata.normalize("NFD", ch) for ch in decomposable[::5]),
        " ".join(changed[::3]),
        " ".join(rng.choice("aeouAEOUnscz\u03b1\u0430") + "".join(rng.sample(marks[:120], 4))
                 for _ in range(60)),
        "\u1100\u1161\u11a8 \u1100\u1161 \uac00\u11a8 \u1100\u11a8 \u1161\u11a8 "
        "\u1112\u1175\u11c2\u11c2 \uac00\u0301\u11a8 \u11a7",
        "\u0301\u0302 leading marks, a\u0316\u0301\u0316 \u0958\u093c e\u0301\u0301",
    ]
    return [[t, unicodedata.normalize("NFC", t)] for t in texts]


def pre_tokenized(cases) -> dict:
    """name -> [the byte length of each piece `tokenizers` cuts each text into], for the
    pre-tokenizers alone (no BPE after them to hide a wrong cut)."""
    from tokenizers import Regex, pre_tokenizers

    def split(regex):
        return pre_tokenizers.Split(Regex(regex), "isolated")

    setups = {
        "gpt2": pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        "llama3": split(LLAMA3_REGEX),
        "qwen2": split(QWEN2_REGEX),
        "digits_gpt2": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                split(GPT2_REGEX)]),
        "digit_runs_llama3": pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=False), split(LLAMA3_REGEX)]),
    }
    out = {}
    for name, pre in setups.items():
        out[name] = [[len(text[a:b].encode()) for _, (a, b) in pre.pre_tokenize_str(text)]
                     for text in cases]
    return out


def encode_cases(tok, cases):
    """One {"ids": [...]} per text; "decoded" too where decoding does not give the text back."""
    rows = []
    for text in cases:
        ids = tok.encode(text, add_special_tokens=False).ids
        row = {"ids": ids}
        decoded = tok.decode(ids, skip_special_tokens=False)
        if decoded != text:
            row["decoded"] = decoded
        rows.append(row)
    return rows


def with_special(tok):
    text = "Hello world"
    return {"text": text, "ids": tok.encode(text, add_special_tokens=True).ids}


def main() -> None:
    in_venv()
    import tokenizers
    if not MODEL.exists():
        sys.exit(f"{MODEL} is missing: run scripts/models.sh")
    cases = texts()
    short = len(cases) - 2  # the fixtures skip the two GPL paragraphs (long with a tiny vocabulary)

    tokens, token_types, merges = smollm2_vocab()
    variants = []
    for name, tok in smollm2_variants(tokens, token_types, merges).items():
        config = json.loads(tok.to_str())
        written = config["model"]
        if written["vocab"] != {t: i for i, t in enumerate(tokens)} or \
                [" ".join(m) for m in written["merges"]] != merges:
            sys.exit(f"{name}: tokenizers wrote another vocabulary or merge list than the GGUF's")
        written["vocab"] = {}
        written["merges"] = []
        variants.append({"name": name, "config": config, "with_special": with_special(tok),
                         "cases": encode_cases(tok, cases)})

    FIXTURES.mkdir(parents=True, exist_ok=True)
    fixtures = []
    for file, (tok, text) in tiny_fixtures().items():
        (FIXTURES / file).write_text(text)
        reread = tokenizers.Tokenizer.from_file(str(FIXTURES / file))
        rows = encode_cases(reread, cases[:short])
        if rows != encode_cases(tok, cases[:short]):
            sys.exit(f"{file}: the written file tokenizes differently from the trained tokenizer")
        fixtures.append({"file": f"tests/data/tokenizer_json/{file}",
                         "vocab_size": reread.get_vocab_size(),
                         "with_special": with_special(reread), "cases": rows})

    for file, (tok, text, edge_texts) in edge_fixtures().items():
        (FIXTURES / file).write_text(text + "\n")
        reread = tokenizers.Tokenizer.from_file(str(FIXTURES / file))
        fixtures.append({"file": f"tests/data/tokenizer_json/{file}",
                         "vocab_size": reread.get_vocab_size(), "texts": edge_texts,
                         "with_special": with_special(reread),
                         "cases": encode_cases(reread, edge_texts)})

    head = {
        "reference": f"Hugging Face tokenizers {tokenizers.__version__}: "
                     "Tokenizer.encode(text, add_special_tokens=False).ids; \"decoded\" is "
                     "Tokenizer.decode(ids, skip_special_tokens=False) where it is not the text",
        "smollm2": {"model_sha256": hashlib.sha256(MODEL.read_bytes()).hexdigest(),
                    "tokens": len(tokens), "merges": len(merges),
                    "tokens_fnv1a64": fnv1a64(tokens), "merges_fnv1a64": fnv1a64(merges)},
        "nfc_reference": f"Python {sys.version_info.major}.{sys.version_info.minor} "
                         f"unicodedata.normalize('NFC', text), Unicode "
                         f"{unicodedata.unidata_version}",
    }
    # One line per text and per case, so that a diff shows what changed.
    lines = ["{", *(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in
                    head.items())]
    lines.append(' "nfc": [')
    lines.append(",\n".join(f"  {json.dumps(c, ensure_ascii=False)}" for c in nfc_cases()))
    lines.append(" ],")
    lines.append(' "pre_tokenized": {')
    lines.append(",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}"
                             for k, v in pre_tokenized(cases).items()))
    lines.append(" },")
    lines.append(' "texts": [')
    lines.append(",\n".join(f"  {json.dumps(t, ensure_ascii=False)}" for t in cases))
    lines.append(" ],")
    for key, groups in (("variants", variants), ("fixtures", fixtures)):
        lines.append(f' "{key}": [')
        blocks = []
        for g in groups:
            rows = g.pop("cases")
            body = json.dumps(g, ensure_ascii=False)[:-1]
            blocks.append("  " + body + ', "cases": [\n' + ",\n".join(
                "   " + json.dumps(r, ensure_ascii=False) for r in rows) + "\n  ]}")
        lines.append(",\n".join(blocks))
        lines.append(" ]" + ("," if key == "variants" else ""))
    lines.append("}")
    GOLDEN.write_text("\n".join(lines) + "\n")
    json.loads(GOLDEN.read_text())  # well-formed
    print(f"wrote {GOLDEN} ({len(cases)} texts, {len(variants)} SmolLM2 variants, "
          f"{len(fixtures)} fixtures in {FIXTURES})")


if __name__ == "__main__":
    main()
