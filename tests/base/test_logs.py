"""Structured logs: the allow-list keeps every field the code logs (and nothing else)."""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path

from verifier.base.logs import SAFE_FIELDS, JsonFormatter

ROOT = Path(__file__).resolve().parents[2]


def _logged_extra_keys() -> set[str]:
    keys = set()
    for path in [*ROOT.joinpath("verifier").rglob("*.py"), *ROOT.joinpath("workers").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "extra" and isinstance(kw.value, ast.Dict):
                        keys |= {k.value for k in kw.value.keys if isinstance(k, ast.Constant)}
    return keys


def test_every_logged_field_is_allowed():
    keys = _logged_extra_keys()
    assert {"job_id", "items", "worker", "error", "request_id"} <= keys  # the walk finds the real call sites
    assert keys <= set(SAFE_FIELDS), sorted(keys - set(SAFE_FIELDS))


def test_job_fields_survive_and_others_are_dropped():
    rec = logging.LogRecord("hero.jobs", logging.INFO, __file__, 1, "job batch stored", None, None)
    rec.job_id, rec.items, rec.worker, rec.secret = "j-1", 16, "worker:h:1", "do-not-log"
    out = json.loads(JsonFormatter().format(rec))
    assert (out["job_id"], out["items"], out["worker"]) == ("j-1", 16, "worker:h:1")
    assert "secret" not in out and out["msg"] == "job batch stored"
