"""The ORM models and the Alembic head describe the same schema: tables, columns, types, nullability,
indexes, unique and check constraints, foreign keys (on SQLite and the real PostgreSQL)."""

from __future__ import annotations

import re

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import CheckConstraint, create_engine, inspect

import verifier.audit.models
import verifier.jobs.models
import verifier.keys.models
import verifier.registry.models  # noqa: F401  (register every table on Base.metadata)
from verifier.base.db import Base, upgrade


def _norm(sql: str) -> str:
    """CHECK text as written, and as PostgreSQL reflects it (`status = ANY (ARRAY[...]::text[])`), alike."""
    s = re.sub(r"[\s()\"]+", "", str(sql)).lower().replace("::charactervarying", "").replace("::text", "")
    return s.replace("=anyarray[", "in").replace("][]", "")


def test_orm_matches_alembic_head(db_url):
    upgrade(db_url)
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": False})
            diff = compare_metadata(ctx, Base.metadata)
            insp = inspect(conn)
            checks = 0
            for table in Base.metadata.sorted_tables:  # autogenerate does not compare CHECK constraints
                declared = {c.name: _norm(c.sqltext) for c in table.constraints if isinstance(c, CheckConstraint)}
                found = {c["name"]: _norm(c["sqltext"]) for c in insp.get_check_constraints(table.name)}
                assert declared == found, table.name
                checks += len(declared)
    finally:
        engine.dispose()
    assert diff == [], diff
    assert checks == 4


def test_comparison_detects_a_missing_index(sqlite_url):
    """The check above can fail: an index the migration has and the ORM lacks shows up."""
    upgrade(sqlite_url)
    engine = create_engine(sqlite_url)
    table = Base.metadata.tables["hero_job_items"]
    index = next(i for i in table.indexes if i.name == "ix_hero_job_items_job_status")
    table.indexes.discard(index)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        table.indexes.add(index)
        engine.dispose()
    assert any(d[0] == "remove_index" and d[1].name == "ix_hero_job_items_job_status" for d in diff), diff
