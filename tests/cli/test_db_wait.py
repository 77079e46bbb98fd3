"""`hero db wait` (the API and worker pods' init container): waits, without migrating, until the database is at
this version's migration head; exit 1 past --timeout naming what to run; 0 at once when at head."""

from __future__ import annotations

import threading
import time

from verifier.base.db import upgrade
from verifier.cli import main


def test_db_wait_waits_for_the_migration_and_never_migrates(tmp_path, monkeypatch, capsys):
    url = f"sqlite:///{tmp_path / 'hero.db'}"
    monkeypatch.setenv("HERO_DATABASE_URL", url)
    monkeypatch.setenv("HERO_AUTO_MIGRATE", "1")  # even so: waiting never migrates
    assert main(["db", "wait", "--timeout", "0.5", "--interval", "0.1"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]  # (the JSON log lines before it: one per change)
    assert last.startswith("hero: error: gave up") and "not migrated" in last and "hero db upgrade" in last

    timer = threading.Timer(0.5, upgrade, args=(url,))  # the migration Job finishing while the pod waits
    timer.start()
    started = time.monotonic()
    try:
        assert main(["db", "wait", "--timeout", "30", "--interval", "0.1"]) == 0
    finally:
        timer.join()
    assert 0.4 < time.monotonic() - started < 30
    assert '"at head"' in capsys.readouterr().out


def test_db_wait_keeps_waiting_while_the_database_is_unreachable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HERO_DATABASE_URL", "postgresql://hero@127.0.0.1:9/hero")  # nothing listens on port 9
    assert main(["db", "wait", "--timeout", "0.3", "--interval", "0.1"]) == 1
    assert "not reachable" in capsys.readouterr().err.strip().splitlines()[-1]
