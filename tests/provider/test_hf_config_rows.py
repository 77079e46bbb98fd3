"""`HeroWatermarkingConfig` meets the batch as transformers' own configs do: one payload is broadcast to every row,
and with `num_return_sequences=k` each prompt's payload covers its k sequences (transformers repeats each input
row k times in a row); the draws are those of the same payloads written out row by row."""

from __future__ import annotations

import pytest
import torch

from tests.vectors.make_generation_vector import fixed_keyset, logits_at, opened_bundle, prompt
from verifier.engine.profile import default_profile
from verifier.provider import HeroWatermarkingConfig

A, B = {"model": 37, "user": 1234}, {"model": 37, "user": 7}


def drive(cfg, rows: int, steps: int = 12) -> list[list[int]]:
    profile = default_profile()
    proc = cfg.construct_processor(profile.vocab_size, "cpu")
    seq = prompt(rows, profile.vocab_size)
    for t in range(steps):
        out = proc(seq, logits_at(t, rows, profile.vocab_size))
        seq = torch.cat([seq, out.argmax(dim=1, keepdim=True)], dim=1)
    assert proc.payload.shape[0] == rows
    return seq[:, 5:].tolist()


@pytest.fixture(scope="module")
def bundle():
    profile = default_profile()
    return opened_bundle(profile, fixed_keyset(profile))


def test_one_payload_is_broadcast_to_every_row(bundle):
    one = HeroWatermarkingConfig(bundle, A, generator=torch.Generator().manual_seed(3))
    assert one.to_dict()["rows"] == "all"
    each = HeroWatermarkingConfig(bundle, [A, A, A], generator=torch.Generator().manual_seed(3))
    assert drive(one, 3) == drive(each, 3)


def test_num_return_sequences_repeats_each_prompts_payload(bundle):
    per_prompt = HeroWatermarkingConfig(bundle, [A, B], generator=torch.Generator().manual_seed(5))
    per_row = HeroWatermarkingConfig(bundle, [A, A, A, B, B, B], generator=torch.Generator().manual_seed(5))
    assert drive(per_prompt, 6) == drive(per_row, 6)


def test_a_batch_that_is_no_multiple_of_the_payloads_is_refused(bundle):
    with pytest.raises(ValueError, match="payloads were given"):
        drive(HeroWatermarkingConfig(bundle, [A, B, A]), 4, steps=1)
