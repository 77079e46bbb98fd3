"""Job drain throughput: one job of N ~220-token BBC texts, drained by the API's in-process worker (one CPU
worker), submit to done. Prints one JSON line.

    python benchmarks/bench_job_drain.py [--texts 100000] [--role moderator] [--batch 32] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _common import emit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=100_000)
    ap.add_argument("--role", default="moderator", choices=["moderator", "auditor"])
    ap.add_argument("--batch", type=int, default=32, help="HERO_JOB_BATCH_SIZE")
    ap.add_argument("--database-url", default=None)
    ap.add_argument("--sqlite-synchronous", default="FULL", choices=["FULL", "NORMAL"])
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hero-drain-"))
    os.environ["HERO_HOME"] = str(home)
    (home / "roles.yaml").write_text(
        "roles:\n  moderator: {max_level: 1, actions: [verify]}\n  auditor: {max_level: all, actions: [verify]}\n"
        "  admin: {max_level: all, actions: [verify, keys.write, keys.read]}\n")
    from fastapi.testclient import TestClient

    from verifier.app import create_app
    from verifier.auth.devkeys import mint_token
    from verifier.cli.bench_serve import bench_texts
    from verifier.lm import load_tokenizer
    from verifier.settings import Settings

    settings = Settings(home=home, database_url=a.database_url, auto_migrate=True, dev_mode=True,
                        roles_file=home / "roles.yaml", job_batch_size=a.batch, sqlite_synchronous=a.sqlite_synchronous,
                        job_max_body_bytes=256_000_000, max_body_bytes=256_000_000)
    base = bench_texts(load_tokenizer("smollm2"), 64)
    texts = [f"{base[i % len(base)]} ({i})" for i in range(a.texts)]
    with TestClient(create_app(settings)) as client:
        hdr = {"Authorization": f"Bearer {mint_token(settings, 'admin', 'bench', 3600)}"}
        assert client.post("/v1/keys/init", headers=hdr).status_code == 201
        hdr = {"Authorization": f"Bearer {mint_token(settings, a.role, 'bench', 3600)}"}
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        r = client.post("/v1/jobs", headers=hdr, json={"texts": texts})
        assert r.status_code == 202, r.text
        jid = r.json()["job_id"]
        while True:
            doc = client.get(f"/v1/jobs/{jid}", headers=hdr).json()
            if doc["status"] in ("done", "failed"):
                break
            time.sleep(0.5)
        wall = time.perf_counter() - t0
    emit({"bench": "job-drain", "texts": a.texts, "role": a.role, "batch": a.batch, "status": doc["status"],
          "seconds": round(wall, 2), "texts_per_s": round(a.texts / wall, 1),
          "cpu_s": round(time.process_time() - cpu0, 2), "sqlite_synchronous": a.sqlite_synchronous,
          "load_avg_1m": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    main()
