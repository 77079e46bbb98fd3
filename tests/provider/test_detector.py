"""The provider's in-process detector (verifier/provider/detector.py): transformers-shaped output from the engine's
Decoder, with the provider's own key tables, on every spec version."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers.keys import fixed_keyset
from tests.helpers.synthetic import generate
from tests.vectors.make_generation_vector import opened_bundle
from verifier.engine import profile as profiles
from verifier.engine.decoder import DecodeError
from verifier.engine.keys import KeySet
from verifier.provider.detector import HeroWatermarkDetector, HeroWatermarkDetectorOutput

PAYLOADS = [{"model": 3, "user": 1234}, {"model": 1, "user": 77}]
STEPS = 250


@pytest.fixture(scope="module")
def v5():
    profile = profiles.v5_profile()
    keys = fixed_keyset(profile, label="detector")
    return profile, keys, generate(profile, keys, PAYLOADS, STEPS, seed=3)


def _random(profile, rows: int, length: int, seed: int = 11) -> torch.Tensor:
    return torch.randint(0, profile.vocab_size, (rows, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("load", [profiles.v1_profile, profiles.default_profile, profiles.v3_profile,
                                  profiles.v4_profile, profiles.v5_profile], ids=lambda f: f.__name__)
def test_watermarked_ids_are_detected_with_their_model_on_every_spec_version(load):
    profile = load()
    keys = fixed_keyset(profile, label="detector")
    ids = generate(profile, keys, PAYLOADS, STEPS, seed=5)
    out = HeroWatermarkDetector(opened_bundle(profile, keys))(ids)  # a provider's opened bundle
    assert out.prediction.tolist() == [True, True]
    assert [f["model"] for f in out.fields] == [3, 1]
    assert (out.p_value < 1e-6).all()
    null = HeroWatermarkDetector(keys, profile)(_random(profile, 2, STEPS))
    assert null.prediction.tolist() == [False, False]
    assert (null.p_value > 1e-3).all()


def test_v5_decodes_the_private_user_with_every_level_held(v5):
    profile, keys, ids = v5
    out = HeroWatermarkDetector(keys, profile)(ids)
    assert out.fields == PAYLOADS
    assert [[lv["status"] for lv in levels] for levels in out.levels] == [["decoded", "decoded"]] * 2


def test_random_ids_are_not_watermarked_and_their_p_values_are_not_small(v5):
    profile, keys, _ = v5
    out = HeroWatermarkDetector(keys, profile)(_random(profile, 16, 200))
    assert not out.prediction.any()
    assert out.p_value.min() > 1e-3
    assert out.fields == [{"model": None, "user": None}] * 16


def test_shapes_and_types(v5):
    profile, keys, ids = v5
    out = HeroWatermarkDetector(keys, profile)(torch.cat([ids, _random(profile, 1, STEPS)]))
    assert isinstance(out, HeroWatermarkDetectorOutput)
    for name, dtype in [("prediction", np.bool_), ("p_value", np.float64), ("log10_p_value", np.float64),
                        ("num_tokens_scored", np.int64)]:
        arr = getattr(out, name)
        assert isinstance(arr, np.ndarray) and arr.shape == (3,) and arr.dtype == dtype, name
    assert ((out.p_value >= 0) & (out.p_value <= 1)).all()
    assert (out.num_tokens_scored > 0).all() and (out.num_tokens_scored <= STEPS).all()
    assert len(out.fields) == len(out.levels) == 3 and all(len(lv) == 2 for lv in out.levels)
    assert all("most_likely" not in lv for levels in out.levels for lv in levels)


def test_inputs_as_numpy_lists_one_row_padding_and_texts(v5):
    profile, keys, ids = v5
    det = HeroWatermarkDetector(keys, profile)
    want = det(ids)
    assert np.array_equal(det(ids.numpy()).p_value, want.p_value)
    assert np.array_equal(det(ids.tolist()).p_value, want.p_value)
    assert det(ids[0]).fields == [PAYLOADS[0]] and det(ids[0].tolist()).fields == [PAYLOADS[0]]
    ragged = [ids[0].tolist(), ids[1, :120].tolist()]
    assert det(ragged).num_tokens_scored[0] == want.num_tokens_scored[0]
    pad = 2  # a padded batch from model.generate: pads at either end are dropped
    padded = torch.cat([torch.full((2, 3), pad), ids, torch.full((2, 4), pad)], dim=1)
    assert np.array_equal(det(padded, pad_token_id=pad).p_value, want.p_value)

    class Tok:  # verifier.lm's batch call; texts are ids written out
        def encode_ids(self, texts):
            return [[int(w) for w in t.split()] for t in texts]

    texts = [" ".join(map(str, row)) for row in ids.tolist()]
    assert np.array_equal(det(texts, tokenizer=Tok()).p_value, want.p_value)
    assert HeroWatermarkDetector(keys, profile, tokenizer=Tok())(texts[0]).fields == [PAYLOADS[0]]
    with pytest.raises(ValueError, match="tokenizer"):
        det(texts)
    with pytest.raises(TypeError, match="integer"):
        det(ids.float())
    with pytest.raises(DecodeError, match="vocabulary"):
        det([[profile.vocab_size]])


def test_private_fields_only_with_those_levels_keys(v5):
    profile, keys, ids = v5
    public = HeroWatermarkDetector(keys, profile, levels=1)
    out = public(ids)
    assert out.prediction.tolist() == [True, True]
    assert out.fields == [{"model": 3}, {"model": 1}]
    assert all(len(lv) == 1 for lv in out.levels)
    assert HeroWatermarkDetector(KeySet(keys.tables[:1]), profile)(ids).fields == out.fields  # level-1 tables only
    assert HeroWatermarkDetector({1: keys.tables[0]}, profile)(ids).fields == out.fields
    with pytest.raises(DecodeError, match="level-1"):
        HeroWatermarkDetector(KeySet(keys.tables[1:]), profile)
    with pytest.raises(ValueError, match="levels must be"):
        HeroWatermarkDetector(keys, profile, levels=3)


def test_a_rotation_decodes_texts_of_either_version(v5):
    profile, keys, ids = v5
    new = fixed_keyset(profile, seed=1, label="detector")
    new_ids = generate(profile, new, PAYLOADS[:1], STEPS, seed=4)
    det = HeroWatermarkDetector([keys, opened_bundle(profile, new)])
    assert det.key_versions == {1: ["l1-v0", "l1-v1"], 2: ["l2-v0", "l2-v1"]}
    out = det([ids[0].tolist(), new_ids[0].tolist()])
    assert out.prediction.tolist() == [True, True] and out.fields == [PAYLOADS[0]] * 2
    assert [levels[0]["key_version"] for levels in out.levels] == ["l1-v0", "l1-v1"]


def test_the_profile_is_the_bundles(v5):
    profile, keys, _ = v5
    bundle = opened_bundle(profile, keys)
    assert HeroWatermarkDetector(bundle).profile == profile
    assert HeroWatermarkDetector(bundle, "v5").profile == profile  # a profile name resolves
    with pytest.raises(ValueError, match="profile"):
        HeroWatermarkDetector(bundle, profiles.v4_profile())
    assert HeroWatermarkDetector(keys).profile == profiles.v5_profile()  # bare tables: spec v5's shipped profile


def test_repr_never_shows_key_material_and_the_detector_is_never_pickled(v5):
    profile, keys, ids = v5
    det = HeroWatermarkDetector(opened_bundle(profile, keys))
    out = det(ids)
    secrets = [b for t in keys.tables for b in (*t.entries, t.position, t.level_key) if b]
    shown = repr(det) + str(det) + repr(out) + str(out.levels)
    for s in secrets:
        assert s.hex() not in shown and repr(s) not in shown and str(list(s)) not in shown
    assert "l1-v0" in repr(det) and "entries" not in repr(det)
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(det)


def test_the_providers_doc_example_runs_as_written():
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "providers.md").read_text()
    section = text[text.index("### Self-test: `HeroWatermarkDetector`"):]
    code, printed = re.search(r"```python\n(.*?)```\n\nprints\n\n```\n(.*?)```", section, re.S).groups()
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == printed
