"""Batched generation for the evaluation, and its resumable on-disk cache.

`generate_rows` samples one batch for any method under a sampling setting and records the generator's
own per-token log-probabilities (raw T = 1 logits, before any watermark or warper: the PPL every method
is compared on). `GenerationCache` appends finished batches to a JSONL file keyed by method, payload
size, token budget, payload scheme and sampling setting, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import LogitsProcessor, LogitsProcessorList

from hero_eval.methods import Method
from hero_eval.perplexity import EntropyRecorder, LogProbRecorder, ppl_from_logprobs
from hero_eval.sampling import NEUTRAL, T1, Sampling

PayloadFn = Callable[[int], list[int]]


class Tick(LogitsProcessor):
    """Advances a progress bar by one token per row at every generation step."""

    def __init__(self, bar, rows: int) -> None:
        self.bar, self.rows = bar, rows

    def __call__(self, input_ids, scores):
        if self.bar is not None:
            self.bar.update(self.rows)
        return scores


def generate_rows(
    model,
    tok,
    method: Method,
    prompts: Sequence[str],
    payloads: Sequence[Sequence[int]],
    tokens: int,
    seed: int,
    sampling: Sampling = T1,
    bar=None,
    natural: bool = False,
    stats: dict | None = None,
) -> tuple[torch.Tensor, list[float], float]:
    """One batch: (new token ids [B, tokens], generator PPL per row, seconds). `seed` fixes torch's RNG
    (plain sampling, unwatermarked steps) and the method's own generator.

    `natural`: answers end at the model's EOS (at most `tokens`); rows are then padded after it and the PPL
    covers the tokens before it. `stats`, when given, receives per row "entropy" (mean nats per generated token
    of the warped distribution a plain sampler draws from) and "length" (tokens before EOS, or all)."""
    torch.manual_seed(seed)
    proc = (
        method.processor(payloads, seed, sampling.warpers())
        if method.applies_warpers
        else method.processor(payloads, seed)
    )
    rec = LogProbRecorder()
    ent = EntropyRecorder(sampling.warpers()) if stats is not None else None
    first = [rec] + ([ent] if ent is not None else [])
    procs = LogitsProcessorList(first + ([proc] if proc is not None else []) + [Tick(bar, len(prompts))])
    enc = tok(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    warp = NEUTRAL if method.applies_warpers else sampling.generate_kwargs()
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate(
            **enc,
            max_new_tokens=tokens,
            min_new_tokens=0 if natural else tokens,
            do_sample=True,
            logits_processor=procs,
            pad_token_id=tok.pad_token_id,
            **({"eos_token_id": tok.eos_token_id} if natural else {}),
            **warp,
        )
    dt = time.perf_counter() - t
    new = out[:, enc["input_ids"].shape[1] :]
    lps = rec.finish(new[:, -1])
    lengths = [new.shape[1]] * new.shape[0]
    if natural:
        for j in range(new.shape[0]):
            hits = (new[j] == tok.eos_token_id).nonzero()
            lengths[j] = int(hits[0, 0]) if len(hits) else new.shape[1]
    if stats is not None and ent is not None:
        e = ent.finish()
        stats["entropy"] = [float(e[j, : max(1, lengths[j])].mean()) for j in range(new.shape[0])]
        stats["length"] = lengths
    return new, [ppl_from_logprobs(lps[j, : lengths[j]].tolist()) for j in range(new.shape[0])], dt


class GenerationCache:
    """Per-cell JSONL cache of generations (one record per prompt index), filled batch by batch."""

    def __init__(self, root: Path, model, tok, seed: int, batch_size: int, log) -> None:
        self.root, self.model, self.tok, self.seed = root, model, tok, seed
        self.batch_size, self.log = batch_size, log

    def path(self, method: Method, tokens: int, sampling: Sampling, scheme: str = "", natural: bool = False) -> Path:
        name = f"{method.name}_{method.total_bits}b_{tokens}t{'_natural' if natural else ''}{scheme}"
        name += sampling.cache_suffix
        return self.root / f"{slug(name)}.jsonl"

    @staticmethod
    def load(path: Path) -> dict[int, dict]:
        done: dict[int, dict] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line from a crash
                done[r["i"]] = r
        return done

    def get(
        self,
        method: Method,
        prompts: Sequence[str],
        tokens: int,
        tag: str,
        payload: PayloadFn,
        *,
        sampling: Sampling = T1,
        scheme: str = "",
        indices: Sequence[int] | None = None,
        natural: bool = False,
    ) -> list[dict]:
        """Records for prompt indices `indices` (default all), generating the missing ones.

        `scheme` names how payloads were chosen (part of the cache key and of the batch seeds; '' keeps
        the seeds and file names of earlier runs). `natural`: answers end at EOS (at most `tokens`); a record's
        ids stop before it and "length" / "ended" say where and whether it came. Records carry "entropy"."""
        path = self.path(method, tokens, sampling, scheme, natural)
        done = self.load(path)
        want = list(range(len(prompts))) if indices is None else list(indices)
        todo = [i for i in want if i not in done]
        if todo:
            bar = tqdm(
                total=len(todo) * tokens,
                desc=f"{tag} {method.name}",
                unit="tok",
                file=self.log,
                leave=False,
                mininterval=5,
            )
            for s in range(0, len(todo), self.batch_size):
                idx = todo[s : s + self.batch_size]
                key = f"{self.seed}/{method.name}/{method.total_bits}/{tokens}/{idx[0]}{scheme}{sampling.cache_suffix}"
                key += "/natural" if natural else ""
                pays = [payload(i) for i in idx]
                stats: dict = {}
                new, ppls, dt = generate_rows(
                    self.model,
                    self.tok,
                    method,
                    [prompts[i] for i in idx],
                    pays,
                    tokens,
                    zlib.crc32(key.encode()),
                    sampling,
                    bar,
                    natural=natural,
                    stats=stats,
                )
                with path.open("a") as fh:
                    for j, i in enumerate(idx):
                        n_j = stats["length"][j]
                        ids = new[j, :n_j].tolist()
                        r = {
                            "i": i,
                            "prompt": prompts[i],
                            "payload": list(pays[j]),
                            "ids": ids,
                            "text": self.tok.decode(ids, skip_special_tokens=True),
                            "gen_ppl": ppls[j],
                            "gen_s_per_token": dt / (len(idx) * new.shape[1]),
                            "batch": len(idx),
                            "entropy": stats["entropy"][j],
                        }
                        if natural:
                            r |= {"length": n_j, "ended": n_j < new.shape[1]}
                        fh.write(json.dumps(r) + "\n")
                        done[i] = r
            bar.close()
        return [done[i] for i in want]


def slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", s)
