"""A burst of model-aware requests at the caps against a real server (issue 52, N2's "must show").

`hero serve` in a child process (127.0.0.1, one worker, SQLite, dev mode, HERO_MODEL_AWARE=1, the shipped
SmolLM2); then:

- idle: the server's RSS after a warm-up request, and the idle time of two small requests: a model-aware verify
  of one short text (`small_verify`) and an authenticated model-free read (`GET /v1/jobs`, `small_read`);
- burst: `--concurrent` (default 8) verify requests at once, each at HERO_MODEL_AWARE_MAX_REQUEST_TOKENS
  (`--texts` x `--tokens` LM tokens, default 32 x 256 = 8,192), each from its own subject (so the per-subject
  LM-token quota is not what answers them); beside them, the two small requests, again and again;
- after: the server's RSS `--settle` seconds (default 60) after the burst's last answer.

One JSON line per phase and a summary with the goals: every burst answer 200 or 503, none later than the
deadline (HERO_MODEL_AWARE_DEADLINE_SECONDS plus the queue wait), no 500, RSS within 20 % of idle after the
settle, small requests within 2x their idle time. Load averages (`os.getloadavg`) before and after: on a shared
host a goal missed (or met) under foreign load says little, and the summary says so.

    cd benchmarks && python bench_model_aware_burst.py [--concurrent 8 --texts 32 --tokens 256 --settle 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import emit
from bench_model_aware_bound import texts_of

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(proc) -> float:
    """RSS of the server process and its children (uvicorn may fork one worker)."""
    total = proc.memory_info().rss
    for c in proc.children(recursive=True):
        try:
            total += c.memory_info().rss
        except Exception:
            pass
    return total / 2**20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrent", type=int, default=8)
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--settle", type=float, default=60.0)
    ap.add_argument("--deadline", type=float, default=120.0, help="HERO_MODEL_AWARE_DEADLINE_SECONDS")
    ap.add_argument("--queue", type=float, default=10.0, help="HERO_MODEL_AWARE_QUEUE_SECONDS")
    args = ap.parse_args()
    import httpx
    import psutil

    from verifier.auth.devkeys import mint_token
    from verifier.base.settings import Settings
    from verifier.lm import load_model

    home = Path(tempfile.mkdtemp(prefix="hero-burst-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    env.update({"HERO_HOME": str(home), "HERO_DEV_MODE": "1", "HERO_AUTO_MIGRATE": "1", "HERO_MODEL_AWARE": "1",
                "HERO_WORKER_DEVICE": "cpu", "HERO_LOG_LEVEL": "WARNING",
                "HERO_MODEL_AWARE_DEADLINE_SECONDS": str(args.deadline),
                "HERO_MODEL_AWARE_QUEUE_SECONDS": str(args.queue)})
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "verifier.cli", "serve", "--host", "127.0.0.1", "--port",
                               str(port), "--workers", "1"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=open(home / "server.log", "w"))
    load_before = os.getloadavg()
    try:
        settings = Settings(home=home, dev_mode=True)  # the server's dev signing key lives under HERO_HOME
        client = httpx.Client(base_url=url, timeout=args.deadline + args.queue + 300)
        t_end = time.time() + 600
        while True:
            try:
                if client.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.time() > t_end or server.poll() is not None:
                raise SystemExit(f"server did not start: {(home / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)

        def auth(role: str, sub: str) -> dict:
            return {"Authorization": f"Bearer {mint_token(settings, role, sub, 7200)}"}

        assert client.post("/v1/keys/init", headers=auth("admin", "bench-admin")).status_code == 201
        _, tokenizer = load_model("smollm2", "cpu")
        small_text = texts_of(tokenizer, 1, 64, seed=7)
        small_hdr = auth("auditor", "bench-small")
        warm = client.post("/v1/verify", headers=small_hdr, json={"texts": small_text})
        assert warm.status_code == 200 and warm.json()["results"][0]["scoring"] == "model-aware", warm.text
        proc = psutil.Process(server.pid)

        def small_verify() -> tuple[int, float]:
            t0 = time.perf_counter()
            r = client.post("/v1/verify", headers=small_hdr, json={"texts": small_text})
            return r.status_code, time.perf_counter() - t0

        def small_read() -> tuple[int, float]:
            t0 = time.perf_counter()
            r = client.get("/v1/jobs?limit=5", headers=small_hdr)
            return r.status_code, time.perf_counter() - t0

        time.sleep(5)
        idle_rss = rss_mb(proc)
        idle_verify = statistics.median(small_verify()[1] for _ in range(3))
        idle_read = statistics.median(small_read()[1] for _ in range(5))
        emit({"phase": "idle", "rss_mb": round(idle_rss), "small_verify_s": round(idle_verify, 3),
              "small_read_s": round(idle_read, 4), "load": load_before})

        big = texts_of(tokenizer, args.texts, args.tokens)
        heads = [auth("auditor", f"bench-burst-{i}") for i in range(args.concurrent)]
        peak = [idle_rss]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], rss_mb(proc))
                time.sleep(0.05)

        def one(i: int) -> dict:
            t0 = time.perf_counter()
            with httpx.Client(base_url=url, timeout=args.deadline + args.queue + 300) as c:
                r = c.post("/v1/verify", headers=heads[i], json={"texts": big})
            return {"status": r.status_code, "seconds": round(time.perf_counter() - t0, 2),
                    "retry_after": r.headers.get("Retry-After"),
                    "detail": None if r.status_code == 200 else str(r.json().get("detail"))[:120]}

        small: list[dict] = []

        def beside() -> None:
            time.sleep(2)  # the burst's requests are in
            while not done.is_set():
                sv, sr = small_verify(), small_read()
                small.append({"verify": sv, "read": sr})

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        side = threading.Thread(target=beside, daemon=True)
        side.start()
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.concurrent) as pool:
            answers = list(pool.map(one, range(args.concurrent)))
        burst_s = time.perf_counter() - t0
        done.set()
        side.join()
        sampler.join()
        load_burst = os.getloadavg()
        for i, a in enumerate(answers):
            emit({"phase": "burst", "request": i, **a})
        sv = [s["verify"] for s in small]
        sr = [s["read"] for s in small]
        emit({"phase": "beside", "small_verify": [(c, round(t, 2)) for c, t in sv],
              "small_read": [(c, round(t, 3)) for c, t in sr]})
        time.sleep(args.settle)
        after_rss = rss_mb(proc)
        load_after = os.getloadavg()
        bound = args.deadline + args.queue + 5  # + the answer's own time after the deadline's check
        read_max = max((t for _, t in sr), default=0.0)
        verify_200 = [t for c, t in sv if c == 200]
        summary = {
            "phase": "summary", "concurrent": args.concurrent, "lm_tokens_each": args.texts * args.tokens,
            "statuses": sorted(a["status"] for a in answers), "burst_s": round(burst_s, 1),
            "slowest_answer_s": max(a["seconds"] for a in answers),
            "idle_rss_mb": round(idle_rss), "peak_rss_mb": round(peak[0]), "rss_after_settle_mb": round(after_rss),
            "settle_s": args.settle,
            "small_read_idle_s": round(idle_read, 4), "small_read_max_beside_s": round(read_max, 4),
            "small_read_median_beside_s": round(statistics.median([t for _, t in sr]), 4) if sr else None,
            "small_verify_idle_s": round(idle_verify, 3),
            "small_verify_beside": {"answered_200": len(verify_200), "503": sum(c == 503 for c, _ in sv),
                                    "max_200_s": round(max(verify_200), 2) if verify_200 else None,
                                    "max_s": round(max((t for _, t in sv), default=0.0), 2)},
            "load_before": load_before, "load_burst": load_burst, "load_after": load_after, "cores": os.cpu_count(),
            "goals": {
                "no_500": all(a["status"] < 500 or a["status"] == 503 for a in answers)
                and all(c < 500 or c == 503 for c, _ in sv + sr),
                "every_answer_200_or_503": all(a["status"] in (200, 503) for a in answers),
                "within_deadline": all(a["seconds"] <= bound for a in answers),
                "rss_within_20pct": after_rss <= 1.2 * idle_rss,
                "small_read_within_2x": read_max <= 2 * idle_read,
                "small_verify_within_2x": bool(verify_200) and max(verify_200) <= 2 * idle_verify,
            },
            "foreign_load": max(load_before[0], load_after[0]) > 1.0,  # the 1-minute load with no burst running
        }
        emit(summary)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    main()
