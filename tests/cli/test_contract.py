"""`hero` CLI contract: JSON on stdout, one clear error line (never a traceback) on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from verifier.cli import main


def run(capsys, *argv: str) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_keys_init_prints_versions_never_key_material(capsys, hero_home):
    code, out, _ = run(capsys, "keys", "init")
    assert code == 0
    assert [(v["level"], v["version"], v["status"]) for v in out["versions"]] == [
        (1, "l1-v1", "active"),
        (2, "l2-v1", "active"),
    ]
    assert set(out["versions"][0]) <= {"level", "version", "status", "created_at", "profile", "tokenizer_fingerprint",
                                       "profile_digest"}
    code, _, err = run(capsys, "keys", "init")
    assert code != 0 and err.startswith("hero: error:") and "already" in err


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["generate", "--prompt", "Hi", "--field", "nope=1"], "unknown field 'nope'"),
        (["generate", "--prompt", "Hi", "--field", "model=4096", "--field", "user=1"], "does not fit in 8 bits"),
        (["generate", "--prompt", "   ", "--field", "model=1", "--field", "user=1"], "empty"),
        (
            ["generate", "--prompt", "Hi", "--field", "model=1", "--field", "user=1", "--max-new-tokens", "10",
             "--min-new-tokens", "20"],
            "--min-new-tokens must be in 0..--max-new-tokens",
        ),
        (["generate", "--prompt", "Hi", "--field", "model=1", "--field", "user=1", "--opening-nats", "-1"],
         "--opening-nats must be in 0..100"),
        (["decode", "--levels", "1", "--text", "   "], "empty"),
        (["decode", "--levels", "2", "--text", "hello"], "1..n"),
        (["decode", "--levels", "1,x", "--text", "hello"], "integers"),
        (["decode", "--levels", "1", "--file", "/nonexistent/file"], "cannot read"),
    ],
)
def test_bad_input_is_one_clear_line(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code != 0 and out is None
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err


def test_decode_without_keys_fails_cleanly(capsys):
    code, _, err = run(capsys, "decode", "--levels", "1", "--text", "some text to check")
    assert code != 0 and "keys init" in err


def test_local_decode_applies_the_services_text_limit(capsys, tmp_path, monkeypatch):
    """`hero decode` takes no longer text than the service would (HERO_MAX_TEXT_CHARS), and says its limits."""
    big = tmp_path / "big.txt"
    big.write_text("word " * 4001)  # 20005 characters: one over the default 20000
    code, out, err = run(capsys, "decode", "--levels", "1", "--file", str(big))
    assert code == 2 and out is None and "Traceback" not in err
    assert "text 1 is too long: 20005 characters (at most 20000 characters per text)" in err
    monkeypatch.setenv("HERO_MAX_TEXT_CHARS", "30000")
    code, _, err = run(capsys, "decode", "--levels", "1", "--file", str(big))
    assert code != 0 and "too long" not in err and "keys init" in err  # within the limit: on to the keys


def test_subprocess_error_has_no_traceback(tmp_path):
    env = {**os.environ, "HERO_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "verifier.cli", "generate", "--prompt", "x", "--field", "model=-1", "--field", "user=1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("hero: error:") and proc.stdout == ""


@pytest.mark.model
def test_generate_then_decode_round_trip(capsys, smollm2):
    assert run(capsys, "keys", "init", "--models", "37,41")[0] == 0  # as scripts/dev sets a deployment up
    code, gen, _ = run(
        capsys,
        "generate",
        "--prompt",
        "The city council met on Tuesday to discuss",
        "--field",
        "model=37",
        "--field",
        "user=1234",
        "--max-new-tokens",
        "160",
        "--min-new-tokens",  # fresh random keys each run: without it an early EOS left 42 scored tokens once
        "160",
    )
    assert code == 0 and set(gen) >= {"text", "payload", "key_version"}
    assert gen["payload"] == {"model": 37, "user": 1234} and gen["key_version"] == "l1-v1"
    assert "The city council met" not in gen["text"]  # continuation only
    code, pub, _ = run(capsys, "decode", "--levels", "1", "--text", gen["text"])
    assert code == 0 and pub["watermarked"] and pub["key_version"] == "l1-v1"
    assert [lv["level"] for lv in pub["levels"]] == [1] and set(pub["levels"][0]["fields"]) == {"model"}
    assert pub["tokens_scored"] > 100 and 0 <= pub["p_value"] < 1e-4
    code, full, _ = run(capsys, "decode", "--levels", "1,2", "--text", gen["text"])
    assert code == 0 and [set(lv["fields"]) for lv in full["levels"]] == [{"model"}, {"user"}]
    # a new deployment is set up with NEW_DEPLOYMENT_PROFILE (v5: position-multiplexed levels, model ids issued
    # with `keys init --models`)
    assert full["spec_version"] == 5 and "mixed-sources" not in full["flags"]
    # The whole 12-bit user is decoded by maximum likelihood (>= 0.99 at 100+ tokens, see docs/spec.md); the
    # public model (maximum likelihood over 256 values) is released only with evidence, and then the right one.
    assert full["levels"][1]["status"] == "decoded" and full["levels"][1]["fields"] == {"user": 1234}
    assert full["levels"][0]["fields"]["model"] in (37, None)
    assert full["levels"][1]["confidence"] > 0.9 and all(0 <= lv["confidence"] <= 1 for lv in full["levels"])


def test_decode_human_text_releases_nothing(capsys):
    """`hero decode` on text no key made: every level `absent`, fields null, no candidates, no flags."""
    assert run(capsys, "keys", "init")[0] == 0
    text = ("The committee said the proposals, first published in March, would be reviewed again after the "
            "summer, when ministers expect to receive the findings of an independent inquiry into costs.")
    code, out, _ = run(capsys, "decode", "--levels", "1,2", "--text", text)
    assert code == 0 and not out["watermarked"] and out["flags"] == [] and out["tokens_scored"] > 20
    for lv in out["levels"]:
        assert lv["status"] == "absent" and set(lv["fields"].values()) == {None}
        assert lv["candidates"] is None and lv["spans"] is None and lv["confidence"] == 0.0


@pytest.mark.model
def test_decode_two_user_splice_is_mixed(capsys, smollm2):
    """Two users' texts joined: `hero decode` names both users (`mixed`), never a third."""
    assert run(capsys, "keys", "init", "--models", "37,41")[0] == 0
    texts = []
    for user, prompt in ((1234, "The city council met on Tuesday to discuss"), (999, "Shares in the bank fell after")):
        code, gen, _ = run(capsys, "generate", "--prompt", prompt, "--field", "model=37", "--field", f"user={user}",
                           "--max-new-tokens", "120", "--min-new-tokens", "120")
        assert code == 0
        texts.append(gen["text"])
    code, out, _ = run(capsys, "decode", "--levels", "1,2", "--text", texts[0] + " " + texts[1])
    assert code == 0
    lv = out["levels"][1]
    named = {c["fields"]["user"] for c in lv["candidates"] or []} | {s["fields"]["user"] for s in lv["spans"] or []}
    assert named <= {1234, 999}
    assert lv["status"] == "mixed" and lv["fields"] == {"user": None} and named == {1234, 999}
    assert "mixed-sources" in out["flags"]


