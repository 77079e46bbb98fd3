"""Relative links in README.md and docs/*.md point to files that exist and, with a #fragment, to a heading
of that file (GitHub's anchor rules), so a reader never lands on a missing section."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.+)$", path.read_text(), re.M)}


def test_relative_links_and_anchors_resolve():
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, frag = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            if not dest.exists():
                bad.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert bad == []


def test_the_checker_catches_a_dead_anchor(tmp_path):
    assert slug("Reading a result") == "reading-a-result" and slug("`HERO_PORT` and more!") == "hero_port-and-more"
    assert "settings" in anchors(ROOT / "docs" / "service.md")
    assert "configuration" not in anchors(ROOT / "docs" / "service.md")
