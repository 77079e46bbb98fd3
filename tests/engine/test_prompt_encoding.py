"""Prompts reach the model as it was trained to see them: led by BOS where the tokenizer adds one (a base Gemma
prompt without `<bos>` gives junk, and its text then decodes to no user), never twice, nothing added for SmolLM2."""

from __future__ import annotations

import pytest

from verifier.provider.generation import encode_prompts


def _ids(tok, prompts):
    enc = encode_prompts(tok, prompts)
    return [[i for i, m in zip(row, mask, strict=True) if m]
            for row, mask in zip(enc["input_ids"].tolist(), enc["attention_mask"].tolist(), strict=True)]


def test_smollm2_prompts_are_tokenized_as_before():
    from verifier.lm import load_tokenizer

    tok = load_tokenizer("smollm2")
    prompts = ["The history of", "<|im_start|>user\nHi<|im_end|>\n"]
    assert _ids(tok, prompts) == [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]


@pytest.mark.slow
def test_gemma_prompts_get_one_bos():
    from verifier.lm import load_tokenizer

    tok = load_tokenizer("gemma3-270m")
    plain, templated = _ids(tok, ["The history of", "<bos><start_of_turn>user\nHi<end_of_turn>\n"])
    assert plain[0] == tok.bos_token_id and plain[1:] == tok("The history of", add_special_tokens=False)["input_ids"]
    assert templated[0] == tok.bos_token_id and templated[1] != tok.bos_token_id
