"""`expect` holds its cap: variants of one text and per-text `expect`s do not reset the count, concurrency does not
pass the cap, refusals are written even over quota, and one `sub` at two issuers shares one counter.

At 7ed75c2 the count keyed on the exact SHA-256 of the text and was read before the decode, outside any lock: each
test below says how it failed there."""

from __future__ import annotations

import re
import threading
import unicodedata

import pytest
from sqlalchemy import func, select

from verifier.audit.models import AuditEventRow, ExpectAskRow
from verifier.audit.service import Actor
from verifier.verify import expect

HUMAN = ("The committee said the proposals, first published in March, would be reviewed again after the summer, "
         "when ministers expect to receive the findings of an independent inquiry into costs.")


def variants(text: str) -> list[str]:
    """Texts a caller makes from one without changing its words: each one a "new" text to an exact digest."""
    words = text.split(" ")
    return [
        text, text + " ", " " + text, text + "\n", text.replace(" ", "\n"), text.replace(" ", "  "),
        text.replace(" ", "\u200b "), "\u200b".join(text), "\ufeff" + text, text.replace(", ", ",\u00a0"),
        unicodedata.normalize("NFD", "Caf\u00e9 " + text), unicodedata.normalize("NFC", "Cafe\u0301 " + text),
        text.upper(), text.replace(".", ""), " ".join(w + "\u2060" for w in words), text.replace(" ", "\t"),
    ]


def _ask(svc, texts, expect_, role="auditor", sub="mallory"):
    return svc.client.post("/v1/verify", headers=svc.auth(role, sub), json={"texts": texts, "expect": expect_})


def _asked_values(svc, sub: str) -> set[int]:
    """Every `user` value the audit log names for `sub`: answered (`verify`, expect=l2:<v>) or refused."""
    out: set[int] = set()
    with svc.ctx.db.snapshot() as s:
        for action, detail in s.execute(select(AuditEventRow.action, AuditEventRow.detail)
                                        .where(AuditEventRow.subject == sub)):
            if action == "verify":
                out |= {int(v) for v in re.findall(r"expect=l2:(\d+):", detail or "")}
            elif action == "verify.refused":
                out |= {int(v) for v in re.findall(r"'user':(\d+)", detail or "")}
    return out


def test_text_key_maps_every_variant_to_one_key_and_other_words_to_another():
    keys = {expect.text_key(v) for v in variants(HUMAN)}
    assert len(keys) == 2  # the text, and the text with "Café" in front (NFC and NFD alike)
    assert expect.text_key(HUMAN) != expect.text_key(HUMAN.replace("March", "April"))


def test_variants_of_one_text_share_one_count(make_service, sqlite_url):
    """Before: a trailing space, a zero-width space or a newline made a "new" text (its own SHA-256), so after the
    cap answered 403 the same value set started again at `values_asked: 1`. Now every variant counts as the text."""
    svc = make_service(sqlite_url, expect_max_values=4)
    svc.init_keys()
    texts = [v for v in variants(HUMAN) if not v.startswith("Caf")]
    answered = []
    for user, text in enumerate(texts):
        r = _ask(svc, [text], {"user": user})
        if r.status_code == 200:
            answered.append(r.json()["results"][0]["expected"][0]["values_asked"])
        else:
            assert r.status_code == 403 and "HERO_EXPECT_MAX_VALUES=4" in r.json()["detail"], r.text
            assert "variant" in r.json()["detail"]
    assert answered == [1, 2, 3, 4]
    assert _asked_values(svc, "mallory") == set(range(len(texts)))  # refused ones audited too


def test_per_text_expects_in_one_request_count_together(make_service, sqlite_url):
    """Before: 32 per-text `expect`s about variants of one text were 32 texts, each value counted as the first
    (all answered, `values_asked: 1`). Now they are counted together: over the cap the whole request is refused
    before any decode; within it the answers pay for each other."""
    svc = make_service(sqlite_url, expect_max_values=4)
    svc.init_keys()
    texts = variants(HUMAN)[:8]
    body = {"texts": [{"text": t, "expect": {"user": u}} for u, t in enumerate(texts)]}
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor", "mallory"), json=body)
    assert r.status_code == 403 and "asks 8 more" in r.json()["detail"], r.text
    body = {"texts": [{"text": t, "expect": {"user": 100 + u}} for u, t in enumerate(texts[:3])]}
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor", "mallory"), json=body)
    assert r.status_code == 200, r.text
    assert sorted(x["expected"][0]["values_asked"] for x in r.json()["results"]) == [1, 2, 3]
    assert _asked_values(svc, "mallory") == set(range(8)) | {100, 101, 102}


