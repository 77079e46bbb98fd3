"""docs/providers.md's SDK snippet names nothing it does not define or import; the SDK's `generate` takes chat
prompts (one user message, or a list of messages) under the model's chat template, as `hero generate --chat`."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def sdk_snippet() -> str:
    text = (ROOT / "docs" / "providers.md").read_text()
    section = text[text.index("## Provider SDK (`verifier.provider`)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def undefined_names(code: str) -> set[str]:
    """Names a module-level block loads that it never binds (assignment, import, def, lambda argument) and that
    are no builtins."""
    tree = ast.parse(code)
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def test_the_undefined_name_check_finds_them():
    assert undefined_names("x = f(y)\nimport os\nos.path\ng = lambda t: t + z\n") == {"f", "y", "z"}


def test_the_sdk_snippet_defines_every_name_it_uses():
    code = sdk_snippet()
    assert "BundleSource(" in code and "generate(" in code
    assert undefined_names(code) == set()


class _ChatTokenizer:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
        assert not tokenize and add_generation_prompt
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def test_sdk_generate_takes_chat_prompts(monkeypatch):
    from tests.vectors.make_generation_vector import fixed_keyset, opened_bundle
    from verifier.engine.profile import default_profile
    from verifier.provider import sampling
    from verifier.provider.generation import Generation

    profile = default_profile()
    bundle = opened_bundle(profile, fixed_keyset(profile))
    seen: list[str] = []

    def fake(model, tokenizer, prompts, payloads, *a, **k):
        seen.extend(prompts)
        return [Generation("answer", [1, 2], p) for p in prompts]

    monkeypatch.setattr(sampling, "generate_watermarked", fake)
    pay = [{"model": 37, "user": 1}, {"model": 37, "user": 2}]
    gens = sampling.generate(None, _ChatTokenizer(), bundle, ["Name a bird.", [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]], pay, chat=True)
    assert seen == ["<user>Name a bird.<assistant>", "<system>Be brief.<user>Hi<assistant>"]
    assert [g.payload for g in gens] == pay
    seen.clear()
    sampling.generate(None, _ChatTokenizer(), bundle, ["Name a bird."], pay[:1])
    assert seen == ["Name a bird."]  # without chat: the text as given
    with pytest.raises(ValueError, match="no chat template"):
        sampling.generate(None, SimpleNamespace(), bundle, ["x"], pay[:1], chat=True)
    with pytest.raises(ValueError, match="role"):
        sampling.generate(None, _ChatTokenizer(), bundle, [[{"content": "x"}]], pay[:1], chat=True)
