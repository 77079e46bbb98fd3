"""The vLLM plugin's metrics, on vLLM's own `/metrics` (prometheus_client's default registry of the process that runs
the logits processor): the bundle in force (age, seconds to expiry, expiry time), failed bundle refreshes, refused
bundles and refused rows. Without them an expired bundle shows only as HTTP 400s.

| metric | what |
|---|---|
| `hero_vllm_bundle_age_seconds` | now - the bundle's `issued_at` (NaN while no bundle is in force) |
| `hero_vllm_bundle_expiry_seconds` | the bundle's `expires_at` - now; negative once expired (NaN: no bundle) |
| `hero_vllm_bundle_expiry_timestamp_seconds` | the bundle's `expires_at` as a Unix time: what the alerts read |
| `hero_vllm_bundle_refresh_failures_total{error}` | polls of the service that failed (the exception's type) |
| `hero_vllm_bundles_refused_total` | fetched bundles refused (another profile shape, or going back) |
| `hero_vllm_refused_rows_total` | batch rows forced to end-of-sequence (a request that cannot be watermarked) |

The gauges are set by a daemon thread every `INTERVAL_S` and when a refresh installs a bundle, so they stay true
while the engine is idle. Refresh failures and refused bundles are counted from the bundle source's log lines (no
hook in verifier/provider/refresh.py), refused rows around `RequestSlots.step`. vLLM's engine core may run in its
own process: set `PROMETHEUS_MULTIPROC_DIR` (an empty folder) for `vllm serve` and the API server's `/metrics`
gathers every process's series (the gauges take the worst live value: `livemin` / `livemax`).

Hooked in by `verifier.provider.vllm._slots` (`watch`); nothing here imports vLLM, so the tests run without it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["INTERVAL_S", "in_force", "metrics", "update_bundle", "watch"]

INTERVAL_S = 15.0

_LOCK = threading.Lock()
_METRICS: dict[str, Any] = {}
_KEYS: list[Callable[[], Any]] = []  # the process's BundleKeys getter, once watched
_THREAD: list[threading.Thread] = []


def metrics() -> dict[str, Any]:
    """The metrics, registered on prometheus_client's default registry once per process."""
    with _LOCK:
        if not _METRICS:
            from prometheus_client import Counter, Gauge

            _METRICS.update(
                age=Gauge("hero_vllm_bundle_age_seconds", "Age of the HeRo bundle in force (now - issued_at); NaN "
                          "while none is", multiprocess_mode="livemax"),
                expiry=Gauge("hero_vllm_bundle_expiry_seconds", "Seconds until the HeRo bundle in force expires "
                             "(negative once expired: watermarked generation stopped); NaN while none is",
                             multiprocess_mode="livemin"),
                expiry_ts=Gauge("hero_vllm_bundle_expiry_timestamp_seconds", "When the HeRo bundle in force "
                                "expires (Unix time); NaN while none is", multiprocess_mode="livemin"),
                refresh_failures=Counter("hero_vllm_bundle_refresh_failures_total", "HeRo bundle refreshes that "
                                         "failed (the bundle in force stays until it expires)", ["error"]),
                bundles_refused=Counter("hero_vllm_bundles_refused_total", "Fetched HeRo bundles refused (another "
                                        "profile shape, or older than the newest installed)"),
                refused_rows=Counter("hero_vllm_refused_rows_total", "Batch rows forced to end-of-sequence: "
                                     "requests that cannot be watermarked end with no model text"),
            )
            for g in ("age", "expiry", "expiry_ts"):
                _METRICS[g].set(math.nan)
            logging.getLogger("hero.provider").addHandler(_SourceLog(logging.INFO))
    return _METRICS


def in_force(keys: Any) -> Any:
    """The bundle a `BundleKeys` serves with (the refreshed one, else the file's), expired or not; None without
    one. Reads what `BundleKeys.bundle()` reads, without its BundleExpired."""
    source = getattr(keys, "_source", None)
    return (source.current if source is not None else None) or getattr(keys, "_bundle", None)


def update_bundle(bundle: Any, now: datetime | None = None) -> None:
    """Set the gauges from `bundle` (None: NaN, no bundle in force)."""
    m = metrics()
    if bundle is None:
        for g in ("age", "expiry", "expiry_ts"):
            m[g].set(math.nan)
        return
    now = now or datetime.now(UTC)
    m["age"].set((now - bundle.issued_at).total_seconds())
    m["expiry"].set((bundle.expires_at - now).total_seconds())
    m["expiry_ts"].set(bundle.expires_at.timestamp())


def _refresh_gauges() -> None:
    for keys in list(_KEYS):
        try:
            update_bundle(in_force(keys()))
        except Exception:  # a metric must never stop the engine; the next tick tries again
            logging.getLogger("hero.provider").debug("bundle gauges not updated", exc_info=True)


def _tick() -> None:
    while True:
        _refresh_gauges()
        threading.Event().wait(INTERVAL_S)


class _SourceLog(logging.Handler):
    """Counts what verifier/provider/refresh.py and step.py log: a failed poll ("bundle refresh failed", its error
    type in `error`; "verifier unreachable at start"), a refused bundle ("bundle ... refused: ..."), and sets the
    gauges when a bundle is installed."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            m = _METRICS
            if msg == "bundle refresh failed":
                m["refresh_failures"].labels(str(getattr(record, "error", "unknown"))[:64]).inc()
            elif msg.startswith("verifier unreachable at start"):
                m["refresh_failures"].labels(msg.partition("(")[2].partition(")")[0][:64] or "unknown").inc()
            elif msg.startswith("bundle ") and " refused: " in msg and record.levelno >= logging.WARNING:
                m["bundles_refused"].inc()
            elif msg == "generation bundle installed":
                _refresh_gauges()
        except Exception:  # never let a metric break the logging call
            self.handleError(record)


def watch(slots: Any, keys: Callable[[], Any]) -> Any:
    """Instrument this engine's `RequestSlots` (refused rows counted after each step) and keep the bundle gauges of
    `keys()` (the process's `BundleKeys`) current. Returns `slots`."""
    m = metrics()
    with _LOCK:
        if keys not in _KEYS:
            _KEYS.append(keys)
        if not _THREAD:
            t = threading.Thread(target=_tick, name="hero-bundle-metrics", daemon=True)
            _THREAD.append(t)
            t.start()
    _refresh_gauges()
    step = slots.step
    refused_rows = m["refused_rows"]

    def counted_step(logits: Any, row_slots: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(row_slots, list | tuple | range):  # read twice: here and by the step
            row_slots = list(row_slots)
        out = step(logits, row_slots, *args, **kwargs)
        refused = slots.refused
        n = sum(1 for s in row_slots if refused[s])
        if n:
            refused_rows.inc(n)
        return out

    slots.step = counted_step
    return slots
