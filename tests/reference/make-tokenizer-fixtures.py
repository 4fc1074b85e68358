#!/usr/bin/python3
"""Fixtures for the CLIP tokenizer (kernels/text/pp-clip-tokenizer.c).

  /usr/bin/python3 tests/reference/make-tokenizer-fixtures.py \
      --clip-src CLIP_CHECKOUT --ftfy-src FTFY_CHECKOUT [--out tests/data/tokenizer]

CLIP_CHECKOUT is a checkout of github.com/openai/CLIP (its
clip/simple_tokenizer.py is the reference: it needs the regex module,
python3-regex); FTFY_CHECKOUT one of github.com/rspeer/python-ftfy (6.x,
needs python3-wcwidth).  Neither is imported from anywhere else.

Writes, under --out:
  sd15/, sd2/    a tokenizer folder each (vocab.json, merges.txt,
                 tokenizer_config.json, special_tokens_map.json): the same
                 BPE, padded with <|endoftext|> (SD 1.x) or "!" (SD 2.x)
  prompts.txt    one prompt a line
  expected-sd15.txt, expected-sd2.txt
                 77 ids a line, per prompt: BOS + ids + EOS, truncated to 77
                 keeping EOS last, then the pad id (transformers'
                 CLIPTokenizer with padding="max_length", truncation=True)
  expected-full.txt
                 the ids of each prompt with CLIP's released vocabulary
                 (clip/bpe_simple_vocab_16e6.txt.gz), before BOS, EOS,
                 truncation and padding: any real tokenizer/ folder gives
                 these (the test packs them with the folder's own tokens)

With --full-out DIR it also writes that released vocabulary as a
tokenizer/ folder (SD 1.x padding; ~2 MB, not kept in the repository):
point $PPDIFFUSE_CLIP_TOKENIZER at it, or at a real pipeline's tokenizer/.

The merges are learned here, deterministically, on a built-in corpus: a few
hundred, so that words of the prompts merge into multi-character tokens
while others fall apart into bytes.  The vocabulary is built as
simple_tokenizer builds its own from the merges (256 byte characters, the
same with </w>, one token per merge, then the two specials), so the ids of
both agree."""
import argparse
import collections
import gzip
import json
import os
import sys
import tempfile

MODEL_MAX_LENGTH = 77
N_MERGES = 400
BOS = "<|startoftext|>"
EOS = "<|endoftext|>"

CORPUS = """
a photo of a cat sitting on the table, highly detailed, 4k, trending on
artstation. a painting of a dog in the style of van gogh. portrait of a woman
with red hair, studio lighting, sharp focus. the astronaut rides a horse on
the moon. beautiful landscape with mountains and a river at sunset. there's
a castle in the clouds; it's raining and they're walking home. we've seen
the city at night with neon lights. i'm sure you'll like the old house and
he'd paint the street. a cyberpunk street market, cinematic, octane render,
unreal engine, concept art, digital painting, illustration, watercolor,
oil on canvas, photorealistic, masterpiece, best quality, high resolution.
"""

LONG = ("a very detailed photograph of a mountain landscape with snow and "
        "pine trees and a lake reflecting the sky, ") * 4

