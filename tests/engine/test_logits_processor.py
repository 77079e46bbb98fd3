"""The transformers LogitsProcessor: warpers apply before watermarking, batches are left-padded,
each row carries its own payload, and repeated contexts are left unwatermarked exactly as decoded."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.keys import make_keyset
from verifier.engine.decoder import Decoder
from verifier.engine.profile import default_profile, v1_profile
from verifier.engine.warpers import make_warpers
from verifier.provider.generation import HeroLogitsProcessor, generate_watermarked

PROMPTS = ["The minister said on Monday that", "Shares in the technology group rose sharply after the company"]


@pytest.mark.model
def test_top_k_1_is_greedy_even_when_watermarked(smollm2):
    model, tok = smollm2
    profile = default_profile()
    ks = make_keyset(profile)
    payloads = [{"model": 1, "user": 2}, {"model": 3, "user": 4}]
    wm = generate_watermarked(model, tok, PROMPTS, payloads, profile, ks, max_new_tokens=12, top_k=1)
    enc = tok(PROMPTS, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        greedy = model.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
    for i, g in enumerate(wm):
        assert g.token_ids == greedy[i, enc["input_ids"].shape[1] :].tolist()[: len(g.token_ids)]


@pytest.mark.model
def test_top_k_and_temperature_restrict_support(smollm2):
    model, tok = smollm2
    profile = default_profile()
    ks = make_keyset(profile)
    enc = tok(PROMPTS[:1], return_tensors="pt", add_special_tokens=False)
    proc = HeroLogitsProcessor(profile, ks, [{"model": 5, "user": 6}], make_warpers(0.7, 3, None))
    with torch.no_grad():
        logits = model(**enc).logits[:, -1]
    top3 = set(logits[0].topk(3).indices.tolist())
    for _ in range(20):
        proc.prompt_length = None
        out = proc(enc["input_ids"], logits.clone())
        tok_id = int(out[0].argmax())
        assert tok_id in top3 and torch.isinf(out[0]).sum() == out.shape[1] - 1


@pytest.mark.model
def test_left_padded_batch_each_row_its_own_payload(smollm2):
    model, tok = smollm2
    profile = default_profile()
    ks = make_keyset(profile)
    payloads = [{"model": 101, "user": 2002}, {"model": 3003, "user": 44}]
    gens = generate_watermarked(
        model,
        tok,
        PROMPTS,
        payloads,
        profile,
        ks,
        max_new_tokens=160,
        min_new_tokens=160,
        generator=torch.Generator().manual_seed(3),
    )
    dec = Decoder(profile, {1: [ks.tables[0]], 2: [ks.tables[1]]})
    res = dec.decode_ids([g.token_ids for g in gens])
    for r, p in zip(res, payloads, strict=True):
        assert r.watermarked
        # each row decodes its own payload: spec v2 releases the exact user of a 160-token row (the model
        # only when every 2-bit segment has its own evidence), never the other row's
        assert r.levels[1].status == "decoded" and r.levels[1].fields == {"user": p["user"]}
        assert r.levels[0].fields["model"] in (p["model"], None)


def test_processor_rejects_mismatched_inputs():
    profile = default_profile()
    ks = make_keyset(profile)
    proc = HeroLogitsProcessor(profile, ks, [{"model": 1, "user": 1}])
    with pytest.raises(ValueError, match="payloads"):
        proc(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, profile.vocab_size))
    with pytest.raises(ValueError, match="vocab_size"):
        proc(torch.zeros(1, 5, dtype=torch.long), torch.zeros(1, 100))
    with pytest.raises(ValueError, match="temperature"):
        make_warpers(0.0)


@pytest.mark.parametrize("profile", [default_profile(), v1_profile()], ids=["v2", "v1"])
def test_a_prompt_shorter_than_the_context_is_left_padded(profile):
    """A one-token prompt (h = 3 or 4): the processor draws from its first step on (it used to fail on a
    context of fewer than h ids), and the vLLM plugin's context_tail pads the same way."""
    from verifier.engine.fused import context_tail

    h, ks = profile.context_width, make_keyset(profile)
    scores = torch.randn(1, profile.vocab_size, generator=torch.Generator().manual_seed(0))
    drawn = []
    for prompt in ([42], [0] * (h - 1) + [42]):  # the short prompt, and the same prompt padded by hand
        proc = HeroLogitsProcessor(profile, ks, [{"model": 1, "user": 1}], generator=torch.Generator().manual_seed(5))
        seq = torch.tensor([prompt])
        for _ in range(h + 2):
            out = proc(seq, scores.clone())
            assert torch.isfinite(out).sum() == 1  # one token drawn
            seq = torch.cat([seq, out.argmax(-1, keepdim=True)], dim=1)
        drawn.append(seq[0, len(prompt):].tolist())
    assert drawn[0] == drawn[1]  # v1 keys its first h draws with contexts that reach into the (padded) prompt
    assert context_tail([42], [], 3) == [0, 0, 42]
    assert context_tail([1, 2], [7], 4) == [0, 1, 2, 7]
    assert context_tail([1, 2, 3, 4, 5], [7], 3) == [4, 5, 7]
    assert context_tail([1], [7, 8, 9, 10], 3) == [8, 9, 10]


