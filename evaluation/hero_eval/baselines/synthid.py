"""SynthID-Text (Dathathri et al., Nature 2024) as a zero-bit baseline, through transformers' implementation.

Generation uses `SynthIDTextWatermarkLogitsProcessor` as `SynthIDTextWatermarkingConfig` builds it (ngram_len 5,
30 keys), applied as `model.generate` applies it: after temperature / top-k / top-p. Under a top-k warper every
token outside the k highest scores has probability 0 before the tournament, and the tournament only rescales
probabilities, so `TopKSynthIDLogitsProcessor` runs the stock arithmetic (`_compute_keys`, `sample_g_values`,
`update_scores`, the same context-history state) on those k tokens alone: the same next-token distribution at
a fraction of the cost (the stock processor hashes the whole 49,152-token vocabulary 30 times per step).

Detection is a valid one-sided test rather than transformers' trained Bayesian detector: under the null (text
not made with these keys) each g-value is a Bernoulli draw with the sampling table's own fraction of ones, so
the count of g = 1 over the unmasked (token, layer) entries is binomial. Masked: entries whose 4-token context
repeats an earlier one (the processor does not watermark them), entries at or after EOS, and entries whose
n-gram hash (the table index, 16 bits) repeats an earlier unmasked one (identical g-values, not independent).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from scipy import stats
from transformers import LogitsProcessor, LogitsProcessorList, SynthIDTextWatermarkingConfig, TopKLogitsWarper
from transformers.generation.logits_process import SynthIDTextWatermarkLogitsProcessor

__all__ = [
    "NGRAM_LEN",
    "N_KEYS",
    "SynthIDDetector",
    "SynthIDScore",
    "TopKSynthIDLogitsProcessor",
    "synthid_config",
    "synthid_keys",
]

NGRAM_LEN = 5
N_KEYS = 30


def synthid_keys(seed: int, salt: str = "", n: int = N_KEYS) -> list[int]:
    """`n` watermarking keys derived from the run seed (a different `salt` = a different, wrong key set)."""
    rng = random.Random(f"synthid/{seed}/{salt}")
    return [rng.randrange(1, 2**31) for _ in range(n)]


def synthid_config(keys: Sequence[int]) -> SynthIDTextWatermarkingConfig:
    return SynthIDTextWatermarkingConfig(ngram_len=NGRAM_LEN, keys=list(keys))


class TopKSynthIDLogitsProcessor(SynthIDTextWatermarkLogitsProcessor):
    """The stock processor's arithmetic on the `top_k` highest scores only (see the module docstring).

    Falls back to the stock call when a row has more than `top_k` finite scores (no top-k warper before it)."""

    def __init__(self, *args, top_k: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.top_k = top_k

    @classmethod
    def from_config(cls, config: SynthIDTextWatermarkingConfig, top_k: int, device="cpu"):
        return cls(
            ngram_len=config.ngram_len,
            keys=config.keys,
            sampling_table_size=config.sampling_table_size,
            sampling_table_seed=config.sampling_table_seed,
            context_history_size=config.context_history_size,
            device=torch.device(device),
            skip_first_ngram_calls=config.skip_first_ngram_calls,
            debug_mode=config.debug_mode,
            top_k=top_k,
        )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        k = min(self.top_k, scores.shape[1])
        if self.debug_mode or bool((torch.isfinite(scores).sum(1) > k).any()):
            return super().__call__(input_ids, scores)
        self._check_input_ids_shape(input_ids)
        top_scores, indices = scores.topk(k, dim=1)
        if self.state is None:
            self._init_state(scores.shape[0])
        else:  # as the stock call: the last token joins the context
            self.state.context = torch.concat((self.state.context, input_ids[:, -1:]), dim=1)[:, 1:]
        self.state.num_calls += 1
        if self.skip_first_ngram_calls and self.state.num_calls < self.ngram_len:
            return scores
        ngram_keys, context_hash = self._compute_keys(self.state.context, indices)
        updated = self.update_scores(top_scores, self.sample_g_values(ngram_keys))
        full = torch.full_like(scores, torch.finfo(updated.dtype).min).scatter(1, indices, updated)
        context_hash = context_hash[:, None]
        repeated = (self.state.context_history == context_hash).any(dim=1, keepdim=True)
        self.state.context_history = torch.concat((context_hash, self.state.context_history), dim=1)[:, :-1]
        return torch.where(repeated, scores, full)


class WarpThenWatermark(LogitsProcessor):
    """Temperature / top-k / top-p, then SynthID: the order `model.generate` applies them in."""

    def __init__(self, warpers: LogitsProcessorList, watermark: SynthIDTextWatermarkLogitsProcessor) -> None:
        self.warpers, self.watermark = warpers, watermark

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        return self.watermark(input_ids, self.warpers(input_ids, scores))


def processor_for(keys: Sequence[int], warpers: LogitsProcessorList | None) -> WarpThenWatermark:
    """A fresh processor (its context state is per generation) for one batch under `warpers`: the top-k one
    when the warpers hold a top-k warper, else the stock processor."""
    warpers = warpers or LogitsProcessorList()
    config = synthid_config(keys)
    top_k = next((w.top_k for w in warpers if isinstance(w, TopKLogitsWarper)), None)
    if top_k:
        wm: SynthIDTextWatermarkLogitsProcessor = TopKSynthIDLogitsProcessor.from_config(config, top_k)
    else:
        wm = config.construct_processor(vocab_size=0, device=torch.device("cpu"))
    return WarpThenWatermark(warpers, wm)


@dataclass(frozen=True)
class SynthIDScore:
    """One text's test: `ones` of `entries` unmasked (token, layer) g-values, against Binomial(entries, p0)."""

    ones: int
    entries: int
    p_value: float

    @property
    def log10_p(self) -> float:
        return math.log10(self.p_value) if self.p_value > 0 else -320.0


