"""Audit log as a transparency log: append cost (chain + Merkle nodes), receipt cost, a full check on a
read snapshot, and the latency of a concurrent writer while that check runs.

    python benchmarks/bench_audit_log.py [--events 100000] [--batch 32] [--url sqlite:///...]

Prints JSON lines. Before this change `GET /v1/audit/verify` walked the chain inside a write
transaction, so on SQLite every disclosure waited for (or failed after) the whole walk.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from _common import emit
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.audit import merkle
from verifier.audit.service import AuditEvent, append, record
from verifier.audit.signer import LogSigner
from verifier.audit.transparency import verify_receipt
from verifier.audit.verification import verify_chain
from verifier.base.db import Database, upgrade


def _events(n: int, start: int) -> list[AuditEvent]:
    return [AuditEvent("verify", f"user-{(start + i) % 97}", "auditor", f"jti-{start + i}", [1, 2], "l1-v1,l2-v1",
                       f"{start + i:064x}", "not-watermarked") for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--url", default=None)
    a = ap.parse_args()
    url = a.url or f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.db'}"
    upgrade(url)
    db = Database(url)
    signer = LogSigner("bench.example/audit", Ed25519PrivateKey.generate())

    t0 = time.perf_counter()
    done = 0
    while done < a.events:
        n = min(a.batch, a.events - done)
        with db.session() as s:
            append(s, _events(n, done))
        done += n
    append_s = time.perf_counter() - t0
    emit({"what": "append", "events": a.events, "batch": a.batch, "seconds": round(append_s, 2),
          "us_per_event": round(append_s / a.events * 1e6, 1)})

    lat = []
    for i in range(200):
        t0 = time.perf_counter()
        with db.session() as s:
            rows = append(s, _events(1, a.events + i))
            (receipt,) = merkle.receipts(s, signer, rows, 0)
        lat.append(time.perf_counter() - t0)
    verify_receipt(receipt, signer.vkey)
    emit({"what": "append+receipt", "tree_size": a.events + 200, "median_ms": round(statistics.median(lat) * 1e3, 2),
          "p95_ms": round(sorted(lat)[189] * 1e3, 2), "proof_hashes": len(receipt["inclusion_proof"])})

    writes: list[float] = []
    stop = threading.Event()

    def writer() -> None:
        k = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            record(db, _events(1, 10**9 + k))
            writes.append(time.perf_counter() - t0)
            k += 1
            time.sleep(0.01)

    th = threading.Thread(target=writer)
    th.start()
    t0 = time.perf_counter()
    rep = verify_chain(db, signer.vkey)
    check_s = time.perf_counter() - t0
    stop.set()
    th.join()
    emit({"what": "verify on snapshot", "events": rep.events, "valid": rep.valid, "seconds": round(check_s, 2),
          "concurrent_writes": len(writes), "writer_max_ms": round(max(writes) * 1e3, 1),
          "writer_median_ms": round(statistics.median(writes) * 1e3, 2)})
    db.dispose()


if __name__ == "__main__":
    main()