def test_generate_is_audited_before_the_text_is_printed(capsys, hero_home, monkeypatch):
    """`hero generate` marks text with any payload using every level's key: on the record (action
    `generate`, the payload claimed, the versions, the text's digest), and no record means no text. The model
    is stubbed: what is tested is the record, not the generation (test_generate_then_decode_round_trip)."""
    import hashlib
    from types import SimpleNamespace

    from sqlalchemy import select

    import verifier.audit.service as audit
    import verifier.lm as lm
    import verifier.provider.generation as generation
    from verifier.audit.models import AuditEventRow
    from verifier.cli.common import open_store

    monkeypatch.setattr(lm, "load_model", lambda name: (None, None))
    monkeypatch.setattr(generation, "generate_watermarked",
                        lambda *a, **k: [SimpleNamespace(text="a marked text", token_ids=[1, 2, 3])])
    assert run(capsys, "keys", "init")[0] == 0
    argv = ("generate", "--prompt", "Hi", "--field", "model=3", "--field", "user=1234", "--model", "smollm2")
    code, gen, err = run(capsys, *argv)
    assert code == 0, err
    with open_store().db.session() as s:
        (ev,) = s.scalars(select(AuditEventRow).where(AuditEventRow.action == "generate")).all()
        assert (ev.role, ev.outcome, ev.detail) == ("cli", "generated", "payload model=3 user=1234")
        assert ev.key_version == "l1-v1,l2-v1" and ev.text_sha256 == hashlib.sha256(b"a marked text").hexdigest()

    def down(*a, **k):
        raise audit.AuditUnavailable("audit log unavailable (test)")

    monkeypatch.setattr(audit, "record", down)
    code, gen, err = run(capsys, *argv)
    assert code != 0 and gen is None and "audit" in err
