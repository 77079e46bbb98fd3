"""Merge `hero eval --sections attribution` runs made per sampling setting into one report.

On 2 cores the two settings are measured by two processes (`--settings T1`, then `--settings k50p0.9`, each
`--measure-only` beside the generator); this joins their results.json files (the settings' cells, the plan's
settings and text counts, the extras of whichever run measured them) and writes README.md + results.json.

    python benchmarks/merge_eval_results.py docs/evaluation/v3 /tmp/ev/t1 /tmp/ev/k

The chat section (`--sections chat`, one run per corpus or sampling setting) merges the same way with `--chat`:
each run's corpora and settings are joined under cells.chat and the chat tables (tables.md) are written.

    python benchmarks/merge_eval_results.py --chat docs/evaluation/chat /tmp/ev/chat-k /tmp/ev/chat-t07 /tmp/ev/bbc
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hero_eval.report import write_report


def merge(runs: list[dict]) -> dict:
    out = json.loads(json.dumps(runs[0]))
    att = out["cells"].setdefault("attribution", {})
    for r in runs[1:]:
        other = r["cells"].get("attribution", {})
        plan = att.setdefault("plan", other.get("plan", {}))
        for s in other.get("plan", {}).get("settings", []):
            if s in other:
                att[s] = other[s]
                if s not in plan["settings"]:
                    plan["settings"].append(s)
        plan.setdefault("texts", {}).update(other.get("plan", {}).get("texts", {}))
        for part in ("diversity", "collusion", "decode_cost"):
            if part in other:
                if part == "diversity" and part in att:
                    att[part].update(other[part])
                else:
                    att.setdefault(part, other[part])
        out["commands"] = out.get("commands", []) + [c for c in r.get("commands", []) if c not in out["commands"]]
        out["elapsed_s"] = out.get("elapsed_s", 0) + r.get("elapsed_s", 0)
        out["skipped"] = sorted(set(out.get("skipped", [])) | set(r.get("skipped", [])))
    return out


def merge_chat(runs: list[dict]) -> dict:
    """cells.chat.<corpus>: every run's settings (their attribution cells, extras, plan counts) side by side."""
    out = json.loads(json.dumps(runs[0]))
    chat = out["cells"].setdefault("chat", {})
    for r in runs[1:]:
        for corpus, node in r["cells"].get("chat", {}).items():
            mine = chat.setdefault(corpus, {})
            for key, part in node.items():
                if key == "attribution":
                    att = mine.setdefault("attribution", {})
                    plan = att.setdefault("plan", json.loads(json.dumps(part.get("plan", {}))))
                    for s in part.get("plan", {}).get("settings", []):
                        if s in part:
                            att[s] = part[s]
                            if s not in plan.setdefault("settings", []):
                                plan["settings"].append(s)
                    plan.setdefault("texts", {}).update(part.get("plan", {}).get("texts", {}))
                    for extra in set(part) - {"plan", *part.get("plan", {}).get("settings", [])}:
                        if isinstance(part[extra], dict) and isinstance(att.get(extra), dict):
                            att[extra].update(part[extra])
                        else:
                            att.setdefault(extra, part[extra])
                elif isinstance(part, dict):
                    mine.setdefault(key, {}).update(part)
                else:
                    mine[key] = part
        out["commands"] = out.get("commands", []) + [c for c in r.get("commands", []) if c not in out["commands"]]
        out["elapsed_s"] = out.get("elapsed_s", 0) + r.get("elapsed_s", 0)
    return out


def main(argv: list[str]) -> None:
    chat = argv[:1] == ["--chat"]
    dest, *srcs = (Path(a) for a in argv[chat:])
    runs = [json.loads((p / "results.json").read_text()) for p in srcs]
    merged = merge_chat(runs) if chat else merge(runs)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "results.json").write_text(json.dumps(merged, indent=1, allow_nan=True))
    if chat:
        from hero_eval.report_chat import write_chat_report

        write_chat_report(merged, dest)
        print(dest / "tables.md")
    else:
        print(write_report(merged, dest))


if __name__ == "__main__":
    main(sys.argv[1:])