@pytest.mark.parametrize("batching", [True, False])
def test_concurrent_values_cannot_pass_the_cap(make_service, sqlite_url, batching):
    """Before: 40 simultaneous values on one text were all answered (the cap was read before the decode, and one
    micro-batch read one count for all its requests; largest `values_asked` 31). Now the count and the cap are
    checked and written under the audit chain's lock in the answer's own transaction: at most `cap` answered."""
    cap, n = 4, 16
    svc = make_service(sqlite_url, expect_max_values=cap, verify_batching=batching, verify_batch_window_ms=20)
    svc.init_keys()
    token = svc.auth("auditor", "mallory")
    codes: dict[int, tuple[int, dict]] = {}
    start = threading.Barrier(n)

    def ask(user: int) -> None:
        start.wait()
        r = svc.client.post("/v1/verify", headers=token,
                            json={"texts": [variants(HUMAN)[user % 8]], "expect": {"user": user}})
        codes[user] = (r.status_code, r.json())

    threads = [threading.Thread(target=ask, args=(u,)) for u in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = [b["results"][0]["expected"][0] for c, b in codes.values() if c == 200]
    assert all(c in (200, 403) for c, _ in codes.values()), codes
    assert len(ok) <= cap and sorted(e["values_asked"] for e in ok) == list(range(1, len(ok) + 1))
    assert not any(e["matches"] for e in ok)
    assert _asked_values(svc, "mallory") == set(range(n))
    with svc.ctx.db.snapshot() as s:
        assert s.scalar(select(func.count()).select_from(ExpectAskRow)) == len(ok)


def test_a_refused_expect_is_charged_and_over_quota_nothing_is_written(make_service, sqlite_url, tmp_path):
    """Before: a refused `expect` was audited before the quota and charged nothing, so one moderator wrote 3,200
    permanent rows in 0.8 s, over quota too. Now a refusal is charged like any request, and over quota the answer
    is 429 with nothing written."""
    roles = tmp_path / "roles.yaml"
    roles.write_text("roles:\n  moderator:\n    max_level: 1\n    actions: [verify]\n"
                     "    limits: {texts_per_minute: 3}\n  admin:\n    max_level: all\n"
                     "    actions: [verify, keys.write, keys.read, audit.read]\n")
    svc = make_service(sqlite_url, profile="v3", roles_file=roles)
    svc.init_keys()

    def events() -> int:
        with svc.ctx.db.snapshot() as s:
            return s.scalar(select(func.count()).select_from(AuditEventRow))

    r = _ask(svc, [HUMAN], {"user": 1}, "moderator")
    assert r.status_code == 403 and "above the level granted" in r.json()["detail"]
    r = _ask(svc, [HUMAN], {"nope": 1}, "moderator")
    assert r.status_code == 422
    assert _ask(svc, [HUMAN], {"model": 2}, "moderator").status_code == 200
    before = events()
    for bad in ({"user": 1}, {"nope": 1}, {"model": 3}):
        r = _ask(svc, [HUMAN], bad, "moderator")
        assert r.status_code == 429 and "Retry-After" in r.headers, r.text
    assert events() == before  # over quota: not one row


def test_one_sub_at_two_issuers_has_two_counts(make_service, sqlite_url):
    """Before: the count keyed on `sub` alone, so `alice` at issuer B used up (or inherited) `alice` at issuer A's
    questions. Now the ledger reads rows of its own issuer (and the issuer-less rows carried over from the old
    count, which count for every issuer: fail closed)."""
    svc = make_service(sqlite_url)
    a, b = Actor("alice", "auditor", "j1", "https://a.example"), Actor("alice", "auditor", "j2", "https://b.example")
    with svc.ctx.db.session() as s:
        la = expect.Ledger(s, a)
        la.add(la.load([HUMAN]), [(2, 5)])
        s.add(ExpectAskRow(issuer="", subject="alice", text_key=expect.LEGACY + "0" * 64, level=2, value=9))
    with svc.ctx.db.session() as s:
        lb = expect.Ledger(s, b)
        assert lb.add(lb.load([HUMAN]), [(2, 6)]) == [{2: 1}]
        la = expect.Ledger(s, a)
        assert la.add(la.load([HUMAN]), [(2, 7)]) == [{2: 2}]
