"""Batches: `hero generate --input prompts.jsonl` and `hero decode --input texts.jsonl`, one JSON
line per item in input order, each text with its own `expect`; local (verifier.offline) and through HERO_URL."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from verifier.cli import main


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


class _Echo(BaseHTTPRequestHandler):
    """A /v1/verify that answers each text with what it was asked (text and the request's `expect`)."""

    seen: ClassVar[list[dict]] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        raw = json.dumps({"results": [{"echo": t, "expect": body.get("expect")} for t in body["texts"]]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def echo_service(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Echo)
    _Echo.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HERO_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("HERO_TOKEN", "t")
    yield _Echo
    server.shutdown()


def test_remote_batch_decode_keeps_order_and_each_texts_expect(echo_service, tmp_path, capsys):
    items = [json.dumps(f"text {i}") if i % 3 else json.dumps({"text": f"text {i}", "expect": {"model": i % 5}})
             for i in range(40)]
    path = tmp_path / "texts.jsonl"
    path.write_text("\n".join(items) + "\n\n")  # a blank line is skipped
    assert main(["decode", "--input", str(path)]) == 0
    out, err = capsys.readouterr()
    got = lines(out)
    assert [g["echo"] for g in got] == [f"text {i}" for i in range(40)]
    assert [g["expect"] for g in got] == [None if i % 3 else {"model": i % 5} for i in range(40)]
    assert all(len(b["texts"]) <= 32 for b in echo_service.seen)  # the service's default HERO_MAX_TEXTS
    assert len(echo_service.seen) == 6  # 26 plain texts in 1 request, 14 asking texts: one per asked value (5)
    assert "decoded 40/40" in err


def test_batch_input_errors_name_the_line(tmp_path, capsys, hero_home):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('"one"\n{"text": "two"}\nnot json\n')
    assert main(["decode", "--local", "--input", str(bad)]) == 2
    assert "bad.jsonl line 3: not JSON" in capsys.readouterr().err
    bad.write_text('"one"\n{"txt": "two"}\n')
    assert main(["decode", "--local", "--input", str(bad)]) == 2
    assert "line 2: expected a JSON string or" in capsys.readouterr().err
    bad.write_bytes(b'"\xff\xfe"\n')
    assert main(["decode", "--local", "--input", str(bad)]) == 2
    assert "is not UTF-8 text" in capsys.readouterr().err
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Hi", "fields": {"model": 1, "user": 2}}\n'
                       '{"prompt": "Yo", "fields": {"model": 999}}\n')
    assert main(["generate", "--input", str(prompts), "--field", "user=5"]) == 2
    assert "prompt 2: field 'model'=999 does not fit in 8 bits" in capsys.readouterr().err
    assert main(["generate", "--input", str(prompts), "--format", "text"]) == 2
    assert "--format text prints one text" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.model
def test_batch_round_trip_of_20_texts(tmp_path, capsys, hero_home, smollm2, monkeypatch):
    """20 prompts in one `hero generate --input` call, their 20 texts in one `hero decode --input` call, each
    text asking about its own model: every text is watermarked and its own model confirmed."""
    import verifier.lm as lm

    monkeypatch.setattr(lm, "load_model", lambda name: smollm2)  # the session's copy: no second load
    monkeypatch.delenv("HERO_PROFILE", raising=False)
    assert main(["keys", "init", "--models", ",".join(str(10 + i) for i in range(20))]) == 0  # the ids it uses
    capsys.readouterr()
    prompts = tmp_path / "prompts.jsonl"
    with prompts.open("w") as f:
        for i in range(20):
            item = {"prompt": f"Story {i}: once upon a time", "fields": {"model": 10 + i, "user": i}}
            f.write(json.dumps(item) + "\n")
    assert main(["generate", "--input", str(prompts), "--max-new-tokens", "48", "--min-new-tokens", "48",
                 "--batch-size", "20"]) == 0
    out, err = capsys.readouterr()
    gens = lines(out)
    assert len(gens) == 20 and "generated 20/20" in err and "tokens/s" in err
    assert [g["payload"] for g in gens] == [{"model": 10 + i, "user": i} for i in range(20)]
    assert all(g["tokens"] == 48 and g["key_versions"] == {"1": "l1-v1", "2": "l2-v1"} for g in gens)
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": g["text"], "expect": {"model": g["payload"]["model"]}}) + "\n"
                             for g in gens))
    assert main(["decode", "--local", "--input", str(texts)]) == 0
    out, err = capsys.readouterr()
    results = lines(out)
    assert len(results) == 20 and "decoded 20/20" in err
    assert [r["expected"][0]["fields"] for r in results] == [{"model": 10 + i} for i in range(20)]
    confirmed = sum(r["expected"][0]["p_value"] < 1e-4 for r in results)
    assert confirmed >= 18, [r["expected"][0]["p_value"] for r in results]  # 48 tokens at T = 1: nearly all


def test_generate_chat_applies_the_chat_template(tmp_path, capsys, hero_home, monkeypatch):
    """--chat: each prompt reaches the model as a user message under the tokenizer's chat template (the model is
    stubbed; the real SmolLM2 template is checked in test_chat_template_of_the_real_tokenizer)."""
    from types import SimpleNamespace

    import verifier.lm as lm
    import verifier.provider.generation as generation

    class Tok:
        chat_template = "{{ messages }}"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert tokenize is False and add_generation_prompt is True
            return "<user>" + messages[0]["content"] + "</user><assistant>"

    seen = []
    monkeypatch.setattr(lm, "load_model", lambda name: (None, Tok()))
    monkeypatch.setattr(generation, "generate_watermarked", lambda m, t, prompts, *a, **k: seen.extend(prompts) or [
        SimpleNamespace(text="an answer", token_ids=[1]) for _ in prompts])
    monkeypatch.delenv("HERO_PROFILE", raising=False)
    assert main(["keys", "init"]) == 0
    assert main(["generate", "--prompt", "Name a bird.", "--chat", "--field", "model=1", "--field", "user=2",
                 "--format", "text"]) == 0
    assert seen == ["<user>Name a bird.</user><assistant>"] and capsys.readouterr().out.endswith("an answer\n")


def test_chat_template_of_the_real_tokenizer():
    from verifier.lm import load_tokenizer
    from verifier.provider.chat import chat_prompt

    text = chat_prompt(load_tokenizer("smollm2"), "Name a bird.")
    assert "Name a bird." in text and text.rstrip().endswith("assistant")
