"""A global bound on model-aware decodes per process (verifier/base/workslots.py).

Before (7ed75c2) nothing bounded them: 4-6 concurrent requests at the token caps each ran the LM on every core,
all missed the 120 s deadline (503, quota charged), the resident memory ratcheted up and stayed, and one 500
(`RuntimeError` from the allocator) came back. Here: with one slot and a short queue, the requests that do not
get a slot in time are answered 503 with Retry-After and cost nothing (no quota, no audit row), the others are
answered, none is a 500; an allocation failure in the LM is a 503 too. (At 7ed75c2 all three concurrent
requests were decoded at once and the third request of a two-texts-a-minute quota was a 429, not a 503.)"""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from tests.verify.test_model_aware_bounds import SlowLM, lms  # noqa: F401  (lms: a fixture)
from tests.verify.test_scoring import HUMAN
from verifier.audit.models import AuditEventRow
from verifier.base.workslots import Busy, WorkSlots, auto_slots


def test_auto_slots_from_cores_and_memory():
    assert auto_slots(cores=2, available=64 << 30) == 1
    assert auto_slots(cores=16, available=64 << 30) == 8
    assert auto_slots(cores=16, available=5 << 30) == 2
    assert auto_slots(cores=1, available=0) == 1


def test_a_full_queue_is_busy_with_retry_after():
    slots = WorkSlots(1, 0.05)
    with slots.hold():
        try:
            slots.acquire()
            raise AssertionError("a second slot")
        except Busy as exc:
            assert exc.status == 503 and exc.headers == {"Retry-After": "1"}
    with slots.hold():  # released: free again
        assert slots.running == 1


def test_concurrent_model_aware_requests_get_a_slot_or_a_free_503(make_service, sqlite_url, lms, tmp_path):  # noqa: F811
    lms["factory"] = lambda vocab: SlowLM(vocab, delay=1.0)
    roles = tmp_path / "roles.yaml"
    roles.write_text("roles:\n  auditor:\n    max_level: all\n    actions: [verify]\n"
                     "    limits: {texts_per_minute: 2}\n"
                     "  admin:\n    max_level: all\n    actions: [verify, keys.write, keys.read]\n")
    svc = make_service(sqlite_url, model_aware=True, roles_file=roles, model_aware_concurrency=1,
                       model_aware_queue_seconds=0.2)
    svc.init_keys()
    svc.ctx.tokenizers(svc.ctx.profile.tokenizer).encode_ids([HUMAN])
    answers: list[tuple[int, dict, dict]] = []
    go = threading.Barrier(3)

    def ask() -> None:
        go.wait()
        r = svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": [HUMAN]})
        answers.append((r.status_code, r.json(), dict(r.headers)))

    threads = [threading.Thread(target=ask) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(c for c, _, _ in answers)
    assert 500 not in codes and 200 in codes and 503 in codes, answers
    for code, body, headers in answers:
        if code == 503:
            assert "busy" in body["detail"] and "nothing was charged" in body["detail"]
            assert int(headers["retry-after"]) >= 1
    with svc.ctx.db.snapshot() as s:
        verified = s.scalar(select(func.count()).select_from(AuditEventRow).where(AuditEventRow.action == "verify"))
    assert verified == codes.count(200)
    # the busy ones were not charged: the quota (2 a minute) still has what they did not use
    left = 2 - codes.count(200)
    for _ in range(left):
        assert svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": [HUMAN]}).status_code == 200
    assert svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": [HUMAN]}).status_code == 429


def test_an_allocation_failure_is_a_503_not_a_500(make_service, sqlite_url, lms):  # noqa: F811
    class Starved(SlowLM):
        def forward(self, input_ids, attention_mask=None):
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    lms["factory"] = lambda vocab: Starved(vocab)
    svc = make_service(sqlite_url, model_aware=True)
    svc.init_keys()
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor"), json={"texts": [HUMAN]})
    assert r.status_code == 503 and "out of memory" in r.json()["detail"] and "retry-after" in r.headers, r.text
