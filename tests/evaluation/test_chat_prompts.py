"""The chat setting's prompts: enough evaluation requests across genres, a disjoint held-out set."""

from __future__ import annotations

import collections

import pytest

from hero_eval.chat_prompts import HELD_OUT_IDS, chat_genres, chat_prompts


def test_eval_split_has_200_plus_prompts_across_8_plus_genres() -> None:
    prompts = chat_prompts("eval")
    assert len(prompts) >= 200
    per_genre = collections.Counter(p.genre for p in prompts)
    assert len(per_genre) >= 8
    assert min(per_genre.values()) >= 10
    assert all(p.prompt.strip() and p.id.startswith(p.genre + "-") for p in prompts)


def test_heldout_is_40_disjoint_and_every_id_exists() -> None:
    ev, held, every = chat_prompts("eval"), chat_prompts("heldout"), chat_prompts("all")
    assert len(held) == 40 == len(HELD_OUT_IDS)
    assert {p.id for p in held} == HELD_OUT_IDS
    assert not {p.id for p in ev} & {p.id for p in held}
    assert len(ev) + len(held) == len(every) == len({p.id for p in every}) == len({p.prompt for p in every})
    assert set(chat_genres()) == {p.genre for p in held}


def test_unknown_split_is_rejected() -> None:
    with pytest.raises(ValueError):
        chat_prompts("train")  # type: ignore[arg-type]
