"""Prompts as chat messages: one user message (or a list of messages) under the model's chat template, ready for
the assistant's answer (an instruct model then answers instead of continuing the text). Used by the SDK's
`generate(..., chat=True)`, `LocalHero.generate(..., chat=True)` and `hero generate --chat`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["chat_prompt"]


def chat_prompt(tokenizer: Any, prompt: str | Sequence[Mapping[str, str]]) -> str:
    """`prompt` (a string: one user message; or messages `[{"role": ..., "content": ...}, ...]`) under the
    tokenizer's chat template, with the generation prompt for the assistant's answer."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("this model's tokenizer has no chat template; generate without chat (drop --chat)")
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if not messages or not all(isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                               for m in messages):
        raise ValueError('chat messages are {"role": ..., "content": ...} mappings of strings')
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
