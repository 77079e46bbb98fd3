"""Several API processes (`hero serve --workers N`) append to one audit chain: the appends serialise on the
chain lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory transaction lock), so the log stays ONE chain and
ONE Merkle tree, with no gap, duplicate index or fork, and every receipt a process handed out verifies. A
process reads the nodes another one wrote in one query (the frontier), not one read per node."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import time

from sqlalchemy import event

from verifier.audit import merkle
from verifier.audit.service import AuditEvent, record_with_receipts, text_digest, verify_chain
from verifier.audit.signer import signer_from_settings
from verifier.audit.transparency import MemoryTree, TreeView, leaf_hash, verify_receipt
from verifier.audit.transparency import frontier_nodes as frontier
from verifier.base.db import Database, upgrade
from verifier.base.settings import Settings

CHILD = textwrap.dedent("""
    import json, os, sys, time
    from verifier.audit.service import AuditEvent, record_with_receipts, text_digest
    from verifier.audit.signer import signer_from_settings
    from verifier.base.db import Database
    from verifier.base.settings import Settings

    url, home, tag, batches, size, go = sys.argv[1:7]
    settings = Settings(home=home, database_url=url)
    db, signer = Database(url), signer_from_settings(settings, create=False)
    while not os.path.exists(go):  # both processes start appending together
        time.sleep(0.005)
    out = []
    for b in range(int(batches)):
        texts = [f"{tag}-{b}-{i}" for i in range(int(size))]
        events = [AuditEvent(action="verify", subject=tag, role="moderator", jti=f"{tag}-{b}", levels=[1],
                             key_version="l1-v1", text_sha256=text_digest(t), outcome="not-watermarked")
                  for t in texts]
        out += list(zip(texts, record_with_receipts(db, events, signer, 0.001), strict=True))
        time.sleep(0.003)  # as between two batches of a server: the other process gets its turn at the lock
    json.dump(out, sys.stdout)
""")


def test_two_processes_appending_at_once_keep_one_chain(db_url, hero_home, tmp_path):
    upgrade(db_url)
    settings = Settings(home=hero_home, database_url=db_url)
    vkey = signer_from_settings(settings, create=True).vkey  # created once here; the children load the same key
    go = tmp_path / "go"
    batches, size = 40, 7
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, db_url, str(hero_home), tag, str(batches), str(size),
                               str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for tag in ("proc-a", "proc-b")]
    time.sleep(1.0)  # let both import and wait at the start line
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out))

    db = Database(db_url)
    try:
        report = verify_chain(db, vkey)
        assert report.valid, report.reason
        assert report.events == 2 * batches * size
        idxs = []
        for res in results:
            assert len(res) == batches * size
            for text, receipt in res:
                verify_receipt(receipt, vkey, text=text)  # raises if the proof or the signature is wrong
                assert receipt["event"]["text_sha256"] == text_digest(text)
                idxs.append(receipt["event"]["idx"])
        assert sorted(idxs) == list(range(1, 2 * batches * size + 1))  # no gap, no index handed out twice
        # The appends really interleaved (else this test proves nothing about concurrency).
        order = sorted((r["event"]["idx"], r["event"]["subject"]) for res in results for _, r in res)
        switches = sum(1 for (_, a), (_, b) in itertools.pairwise(order) if a != b)
        assert switches >= 2, "the two processes did not append concurrently"
    finally:
        db.dispose()



def test_frontier_is_all_an_append_and_its_proofs_need_from_the_older_tree():
    """`frontier_nodes(n)`: the only nodes of leaves [0, n) that appending n.. and proving them can touch."""
    leaves = [leaf_hash(bytes([i])) for i in range(70)]
    for n in range(0, 40):
        for m in range(n + 1, min(n + 20, 70) + 1):
            full = MemoryTree(leaves[:m])
            allowed = set(frontier(n))
            older: dict = {}

            def get(level, idx, full=full, allowed=allowed, n=n, older=older):
                if (idx + 1) << level <= n:  # a node over older leaves only: must be in the frontier
                    assert (level, idx) in allowed, f"size {n}: node ({level}, {idx}) is not in the frontier"
                    older[(level, idx)] = True
                return full._get(level, idx)

            view = TreeView(get)
            assert view.mth(0, m) == full.root()
            for i in range(n, m):
                assert view.inclusion_proof(i, m) == full.inclusion_proof(i, m)


def test_an_append_after_another_process_reads_the_older_tree_in_one_query(db_url, hero_home):
    """The other process's nodes are not in this one's memory: they come in ONE query, and the receipts verify."""
    upgrade(db_url)
    settings = Settings(home=hero_home, database_url=db_url)
    signer = signer_from_settings(settings, create=True)
    db = Database(db_url)
    reads: list[str] = []

    def count(conn, cursor, statement, *args):
        if "hero_audit_tree" in statement and statement.lstrip().upper().startswith("SELECT"):
            reads.append(statement)

    try:
        for batch in range(6):
            merkle._SHARED.clear()  # as if every earlier append had been made by another process
            texts = [f"t-{batch}-{i}" for i in range(5 + batch)]
            events = [AuditEvent(action="verify", subject="s", role="moderator", jti="j", levels=[1],
                                 text_sha256=text_digest(t), outcome="not-watermarked") for t in texts]
            reads.clear()
            event.listen(db.engine, "before_cursor_execute", count)
            try:
                receipts = record_with_receipts(db, events, signer, 0.0)
            finally:
                event.remove(db.engine, "before_cursor_execute", count)
            assert len(reads) <= 1, reads
            for t, r in zip(texts, receipts, strict=True):
                verify_receipt(r, signer.vkey, text=t)
        assert verify_chain(db, signer.vkey).valid
    finally:
        db.dispose()
