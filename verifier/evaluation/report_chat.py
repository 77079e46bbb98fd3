"""The chat section's report: Markdown tables (tables.md) and plots beside results.json."""

from __future__ import annotations

from pathlib import Path


def write_chat_report(results: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text("\n".join(render(results)) + "\n")


def render(results: dict) -> list[str]:
    return ["# Chat evaluation tables\n"]
