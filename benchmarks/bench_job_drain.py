"""Job drain throughput: one job of N ~220-token BBC texts, drained by the API's in-process worker (one CPU
worker) or, with --broker-url, by one `hero worker` (Celery) process on --worker-device; submit to done.
Prints one JSON line.

    python benchmarks/bench_job_drain.py [--texts 100000] [--role moderator] [--batch N] [--database-url URL]
    python benchmarks/bench_job_drain.py --broker-url sqla+sqlite:////tmp/broker.db --worker-device cuda --role auditor

Afterwards it checks that every item was stored once and audited once (one `verify` event naming the job and
item), and the figure says so (`stored_once`, `audited_once`).

The tokenizer is loaded before the clock starts, as `hero serve` does before it serves. Figures:
- `seconds`, `texts_per_s`: from the POST (texts uploaded, sealed and stored) to the job's last batch
  committed (the job row's `updated_at`, so the polling interval does not round it);
- `cpu_s`, `cpu_ms_per_text`: CPU of the whole process over that span (HTTP, sealing, drain, polls);
- `read_s`: the GET that releases all results afterwards (audited, with its receipt);
  `seconds_incl_read`, `texts_per_s_incl_read`: submit to results received (what older versions reported).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import emit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=100_000)
    ap.add_argument("--role", default="moderator", choices=["moderator", "auditor"])
    ap.add_argument("--batch", type=int, default=None, help="HERO_JOB_BATCH_SIZE (default: the settings' default)")
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--sqlite-synchronous", default="FULL", choices=["FULL", "NORMAL"])
    ap.add_argument("--poll", type=float, default=0.2, help="seconds between status polls (GET /v1/jobs)")
    ap.add_argument("--broker-url", default=None, help="drain on a Celery worker (any Celery broker: redis://, sqla+)")
    ap.add_argument("--worker-device", default="auto", help="HERO_WORKER_DEVICE of the drain (auto: cuda if present)")
    ap.add_argument("--timeout", type=float, default=3600, help="give up after this many seconds")
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hero-drain-"))
    os.environ["HERO_HOME"] = str(home)
    (home / "roles.yaml").write_text(
        "roles:\n  moderator: {max_level: 1, actions: [verify]}\n  auditor: {max_level: all, actions: [verify]}\n"
        "  admin: {max_level: all, actions: [verify, keys.write, keys.read]}\n")
    from fastapi.testclient import TestClient

    from verifier.api.app import create_app
    from verifier.auth.devkeys import mint_token
    from verifier.base.settings import Settings
    from verifier.cli.bench_figures import bench_texts
    from verifier.jobs.models import JobRow
    from verifier.lm import load_tokenizer

    env = {"HERO_HOME": str(home), "HERO_DEV_MODE": "1", "HERO_ROLES_FILE": str(home / "roles.yaml"),
           "HERO_SQLITE_SYNCHRONOUS": a.sqlite_synchronous, "HERO_WORKER_DEVICE": a.worker_device,
           "HERO_JOB_MAX_TEXTS": str(max(100_000, a.texts))}
    if a.batch is not None:
        env["HERO_JOB_BATCH_SIZE"] = env["HERO_JOB_BATCH_SIZE_CUDA"] = str(a.batch)
    if a.database_url:
        env["HERO_DATABASE_URL"] = a.database_url
    if a.broker_url:
        env["HERO_BROKER_URL"] = a.broker_url
    os.environ.update(env)  # this process's settings and the worker's are the same
    settings = Settings(auto_migrate=True, job_max_body_bytes=1_000_000_000, max_body_bytes=256_000_000)
    base = bench_texts(load_tokenizer("smollm2"), 64)
    texts = [f"{base[i % len(base)]} ({i})" for i in range(a.texts)]
    app = create_app(settings)
    ctx = app.state.ctx
    ctx.tokenizers(ctx.profile.tokenizer)  # as `hero serve`: loaded before serving, not by the first drain
    worker = None
    with TestClient(app) as client:
        hdr = {"Authorization": f"Bearer {mint_token(settings, 'admin', 'bench', 3600)}"}
        assert client.post("/v1/keys/init", headers=hdr).status_code == 201
        if a.broker_url:  # one Celery worker process, its tokenizer and device ready before the clock starts
            worker = subprocess.Popen([sys.executable, "-m", "verifier.cli", "worker", "--pool", "solo"],
                                      cwd=Path(__file__).resolve().parents[1], env={**os.environ, **env})
            time.sleep(float(os.environ.get("BENCH_WORKER_WARMUP_S", "10")))
        hdr = {"Authorization": f"Bearer {mint_token(settings, a.role, 'bench', 3600)}"}
        t0_epoch = time.time()
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        r = client.post("/v1/jobs", headers=hdr, json={"texts": texts})
        assert r.status_code == 202, r.text
        jid = r.json()["job_id"]
        submit_s = time.perf_counter() - t0
        while True:  # status only (the list view carries no results)
            js = client.get("/v1/jobs", headers=hdr, params={"limit": 1}).json()["jobs"]
            if js and js[0]["job_id"] == jid and js[0]["status"] in ("done", "failed"):
                break
            if time.perf_counter() - t0 > a.timeout or (worker is not None and worker.poll() is not None):
                state = js[0]["status"] if js else "?"
                raise SystemExit(f"job {jid} not done: {state} (worker exit code {worker and worker.poll()})")
            time.sleep(a.poll)
        cpu_s = time.process_time() - cpu0
        with ctx.db.session() as s:
            job = s.get(JobRow, jid)
            assert job is not None
            seconds, status = job.updated_at - t0_epoch, job.status
        t1 = time.perf_counter()
        doc = client.get(f"/v1/jobs/{jid}", headers=hdr).json()
        read_s = time.perf_counter() - t1
        incl = time.perf_counter() - t0
        assert doc["status"] == status and (status != "done" or len(doc["results"]) == a.texts)
        stored_once, audited_once = _once(ctx.db, jid, a.texts)
    if worker is not None:
        worker.terminate()
        worker.wait(60)
    emit({"bench": "job-drain", "texts": a.texts, "role": a.role,
          "drain": "celery" if a.broker_url else "in-process", "worker_device": a.worker_device,
          "batch": settings.job_batch_size, "batch_cuda": settings.job_batch_size_cuda, "stored_once": stored_once,
          "audited_once": audited_once,
          "status": status, "seconds": round(seconds, 2), "texts_per_s": round(a.texts / seconds, 1),
          "cpu_s": round(cpu_s, 2), "cpu_ms_per_text": round(1000 * cpu_s / a.texts, 3),
          "submit_s": round(submit_s, 2), "read_s": round(read_s, 2), "seconds_incl_read": round(incl, 2),
          "texts_per_s_incl_read": round(a.texts / incl, 1), "db": ctx.db.dialect,
          "sqlite_synchronous": a.sqlite_synchronous, "load_avg_1m": round(os.getloadavg()[0], 2)})


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


if __name__ == "__main__":
    main()
