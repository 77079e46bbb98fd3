"""Model-aware scoring: the LM re-run gives, per scored token and level, the probability the routing step had.

A verifier that holds the profile's language model re-runs it over the text alone (it never sees the
prompt), in batches on its device (CUDA when present), and reads, at every scored position t, the model's
next-token distribution P_t at temperature 1 (the verifier does not know the generator's top-k/top-p).
Under the HeRo sampler level l chose the routing chunk holding x_t among its siblings, so that step's
probability is p_l = mass(x_t's level-l range) / mass(its level-(l-1) range); the last level's range is
the token itself. These p_l (a function of the text only) become the weights of the decoder's weighted
statistic (engine/weighted.py, engine/weighted_decode.py). The model object is handed in (the service binds
verifier.lm's loader in verifier/verify/scoring.py): the engine loads no model itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import torch

from verifier.engine import reference
from verifier.engine.decoder import DecodeError, Decoder, DecodeResult, token_ids
from verifier.engine.profile import Profile
from verifier.engine.weighted_decode import WeightedDecoder, Weighting

DEFAULT_BATCH = 16


@lru_cache(maxsize=8)
def _prefixes(vocab: int, schedule: tuple[int, ...], stride: int) -> np.ndarray:
    """[L, V] int64: for every token, an id of its routing range after levels 1..L-1, then the token itself."""
    rho = np.arange(vocab, dtype=np.int64)
    if stride:
        a, r = divmod(vocab, stride)
        c, q = rho % stride, rho // stride
        rho = c * a + np.minimum(c, r) + q
    out = []
    start = np.zeros(vocab, dtype=np.int64)
    size = np.full(vocab, vocab, dtype=np.int64)
    prefix = np.zeros(vocab, dtype=np.int64)
    for k in schedule:
        rel = rho - start
        a, r = size // k, size % k
        small = k - r
        chunk = np.where((a > 0) & (rel < small * a), rel // np.maximum(a, 1), small + (rel - small * a) // (a + 1))
        cstart = np.where(chunk < small, chunk * a, small * a + (chunk - small) * (a + 1))
        start, size = start + cstart, np.where(chunk < small, a, a + 1)
        prefix = prefix * k + chunk
        out.append(prefix.copy())
    out.append(np.arange(vocab, dtype=np.int64))
    return np.stack(out)


def routing_prefixes(profile: Profile) -> np.ndarray:
    """[levels, V]: which tokens share a routing range at each level (engine/reference.routing_path's law)."""
    return _prefixes(profile.vocab_size, tuple(profile.schedule), profile.routing_stride)


def level_probabilities(model, profile: Profile, batch: Sequence[Sequence[int]], *,
                        batch_size: int = DEFAULT_BATCH) -> list[np.ndarray]:
    """Per text, [n_scored, levels] float64: p_l of each scored token (reference.scored_positions order).

    One forward pass per `batch_size` texts on the model's device, no prompt, right-padded."""
    device = next(model.parameters()).device
    pref = torch.from_numpy(routing_prefixes(profile)).to(device)  # [L, V]
    sizes = [int(pref[lv].max()) + 1 for lv in range(pref.shape[0])]
    h = profile.context_width
    out: list[np.ndarray] = []
    for lo in range(0, len(batch), batch_size):
        rows = [list(x) for x in batch[lo : lo + batch_size]]
        width = max(1, max(len(r) for r in rows))
        ids = torch.zeros(len(rows), width, dtype=torch.int64)
        mask = torch.zeros(len(rows), width, dtype=torch.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.int64)
            mask[i, : len(r)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
        for i, r in enumerate(rows):
            pos = reference.scored_positions(r, h)
            if not pos:
                out.append(np.zeros((0, len(sizes))))
                continue
            t = torch.tensor(pos, device=device)
            probs = torch.softmax(logits[i, t - 1].double(), dim=-1)  # [n, V]: P(x_t | x_<t), text only
            tok = torch.tensor([r[p] for p in pos], device=device)
            prev = torch.ones(len(pos), dtype=torch.float64, device=device)
            levels = []
            for lv, size in enumerate(sizes[:-1]):
                idx = pref[lv].expand(len(pos), -1)
                mass = torch.zeros(len(pos), size, dtype=torch.float64, device=device).scatter_add_(1, idx, probs)
                cur = mass.gather(1, pref[lv, tok].unsqueeze(1))[:, 0]
                levels.append(cur / prev.clamp_min(1e-300))
                prev = cur
            levels.append(probs.gather(1, tok.unsqueeze(1))[:, 0] / prev.clamp_min(1e-300))
            out.append(torch.stack(levels, dim=1).clamp(1e-12, 1.0).cpu().numpy())
    return out


class ModelAwareScorer:
    """Model-aware decoding (`scoring: "model-aware"`, `hero decode --model-aware`, HERO_MODEL_AWARE=1): the
    profile's LM re-run over each text on `device`, its level probabilities turned into per-token weights
    (`Weighting`), the decoder's keys and rules applied to the weighted statistic."""

    def __init__(self, loader: Callable[[str, str], Any], device: str = "cpu", weighting: Weighting | None = None,
                 batch_size: int = DEFAULT_BATCH) -> None:
        self._load = loader  # (model name, device) -> the model (verifier/verify/scoring.py binds verifier.lm's)
        self.device = device
        self.weighting = weighting or Weighting()
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"ModelAwareScorer(device={self.device!r}, {self.weighting})"

    def decode_ids(self, decoder: Decoder, batch: Sequence[Sequence[int]]) -> list[DecodeResult]:
        decoder.pad(batch)  # ids checked against the vocabulary before the model sees them
        if any(len(x) == 0 for x in batch):
            raise DecodeError("a text has no tokens")
        model = self._load(decoder.profile.tokenizer, self.device)
        probs = level_probabilities(model, decoder.profile, batch, batch_size=self.batch_size)
        weights = [self.weighting(p) for p in probs]
        return WeightedDecoder(decoder).decode_ids(batch, weights)

    def decode_texts(self, decoder: Decoder, texts: Sequence[str], tokenizer) -> list[DecodeResult]:
        """`Decoder.decode_texts`, model-aware."""
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise DecodeError(f"text {i} is empty")
        return self.decode_ids(decoder, token_ids(tokenizer, texts))

