"""Instruction prompts for the chat setting of `hero eval` (the text the product exists for).

280 requests written for this evaluation across 14 genres (chat, how-to, emails, product copy,
science, stories, opinions, advice, recipes, travel, history, comparisons, code, explanations),
none taken from the BBC corpus that serves the continuation setting. A fixed, stratified set of 40
is held out (2-3 per genre) so that a construction tuned on the 240 evaluation prompts can be checked
on requests it never saw. The held-out ids are listed here rather than drawn at import time, so the
split cannot move with a library's shuffle.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Literal

__all__ = ["HELD_OUT_IDS", "ChatPrompt", "chat_genres", "chat_prompts"]

Split = Literal["eval", "heldout", "all"]

HELD_OUT_IDS: frozenset[str] = frozenset(
    {
        "advice-09", "advice-14", "advice-18", "chat-19", "chat-20", "code-04", "code-07", "code-20",
        "comparison-02", "comparison-05", "comparison-15", "email-02", "email-08", "email-17", "explain-03",
        "explain-16", "explain-20", "history-03", "history-04", "howto-03", "howto-07", "howto-08",
        "opinion-01", "opinion-12", "opinion-17", "product-02", "product-04", "product-13", "recipe-09",
        "recipe-17", "recipe-18", "science-01", "science-18", "science-19", "story-07", "story-10",
        "story-13", "travel-02", "travel-16", "travel-18",
    }
)  # fmt: skip


@dataclass(frozen=True)
class ChatPrompt:
    """One user request: a stable id ("<genre>-NN"), its genre and the text sent as the user turn."""

    id: str
    genre: str
    prompt: str


@functools.cache
def _all() -> tuple[ChatPrompt, ...]:
    text = resources.files("hero_eval").joinpath("data/chat_prompts.jsonl").read_text(encoding="utf-8")
    return tuple(ChatPrompt(**json.loads(line)) for line in text.splitlines() if line.strip())


def chat_prompts(split: Split = "eval") -> list[ChatPrompt]:
    """The prompts of one split in file order: "eval" (240), "heldout" (40) or "all" (280)."""
    if split == "all":
        return list(_all())
    if split == "eval":
        return [p for p in _all() if p.id not in HELD_OUT_IDS]
    if split == "heldout":
        return [p for p in _all() if p.id in HELD_OUT_IDS]
    raise ValueError(f"unknown split {split!r}: expected 'eval', 'heldout' or 'all'")


def chat_genres() -> list[str]:
    """The genres in file order."""
    return list(dict.fromkeys(p.genre for p in _all()))