PROMPTS = [
    # plain
    "a photo of a cat", "A Photo Of A Cat", "a painting of a dog",
    "portrait of a woman with red hair, studio lighting",
    "the astronaut rides a horse on the moon",
    "beautiful landscape with mountains", "cyberpunk street market",
    "masterpiece, best quality", "oil on canvas", "photorealistic",
    "x", "zzzzzz", "qwxyzkj fjord", "unrelatedwordsnotinthecorpus",
    # punctuation
    "hello, world!", "what?!", "wait... what", "a--b", "(cat:1.2)",
    "[dog] {bird} <fish>", "a/b\\c|d", "#hashtag @mention", "100% sure",
    "$5 & 6 cents", "***", "!!!", "!", ".", ",,,", "a.b.c", "end.",
    "semi;colon: ok", "quote \"this\" now", "tilde~caret^grave`",
    # digits
    "4k", "8k uhd", "1234567890", "3.14159", "2001: a space odyssey",
    "1st 2nd 3rd", "v1.5", "sd-2.1", "512x512", "0",
    # apostrophes and contractions
    "there's a castle", "it's raining", "they're walking home",
    "we've seen it", "i'm sure", "you'll like it", "he'd paint",
    "don't stop", "IT'S LOUD", "THEY'RE HERE", "rock 'n' roll",
    "'s", "''s", "'", "''", "a's b't c're d've e'm f'll g'd",
    "'sand 'tea 'real", "o'neil's", "dogs' bowls",
    # unicode and accents
    "café", "naïve résumé", "crème brûlée", "über straße", "ÀÉÎÕÜ",
    "cafe\u0301 (decomposed)", "ñandú", "Ελληνικά ΣΑΣ", "русский текст",
    "日本語のテキスト", "中文提示词", "한국어", "עברית", "العربية",
    "ǅemal", "ﬁne ﬂower", "ＦＵＬＬ　ｗｉｄｔｈ", "“curly” ‘quotes’",
    "Ünïcödé", "ꝏ", "½ ² ⅷ", "x²", "١٢٣", "ᛗᛁᛚᚲ",
    "\u02bcmodifier apostrophe", "\u017f long s 'ſ", "İstanbul",
    # emoji
    "a cat 🐱", "🔥🔥🔥", "👍🏽 thumbs", "🇫🇷 flag", "👩‍🚀 astronaut",
    "❤️ love", "😀😃😄", "emoji😀inside",
    # HTML entities
    "fish &amp; chips", "&lt;b&gt;bold&lt;/b&gt;", "a &quot;quote&quot;",
    "&#39;single&#39;", "&#x27;hex&#x27;", "&amp;amp;", "&amp;amp;amp;lt;",
    "&eacute;t&eacute;", "&EACUTE;T&EACUTE;", "&notit; &notin;",
    "&nbsp;spaced&nbsp;", "&copy; 2024", "&hearts;&spades;", "&#128512;",
    "&#0; &#x110000; &#55296;", "&#128; &#x9f;", "&amp", "&ampx", "& alone",
    "<b>&amp;</b>", "&unknown;", "&#65;&#66;&#67;", "&#x41x;",
    # white space and control characters
    "  many    spaces   here  ", "\ttabs\tand\tspaces ", "a\u00a0b\u3000c",
    "trailing   ", "   leading", "line\u2028sep", "nel\u0085char",
    "ctrl\u0001chars\u007f", "zero\u200bwidth", "bom\ufeffhere",
    "\x1b[31mred\x1b[0m", "in\u2003between",
    # specials in text
    "<|startoftext|>", "a <|endoftext|> b", "<|ENDOFTEXT|>",
    # empty and blank
    "", " ", "   ",
    # long
    LONG, LONG.upper(), "word " * 80, "!" * 200, "1 2 3 " * 40,
]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clip-src", required=True)
    p.add_argument("--ftfy-src", required=True)
    p.add_argument("--full-out", help="write the released vocabulary here")
    p.add_argument("--out", default=os.path.join(
        os.path.dirname(__file__), "..", "data", "tokenizer"))
    return p.parse_args()


def learn_merges(st, texts, n_merges):
    """Plain BPE training over CLIP's pre-tokens; ties go to the
    lexicographically smallest pair."""
    words = collections.Counter()
    for text in texts:
        text = st.whitespace_clean(st.basic_clean(text)).lower()
        for token in st.re.findall(st.SimpleTokenizer.PAT, text):
            chars = [st.bytes_to_unicode()[b] for b in token.encode("utf-8")]
            chars[-1] += "</w>"
            words[tuple(chars)] += 1
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        merged = collections.Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges


