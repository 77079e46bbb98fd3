"""`expect` that cannot be p-hacked into a receipt: every asked value is counted per (subject, text) and corrected for.

The one-value test (engine/expected.py) is calibrated for ONE question. A caller who asks about every value in
turn (4,096 users about one human text) would, by chance alone, meet some value whose own p-value is below alpha
and walk away with a signed receipt saying `matches: true`. So every asked value is counted, and recorded in the
audit log (`expect=l<level>:<value>:p=<p>:matches=<bool>:asked=<k>` in the `verify` event's detail):

- "the subject" is (token issuer, `sub`): the same `sub` at two issuers is two callers;
- "the text" is what the decoder scores, not its bytes: `text_key` maps a text with added or removed spaces,
  newlines, zero-width or other format characters, punctuation, case or another Unicode normalisation form to one
  key (a trailing space made a "new" text that ran the same test: issue 52, N1);
- `values_asked` (k): the distinct values of that level this subject has asked about this text, this one
  included. The count lives in `hero_expect_asks` (one row per value, its primary key the whole question), read
  and written under the audit chain's lock in the transaction of the answer's own audit events
  (`record_prepared`), so it is exact on any number of processes and concurrent requests (N6);
- `p_value` is corrected for them (Bonferroni over the values asked so far: min(1, k p)) and `matches` is
  `p_value <= alpha`; each result says so (`correction`);
- at most HERO_EXPECT_MAX_VALUES distinct values per (subject, text, level): a further one is refused (403,
  audited as `verify.refused`). It is checked twice: before the decode (a cheap early refusal, over every text and
  every per-text `expect` of the request together) and again under the lock before the answer is released (the
  one that holds under concurrency). Over every value one subject may ask about one text, the chance of any false
  match is then at most alpha * H(cap) (sum of alpha / k; 3.4 alpha at the default cap 16).
A refusal is charged to the caller's quota like any request, before it is written (docs/service.md, `expect`).
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import insert, or_, select
from sqlalchemy.orm import Session

from verifier.audit.models import ExpectAskRow
from verifier.audit.service import Actor, AuditEvent, text_digest
from verifier.base.db import Database
from verifier.base.errors import Forbidden, clip
from verifier.verify.disclosure import bonferroni

CORRECTION = "bonferroni-over-asked"
KEY_VERSION = "n1"  # text_key's rule; a new rule gets a new prefix (and keeps reading the old keys)
LEGACY = "sha256:"  # the exact text's digest: the key of the values asked before revision 0010

Asked = Sequence[tuple[int, int]]  # (level, value) pairs of one `expect`


class ExpectCapReached(Forbidden):
    """This subject already asked about `cap` other values of this level for this text."""


def text_key(text: str) -> str:
    """The text as the cap counts it: NFKC, case-folded, letters and digits only (spaces, newlines, zero-width and
    other format characters, punctuation, combining marks and symbols dropped). Every variant a caller can make
    without changing the words maps to one key; two texts whose words differ still differ. Erring towards one key
    only ever refuses sooner."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    kept = "".join(ch for ch in folded if unicodedata.category(ch)[0] in "LN")
    return f"{KEY_VERSION}:{hashlib.sha256(kept.encode('utf-8')).hexdigest()}"


class Ledger:
    """The values one subject has asked about texts, per (text key, level): as read from `hero_expect_asks` (rows
    of this issuer, and rows carried over from before issuers were recorded, issuer "") plus what this transaction
    added. Read once per text key, so several requests of one subject in one group commit count together."""

    def __init__(self, s: Session, actor: Actor) -> None:
        self.s, self.actor = s, actor
        self.seen: dict[str, dict[int, set[int]]] = {}

    def load(self, texts: Iterable[str]) -> list[str]:
        """Each text's key, its earlier values read (the exact-text key of the old count folded in)."""
        keys = [text_key(t) for t in texts]
        todo = {k: LEGACY + text_digest(t) for k, t in zip(keys, texts, strict=True) if k not in self.seen}
        if todo:
            legacy = {v: k for k, v in todo.items()}
            q = select(ExpectAskRow.text_key, ExpectAskRow.level, ExpectAskRow.value).where(
                ExpectAskRow.subject == self.actor.subject[:256],
                or_(ExpectAskRow.issuer == self.actor.issuer[:256], ExpectAskRow.issuer == ""),
                ExpectAskRow.text_key.in_(sorted(set(todo) | set(legacy))))
            for k in todo:
                self.seen[k] = {}
            for key, lv, v in self.s.execute(q):
                self.seen[legacy.get(key, key)].setdefault(int(lv), set()).add(int(v))
        return keys

    def over_cap(self, pairs: Sequence[tuple[str, Asked]], cap: int) -> str | None:
        """Why asking each text (by key) its values, all together and beside what was asked before, passes the
        cap, or None."""
        new: dict[tuple[str, int], set[int]] = {}
        for k, asked in pairs:
            for lv, v in asked:
                new.setdefault((k, lv), set(self.seen.get(k, {}).get(lv, set()))).add(v)
        for i, (k, asked) in enumerate(pairs):
            for lv, _v in asked:
                if len(new[(k, lv)]) > cap:
                    before = len(self.seen.get(k, {}).get(lv, set()))
                    return (f"expect: you have asked about {before} values of level {lv} for text {i + 1} (or a "
                            f"variant of it: spaces, case and punctuation do not make a new text), and this request "
                            f"asks {len(new[(k, lv)]) - before} more; one subject may ask about at most {cap} "
                            f"(HERO_EXPECT_MAX_VALUES={cap}); a verify without `expect` searches every value")
        return None

    def add(self, keys: Sequence[str], asked: Asked) -> list[dict[int, int]]:
        """Counts `asked` for each text (new rows written in this transaction); each text's k per level."""
        rows = []
        out = []
        for k in keys:
            per = self.seen.setdefault(k, {})
            ks = {}
            for lv, v in asked:
                values = per.setdefault(lv, set())
                if v not in values:
                    values.add(v)
                    rows.append({"issuer": self.actor.issuer[:256], "subject": self.actor.subject[:256],
                                 "text_key": k, "level": lv, "value": v})
                ks[lv] = len(values)
            out.append(ks)
        if rows:
            self.s.execute(insert(ExpectAskRow), rows)
        return out


def check_cap(db: Database, actor: Actor, items: Sequence[tuple[str, Asked]], cap: int) -> None:
    """Before the decode: ExpectCapReached (403) when the values this request asks (every text's, counted
    together: one request may not ask 32 values as 32 first questions) would pass the cap for some text."""
    with db.snapshot() as s:
        ledger = Ledger(s, actor)
        keys = ledger.load([t for t, _ in items])
        why = ledger.over_cap([(k, asked) for k, (_t, asked) in zip(keys, items, strict=True)], cap)
    if why is not None:
        raise ExpectCapReached(why)


def correct(results: Sequence[dict], counts: Sequence[Mapping[int, int]], asked: Asked, alpha: float) -> list[str]:
    """Applies the correction (k = `counts[i][level]`) to each result's `expected` in place; returns each result's
    audit detail part."""
    values = dict(asked)
    parts = []
    for r, ks in zip(results, counts, strict=True):
        items = []
        for e in r.get("expected") or ():
            lv = e["level"]
            k = ks[lv]
            if k > 1:  # the first value asked keeps the engine's answer exactly (as the local decode reads it)
                bonferroni(e, k)
                e["matches"] = e["log10_p_value"] <= math.log10(alpha)
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
