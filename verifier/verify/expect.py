"""`expect` that cannot be p-hacked into a receipt: every asked value is counted per (subject, text) and corrected for.

The one-value test (engine/expected.py) is calibrated for ONE question. A caller who asks about every value in
turn (4,096 users about one human text) would, by chance alone, meet some value whose own p-value is below alpha
and walk away with a signed receipt saying `matches: true`. So the audit log, where every asked value is recorded
(`expect=l<level>:<value>:p=<p>:matches=<bool>:asked=<k>` in the `verify` event's detail), is also the counter:

- `values_asked` (k): the distinct values of that level this subject has asked about this text, this one
  included, read under the audit chain's lock (`record_prepared`: exact across processes);
- `p_value` is corrected for them (Bonferroni over the values asked so far: min(1, k p)) and `matches` is
  `p_value <= alpha`; each result says so (`correction`);
- at most HERO_EXPECT_MAX_VALUES distinct values per (subject, text, level): a further one is refused (403,
  audited as `verify.refused`, no quota charged). Over every value one subject may ask about one text, the
  chance of any false match is then at most alpha * H(cap) (sum of alpha / k; 3.4 alpha at the default cap 16).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from sqlalchemy.orm import Session

from verifier.audit import repository as audit_repo
from verifier.audit.service import Actor, AuditEvent, text_digest
from verifier.db import Database
from verifier.engine import stats
from verifier.errors import Forbidden, clip

CORRECTION = "bonferroni-over-asked"
MARKER = "expect=l"
_ASKED = re.compile(r"(?:^| )expect=l(\d+):(\d+):")


class ExpectCapReached(Forbidden):
    """This subject already asked about `cap` other values of this level for this text."""


def asked_values(rows: Sequence[tuple[str, str]]) -> dict[str, dict[int, set[int]]]:
    """{text digest: {level: values asked}} from (digest, detail) of earlier `verify` events."""
    out: dict[str, dict[int, set[int]]] = {}
    for digest, detail in rows:
        for lv, v in _ASKED.findall(detail):
            out.setdefault(digest, {}).setdefault(int(lv), set()).add(int(v))
    return out


def prior_asks(s: Session, actor: Actor, digests: Sequence[str]) -> dict[str, dict[int, set[int]]]:
    return asked_values(audit_repo.details_about(s, actor.subject, sorted(set(digests)), "verify", MARKER))


def check_cap(db: Database, actor: Actor, texts: Sequence[str], asked: Sequence[tuple[int, int]], cap: int) -> None:
    """Before quota and decode: ExpectCapReached (403) when a value not asked before would be one too many."""
    digests = [text_digest(t) for t in texts]
    with db.snapshot() as s:
        prior = prior_asks(s, actor, digests)
    for i, d in enumerate(digests):
        for lv, v in asked:
            seen = prior.get(d, {}).get(lv, set())
            if v not in seen and len(seen) >= cap:
                raise ExpectCapReached(
                    f"expect: you have asked about {len(seen)} values of level {lv} for text {i}, the most one "
                    f"subject may (HERO_EXPECT_MAX_VALUES={cap}); a verify without `expect` searches every value")


def correct(results: Sequence[dict], digests: Sequence[str], prior: Mapping[str, Mapping[int, set[int]]],
            asked: Sequence[tuple[int, int]], alpha: float) -> list[str]:
    """Applies the correction to each result's `expected` in place; returns each result's audit detail part."""
    values = dict(asked)
    parts = []
    for r, d in zip(results, digests, strict=True):
        items = []
        for e in r.get("expected") or ():
            lv = e["level"]
            seen = set(prior.get(d, {}).get(lv, set()))
            seen.add(values[lv])
            k = len(seen)
            log_p = min(0.0, e["log10_p_value"] * math.log(10.0) + math.log(k))
            e["p_value"] = stats.to_p(log_p)
            e["log10_p_value"] = log_p / math.log(10.0)
            e["matches"] = log_p <= math.log(alpha)
            e["values_asked"] = k
            e["correction"] = CORRECTION
            items.append(f"expect=l{lv}:{values[lv]}:p={e['p_value']:.3g}:matches={str(e['matches']).lower()}:"
                         f"asked={k}")
        parts.append(" ".join(items))
    return parts


def refusal_events(actor: Actor, texts: Sequence[str], expect: Mapping[str, object] | None, status: int,
                   granted: int) -> list[AuditEvent]:
    """One `verify.refused` event per text: what was asked (clipped: it is caller input) and why it was refused."""
    asked = clip(dict(expect or {}), 256).replace(" ", "")
    return [AuditEvent.of(actor, "verify.refused", [], None, text_digest(t), f"http-{status}",
                          f"expect={asked} granted_level={granted}") for t in texts]