def special(content):
    return {"content": content, "lstrip": False, "normalized": True,
            "rstrip": False, "single_word": False}


def write_tokenizer(folder, merges_text, vocab, pad):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write(merges_text + "\n")
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, separators=(",", ":"))
    config = {
        "add_prefix_space": False, "bos_token": special(BOS),
        "do_lower_case": True, "eos_token": special(EOS), "errors": "replace",
        "model_max_length": MODEL_MAX_LENGTH, "pad_token": pad,
        "tokenizer_class": "CLIPTokenizer", "unk_token": special(EOS),
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
    tokens = {"bos_token": special(BOS), "eos_token": special(EOS),
              "pad_token": pad, "unk_token": special(EOS)}
    with open(os.path.join(folder, "special_tokens_map.json"), "w") as f:
        json.dump(tokens, f, indent=2, ensure_ascii=False)


def pack(ids, bos, eos, pad):
    ids = [bos] + ids[:MODEL_MAX_LENGTH - 2] + [eos]
    return ids + [pad] * (MODEL_MAX_LENGTH - len(ids))


def main():
    args = parse_args()
    sys.path.insert(0, args.ftfy_src)
    sys.path.insert(0, os.path.join(args.clip_src, "clip"))
    import ftfy
    import simple_tokenizer as st
    st.SimpleTokenizer.PAT = st.re.compile(
        r"""<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|"""
        r"""[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""", st.re.IGNORECASE)

    for p in PROMPTS:
        assert "\n" not in p, p
        # The C clean-up leaves mojibake alone: so must every prompt here.
        if ftfy.fix_text(p) != ftfy.fix_text(p, fix_encoding=False):
            sys.exit(f"prompt {p!r} needs ftfy's mojibake repair")

    merges = learn_merges(st, [CORPUS] + PROMPTS[:40], N_MERGES)
    merges_text = "#version: 0.2\n" + "\n".join(" ".join(m) for m in merges)
    with tempfile.TemporaryDirectory() as tmp:
        gz = os.path.join(tmp, "merges.txt.gz")
        with gzip.open(gz, "wb") as f:
            f.write(merges_text.encode("utf-8"))
        tok = st.SimpleTokenizer(gz)
    vocab = tok.encoder
    assert len(vocab) == 512 + len(merges) + 2

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "prompts.txt"), "w",
              encoding="utf-8", newline="\n") as f:
        f.write("".join(p + "\n" for p in PROMPTS))
    multi = 0
    for name, pad in (("sd15", EOS), ("sd2", "!")):
        write_tokenizer(os.path.join(args.out, name), merges_text, vocab, pad)
        with open(os.path.join(args.out, f"expected-{name}.txt"), "w") as f:
            for p in PROMPTS:
                ids = tok.encode(p)
                multi += sum(1 for i in ids if 512 <= i < len(vocab) - 2)
                row = pack(ids, vocab[BOS], vocab[EOS], vocab[pad])
                f.write(" ".join(str(i) for i in row) + "\n")
    assert multi > 0

    full = st.SimpleTokenizer(os.path.join(args.clip_src, "clip",
                                           "bpe_simple_vocab_16e6.txt.gz"))
    with open(os.path.join(args.out, "expected-full.txt"), "w") as f:
        for p in PROMPTS:
            f.write(" ".join(str(i) for i in full.encode(p)) + "\n")
    if args.full_out:
        released = gzip.open(os.path.join(args.clip_src, "clip",
                                        "bpe_simple_vocab_16e6.txt.gz"))
        lines = released.read().decode("utf-8").split("\n")
        # Its first line is not the header transformers' merges.txt has.
        lines[0] = "#version: 0.2"
        write_tokenizer(args.full_out, "\n".join(lines[:49152 - 256 - 2 + 1]),
                        full.encoder, EOS)
    print(f"{len(PROMPTS)} prompts, {len(merges)} merges, "
          f"{len(vocab)} tokens -> {args.out}")


if __name__ == "__main__":
    main()
