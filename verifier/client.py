"""Verifier SDK: `HeroClient`, a small typed client for the HeRo verification API (httpx only).

    from verifier.client import HeroClient
    with HeroClient("https://verifier.example", token=TOKEN) as hero:
        [r] = hero.verify(["some text"])
        r.watermarked, r.p_value, r.levels[0].fields

Retries 429 and 503 with backoff, honouring `Retry-After`, and transport errors only where a retry cannot
do a thing twice: a connection never made, a GET, or a POST /v1/jobs carrying its `Idempotency-Key` (one per
`submit_job` call, so a retry after a lost answer names the job the first attempt made). No FastAPI, SQLAlchemy
or settings import: install it anywhere.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

RETRY_STATUSES = (429, 503)


class HeroAPIError(RuntimeError):
    """A non-2xx answer (after retries): `status` and the service's `detail`."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class LevelResult:
    level: int
    status: str
    key_version: str | None
    fields: dict[str, int | None] | None
    confidence: float
    p_value: float
    reason: str | None = None
    candidates: list[dict[str, Any]] | None = None
    spans: list[dict[str, Any]] | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LevelResult:
        return cls(int(d["level"]), str(d["status"]), d.get("key_version"), d.get("fields"),
                   float(d.get("confidence", 0.0)), float(d["p_value"]), d.get("reason"), d.get("candidates"),
                   d.get("spans"))


@dataclass(frozen=True)
class VerifyResult:
    watermarked: bool
    p_value: float
    key_version: str | None
    tokens_scored: int
    levels: list[LevelResult]
    flags: list[str] = field(default_factory=list)
    spec_version: int | None = None
    receipt: dict[str, Any] | None = None
    scoring: str | None = None  # model-free | model-aware
    # the one-value test of the value the request named (`expect`): [{"level", "fields", "p_value", "matches"...}]
    expected: list[dict[str, Any]] | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> VerifyResult:
        return cls(bool(d["watermarked"]), float(d["p_value"]), d.get("key_version"), int(d["tokens_scored"]),
                   [LevelResult.from_json(lv) for lv in d.get("levels", [])], list(d.get("flags", [])),
                   d.get("spec_version"), d.get("receipt"), d.get("scoring"), d.get("expected"))

    def fields(self) -> dict[str, int | None]:
        """All released fields across levels (decoded levels only)."""
        out: dict[str, int | None] = {}
        for lv in self.levels:
            if lv.fields:
                out.update(lv.fields)
        return out


@dataclass(frozen=True)
class Job:
    job_id: str
    status: str
    total: int
    done: int
    results: list[VerifyResult] | None
    error: str | None = None
    receipt: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Job:
        res = d.get("results")
        return cls(str(d["job_id"]), str(d["status"]), int(d["progress"]["total"]), int(d["progress"]["done"]),
                   None if res is None else [VerifyResult.from_json(r) for r in res], d.get("error"),
                   d.get("receipt"))


def _retry_after(resp: httpx.Response, default: float) -> float:
    value = resp.headers.get("Retry-After")
    if value is None:
        return default
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return default


class HeroClient:
    """Verify texts, submit and read decode jobs. `token`: a JWT string, or a callable returning a fresh one."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | Callable[[], str] = "",
        *,
        client: httpx.Client | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        max_wait_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if client is None:
            if base_url is None:
                raise ValueError("give base_url or client")
            client = httpx.Client(base_url=base_url, timeout=timeout_s)
        self._client = client
        self._token = token
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_wait_s = max_wait_s
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"HeroClient({self._client.base_url!s})"

    def __enter__(self) -> HeroClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        attempt = 0
        extra_headers = kw.pop("headers", {})
        # Safe to send again after a transport error: GET, or a request the service deduplicates by its key. A
        # connection that was never made (or a pool timeout) sent nothing, so any request may go again then.
        replayable = method in ("GET", "HEAD") or "Idempotency-Key" in extra_headers
        while True:
            token = self._token() if callable(self._token) else self._token
            headers = {"Authorization": f"Bearer {token}", **extra_headers}
            try:
                resp = self._client.request(method, path, headers=headers, **kw)
            except httpx.TransportError as exc:
                unsent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
                if attempt >= self.max_retries or not (replayable or unsent):
                    raise
                resp = None
            if resp is not None and resp.status_code not in RETRY_STATUSES:
                if resp.status_code >= 400:
                    try:
                        detail = str(resp.json().get("detail", ""))
                    except ValueError:
                        detail = resp.text[:200]
                    raise HeroAPIError(resp.status_code, detail)
                return resp
            if attempt >= self.max_retries:
                assert resp is not None
                raise HeroAPIError(resp.status_code, "retries exhausted")
            default = self.backoff_s * (2**attempt)
            wait = default if resp is None else _retry_after(resp, default)
            self._sleep(min(wait, self.max_wait_s))
            attempt += 1

    def verify(self, texts: Sequence[str], max_level: int | None = None,
               expect: dict[str, int] | None = None) -> list[VerifyResult]:
        """POST /v1/verify: one result per text, in order (each with its audit receipt). `expect` (e.g.
        {"model": 37}) adds each result's one-value test of that value (`VerifyResult.expected`)."""
        body: dict[str, Any] = {"texts": list(texts)}
        if max_level is not None:
            body["max_level"] = max_level
        if expect:
            body["expect"] = dict(expect)
        data = self._request("POST", "/v1/verify", json=body).json()
        return [VerifyResult.from_json(r) for r in data["results"]]

    def submit_job(self, texts: Sequence[str], max_level: int | None = None,
                   idempotency_key: str | None = None) -> str:
        """POST /v1/jobs: the job id (decoding runs on the service's workers). Sent with an `Idempotency-Key` (a
        new UUID unless given), so the retries after a lost answer make one job, not several."""
        body: dict[str, Any] = {"texts": list(texts)}
        if max_level is not None:
            body["max_level"] = max_level
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        return str(self._request("POST", "/v1/jobs", json=body, headers=headers).json()["job_id"])

    def job(self, job_id: str) -> Job:
        """GET /v1/jobs/{id}: status, progress and, once done, the results."""
        return Job.from_json(self._request("GET", f"/v1/jobs/{job_id}").json())

    def result_pages(self, job_id: str, *, limit: int = 1000, cursor: str | None = None) -> Iterator[dict[str, Any]]:
        """GET /v1/jobs/{id}/results, following `next_cursor`: each page as served (`results` with their
        `index`, `next_cursor`, the page read's `receipt`). The job must be done (else HeroAPIError 409)."""
        while True:
            params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor is not None else {})}
            page = self._request("GET", f"/v1/jobs/{job_id}/results", params=params).json()
            yield page
            cursor = page.get("next_cursor")
            if cursor is None:
                return

    def iter_results(self, job_id: str, *, poll_s: float = 1.0, timeout_s: float = 3600.0) -> Iterator[VerifyResult]:
        """Wait for the job, then yield its results in input order, page by page. Raises HeroAPIError if the job
        failed."""
        deadline = time.monotonic() + timeout_s
        while True:
            j = self._request("GET", f"/v1/jobs/{job_id}", params={"results": "false"}).json()
            status = str(j["status"])
            if status == "failed":
                raise HeroAPIError(500, f"job {job_id} failed: {j.get('error') or 'unknown error'}")
            if status == "done":
                for page in self.result_pages(job_id):
                    yield from (VerifyResult.from_json({k: v for k, v in r.items() if k != "index"})
                                for r in page["results"])
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} not done after {timeout_s} s "
                                   f"({j['progress']['done']}/{j['progress']['total']})")
            self._sleep(poll_s)
