"""One job spread over `hero worker` processes (fan-out): 1 vs N workers, alternated, PostgreSQL + Redis.

    python benchmarks/bench_job_workers.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test \
        [--texts 30000] [--workers 1,2] [--rounds 2] [--kill] [--batch 256] [--threads 1]

Each round: a private PostgreSQL schema and a private redis-server (the broker), a fresh HERO_HOME with new keys,
then `hero worker --pool solo` processes started and warm (their /metrics answering: tokenizer loaded) before the
clock starts; one job of `--texts` ~220-token texts is POSTed (with an Idempotency-Key, POSTed twice: the second
must name the same job) and drained. Rounds alternate 1 and N workers (1, N, 1, N, ...) so a machine whose load
drifts slows both alike. After each round it checks that every item was stored once and audited once (one
`verify` event per item) and reads every result through GET /v1/jobs/{id}/results page by page (every index
once, in order). `--kill`: one more round with two workers where one is SIGKILLed once a third of the job is
stored: the job must still complete, every item once.

Figures per round (one JSON line each, then a summary line):
- `drain_s`: from the POST's answer (texts sealed and stored: the same work for 1 or N workers) to the job's
  last batch committed (the job row's `updated_at`); `texts_per_s` = texts / drain_s;
- `per_worker`: items each worker stored (`claimed_by`); `worker_cpu_s`: CPU seconds each surviving worker used
  since it started (warm-up included: tokenizer and decoder set-up, a few seconds); `stored_once`, `audited_once`,
  `pages_cover_once`, `idempotent_post` (the retried POST named the same job and no second job exists);
- summary: median drain_s per worker count and the speed-up (1-worker median / N-worker median), with the
  1-minute load average at the start and end of the run (the machine is shared: say how loaded it was).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _common import emit

REPO = Path(__file__).resolve().parents[1]


def _redis(workdir: Path, port: int) -> subprocess.Popen:
    import redis

    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            redis.Redis(port=port, socket_connect_timeout=0.5).ping()
            return proc
        except Exception:
            time.sleep(0.1)
    raise SystemExit("redis-server did not start")


def _metrics_up(port: int) -> bool:
    import httpx

    try:
        return "hero_worker_db_up 1.0" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return False


def _round(a, texts: list[str], n_workers: int, kill: bool) -> dict:
    from fastapi.testclient import TestClient
    from sqlalchemy import func, select

    from verifier.api.app import create_app
    from verifier.auth.devkeys import mint_token
    from verifier.base.settings import Settings
    from verifier.cli.bench_figures import free_port, pg_schema
    from verifier.jobs.models import JobItemRow, JobRow

    home = Path(tempfile.mkdtemp(prefix="hero-fanout-"))
    (home / "roles.yaml").write_text(
        "roles:\n  moderator: {max_level: 1, actions: [verify]}\n"
        "  admin: {max_level: all, actions: [verify, keys.write, keys.read]}\n")
    rport = free_port()
    broker = _redis(home, rport)
    workers: list[subprocess.Popen] = []
    try:
        with pg_schema(a.database_url) as db_url:
            env = {"HERO_HOME": str(home), "HERO_DEV_MODE": "1", "HERO_ROLES_FILE": str(home / "roles.yaml"),
                   "HERO_DATABASE_URL": db_url, "HERO_BROKER_URL": f"redis://127.0.0.1:{rport}/0",
                   "HERO_JOB_MAX_TEXTS": str(max(100_000, len(texts))), "HERO_WORKER_DEVICE": "cpu",
                   "HERO_JOB_BATCH_SIZE": str(a.batch), "HERO_JOB_FANOUT_MAX": str(a.fanout),
                   "HERO_JOB_LEASE_SECONDS": str(a.lease), "HERO_JOB_STALE_SECONDS": str(2 * a.lease),
                   "HERO_LOG_LEVEL": "WARNING"}
            os.environ.update(env)
            # each worker's threads (torch intra-op and the evidence kernel, the tokenizers' pool): `--threads`,
            # so that N workers do not oversubscribe the cores (set in the workers' environment only)
            threads = {"OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads),
                       "RAYON_NUM_THREADS": str(a.threads), "TOKENIZERS_PARALLELISM": "false"} if a.threads else {}
            settings = Settings(auto_migrate=True, job_max_body_bytes=1_000_000_000, max_body_bytes=256_000_000)
            app = create_app(settings)
            with TestClient(app) as client:
                admin = {"Authorization": f"Bearer {mint_token(settings, 'admin', 'bench', 7200)}"}
                assert client.post("/v1/keys/init", headers=admin).status_code == 201
                ports = [free_port() for _ in range(n_workers)]
                for i, port in enumerate(ports):
                    log = open(home / f"worker{i}.log", "wb")
                    workers.append(subprocess.Popen(
                        [sys.executable, "-m", "verifier.cli", "worker", "--pool", "solo", "--hostname", f"w{i}@%h"],
                        cwd=REPO, env={**os.environ, **env, **threads, "HERO_WORKER_METRICS_PORT": str(port)},
                        stdout=log, stderr=subprocess.STDOUT))
                deadline = time.time() + 600
                while not all(_metrics_up(p) for p in ports):
                    if time.time() > deadline or any(w.poll() is not None for w in workers):
                        raise SystemExit(f"workers did not start: see {home}/worker*.log")
                    time.sleep(0.5)
                hdr = {"Authorization": f"Bearer {mint_token(settings, 'moderator', 'bench', 7200)}",
                       "Idempotency-Key": str(uuid.uuid4())}
                # Warm-up, before the clock: one one-text job per worker (each solo worker reserves one message at
                # a time, so each takes one), so every worker has built its decoder and loaded the tokenizer.
                warm = [client.post("/v1/jobs", headers={"Authorization": hdr["Authorization"]},
                                    json={"texts": [texts[i]]}).json()["job_id"] for i in range(n_workers)]
                while any(client.get(f"/v1/jobs/{w}", headers={"Authorization": hdr["Authorization"]},
                                     params={"results": "false"}).json()["status"] != "done" for w in warm):
                    if time.time() > deadline:
                        raise SystemExit(f"warm-up jobs not done: see {home}/worker*.log")
                    time.sleep(0.5)
                load0 = os.getloadavg()[0]
                r = client.post("/v1/jobs", headers=hdr, json={"texts": texts})
                t_accepted = time.time()
                assert r.status_code == 202, r.text
                jid = r.json()["job_id"]
                again = client.post("/v1/jobs", headers=hdr, json={"texts": texts})  # a retry after a lost answer
                killed = None
                status_hdr = {"Authorization": hdr["Authorization"]}
                while True:
                    doc = client.get(f"/v1/jobs/{jid}", headers=status_hdr, params={"results": "false"}).json()
                    if doc["status"] in ("done", "failed"):
                        break
                    if kill and killed is None and doc["progress"]["done"] >= len(texts) // 3:
                        killed = workers[-1].pid
                        workers[-1].send_signal(signal.SIGKILL)
                        workers[-1].wait(30)
                    if time.time() - t_accepted > a.timeout:
                        raise SystemExit(f"job {jid} not done after {a.timeout} s: {doc['progress']}")
                    time.sleep(0.5)
                with app.state.ctx.db.session() as s:
                    job = s.get(JobRow, jid)
                    assert job is not None
                    drain_s, status = job.updated_at - t_accepted, job.status
                    per_worker = dict(s.execute(select(JobItemRow.claimed_by, func.count())
                                                .where(JobItemRow.job_id == jid)
                                                .group_by(JobItemRow.claimed_by)).all())
                    n_jobs = s.scalar(select(func.count()).select_from(JobRow)) - n_workers  # less the warm-ups
                cpu_s = [_cpu(w.pid) for w in workers if w.poll() is None]  # from start, warm-up included
                stored_once, audited_once = _once(app.state.ctx.db, jid, len(texts))
                t_read = time.perf_counter()
                indices, cursor, pages = [], None, 0
                while True:
                    q = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
                    page = client.get(f"/v1/jobs/{jid}/results", headers=status_hdr, params=q).json()
                    indices += [x["index"] for x in page["results"]]
                    pages += 1
                    cursor = page["next_cursor"]
                    if cursor is None:
                        break
                read_s = time.perf_counter() - t_read
            return {"bench": "job-workers", "workers": n_workers, "killed_pid": killed, "texts": len(texts),
                    "status": status, "drain_s": round(drain_s, 2), "texts_per_s": round(len(texts) / drain_s, 1),
                    "per_worker": {k.split(":")[-1] if k else None: v for k, v in per_worker.items()},
                    "worker_cpu_s": cpu_s,
                    "stored_once": stored_once, "audited_once": audited_once,
                    "pages": pages, "pages_read_s": round(read_s, 2),
                    "pages_cover_once": indices == list(range(len(texts))),
                    "idempotent_post": again.status_code == 202 and again.json()["job_id"] == jid and n_jobs == 1,
                    "batch": a.batch, "fanout_max": a.fanout, "load_avg_1m_start": round(load0, 2),
                    "load_avg_1m_end": round(os.getloadavg()[0], 2)}
    finally:
        for w in workers:
            if w.poll() is None:
                w.terminate()
                try:
                    w.wait(30)
                except subprocess.TimeoutExpired:
                    w.kill()
        broker.terminate()
        broker.wait(30)


def _cpu(pid: int) -> float:
    """CPU seconds (user + system, threads included) a live worker process has used since it started."""
    import psutil

    t = psutil.Process(pid).cpu_times()
    return round(t.user + t.system, 1)


def _once(db, job_id: str, n: int) -> tuple[bool, bool]:
    """(every item has one stored result, every item has exactly one drain `verify` audit event)."""
    from collections import Counter

    from sqlalchemy import select

    from verifier.audit.models import AuditEventRow
    from verifier.jobs.models import JobItemRow

    with db.session() as s:
        done = s.scalars(select(JobItemRow.idx).where(JobItemRow.job_id == job_id,
                                                       JobItemRow.result.is_not(None))).all()
        details = s.scalars(select(AuditEventRow.detail).where(AuditEventRow.action == "verify",
                                                               AuditEventRow.detail.like(f"job={job_id} item=%"))).all()
    items = Counter(d.split()[1] for d in details)
    return sorted(done) == list(range(n)), len(items) == n and set(items.values()) == {1}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--database-url", required=True, help="PostgreSQL (a private schema is made per round)")
    ap.add_argument("--texts", type=int, default=30_000)
    ap.add_argument("--workers", default="1,2", help="worker counts, alternated each round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per worker count")
    ap.add_argument("--kill", action="store_true", help="and a round with 2 workers, one SIGKILLed mid-job")
    ap.add_argument("--only-kill", action="store_true", help="only the kill round")
    ap.add_argument("--batch", type=int, default=256, help="HERO_JOB_BATCH_SIZE")
    ap.add_argument("--fanout", type=int, default=16, help="HERO_JOB_FANOUT_MAX")
    ap.add_argument("--lease", type=float, default=30.0, help="HERO_JOB_LEASE_SECONDS (the kill round waits it out)")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--threads", type=int, default=1,
                    help="threads per worker (OMP_NUM_THREADS, RAYON_NUM_THREADS; tokenizers in the calling thread); "
                         "0: the workers' defaults")
    a = ap.parse_args()
    from verifier.cli.bench_figures import bench_texts
    from verifier.lm import load_tokenizer

    base = bench_texts(load_tokenizer("smollm2"), 64)
    texts = [f"{base[i % len(base)]} ({i})" for i in range(a.texts)]
    counts = [int(x) for x in a.workers.split(",")]
    rows = []
    load_start = os.getloadavg()[0]
    if not a.only_kill:
        for _ in range(a.rounds):
            for n in counts:
                rows.append(_round(a, texts, n, kill=False))
                emit(rows[-1])
    if a.kill or a.only_kill:
        emit(_round(a, texts, 2, kill=True))
    if rows:
        med = {n: statistics.median(r["drain_s"] for r in rows if r["workers"] == n) for n in counts}
        emit({"bench": "job-workers-summary", "texts": a.texts, "median_drain_s": med,
              "speedup": {n: round(med[counts[0]] / med[n], 2) for n in counts[1:]},
              "rounds": a.rounds, "threads_per_worker": a.threads or None, "cpus": os.cpu_count(),
              "load_avg_1m_start": round(load_start, 2),
              "load_avg_1m_end": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    main()
