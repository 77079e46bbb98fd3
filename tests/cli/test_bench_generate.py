"""`hero bench generate`: the interval it reports, the payloads it draws per profile, several profiles in one run
and a profile whose vocabulary is not the model's refused before any timing."""

from __future__ import annotations

import math

import pytest

from verifier.base.timing import median_interval
from verifier.cli import main
from verifier.cli.bench_figures import bench_payloads
from verifier.engine.payload import encode_payload
from verifier.engine.profile import default_profile, v3_profile, v4_profile


def test_median_interval_is_the_binomial_order_statistic_interval():
    xs = [float(x) for x in range(15, 0, -1)]  # unsorted on purpose
    iv = median_interval(xs)
    # n = 15: P(Bin(15, 1/2) <= 3) = 576 / 32768, so [x_(4), x_(12)] covers 1 - 2 * 576 / 32768 >= 0.95
    assert (iv["median"], iv["lo"], iv["hi"], iv["n"]) == (8.0, 4.0, 12.0, 15)
    assert iv["coverage"] == pytest.approx(1 - 2 * 576 / 32768)
    # one step narrower would cover less than 0.95
    assert 1 - 2 * sum(math.comb(15, j) for j in range(5)) / 2 ** 15 < 0.95


def test_median_interval_with_too_few_rounds_is_min_to_max_with_its_coverage():
    iv = median_interval([3.0, 1.0, 2.0])
    assert (iv["lo"], iv["hi"], iv["median"]) == (1.0, 3.0, 2.0)
    assert iv["coverage"] == pytest.approx(0.75)
    with pytest.raises(ValueError):
        median_interval([])


@pytest.mark.parametrize("profile", [default_profile(), v3_profile(), v4_profile()], ids=lambda p: p.name)
def test_bench_payloads_are_valid_and_v4_uses_issued_values(profile):
    payloads = bench_payloads(profile, 16)
    assert len(payloads) == 16
    for p in payloads:
        encode_payload(profile, p)  # raises on a value out of range or not issued
    if profile.levels[0].issued is not None:
        assert {p["model"] for p in payloads} == set(profile.levels[0].issued)
    assert len({p["user"] for p in payloads}) > 1


def test_bench_generate_unknown_profile_is_one_line(capsys):
    assert main(["bench", "generate", "--profile", "no-such-profile", "--reps", "3"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hero: error: no-such-profile") and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_bench_generate_times_each_profile_in_the_same_rounds():
    """v4 and v3 beside plain on the random-weight SmolLM2 shape: every variant has wall and CPU times and a
    paired interval that contains its median."""
    from verifier.cli.bench_figures import RANDOM_MODEL, generate_overhead_figures

    f = generate_overhead_figures(2, tokens=2, reps=3, model_name=RANDOM_MODEL, profiles=[v4_profile(), v3_profile()],
                                  threads=1)
    assert f["profile"] == "v4" and f["spec_version"] == 4 and f["threads"] == 1 and f["vocab_size"] == 49152
    assert set(f["seconds_per_step"]) == set(f["cpu_seconds_per_step"]) == {"plain", "hero", "hero-v3"}
    assert all(s["min"] > 0 for s in f["cpu_seconds_per_step"].values())
    for name in ("hero", "hero-v3"):
        for kind in ("cpu", "wall"):
            iv = f["overhead_pct_vs_plain"][name][kind]
            assert iv["n"] == 3 and iv["lo"] <= iv["median"] <= iv["hi"]
    assert len(f["load_average"]["before"]) == 3
    # the processor's own CPU per step, per watermarked variant: positive and a small part of a plain step
    assert set(f["processor_cpu"]) == {"hero", "hero-v3"}
    assert all(0 < v["ms_per_step"] and 0 < v["pct_of_plain_step"] < 100 for v in f["processor_cpu"].values())


@pytest.mark.slow
def test_bench_generate_refuses_a_profile_on_another_vocabulary():
    from verifier.cli.bench_figures import RANDOM_MODEL, generate_overhead_figures
    from verifier.engine.profile import profile_from_dict

    data = v4_profile().to_dict()
    data.update(name="wide", vocab_size=262_144)
    with pytest.raises(ValueError, match=r"vocab_size 262144 but model .* returns 49152 logits"):
        generate_overhead_figures(1, tokens=1, reps=1, model_name=RANDOM_MODEL, profiles=[profile_from_dict(data)])