def context_mask(ids: Sequence[int], ngram_len: int, eos_token_id: int | None, history: int) -> list[bool]:
    """Per n-gram (the window ending at token j + ngram_len - 1): False where its context (the ngram_len - 1
    tokens before) came earlier among the last `history` contexts, or where the window reaches EOS. The same
    masks as the stock `compute_context_repetition_mask` and `compute_eos_token_mask` (tested), in plain Python:
    the stock ones step a torch loop per token, too slow for thousands of texts."""
    c = ngram_len - 1
    end = ids.index(eos_token_id) if eos_token_id is not None and eos_token_id in ids else len(ids)
    out: list[bool] = []
    last: dict[tuple[int, ...], int] = {}
    for j in range(len(ids) - c):
        ctx = tuple(ids[j : j + c])
        out.append((ctx not in last or j - last[ctx] > history) and j + c < end)
        last[ctx] = j
    return out


class SynthIDDetector:
    """The binomial test for one key set (no trained detector, nothing fitted on the evaluation's texts)."""

    def __init__(self, keys: Sequence[int], eos_token_id: int | None = None) -> None:
        self.proc = synthid_config(keys).construct_processor(vocab_size=0, device=torch.device("cpu"))
        self.eos = eos_token_id
        self.p0 = float(self.proc.sampling_table.double().mean())
        self.depth = len(keys)

    def mask(self, ids: Sequence[int], index: Sequence[int]) -> list[bool]:
        """Unmasked n-grams: a fresh context before EOS, and a table index (n-gram hash) not seen before."""
        keep = context_mask(ids, self.proc.ngram_len, self.eos, self.proc.context_history_size)
        seen: set[int] = set()
        for j, k in enumerate(keep):
            if k:
                keep[j] = index[j] not in seen
                seen.add(index[j])
        return keep

    def score(self, ids: Sequence[Sequence[int]]) -> list[SynthIDScore]:
        return [self._one(list(x)) for x in ids]

    @torch.no_grad()
    def _one(self, ids: list[int]) -> SynthIDScore:
        n = self.proc.ngram_len
        if len(ids) < n:
            return SynthIDScore(0, 0, 1.0)
        t = torch.tensor([ids], dtype=torch.int64)
        keys = self.proc.compute_ngram_keys(t.unfold(1, n, 1))  # [1, L - n + 1, depth]
        g = self.proc.sample_g_values(keys)[0]
        keep = self.mask(ids, (keys[0, :, 0] % self.proc.sampling_table.shape[0]).tolist())
        sel = torch.tensor(keep, dtype=torch.bool)
        entries = int(sel.sum()) * self.depth
        ones = int(g[sel].sum())
        p = float(stats.binom.sf(ones - 1, entries, self.p0)) if entries else 1.0
        return SynthIDScore(ones, entries, p)
