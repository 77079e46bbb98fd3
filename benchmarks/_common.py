"""Shared bits of the benchmark scripts: import path and JSON-line output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def alternate(commands: list[tuple[list[str], str]], rounds: int) -> list[list[float]]:
    """A/B rounds between worker processes, one per checkout: each (argv, checkout dir) is started there (no
    HERO_* variables), must print "ready <dir>", then answers each "go" line with one number. Rounds
    alternate which side goes first, so a machine whose speed drifts slows both alike. Per side, its numbers."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    procs = [subprocess.Popen(argv, cwd=d, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for argv, d in commands]
    try:
        for (_, d), p in zip(commands, procs, strict=True):
            if p.stdout.readline().split() != ["ready", d]:
                raise SystemExit(f"the worker for {d} failed to start or ran other code (is its C kernel built?)")
        out: list[list[float]] = [[] for _ in procs]
        for r in range(rounds):
            for k in (range(len(procs)) if r % 2 == 0 else reversed(range(len(procs)))):
                procs[k].stdin.write("go\n")
                procs[k].stdin.flush()
                out[k].append(float(procs[k].stdout.readline()))
        return out
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(60)
