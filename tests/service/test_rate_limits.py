"""Finding 14: per-subject and per-role quotas on texts (per minute / per day), 429 + Retry-After, metrics."""

from __future__ import annotations

import os
import time
import uuid

import pytest
import yaml
from prometheus_client import REGISTRY

TEXT = "An ordinary sentence that nobody watermarked, long enough to be scored."


def _roles(tmp_path, moderator_limits: dict) -> str:
    from verifier.settings import REPO_ROOT

    data = yaml.safe_load((REPO_ROOT / "policies" / "roles.yaml").read_text())
    data["roles"]["moderator"]["limits"] = moderator_limits
    path = tmp_path / "roles.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _verify(svc, sub, n=1):
    return svc.client.post("/v1/verify", headers=svc.auth("moderator", sub), json={"texts": [TEXT] * n})


def _limited(role, window) -> float:
    return REGISTRY.get_sample_value("hero_rate_limited_total", {"role": role, "window": window}) or 0.0


def test_subject_quota_per_minute_and_day(make_service, sqlite_url, tmp_path):
    svc = make_service(sqlite_url, roles_file=_roles(tmp_path, {"texts_per_minute": 3, "texts_per_day": 5}))
    svc.init_keys()
    now = [1_000_000.0 * 60]
    svc.ctx.limiter.clock = lambda: now[0]
    before = _limited("moderator", "subject_minute")
    assert _verify(svc, "ann", 2).status_code == 200
    r = _verify(svc, "ann", 2)
    assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
    assert "3 texts per minute" in r.json()["detail"]
    assert _limited("moderator", "subject_minute") == before + 1
    assert _verify(svc, "ann", 1).status_code == 200  # the refused request counted nothing
    assert _verify(svc, "bob", 3).status_code == 200  # another subject has its own quota
    now[0] += 61
    assert _verify(svc, "ann", 2).status_code == 200  # a new minute; ann has now used 5 today
    r = _verify(svc, "ann", 1)
    assert r.status_code == 429 and "per day" in r.json()["detail"] and int(r.headers["retry-after"]) > 60
    # Jobs count against the same quota.
    r = svc.client.post("/v1/jobs", headers=svc.auth("moderator", "ann"), json={"texts": [TEXT]})
    assert r.status_code == 429


def test_role_quota_and_other_roles_unaffected(make_service, sqlite_url, tmp_path):
    svc = make_service(sqlite_url, roles_file=_roles(tmp_path, {"role_texts_per_minute": 4}))
    svc.ctx.limiter.clock = lambda: 1_800_000_010.0  # all in one minute window, however slow the machine
    svc.init_keys()
    assert _verify(svc, "a", 2).status_code == 200
    assert _verify(svc, "b", 2).status_code == 200
    assert _verify(svc, "c", 1).status_code == 429
    r = svc.client.post("/v1/verify", headers=svc.auth("auditor", "c"), json={"texts": [TEXT]})
    assert r.status_code == 200


def test_policy_rejects_bad_limits(tmp_path):
    from verifier.auth.policy import PolicyError, load_policy

    with pytest.raises(PolicyError, match="limits"):
        load_policy(_roles(tmp_path, {"texts_per_hour": 3}))
    with pytest.raises(PolicyError, match="positive"):
        load_policy(_roles(tmp_path, {"texts_per_minute": 0}))


def test_redis_counters_are_shared_between_processes():
    from verifier.ratelimit import RateLimited, RateLimiter, RedisCounter, RoleLimits

    url = os.environ.get("HERO_TEST_REDIS_URL", "redis://127.0.0.1:6379/10")
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except Exception as exc:
        if os.environ.get("HERO_REQUIRE_SERVICES") == "1":
            pytest.fail(f"Redis at {url} unreachable: {exc}")
        pytest.skip(f"Redis at {url} unreachable")
    limits = RoleLimits(texts_per_minute=3)
    frozen = time.time() + 3600  # one minute window however slow the machine; its Redis keys live past the test
    a, b = RateLimiter(RedisCounter(url), lambda: frozen), RateLimiter(RedisCounter(url), lambda: frozen)  # 2 APIs
    sub = uuid.uuid4().hex
    a.charge("moderator", sub, limits, 2)
    with pytest.raises(RateLimited):
        b.charge("moderator", sub, limits, 2)
    b.charge("moderator", sub, limits, 1)
    with pytest.raises(RateLimited):
        a.charge("moderator", sub, limits, 1)
