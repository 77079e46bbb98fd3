"""Perplexity of continuations: the generator's own log-probs recorded during sampling (free), and a
larger scorer model (Gemma-3-270m) run over prompt + continuation re-tokenised with its tokenizer."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, LogitsProcessorList


class LogProbRecorder(LogitsProcessor):
    """First processor in the list: sees the model's raw (T = 1) scores and records, at the next step,
    the log-probability of the token that was actually sampled. Call `finish(final_ids)` afterwards."""

    def __init__(self) -> None:
        self.prev: torch.Tensor | None = None
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prev is not None:
            self.logprobs.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """[B, T] log-probs of the generated tokens."""
        if self.prev is not None:
            self.logprobs.append(self.prev.gather(1, last_tokens.view(-1, 1)).squeeze(1))
            self.prev = None
        return torch.stack(self.logprobs, 1) if self.logprobs else torch.zeros(0, 0)


class EntropyRecorder(LogitsProcessor):
    """Records, per row and step, the entropy (nats) of the distribution a plain sampler draws from: the raw
    scores after the setting's warpers (temperature, top-k, top-p). A watermark's evidence per token is bounded
    by it, so every figure is printed beside its texts' mean. Pass-through: the scores are not changed."""

    def __init__(self, warpers: LogitsProcessorList) -> None:
        self.warpers = warpers
        self.rows: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        logp = torch.log_softmax(self.warpers(input_ids, scores.float().clone()), dim=-1)
        self.rows.append(-(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1))
        return scores

    def finish(self) -> torch.Tensor:
        """[B, T] entropies of the generated steps."""
        return torch.stack(self.rows, 1) if self.rows else torch.zeros(0, 0)


def ppl_from_logprobs(lps: Sequence[float]) -> float:
    lps = [x for x in lps if math.isfinite(x)]
    return math.exp(-sum(lps) / len(lps)) if lps else float("nan")


@torch.no_grad()
def score_ppl(model, tokenizer, prompts: Sequence[str], texts: Sequence[str], batch_size: int = 4) -> list[float]:
    """PPL of each text given its prompt under `model` (continuation tokens only)."""
    out: list[float] = []
    for s in range(0, len(texts), batch_size):
        rows, starts = [], []
        for pr, tx in zip(prompts[s : s + batch_size], texts[s : s + batch_size], strict=True):
            p_ids = tokenizer(pr, add_special_tokens=True)["input_ids"]
            c_ids = tokenizer(tx, add_special_tokens=False)["input_ids"]
            rows.append(p_ids + c_ids)
            starts.append(len(p_ids))
        width = max(len(r) for r in rows)
        pad = tokenizer.pad_token_id or 0
        ids = torch.full((len(rows), width), pad, dtype=torch.int64)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r)
            mask[i, : len(r)] = 1
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
        lp = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:].unsqueeze(2)).squeeze(2)
        for i, r in enumerate(rows):
            seg = lp[i, starts[i] - 1 : len(r) - 1]
            out.append(math.exp(-float(seg.mean())) if seg.numel() else float("nan"))
    return out
