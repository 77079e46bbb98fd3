"""Client CPU of one /v1/verify group commit (events, Merkle nodes, checkpoint, receipts), the append path as
shipped against SQLAlchemy's insert of the same rows (the path before 2026-11-26 16:00 UTC), alternating blocks in one
process so that a noisy machine drifts on both alike.

    python benchmarks/bench_audit_commit.py [--events 16] [--rounds 12] [--database-url postgresql+psycopg://...]

Prints one JSON line per variant: median and mean process CPU (ms) per commit. A PostgreSQL URL gets a private
schema, dropped after.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import emit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=16, help="events per commit (texts in one batch)")
    ap.add_argument("--rounds", type=int, default=12, help="alternating blocks of 40 commits per variant")
    ap.add_argument("--database-url", default=None)
    a = ap.parse_args()
    from verifier.cli.bench_figures import pg_schema

    with pg_schema(a.database_url) if a.database_url else contextlib.nullcontext() as url:
        run(a, url)


def run(a: argparse.Namespace, url: str | None) -> None:
    home = Path(tempfile.mkdtemp(prefix="hero-audit-commit-"))
    os.environ["HERO_HOME"] = str(home)
    logging.disable(logging.WARNING)
    from verifier.api.context import build_context
    from verifier.audit import repository as repo
    from verifier.audit.models import AuditEventRow, AuditTreeNodeRow
    from verifier.audit.service import AuditEvent, record_with_receipts
    from verifier.audit.signer import signer_from_settings
    from verifier.base.settings import Settings

    settings = Settings(home=home, database_url=url, auto_migrate=True)
    ctx = build_context(settings)
    signer = signer_from_settings(settings)

    def orm_events(s, rows):
        s.execute(AuditEventRow.__table__.insert(), [{k: getattr(r, k) for k in repo._EVENT_COLUMNS} for r in rows])

    def orm_nodes(s, nodes):
        s.execute(AuditTreeNodeRow.__table__.insert(), [{"level": lv, "idx": i, "hash": h} for lv, i, h in nodes])

    variants = {"shipped": (repo.insert_events, repo.add_tree_nodes), "sqlalchemy-insert": (orm_events, orm_nodes)}
    events = [AuditEvent("verify", "bench", "moderator", "jti", [1], "l1-v1", "a" * 64, "watermarked", None)
              for _ in range(a.events)]
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for _ in range(a.rounds):
            for name, (ins_events, ins_nodes) in variants.items():
                repo.insert_events, repo.add_tree_nodes = ins_events, ins_nodes
                for i in range(40):
                    c0 = time.process_time()
                    record_with_receipts(ctx.db, events, signer, settings.checkpoint_interval_seconds)
                    if i >= 5:  # the first commits of a block warm its statements
                        cpu[name].append(time.process_time() - c0)
    finally:
        ctx.close()
    for name, v in cpu.items():
        emit({"bench": "audit-commit", "variant": name, "database": ctx.db.dialect, "events": a.events,
              "commits": len(v), "cpu_ms_median": round(statistics.median(v) * 1000, 3),
              "cpu_ms_mean": round(statistics.mean(v) * 1000, 3)})


if __name__ == "__main__":
    main()
