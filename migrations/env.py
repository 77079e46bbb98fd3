"""Alembic environment: same engine setup as the service (WAL/busy timeout on SQLite, psycopg 3)."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

import verifier.audit.models
import verifier.jobs.models
import verifier.keys.models
import verifier.registry.models  # noqa: F401  (register tables on Base.metadata)
from verifier.base.db import Base, make_engine
from verifier.base.settings import get_settings

config = context.config
if config.config_file_name is not None and not config.attributes.get("url"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    return config.attributes.get("url") or get_settings().db_url


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
