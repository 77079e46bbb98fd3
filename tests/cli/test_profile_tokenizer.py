"""A deployment's own profile on a tokenizer by local directory (`hero profile new`, HERO_PROFILES_DIR): keys,
watermarked tokens, decode to the exact user; the same profile on another tokenizer is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from verifier.cli import main
from verifier.lm import TokenizerMismatch, cache_root

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def _smollm2_tokenizer_dir() -> Path:
    found = sorted(cache_root().glob("smollm2-*/tokenizer.json"))
    if not found:
        pytest.skip("the converted SmolLM2 model (its tokenizer.json) is not in the model cache")
    return found[-1].parent


def _copy_tokenizer(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy(src / name, dst / name)
    return dst


def _swap_two_tokens(folder: Path) -> Path:
    """Another tokenizer: two vocabulary entries' ids swapped in its tokenizer.json."""
    data = json.loads((folder / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    vocab["Ġhistory"], vocab["Ġprinting"] = vocab["Ġprinting"], vocab["Ġhistory"]
    (folder / "tokenizer.json").write_text(json.dumps(data))
    return folder


def _cli(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def _watermarked_ids(profile, keyset, payload: dict, tokenizer, n: int = 160) -> list[int]:
    """`n` watermarked draws on random logits over space-prefixed lowercase words (ids that re-tokenize to
    themselves once decoded to text)."""
    from verifier.provider.generation import HeroLogitsProcessor

    vocab = tokenizer.get_vocab()
    words = sorted(i for t, i in vocab.items() if t.startswith("Ġ") and t[1:].isalpha() and t[1:].islower()
                   and len(t) > 3)
    gen = torch.Generator().manual_seed(7)
    proc = HeroLogitsProcessor(profile, keyset, [payload], generator=torch.Generator().manual_seed(1))
    seq = torch.tensor([tokenizer.encode(" the history of", add_special_tokens=False)])
    for _ in range(n):
        scores = torch.full((1, profile.vocab_size), float("-inf"))
        scores[0, words] = torch.randn(len(words), generator=gen)
        seq = torch.cat([seq, proc(seq, scores).argmax(-1, keepdim=True)], dim=1)
    return seq[0, -n:].tolist()


@pytest.mark.slow
def test_profile_on_a_local_tokenizer_decodes_its_user_and_refuses_another(tmp_path, monkeypatch, capsys):
    from verifier.lm import load_tokenizer
    from verifier.offline import LocalHero

    tok_a = _copy_tokenizer(_smollm2_tokenizer_dir(), tmp_path / "tok-a")
    monkeypatch.setenv("HERO_PROFILES_DIR", str(tmp_path / "profiles"))
    code, out, err = _cli(capsys, "profile", "new", "mine", "--from", "v3", "--tokenizer", str(tok_a))
    assert code == 0, err
    assert out["vocab_size"] == 49152 and len(out["tokenizer_fingerprint"]) == 64
    assert Path(out["path"]).is_file() and Path(out["path"]).parent == tmp_path / "profiles"
    code, out, err = _cli(capsys, "keys", "init", "--profile", "mine")
    assert code == 0 and out["profile"] == "mine", err

    with LocalHero(profile="mine") as hero:
        assert hero.profile.tokenizer == str(tok_a.resolve())
        keyset = hero.store.active_keyset(hero.profile)
        tokenizer = load_tokenizer(str(tok_a))
        ids = _watermarked_ids(hero.profile, keyset, {"model": 37, "user": 1234}, tokenizer)
        text = tokenizer.decode(ids)
        (res,) = hero.decode([text], max_level=2)
    assert res["watermarked"]
    fields = {k: v for lv in res["levels"] for k, v in (lv.get("fields") or {}).items()}
    assert fields.get("user") == 1234 and fields.get("model") == 37

    # the same profile, its tokenizer path now naming another tokenizer (two vocabulary entries swapped)
    tok_b = _swap_two_tokens(_copy_tokenizer(tok_a, tmp_path / "tok-b"))
    shutil.rmtree(tok_a)
    tok_b.rename(tok_a)
    with LocalHero(profile="mine") as hero, pytest.raises(TokenizerMismatch) as err_info:
        hero.decode([text], max_level=2)
    message = str(err_info.value)
    assert "\n" not in message and "'mine'" in message and "fingerprint" in message
    code, _, err = _cli(capsys, "keys", "init", "--profile", "mine")  # keys on it refused too
    assert code != 0 and "fingerprint" in err


def test_profile_new_writes_the_deployments_folder_and_keeps_shipped_names(tmp_path, monkeypatch, capsys, hero_home):
    """Without HERO_PROFILES_DIR a deployment's profiles live in $HERO_HOME/profiles (found by every later
    command); shipped names are refused."""
    tok = _copy_tokenizer(_smollm2_tokenizer_dir(), tmp_path / "tok")
    monkeypatch.delenv("HERO_PROFILES_DIR", raising=False)
    code, _made, err = _cli(capsys, "profile", "new", "mine", "--from", "v3", "--tokenizer", str(tok))
    assert code == 0 and (hero_home / "profiles" / "mine.yaml").is_file(), err
    monkeypatch.setenv("HERO_PROFILES_DIR", str(tmp_path / "profiles"))
    code, _, err = _cli(capsys, "profile", "new", "v3", "--from", "v3", "--tokenizer", str(tok))
    assert code != 0 and "shipped" in err
    code, _, err = _cli(capsys, "profile", "new", "mine", "--from", "v3", "--tokenizer", str(tmp_path / "nowhere"))
    assert code != 0 and "nowhere" in err and "\n" not in err.strip()


def _hub_cache(root: Path, repo: str, revisions: dict[str, Path]) -> None:
    """A Hugging Face hub cache holding `repo` at each commit (its tokenizer files); refs/main names the first."""
    folder = root / f"models--{repo.replace('/', '--')}"
    for commit, src in revisions.items():
        shutil.copytree(src, folder / "snapshots" / commit)
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(next(iter(revisions)))


def test_hub_id_from_the_offline_cache_with_a_pinned_revision(tmp_path, monkeypatch, capsys):
    """HF_HUB_OFFLINE=1: a hub id resolves from the local cache at the pinned commit; the profile records that
    commit's fingerprint, and the same profile pointed at another commit is refused in one line."""
    import huggingface_hub.constants as hf

    from verifier.engine.profile import resolve_profile
    from verifier.lm import TokenizerCache, decode_tokenizer

    tok_a = _copy_tokenizer(_smollm2_tokenizer_dir(), tmp_path / "a")
    tok_b = _copy_tokenizer(tok_a, tmp_path / "b")
    _swap_two_tokens(tok_b)
    first, second = "1" * 40, "2" * 40
    _hub_cache(tmp_path / "hub", "acme/tok", {first: tok_a, second: tok_b})
    monkeypatch.setattr(hf, "HF_HUB_CACHE", str(tmp_path / "hub"))  # read by huggingface_hub at call time
    monkeypatch.setattr(hf, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1 (the constant is set at import)
    monkeypatch.setenv("HERO_PROFILES_DIR", str(tmp_path / "profiles"))

    code, out, err = _cli(capsys, "profile", "new", "hubbed", "--from", "v3", "--tokenizer", "acme/tok",
                          "--revision", first)
    assert code == 0 and out["revision"] == first, err
    profile = resolve_profile("hubbed")
    assert (profile.tokenizer, profile.tokenizer_revision) == ("acme/tok", first)
    want = decode_tokenizer(str(tok_a))(" the history of")["input_ids"]
    assert TokenizerCache(decode_tokenizer).for_profile(profile)(" the history of")["input_ids"] == want

    path = tmp_path / "profiles" / "hubbed.yaml"
    path.write_text(path.read_text().replace(first, second))
    with pytest.raises(TokenizerMismatch, match="fingerprint") as info:
        TokenizerCache(decode_tokenizer).for_profile(resolve_profile("hubbed"))
    assert "\n" not in str(info.value)
    path.write_text(path.read_text().replace(second, "3" * 40))  # a commit the cache does not hold
    with pytest.raises(ValueError, match="local Hugging Face cache") as info:
        TokenizerCache(decode_tokenizer).for_profile(resolve_profile("hubbed"))
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_generation_with_a_model_by_local_directory(tmp_path, monkeypatch, capsys):
    """The model used for generation given by directory (a tiny random Llama beside the SmolLM2 tokenizer):
    LocalHero generates with the profile's keys and the text decodes to the exact user."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from verifier.offline import LocalHero

    folder = _copy_tokenizer(_smollm2_tokenizer_dir(), tmp_path / "tiny")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=49152, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(folder)
    monkeypatch.setenv("HERO_PROFILES_DIR", str(tmp_path / "profiles"))
    assert _cli(capsys, "profile", "new", "tiny", "--from", "v3", "--tokenizer", str(folder))[0] == 0
    assert _cli(capsys, "keys", "init", "--profile", "tiny")[0] == 0
    with LocalHero(profile="tiny") as hero:
        (gen,) = hero.generate(["The history of"], [{"model": 37, "user": 1234}], model=hero.profile.tokenizer,
                               max_new_tokens=160, min_new_tokens=160)
        (res,) = hero.decode([gen["text"]], max_level=2)
    fields = {k: v for lv in res["levels"] for k, v in (lv.get("fields") or {}).items()}
    assert res["watermarked"] and fields.get("user") == 1234, res


@pytest.mark.slow
@pytest.mark.model
def test_a_profile_made_before_the_models_first_conversion_decodes_after_it(tmp_path, monkeypatch, capsys, hero_home):
    """On a fresh machine `hero profile new --tokenizer smollm2` can run before the built-in was ever converted
    (its tokenizer then comes from the GGUF file); the first generation converts it. The fingerprint recorded
    before must be the one the decode computes after, from the converted tokenizer.json."""
    from verifier import lm
    from verifier.engine.profile import resolve_profile

    monkeypatch.setenv("HERO_MODEL_CACHE", str(tmp_path / "models"))
    monkeypatch.setenv("HERO_PROFILES_DIR", str(tmp_path / "profiles"))
    assert lm.tokenizer_dir("smollm2") is None
    code, _, err = _cli(capsys, "profile", "new", "mine", "--from", "v4", "--tokenizer", "smollm2")
    assert code == 0, err
    lm._convert(lm._spec("smollm2"))  # what the first `hero generate` / load_model does
    assert lm.tokenizer_dir("smollm2") is not None
    profile = resolve_profile("mine")
    lm.TokenizerCache(lm.decode_tokenizer).for_profile(profile)  # TokenizerMismatch on another fingerprint
    assert profile.tokenizer_fingerprint == lm.tokenizer_fingerprint("smollm2")
