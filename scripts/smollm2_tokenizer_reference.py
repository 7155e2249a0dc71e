#!/usr/bin/env python3
"""Writes tests/data/smollm2_tokenizer_golden.json: SmolLM2's token ids for test texts, by llama.cpp.

The reference is llama.cpp's tokenizer (through llama-cpp-python, vocabulary only, special tokens
parsed), an implementation independent of kvscope's. The C++ BpeTokenizer must produce the same ids
for every case and decode them back to the text (tests/model/bpe_tokenizer_test.cpp). Regenerate
(needs `pip install llama-cpp-python` and the model from scripts/models.sh) with:
    python3 scripts/smollm2_tokenizer_reference.py
"""

import hashlib
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = ROOT / "assets" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests" / "data" / "smollm2_tokenizer_golden.json"
GPL3 = pathlib.Path("/usr/share/common-licenses/GPL-3")

CHATML = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")

CASES = [
    # empty and whitespace
    "",
    " ",
    "  ",
    "\n",
    "\n\n\n",
    "\t",
    "  \n  x",
    "   leading spaces",
    "trailing spaces   ",
    "multiple     spaces   between words",
    "tabs\tand\t\tmore\t\t\ttabs",
    "line one\nline two\n\nline four\n",
    "\r\nwindows\r\nline endings\r\n",
    " \t \n \t x",
    "x \n",
    "a  \x1c  b",  # U+001C: whitespace to str.isspace(), not to \s
    "group\x1dseparator",  # byte 0x1D has no token in SmolLM2's vocabulary: left out
    "plane 4 \U00040000 x",  # lead byte 0xF1 has no token either
    "no\u00a0break\u2003em\u3000ideographic",
    # digits
    "12345",
    "3.14159",
    "2024-11-23",
    "x1y22z333",
    " 42 is the answer, not 4 2",
    "$1,000,000.00 and 99%",
    "\u0663\u0664\u0665 \u00b2\u00b3 \u2167 \u00bd",  # Arabic-Indic digits, superscripts, Roman, 1/2
    # punctuation
    "Hello, world!",
    "Wait... what?!?",
    "(parentheses) [brackets] {braces} <angles>",
    "email@example.com https://example.org/path?q=1&r=2#frag",
    "--- *** ___ ~~~ ``` ''' \"\"\"",
    # apostrophes
    "don't",
    "I'M",
    "we'll",
    "'s",
    "they're I've she'd it's we'll O'Neil",
    "'twas the night 'S 'LL ''s",
    "rock 'n' roll",
    # non-ASCII
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9",
    "\u00fcber Stra\u00dfe Gr\u00fc\u00dfe",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u03ba\u03cc\u03c3\u03bc\u03b5",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "e\u0301 a\u0308 n\u0303o combining marks",
    "\uc548\ub155\ud558\uc138\uc694",
    # emoji
    "I \u2764\ufe0f emoji \U0001F600\U0001F389",
    "family \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 zwj",
    "flags \U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5",
    "skin \U0001F44D\U0001F3FD tone",
    # special tokens
    CHATML,
    "<|endoftext|>",
    "text<|im_end|>more<|im_start|>",
    "<|im_start|<|im_end|>>",
    "<filename>main.py<file_sep><gh_stars>100",
    # code
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < 10; ++i) { x[i] = i * 2; }",
    "const f = (a, b) => a ?? b; // comment",
    "SELECT * FROM users WHERE id = 7;",
]


def gpl_paragraphs() -> list[str]:
    text = GPL3.read_text()
    paragraphs = [p for p in text.split("\n\n") if len(p) > 300]
    return [paragraphs[0] + "\n\n" + paragraphs[1], paragraphs[5]]


def main() -> None:
    if not MODEL.exists():
        sys.exit(f"{MODEL} is missing: run scripts/models.sh")
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(MODEL), vocab_only=True, verbose=False)
    cases = []
    for text in CASES + gpl_paragraphs():
        ids = llm.tokenize(text.encode(), add_bos=False, special=True)
        cases.append({"text": text, "ids": list(ids)})
    golden = {
        "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}, "
                     "Llama.tokenize(text.encode(), add_bos=False, special=True)",
        "model_sha256": hashlib.sha256(MODEL.read_bytes()).hexdigest(),
        "cases": cases,
    }
    # One line per case, so a diff shows which texts changed.
    lines = [json.dumps(case, ensure_ascii=False) for case in golden.pop("cases")]
    head = json.dumps(golden, ensure_ascii=False, indent=1)[:-2]
    OUT.write_text(head + ',\n "cases": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n")
    print(f"wrote {OUT} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
