"""The serving table of docs/performance.md: `hero bench serve` over the issue's matrix, one markdown row
per run (and each run's JSON line on stderr), so the whole table is one command.

    python benchmarks/bench_serve_table.py [--seconds 5] [--database-url postgresql+psycopg://...] [--quick]
    python benchmarks/bench_serve_table.py --only "--concurrency 32" --only "--concurrency 1"

Rows: SQLite with 1, 8, 32, 128 clients and 1 or 32 texts per request (moderator), the auditor with the
v1 and the v2 (default) profile, and with --database-url the PostgreSQL rows. Each run starts its own
server (about 10 s of start-up) and measures for --seconds.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

HERO = str(Path(sys.executable).with_name("hero"))


def matrix(pg: str | None, quick: bool) -> list[str]:
    rows = [f"--concurrency {c}" for c in (1, 8, 32, 128)]
    rows += [f"--concurrency {c} --texts-per-request 32" for c in ((8,) if quick else (1, 8, 32))]
    rows += ["--concurrency 32 --profile v1", "--concurrency 32 --profile v1 --role auditor",
             "--concurrency 32 --role auditor"]
    if pg:
        rows += [f"--concurrency {c} --database-url {pg}" for c in ((32,) if quick else (1, 32, 128))]
        rows += [f"--concurrency 8 --texts-per-request 32 --database-url {pg}"]
    return rows


def run(flags: str, seconds: float) -> dict:
    out = subprocess.run([HERO, "bench", "serve", "--seconds", str(seconds), *shlex.split(flags)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def row(flags: str, r: dict, pg: str | None) -> str:
    shown = flags.replace(pg, "$PG") if pg else flags
    return (f"| `{shown}` | {r['texts_per_s']:,.1f} | {r['p50_ms']:.2f} | {r['p99_ms']:.1f} | {r['errors']} | "
            f"{r['ratio_to_tokenizer']:.3f} | {r['server_cpu_ms_per_text']:.3f} | {r['server_cpu_share']:.2f} | "
            f"{r['load_avg_1m'][0]:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--database-url", default=None, help="a PostgreSQL URL adds its rows")
    ap.add_argument("--quick", action="store_true", help="fewer rows")
    ap.add_argument("--only", action="append", default=[], help="run just these flag sets (repeatable)")
    a = ap.parse_args()
    print("| flags | texts/s | p50 ms | p99 ms | errors | ratio to tokenizer | server CPU ms/text | server CPU share "
          "| load 1 min |")
    print("|---|---|---|---|---|---|---|---|---|")
    for flags in a.only or matrix(a.database_url, a.quick):
        r = run(flags, a.seconds)
        print(json.dumps(r), file=sys.stderr, flush=True)
        print(row(flags, r, a.database_url), flush=True)


if __name__ == "__main__":
    main()