def test_repeated_contexts_unwatermarked_and_recorded_only_inside_continuation():
    profile = v1_profile()  # h = 4 (the v2 default has h = 3)
    ks = make_keyset(profile)
    proc = HeroLogitsProcessor(profile, ks, [{"model": 1, "user": 1}])
    prompt = torch.tensor([[5, 6, 7, 8]])
    scores = torch.zeros(1, profile.vocab_size)
    seq = prompt
    for _ in range(12):  # force a periodic continuation: 1 2 3 4 1 2 3 4 ...
        proc(seq, scores)
        nxt = torch.tensor([[1 + (seq.shape[1] - 4) % 4]])
        seq = torch.cat([seq, nxt], dim=1)
    # continuation contexts logged: (1,2,3,4),(2,3,4,1),(3,4,1,2),(4,1,2,3) and nothing touching the prompt
    want = _words([(1, 2, 3, 4), (2, 3, 4, 1), (3, 4, 1, 2), (4, 1, 2, 3)])
    n = int(proc.log.counts[0])
    assert n == 4 and sorted(map(tuple, proc.log.words[0, :n].tolist())) == sorted(map(tuple, want.tolist()))


def _words(contexts: list[tuple[int, ...]]) -> torch.Tensor:
    """The context log's entry of each h-gram (its packed SipHash message words)."""
    from gpu import prf

    return torch.stack(prf.context_words(torch.tensor(contexts, dtype=torch.int64)), dim=1)


def test_repeated_contexts_draw_from_the_distribution_with_fresh_randomness():
    """A repeated continuation context is sampled from P with fresh randomness (what the decoder's
    context masking assumes): over many rows its draws follow P (chi-square) and vary, while a new
    context with the same key and payload gives the same watermarked token in every row."""
    profile = default_profile()
    ks = make_keyset(profile)
    rows = 400
    probs = torch.tensor([0.30, 0.25, 0.15, 0.10, 0.08, 0.06, 0.04, 0.02])
    support = torch.tensor([11, 500, 4096, 9000, 20000, 33333, 40000, 49151])
    scores = torch.full((rows, profile.vocab_size), float("-inf"))
    scores[:, support] = probs.log()
    seq = torch.tensor([[5, 6, 7, 8, 1, 2, 3, 4]]).expand(rows, -1)
    payloads = [{"model": 9, "user": 77}] * rows

    def draw(repeated: bool) -> torch.Tensor:
        # mid-response (no opening gate: its own test is tests/gpu/test_opening.py)
        proc = HeroLogitsProcessor(profile, ks, payloads, generator=torch.Generator().manual_seed(1), opening_nats=0)
        proc.prompt_length = 4  # the context (last h of 1, 2, 3, 4) lies inside the continuation
        if repeated:  # every row has marked this context before
            proc.log.words[:, 0] = _words([tuple(seq[0, -profile.context_width :].tolist())])
            proc.log.counts[:] = 1
        return proc(seq, scores.clone()).argmax(dim=1)

    marked = draw(repeated=False)
    assert marked.unique().numel() == 1 and int(marked[0]) in support.tolist()
    plain = draw(repeated=True)
    freq = torch.tensor([(plain == t).sum() for t in support.tolist()], dtype=torch.float64)
    assert int(freq.sum()) == rows  # nothing outside the support
    expected = rows * probs.double()
    chi2 = float(((freq - expected) ** 2 / expected).sum())
    assert chi2 < 24.3  # 7 dof: P(chi2 > 24.3) ~ 1e-3
    assert plain.unique().numel() >= 5


@pytest.mark.model
def test_v2_responses_differ_across_rng_seeds_under_one_key(smollm2):
    """Spec v2: same key, prompt and payload, different RNG seeds -> different responses (v1 produced
    byte-identical 40-token outputs: every token's randomness came from the key and the context)."""
    model, tok = smollm2
    profile = default_profile()
    assert profile.spec_version == 2
    ks = make_keyset(profile)
    outs = [
        generate_watermarked(model, tok, PROMPTS, [{"model": 5, "user": 6}] * 2, profile, ks, max_new_tokens=20,
                             min_new_tokens=20, generator=torch.Generator().manual_seed(seed))
        for seed in (1, 2)
    ]
    for a, b in zip(*outs, strict=True):
        assert a.token_ids != b.token_ids
