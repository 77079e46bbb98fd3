"""Verification: decode through the runner (results come back shaped), append the audit events, then release.

`verify_batch` serves several callers at once (the micro-batcher, verifier.verify.batcher): one runner
call (one tokenizer call, one kernel batch) per level group, and every caller's audit events in ONE
transaction (group commit) with one signed checkpoint covering all of them; each result still carries its
own receipt. Nothing is released before that transaction commits; if it fails, every caller of the batch
gets the failure (503) and no result.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from verifier.audit.service import Actor, record_prepared, text_digest
from verifier.audit.signer import LogSigner
from verifier.base.db import Database
from verifier.base.errors import Forbidden, InvalidInput
from verifier.base.metrics import DISCLOSURES, VERIFY_SECONDS, VERIFY_TEXTS
from verifier.engine.payload import PayloadError, level_values, value_fields
from verifier.engine.profile import Profile
from verifier.verify import expect
from verifier.verify.disclosure import audit_events
from verifier.verify.runner import DecodeJob, DecodeRunner


@dataclass(frozen=True)
class VerifyRequest:
    """One caller's texts (as a job: no key material) and who is asking."""

    job: DecodeJob
    actor: Actor
    expect_cap: int | None = None  # HERO_EXPECT_MAX_VALUES, enforced under the chain lock (verify/expect.py)

    def __repr__(self) -> str:  # texts may be sensitive: never log them
        return f"VerifyRequest({self.job!r}, role={self.actor.role!r})"


Outcome = list[dict] | BaseException


class Serving(Protocol):
    runner: DecodeRunner
    db: Database
    signer: LogSigner


def expected_levels(profile: Profile, expect: Mapping[str, int] | None, level: int) -> tuple[tuple[int, int], ...]:
    """A request's `expect` as (level, value) pairs, checked before any decode: named fields of whole levels
    (422), per-value levels only (422: a segmented value shares segments with others), within the grant (403)."""
    if not expect:
        return ()
    try:
        asked = level_values(profile, expect)
    except PayloadError as exc:
        raise InvalidInput(f"expect: {exc}") from None
    for lv in asked:
        if lv > level:
            raise Forbidden(f"expect names level {lv} ({', '.join(f.name for f in profile.levels[lv - 1].fields)}), "
                            f"above the level granted to you ({level})")
        if not profile.levels[lv - 1].per_value:
            raise InvalidInput(f"expect: level {lv} of profile {profile.name!r} is segmented; a one-value test needs "
                               "a per-value level (spec v3's public level, v2's private levels)")
    return tuple(sorted(asked.items()))


def batch_worker(serving: Serving, interval_s: float):
    """The micro-batcher's work function (verifier.verify.batcher): `verify_batch` on the runner, database and
    signer `serving` holds when each batch runs (the API context: a test may swap its runner)."""

    def process(requests: Sequence[VerifyRequest]) -> list[Outcome]:
        return verify_batch(serving.runner, serving.db, requests, serving.signer, interval_s)

    return process


def _decode_groups(runner: DecodeRunner, requests: Sequence[VerifyRequest]) -> list[list[dict] | BaseException]:
    """Released results per request: one runner call per (profile, level, alpha, device) group.

    A group whose combined call fails is retried request by request, so one caller's bad input (or a
    failure only some requests hit) is that caller's error alone."""
    out: list[list[dict] | BaseException | None] = [None] * len(requests)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault((id(r.job.profile), r.job.level, r.job.alpha, r.job.device, r.job.expect), []).append(i)
    for idxs in groups.values():
        first = requests[idxs[0]].job
        texts = tuple(t for i in idxs for t in requests[i].job.texts)
        try:  # one request: its own job (its cancel event included); several: one job for all
            raw = runner.decode(first if len(idxs) == 1 else DecodeJob(first.profile, texts, first.level, first.alpha,
                                                                       first.device, expect=first.expect))
        except Exception as exc:
            if len(idxs) == 1:
                out[idxs[0]] = exc
                continue
            for i in idxs:
                try:
                    out[i] = runner.decode(requests[i].job)
                except Exception as one:
                    out[i] = one
            continue
        pos = 0
        for i in idxs:
            n = len(requests[i].job.texts)
            out[i] = raw[pos : pos + n]
            pos += n
    return out  # type: ignore[return-value]


