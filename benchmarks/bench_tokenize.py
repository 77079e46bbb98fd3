"""Tokenization throughput (SmolLM2 fast tokenizer): one batched call vs one call per text.

    python benchmarks/bench_tokenize.py [--batches 1,4,16,32,64] [--tokens 200]
"""

from __future__ import annotations

import argparse
import statistics

from _common import emit

from verifier.base.timing import summary, timed


def tokenize_figures(batch: int, tokens: int = 200, reps: int = 10, name: str = "smollm2") -> dict:
    """Batched fast-tokenizer throughput (what Decoder.decode_texts calls) vs one text at a time."""
    from verifier.lm import load_tokenizer

    tok = load_tokenizer(name)
    words = "the watermark survives light edits while the verifier reads every token of the text".split()
    texts = [" ".join(words[(i + j) % len(words)] for j in range(tokens * 3 // 4)) for i in range(batch)]
    n = sum(len(x) for x in tok(texts, add_special_tokens=False)["input_ids"])
    batched = timed(lambda: tok(texts, add_special_tokens=False)["input_ids"], reps)
    single = timed(lambda: [tok(t, add_special_tokens=False)["input_ids"] for t in texts], reps)
    return {"bench": "tokenize", "batch": batch, "tokens": n, "fast": bool(getattr(tok, "is_fast", False)),
            "batched_tokens_per_s": n / statistics.median(batched),
            "single_tokens_per_s": n / statistics.median(single),
            "batched_seconds": summary(batched), "single_seconds": summary(single)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,4,16,32,64")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    for b in (int(x) for x in a.batches.split(",")):
        emit(tokenize_figures(b, a.tokens, a.reps))


if __name__ == "__main__":
    main()
