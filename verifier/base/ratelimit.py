"""Per-subject and per-role quotas on texts verified (per minute and per day): 429 with Retry-After.

p-values and confidences answer "how watermarked is this?", which is exactly the oracle an attacker
needs to strip or forge marks by trial and error; quotas bound how fast anyone can ask. Limits come
from the role's `limits` in policies/roles.yaml (texts_per_minute / texts_per_day for each subject of
the role, role_texts_per_minute / role_texts_per_day for the whole role).

Moving windows from the `limits` library: at most `limit` texts in ANY window-length span (a fixed
window let 2x through across its edge). Each bucket's check-and-take is one atomic step (a Lua script
in Redis, a per-key lock in memory), so a refused charge never adds to a bucket that others read: no
false 429s while someone is being refused. Counters live in process memory (embedded default) or in
Redis (HERO_RATE_LIMIT_URL, default the broker when it is Redis), shared by every API process.

A charge touches up to four buckets. They are all checked first and nothing is taken when any is short;
then each is taken atomically, the caller's own subject buckets before the role's. In memory one lock makes
that exact; in Redis the only way one can be taken while a later one refuses is a race on the role bucket,
and what it costs is the refused caller's own subject quota, never the role's (docs/service.md, quotas).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from limits.storage import MemoryStorage, MovingWindowSupport

from verifier.base.errors import DomainError, Unavailable
from verifier.base.metrics import RATE_LIMITED

WINDOWS = {"minute": 60, "day": 86400}


@dataclass(frozen=True)
class Bucket:
    key: str  # e.g. "sub:<role>:<iss>:<sub>" or "role:<role>"
    label: str  # metric label: subject_minute | subject_day | role_minute | role_day
    window: str
    limit: int


class RateLimited(DomainError):
    status = 429

    def __init__(self, bucket: Bucket, retry_after: int) -> None:
        scope = "role" if bucket.label.startswith("role") else "subject"
        unit = "LM tokens (model-aware scoring)" if "lm_tokens" in bucket.label else "texts"
        super().__init__(f"rate limit reached: {bucket.limit} {unit} per {bucket.window} for this {scope}; "
                         f"retry in {retry_after} s")
        self.bucket = bucket
        self.retry_after = retry_after
        self.headers = {"Retry-After": str(retry_after)}  # type: ignore[misc]  (per instance)


class RateStoreUnavailable(Unavailable):
    """The shared counter store cannot be reached: fail closed (503), never uncounted."""


class Counter(Protocol):
    def charge(self, buckets: Sequence[Bucket], n: int, now: float) -> Bucket | None: ...

    def retry_after(self, bucket: Bucket, n: int, now: float) -> int: ...


class WindowCounter:
    """Moving windows on a `limits` storage (its moving-window entry points: `acquire_entry` takes `n` entries
    only if they fit, atomically; `get_moving_window` reads the window). `charge` returns the bucket that
    refused, or None (all taken)."""

    def __init__(self, storage: MovingWindowSupport) -> None:
        self.storage = storage

    @staticmethod
    def _key(b: Bucket) -> str:  # the limit is part of the key: a changed limit starts a fresh window
        return f"hero/{b.key}/{b.window}/{b.limit}"

    def _fits(self, b: Bucket, n: int) -> bool:
        return self.storage.get_moving_window(self._key(b), b.limit, WINDOWS[b.window])[1] <= b.limit - n

    def charge(self, buckets: Sequence[Bucket], n: int, now: float) -> Bucket | None:
        for b in buckets:  # a check first: nothing is taken when any bucket is short
            if n > b.limit or (len(buckets) > 1 and not self._fits(b, n)):
                return b
        for b in sorted(buckets, key=lambda b: b.label.startswith("role")):  # the caller's own buckets first
            if not self.storage.acquire_entry(self._key(b), b.limit, WINDOWS[b.window], amount=n):
                return b  # lost a race for this bucket; it took nothing
        return None

    def retry_after(self, bucket: Bucket, n: int, now: float) -> int:
        """Seconds until the oldest text in the window leaves it (at least 1; a whole window if it never fits)."""
        size = WINDOWS[bucket.window]
        if n > bucket.limit:
            return size
        start, _count = self.storage.get_moving_window(self._key(bucket), bucket.limit, size)
        return max(1, min(size, math.ceil(start + size - now)))


class MemoryCounter(WindowCounter):
    """Process-local moving windows (the embedded single-process default). One lock around a whole charge: the
    check and the takes cannot interleave with another charge, so several buckets are all-or-nothing exactly."""

    def __init__(self) -> None:
        super().__init__(MemoryStorage())
        self._lock = threading.Lock()

    def charge(self, buckets: Sequence[Bucket], n: int, now: float) -> Bucket | None:
        with self._lock:
            return super().charge(buckets, n, now)


class RedisCounter(WindowCounter):
    """Moving windows shared through Redis (each check-and-take is one Lua script)."""

    def __init__(self, url: str) -> None:
        """`url`: redis://, rediss://, redis+sentinel://host:port/service or redis+cluster://host:port,... (the
        `limits` storage each scheme names, through its `storage_from_string`)."""
        from limits.storage import MovingWindowSupport, storage_from_string

        storage = storage_from_string(url, socket_timeout=2, socket_connect_timeout=2)
        if not isinstance(storage, MovingWindowSupport):
            raise ValueError("HERO_RATE_LIMIT_URL: the storage has no moving windows")
        super().__init__(storage)

    def charge(self, buckets: Sequence[Bucket], n: int, now: float) -> Bucket | None:
        return self._guard(super().charge, buckets, n, now)

    def retry_after(self, bucket: Bucket, n: int, now: float) -> int:
        return self._guard(super().retry_after, bucket, n, now)

    @staticmethod
    def _guard(fn, *args):
        import redis

        try:
            return fn(*args)
        except redis.RedisError as exc:
            raise RateStoreUnavailable(f"rate-limit store unavailable ({exc.__class__.__name__})") from None


@dataclass(frozen=True)
class RoleLimits:
    texts_per_minute: int | None = None
    texts_per_day: int | None = None
    role_texts_per_minute: int | None = None
    role_texts_per_day: int | None = None
    # LM tokens a subject's model-aware requests may have scored (HERO_MODEL_AWARE=1): the LM's cost is per token
    lm_tokens_per_minute: int | None = None
    lm_tokens_per_day: int | None = None

    def token_buckets(self, role: str, subject_key: str) -> list[Bucket]:
        """The subject's LM-token buckets (label subject_lm_tokens_minute / _day)."""
        return [Bucket(f"lmtok:{role}:{subject_key}", f"subject_lm_tokens_{window}", window, limit)
                for window, limit in (("minute", self.lm_tokens_per_minute), ("day", self.lm_tokens_per_day))
                if limit is not None]

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

    def charge(self, role: str, subject_key: str, limits: RoleLimits | None, n: int, lm_tokens: int = 0) -> None:
        """Counts n texts (and `lm_tokens`, when the LM runs) against the caller's buckets; raises RateLimited when
        over. The LM-token buckets are charged first: refused there, nothing is counted; refused on texts after
        that, the tokens stay taken (the caller's own LM-token quota, never the role's)."""
        if limits is None or n <= 0:
            return
        now = self.clock()
        for buckets, amount in ((limits.token_buckets(role, subject_key) if lm_tokens > 0 else [], lm_tokens),
                                (limits.buckets(role, subject_key), n)):
            if not buckets:
                continue
            over = self.counter.charge(buckets, amount, now)
            if over is not None:
                RATE_LIMITED.labels(role, over.label).inc()
                raise RateLimited(over, self.counter.retry_after(over, amount, now))


def shared_counter_url(settings) -> str | None:
    """The Redis URL every API process shares its quota counters through, or None (counters in process memory)."""
    return settings.rate_limit_url or (settings.broker_url if (settings.broker_url or "").startswith("redis") else None)


def make_rate_limiter(settings) -> RateLimiter:
    url = shared_counter_url(settings)
    return RateLimiter(RedisCounter(url) if url else MemoryCounter())
