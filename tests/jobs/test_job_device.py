"""Where a job's drain runs: the in-process drain and Celery workers take HERO_WORKER_DEVICE, and a drain on a
CUDA device claims device-sized batches (HERO_JOB_BATCH_SIZE_CUDA)."""

from __future__ import annotations

import pytest

from verifier.jobs.drain import DrainContext


@pytest.fixture
def lite_factory(sqlite_url, make_service):
    return lambda **kw: make_service(sqlite_url, **kw)


def test_the_in_process_drain_runs_on_the_worker_device(lite_factory):
    svc = lite_factory(worker_device="cuda:1", job_batch_size=100, job_batch_size_cuda=3000)
    dc = svc.ctx.jobs._make()  # the context each in-process drain is given; nothing runs on the device here
    assert (dc.device, dc.batch_size) == ("cuda:1", 3000)


def test_a_cpu_drain_keeps_the_cpu_batch_size(lite_factory):
    dc = lite_factory(worker_device="cpu", job_batch_size=100, job_batch_size_cuda=3000).ctx.jobs._make()
    assert (dc.device, dc.batch_size) == ("cpu", 100)
    auto = lite_factory(worker_device="auto", job_batch_size=100).ctx.jobs._make()
    assert auto.device in ("cpu", "cuda") and auto.batch_size == (100 if auto.device == "cpu" else 2048)


def test_drain_context_sizes_batches_by_device(lite_factory):
    svc = lite_factory(job_batch_size=64, job_batch_size_cuda=4096)
    c = svc.ctx
    args = (svc.settings, c.db, c.store, c.policy, lambda name: c.profile, c.runner)
    assert DrainContext.from_settings(*args, worker="w", device="cuda").batch_size == 4096
    assert DrainContext.from_settings(*args, worker="w", device="cpu").batch_size == 64