def verify_batch(
    runner: DecodeRunner, db: Database, requests: Sequence[VerifyRequest], signer: LogSigner | None = None,
    interval_s: float = 0.0,
) -> list[Outcome]:
    """Per request, its released results or the exception it must raise. Audit first (one transaction for
    the whole batch): no audit row, no answer. A request with `expect` has its one-value tests corrected for
    the values its subject asked about each text before (verify/expect.py), read under the chain's lock."""
    t0 = time.perf_counter()
    decoded = _decode_groups(runner, requests)
    VERIFY_SECONDS.observe(time.perf_counter() - t0)
    outcomes: list[Outcome] = list(decoded)
    if all(isinstance(o, BaseException) for o in outcomes):
        return outcomes

    counts = [0] * len(requests)  # audit events per request, in order: each answered result has one receipt

    def prepare(s) -> list:
        events = []
        ledgers: dict[Actor, expect.Ledger] = {}
        for i, (req, results) in enumerate(zip(requests, decoded, strict=True)):
            counts[i] = 0
            if isinstance(results, BaseException):
                continue
            digests = [text_digest(t) for t in req.job.texts]
            details = None
            if req.job.expect:  # counted and capped here, under the chain lock: exact under concurrency
                ledger = ledgers.setdefault(req.actor, expect.Ledger(s, req.actor))
                keys = ledger.load(req.job.texts)
                why = (ledger.over_cap([(k, req.job.expect) for k in keys], req.expect_cap)
                       if req.expect_cap is not None else None)
                if why is not None:
                    outcomes[i] = refused = expect.ExpectCapReached(why)
                    asked = {k: v for lv, val in req.job.expect
                             for k, v in value_fields(req.job.profile, lv, val).items()}
                    made = expect.refusal_events(req.actor, req.job.texts, asked, refused.status, req.job.level)
                    events.extend(made)
                    counts[i] = len(made)
                    continue
                details = expect.correct(results, ledger.add(keys, req.job.expect), req.job.expect, req.job.alpha)
            made = audit_events(req.actor, digests, results, details)
            events.extend(made)
            counts[i] = len(made)
        return events

    try:
        rows, receipt_list = record_prepared(db, prepare, signer, interval_s,
                                             reads=any(r.job.expect for r in requests))
    except Exception as exc:  # no audit row: nobody in the batch gets an answer
        return [o if isinstance(o, BaseException) else exc for o in outcomes]
    receipts = iter(receipt_list) if receipt_list is not None else None
    for req, o, n in zip(requests, outcomes, counts, strict=True):
        if receipts is not None and isinstance(o, BaseException):
            for _ in range(n):  # a refusal's own events: recorded, no answer to carry their receipts
                next(receipts)
            continue
        if isinstance(o, BaseException):
            continue
        if receipts is not None:
            for result in o:
                result["receipt"] = next(receipts)
        DISCLOSURES.labels(req.actor.role, str(req.job.level)).inc(len(o))
    for name, n in Counter(e.outcome for e in rows).items():  # one labels() lookup per outcome, not per text
        VERIFY_TEXTS.labels(name).inc(n)
    return outcomes


def verify_texts(
    runner: DecodeRunner, db: Database, job: DecodeJob, actor: Actor, signer: LogSigner | None = None,
    interval_s: float = 0.0, expect_cap: int | None = None,
) -> list[dict]:
    """Decode, audit (committed first: no audit row, no answer), release; with `signer`, each result carries
    its event's transparency-log receipt, made in the same transaction as the events."""
    (out,) = verify_batch(runner, db, [VerifyRequest(job, actor, expect_cap)], signer, interval_s)
    if isinstance(out, BaseException):
        raise out
    return out
