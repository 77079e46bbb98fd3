"""Per-subject and per-role quotas on texts verified (per minute and per day): 429 with Retry-After.

p-values and confidences answer "how watermarked is this?", which is exactly the oracle an attacker
needs to strip or forge marks by trial and error; quotas bound how fast anyone can ask. Limits come
from the role's `limits` in policies/roles.yaml (texts_per_minute / texts_per_day for each subject of
the role, role_texts_per_minute / role_texts_per_day for the whole role). Fixed windows; counters live
in process memory (embedded default) or in Redis (HERO_RATE_LIMIT_URL, default the broker when it is
Redis), shared by every API process. A charge is all-or-nothing across the buckets it touches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from verifier.errors import DomainError, Unavailable
from verifier.metrics import RATE_LIMITED

WINDOWS = {"minute": 60, "day": 86400}


@dataclass(frozen=True)
class Bucket:
    key: str  # e.g. "sub:<iss>:<sub>" or "role:<role>"
    label: str  # metric label: subject_minute | subject_day | role_minute | role_day
    window: str
    limit: int


class RateLimited(DomainError):
    status = 429

    def __init__(self, bucket: Bucket, retry_after: int) -> None:
        scope = "role" if bucket.label.startswith("role") else "subject"
        super().__init__(f"rate limit reached: {bucket.limit} texts per {bucket.window} for this {scope}; "
                         f"retry in {retry_after} s")
        self.bucket = bucket
        self.retry_after = retry_after
        self.headers = {"Retry-After": str(retry_after)}  # type: ignore[misc]  (per instance)


class RateStoreUnavailable(Unavailable):
    """The shared counter store cannot be reached: fail closed (503), never uncounted."""


class Counter(Protocol):
    def charge(self, buckets: Sequence[Bucket], n: int, now: float) -> Bucket | None: ...


def _slot(bucket: Bucket, now: float) -> tuple[str, int]:
    size = WINDOWS[bucket.window]
    start = int(now // size) * size
    return f"hero:rl:{bucket.key}:{bucket.window}:{start}", start + size


class MemoryCounter:
    """Process-local fixed windows (the embedded single-process default)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, int]] = {}  # slot key -> (count, window end)

    def charge(self, buckets: Sequence[Bucket], n: int, now: float) -> Bucket | None:
        with self._lock:
            if len(self._counts) > 100_000:
                self._counts = {k: v for k, v in self._counts.items() if v[1] > now}
            slots = [_slot(b, now) for b in buckets]
            for b, (key, _end) in zip(buckets, slots, strict=True):
                if self._counts.get(key, (0, 0))[0] + n > b.limit:
                    return b
            for key, end in slots:
                self._counts[key] = (self._counts.get(key, (0, end))[0] + n, end)
        return None


class RedisCounter:
    """Shared fixed windows in Redis: INCRBY, and roll back every bucket if any went over."""

    def __init__(self, url: str) -> None:
        import redis

        self._r = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    def charge(self, buckets: Sequence[Bucket], n: int, now: float) -> Bucket | None:
        import redis

        try:
            return self._charge(buckets, n, now)
        except redis.RedisError as exc:
            raise RateStoreUnavailable(f"rate-limit store unavailable ({exc.__class__.__name__})") from None

    def _charge(self, buckets: Sequence[Bucket], n: int, now: float) -> Bucket | None:
        slots = [_slot(b, now) for b in buckets]
        pipe = self._r.pipeline()
        for key, end in slots:
            pipe.incrby(key, n)
            pipe.expireat(key, int(end) + 5)
        counts = pipe.execute()[0::2]
        over = next((b for b, c in zip(buckets, counts, strict=True) if c > b.limit), None)
        if over is not None:
            undo = self._r.pipeline()
            for key, _ in slots:
                undo.decrby(key, n)
            undo.execute()
        return over


@dataclass(frozen=True)
class RoleLimits:
    texts_per_minute: int | None = None
    texts_per_day: int | None = None
    role_texts_per_minute: int | None = None
    role_texts_per_day: int | None = None

    def buckets(self, role: str, subject_key: str) -> list[Bucket]:
        out = []
        for attr, scope, key in (
            ("texts_per_minute", "subject", f"sub:{role}:{subject_key}"),
            ("texts_per_day", "subject", f"sub:{role}:{subject_key}"),
            ("role_texts_per_minute", "role", f"role:{role}"),
            ("role_texts_per_day", "role", f"role:{role}"),
        ):
            limit = getattr(self, attr)
            if limit is not None:
                window = "minute" if attr.endswith("minute") else "day"
                out.append(Bucket(key, f"{scope}_{window}", window, limit))
        return out


class RateLimiter:
    def __init__(self, counter: Counter, clock=time.time) -> None:
        self.counter = counter
        self.clock = clock

    def charge(self, role: str, subject_key: str, limits: RoleLimits | None, n: int) -> None:
        """Counts n texts against the caller's buckets; raises RateLimited (nothing counted) when over."""
        if limits is None or n <= 0:
            return
        buckets = limits.buckets(role, subject_key)
        if not buckets:
            return
        now = self.clock()
        over = self.counter.charge(buckets, n, now)
        if over is not None:
            RATE_LIMITED.labels(role, over.label).inc()
            _, end = _slot(over, now)
            raise RateLimited(over, max(1, int(end - now + 0.999)))


def shared_counter_url(settings) -> str | None:
    """The Redis URL every API process shares its quota counters through, or None (counters in process memory)."""
    return settings.rate_limit_url or (settings.broker_url if (settings.broker_url or "").startswith("redis") else None)


def make_rate_limiter(settings) -> RateLimiter:
    url = shared_counter_url(settings)
    return RateLimiter(RedisCounter(url) if url else MemoryCounter())
