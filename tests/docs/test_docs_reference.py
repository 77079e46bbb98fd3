"""The docs stay a reference: docs/performance.md is at most 300 lines of current tables (history goes to
docs/research/ as dated notes), and no file names a numbered work session (a fact carries the date it was
measured)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("benchmarks", "docs", "gpu", "migrations", "policies", "research", "scripts", "tests", "verifier", "workers")
TEXT = {".py", ".md", ".json", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg", ".ini", ".c", ".h", ".html", ".js",
        ".css", ""}
NUMBERED_SESSION = re.compile(r"(?i)\bsessions?[ -]\d")


def test_performance_doc_is_at_most_300_lines():
    lines = (ROOT / "docs" / "performance.md").read_text().splitlines()
    assert len(lines) <= 300, len(lines)


def test_no_file_names_a_numbered_work_session():
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "Dockerfile", ROOT / "compose.yaml"]
    for folder in FOLDERS:
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in TEXT
                  and "__pycache__" not in p.parts and not p.name.startswith(".")]
    hits = []
    for path in files:
        try:
            text = path.read_text()
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        hits += [f"{path.relative_to(ROOT)}:{m.group(0)}" for m in NUMBERED_SESSION.finditer(text)]
    assert not hits, hits[:20]
