"""Merge `hero eval --sections attribution` runs made per sampling setting into one report.

On 2 cores the two settings are measured by two processes (`--settings T1`, then `--settings k50p0.9`, each
`--measure-only` beside the generator); this joins their results.json files (the settings' cells, the plan's
settings and text counts, the extras of whichever run measured them) and writes README.md + results.json.

    python benchmarks/merge_eval_results.py docs/evaluation/v3 /tmp/ev/t1 /tmp/ev/k
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from verifier.evaluation.report import write_report


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


def main(argv: list[str]) -> None:
    dest, *srcs = (Path(a) for a in argv)
    runs = [json.loads((p / "results.json").read_text()) for p in srcs]
    merged = merge(runs)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "results.json").write_text(json.dumps(merged, indent=1, allow_nan=True))
    print(write_report(merged, dest))


if __name__ == "__main__":
    main(sys.argv[1:])
