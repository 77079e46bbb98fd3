"""Wall time of `hero` invocations as a user sees them (fresh process each time): `hero --help`, an argument
error, and `hero decode` against a running service (HERO_URL) versus a local decode.

    python benchmarks/bench_cli.py [--reps 5]

Starts its own dev-mode service (`hero serve`, SQLite under a temporary HERO_HOME, 127.0.0.1, random port),
so it needs the venv's `hero` on PATH. Prints one JSON line per figure (median/min/max seconds)."""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

from _common import emit

TEXT = ("The committee met on Tuesday to discuss the budget for the coming year, and after a long debate "
        "it agreed to fund the new library wing while postponing the repairs to the sports hall.")


def timed(cmd: list[str], env: dict, reps: int) -> dict:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode not in (0, 2):
            raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr[-500:]}")
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "reps": reps}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    hero = shutil.which("hero")
    if hero is None:
        raise SystemExit("hero not on PATH: . .venv/bin/activate")
    home = tempfile.mkdtemp(prefix="hero-bench-cli-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HERO_HOME": home, "HERO_DEV_MODE": "1"}
    env.pop("HERO_DATABASE_URL", None)
    env.pop("HERO_URL", None)
    emit({"bench": "cli", "command": "hero --help", **timed([hero, "--help"], env, args.reps)})
    emit({"bench": "cli", "command": "hero decode --levels x (argument error)",
          **timed([hero, "decode", "--levels", "x", "--text", "t"], env, args.reps)})
    subprocess.run([hero, "keys", "init"], env=env, check=True, capture_output=True)
    token = subprocess.run([hero, "token", "--role", "moderator", "--sub", "bench"], env=env, check=True,
                           capture_output=True, text=True).stdout.strip()
    server = subprocess.Popen([hero, "serve", "--host", "127.0.0.1", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", timeout=1).read()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise SystemExit("service did not start") from None
                time.sleep(0.3)
        remote = {**env, "HERO_URL": url, "HERO_TOKEN": token}
        emit({"bench": "cli", "command": "hero decode --text T (HERO_URL: running service)",
              **timed([hero, "decode", "--text", TEXT], remote, args.reps)})
        emit({"bench": "cli", "command": "hero decode --text T (local: tokenizer and keys loaded per call)",
              **timed([hero, "decode", "--local", "--text", TEXT], env, max(1, min(args.reps, 3)))})
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
