"""`hero generate` progress: generate_watermarked calls `on_step` once per generated position and the hook
leaves the output unchanged (same seed, same tokens)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.keys import make_keyset
from verifier.engine.profile import default_profile
from verifier.provider.generation import generate_watermarked


@pytest.mark.model
def test_on_step_counts_steps_and_changes_nothing(smollm2):
    model, tok = smollm2
    profile = default_profile()
    ks = make_keyset(profile)
    kw = dict(max_new_tokens=6, min_new_tokens=6)
    steps = []
    a = generate_watermarked(model, tok, ["The minister said"], [{"model": 1, "user": 2}], profile, ks,
                             generator=torch.Generator().manual_seed(5), on_step=lambda: steps.append(1), **kw)
    b = generate_watermarked(model, tok, ["The minister said"], [{"model": 1, "user": 2}], profile, ks,
                             generator=torch.Generator().manual_seed(5), **kw)
    assert len(steps) == 6
    assert a[0].token_ids == b[0].token_ids
