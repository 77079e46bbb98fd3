"""A log that mixes both event forms: the version-1 events of tests/vectors/audit_receipt_v1.json (rows and tree as
the code before RFC 8785 left them) extended by events appended now (RFC 8785, `canon` = "jcs")."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.audit.models import AuditEventRow, AuditTreeNodeRow
from verifier.audit.service import Actor, AuditEvent, record_with_receipts, text_digest
from verifier.audit.signer import LogSigner
from verifier.base.db import Database, upgrade

V1 = json.loads((Path(__file__).parents[1] / "vectors" / "audit_receipt_v1.json").read_text(encoding="utf-8"))
NEW_TEXT = "Zweiter Text, geprüft: «naïve» — 😀"


def v1_signer() -> LogSigner:
    """The vector's log key (a test key: its seed is in the vector on purpose)."""
    return LogSigner(V1["origin"], Ed25519PrivateKey.from_private_bytes(bytes.fromhex(V1["signing_seed_hex"])))


def new_events() -> list[AuditEvent]:
    """Events whose canonical forms differ between Python json and RFC 8785: non-ASCII and astral characters in
    subject, detail and issuer, DEL (escaped by json's ensure_ascii only), U+2028; and one plain ASCII event.
    Events hold only str, int (idx) and null values, so strings are where the two forms part."""
    zoe = Actor("Zoë Ünal", "auditor", "jti-new-1", "https://idp.example/ünï")
    return [
        AuditEvent.of(zoe, "verify", [1, 2], "v1", text_digest(NEW_TEXT), "watermarked",
                      "result_sha256=" + "cd" * 32 + " note=naïve — 😀 del \x7f sep \u2028 ctrl \x01"),
        AuditEvent.of(Actor("plain", "moderator", "jti-new-2"), "verify.refused", [1], outcome="refused"),
        AuditEvent.of(Actor("operator", "cli", "jti-new-3"), "keys.rotate", (), key_version="v2", detail="é"),
    ]


def load_v1(db: Database) -> None:
    """The vector's three events and their Merkle nodes, inserted as the older code stored them (no `canon`)."""
    with db.session() as s:
        s.execute(AuditEventRow.__table__.insert(), V1["rows"])
        s.execute(AuditTreeNodeRow.__table__.insert(),
                  [{**n, "hash": base64.b64decode(n["hash"])} for n in V1["tree"]])


def mixed_log(url: str) -> tuple[Database, list[dict]]:
    """The database at `url` migrated to head, holding the vector's v1 events and then `new_events()` appended by
    the service (with their receipts)."""
    upgrade(url)
    db = Database(url)
    load_v1(db)
    return db, record_with_receipts(db, new_events(), v1_signer(), 0.0)
