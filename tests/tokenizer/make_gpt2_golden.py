#!/usr/bin/env python3
"""Prints the golden GPT-2 ids embedded in gpt2_bpe_test.cpp (kGolden), as C++ rows.

Two references on the official files (/work/shared/data/gpt2 by default):
  - OpenAI's encoder.py algorithm (bytes_to_unicode, get_pairs, bpe, the `regex` pattern),
    re-typed below from github.com/openai/gpt-2/blob/master/src/encoder.py;
  - Hugging Face transformers' GPT2Tokenizer(vocab_file=..., merges_file=...).
It fails if the two disagree.  Run: .venv/bin/python tests/tokenizer/make_gpt2_golden.py [dir]
"""
import json
import string
import sys
import textwrap
from pathlib import Path

import regex as re

data = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/data/gpt2")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def get_pairs(word):
    return set(zip(word, word[1:]))


class Encoder:
    def __init__(self, encoder, bpe_merges):
        self.encoder = encoder
        self.byte_encoder = bytes_to_unicode()
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.pat = re.compile(
            r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

    def bpe(self, token):
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        return " ".join(word)

    def encode(self, text):
        bpe_tokens = []
        for token in re.findall(self.pat, text):
            token = "".join(self.byte_encoder[b] for b in token.encode("utf-8"))
            bpe_tokens.extend(self.encoder[t] for t in self.bpe(token).split(" "))
        return bpe_tokens


# Keep in sync with kGolden in gpt2_bpe_test.cpp (C++ escapes there, same strings).
CASES = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's what we've done, isn't it? You're right, I'd've known.",
    "Привет, мир! Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Emoji: 😀👍🏽 and flags 🇺🇦🇯🇵, family 👨\u200d👩\u200d👧.",
    "中文分词测试：我爱北京天安门。日本語のテキストです。한국어 문장.",
    "Numbers 1234567890 3.14159 2024-01-01 and 1,000,000.",
    "  leading spaces, tabs\t\tand\nnewlines\n\n\n  trailing spaces   ",
    "def f(x):\n    return x ** 2  # comment\n\treturn\r\n",
    "<|endoftext|> is plain text here",
    "mixed\u00a0nbsp\u2003em\u3000ideographic \u0085nel \u200bzwsp\x1c\x1d end \x85",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!",
    # Letters and digits newer than Unicode 14 (CJK Extension H, Nag Mundari digits, Armenian).
    "new a\U00031350b \U0001E4F0\U0001E4F1x \u0558z",
]


def cpp_literal(text, width=80):
    """C++ string literal(s): printable non-ASCII kept as UTF-8, the rest escaped as bytes;
    split into adjacent literals of about `width` characters."""
    pieces, cur, after_hex = [], "", False
    for ch in text:
        if ch.isprintable() and ch not in '"\\':
            tok, hexed = ch, False
        elif ch in '"\\':
            tok, hexed = "\\" + ch, False
        else:
            tok, hexed = "".join(f"\\x{b:02X}" for b in ch.encode("utf-8")), True
        if len(cur) + len(tok) > width or (after_hex and not hexed and ch in string.hexdigits):
            pieces.append(cur)  # a new literal also stops "\x83" from swallowing a hex digit
            cur = ""
        cur += tok
        after_hex = hexed
    pieces.append(cur)
    return "\n     ".join(f'"{p}"' for p in pieces)


def main():
    encoder = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
    merges = (data / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:-1]
    ref = Encoder(encoder, [tuple(m.split()) for m in merges])
    from transformers import GPT2Tokenizer
    # transformers 5 names the files vocab/merges (4.x: vocab_file/merges_file).
    hf = GPT2Tokenizer(vocab=str(data / "encoder.json"), merges=str(data / "vocab.bpe"))
    for text in CASES:
        ids = ref.encode(text)
        # split_special_tokens: "<|endoftext|>" in the text is ordinary text, as in encoder.py.
        hf_ids = hf.encode(text, add_special_tokens=False, split_special_tokens=True)
        if hf_ids != ids:
            print(f"MISMATCH encoder.py vs HF for {text!r}:\n {ids}\n {hf_ids}", file=sys.stderr)
            sys.exit(1)
        rows = textwrap.wrap(", ".join(map(str, ids)), 90)
        print(f"    {{{cpp_literal(text)},\n     {{" + "\n      ".join(rows) + "}},")


if __name__ == "__main__":
    main()
