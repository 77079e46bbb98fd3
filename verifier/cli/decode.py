"""`hero decode`: detect and decode a text for the requested levels, as JSON.

With HERO_URL (or --url) set, the text goes to that running service's POST /v1/verify with the bearer token
in HERO_TOKEN: no tokenizer or key loading per call, and the service audits the disclosure under the token's
identity. Otherwise it decodes locally with the key store of this machine (audited as the OS user)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from verifier.cli.common import add_profile_arg, cli_settings, emit, read_lines

SERVICE_TIMEOUT_S = 120.0
REMOTE_CHUNK = 32  # texts per POST /v1/verify (the service's default HERO_MAX_TEXTS)
JOB_THRESHOLD = 256  # more texts (none with its own `expect`) go to the service as one decode job


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decode", help="decode the payload of a text (via HERO_URL's service when set)")
    p.add_argument("--levels", default="1", help="levels to decode: '1' or '1,2' (must start at 1)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text", help="the text to decode")
    src.add_argument("--file", help="file holding the text: the whole file is one text, blank lines included "
                                    "('-' = stdin)")
    src.add_argument("--input", metavar="FILE",
                     help='many texts, JSON lines: a JSON string or {"text": ..., "expect": {"model": 37}} per line '
                     "('-' = stdin); one JSON result per line out, in order, progress on stderr (through HERO_URL: "
                     f"/v1/verify in requests of {REMOTE_CHUNK}, a decode job above {JOB_THRESHOLD} texts)")
    p.add_argument("--alpha", type=float, default=None,
                   help="significance for 'watermarked' (local decode; default HERO_ALPHA, 1e-4)")
    p.add_argument("--url", default=None,
                   help="decode with the service at this base URL (default: HERO_URL; token: HERO_TOKEN)")
    p.add_argument("--local", action="store_true", help="decode here even when HERO_URL is set")
    p.add_argument("--model-aware", action="store_true",
                   help="local decode: re-run the profile's language model over the text and weight each token's "
                   "evidence by it (stronger on short and top-k/top-p texts; needs the model package). A service "
                   "scores as its HERO_MODEL_AWARE says; each result names its `scoring`")
    p.add_argument("--top-k", type=int, default=None,
                   help="with --model-aware: the providers' top-k, re-created on the re-run (default "
                   "HERO_MODEL_AWARE_TOP_K; a setting of the deployment, not of the text)")
    p.add_argument("--top-p", type=float, default=None,
                   help="with --model-aware: the providers' top-p (default HERO_MODEL_AWARE_TOP_P)")
    p.add_argument("--statistic", choices=("linear", "likelihood-ratio", "union"), default=None,
                   help="with --model-aware: the statistic summed (default HERO_MODEL_AWARE_STATISTIC, union: the "
                   "best of equal, linear and likelihood-ratio weights per value, each also read with the tokens "
                   "the LM finds improbable (edits) dropped at every HERO_MODEL_AWARE_EDIT_FLOORS floor, at a "
                   "factor of the readings; linear and likelihood-ratio alone are each weaker somewhere)")
    p.add_argument("--expect", action="append", default=[], metavar="FIELD=VALUE",
                   help="ask about one value (repeatable, e.g. --expect model=37): the result's `expected` gives "
                   "that value's one-value test (per-value levels, within --levels)")
    add_profile_arg(p)
    p.set_defaults(handler=cmd_decode)


def parse_levels(raw: str) -> int:
    try:
        levels = sorted({int(x) for x in raw.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--levels expects comma-separated integers, got {raw!r}") from None
    if not levels or levels != list(range(1, levels[-1] + 1)):
        raise ValueError(f"--levels must be 1..n without gaps (e.g. 1 or 1,2), got {raw!r}")
    return levels[-1]


def read_text(args: argparse.Namespace) -> str:
    if args.text is not None:
        return args.text
    if args.file is None:
        raise ValueError("give --text or --file")
    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{args.file} is not UTF-8 text") from None


def service_url(args: argparse.Namespace) -> str | None:
    if args.local:
        return None
    url = args.url or os.environ.get("HERO_URL") or None
    return url.rstrip("/") if url else None


def decode_remote(url: str, token: str, text: str, max_level: int, timeout: float = SERVICE_TIMEOUT_S,
                  expect: dict[str, int] | None = None) -> dict:
    """POST /v1/verify on a running service; its result (with the audit receipt) or a one-line error."""
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        raise ValueError(f"HERO_URL must start with http:// or https://, got {url[:40]!r}")
    body = json.dumps({"texts": [text], "max_level": max_level, **({"expect": expect} if expect else {})}).encode()
    req = urllib.request.Request(f"{url}/v1/verify", data=body, method="POST", headers={  # noqa: S310
        "Authorization": f"Bearer {token}", "Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (the operator's own URL)
            return json.loads(resp.read())["results"][0]
    except urllib.error.HTTPError as exc:
        try:
            detail = json.loads(exc.read()).get("detail", "")
        except ValueError:
            detail = ""
        raise RuntimeError(f"service answered {exc.code}: {detail or exc.reason}") from None
    except urllib.error.URLError as exc:
        raise RuntimeError(f"cannot reach {url}: {exc.reason}") from None


def cmd_decode(args: argparse.Namespace) -> None:
    max_level = parse_levels(args.levels)
    if args.input is not None:
        items = read_items(args.input)
        texts, expects = [t for t, _ in items], [e for _, e in items]
        common = _expect(args)
        if common:
            expects = [e if e is not None else common for e in expects]
    else:
        text = read_text(args)
        if not text.strip():
            raise ValueError("text is empty")
        texts, expects = [text], [_expect(args) or None]
    url = service_url(args)
    if url is not None:
        if args.alpha is not None:
            raise ValueError("--alpha applies to a local decode; the service uses its HERO_ALPHA (or pass --local)")
        if args.model_aware or args.top_k is not None or args.top_p is not None or args.statistic is not None:
            raise ValueError("--model-aware applies to a local decode; the service scores as its HERO_MODEL_AWARE "
                             "says (or pass --local)")
        if args.profile:
            raise ValueError("--profile applies to a local decode; the service decodes with its deployment's "
                             "profile (GET /v1/keys names it); pass --local to decode here with another profile")
        token = os.environ.get("HERO_TOKEN", "").strip()
        if not token:
            raise ValueError("HERO_URL is set but HERO_TOKEN is empty: export a bearer token (or pass --local)")
        if args.input is None:
            emit(decode_remote(url, token, texts[0], max_level, expect=expects[0]))
        else:
            decode_remote_batch(url, token, texts, expects, max_level)
        return
    decode_local(args, texts, expects, max_level)


def read_items(path: str) -> list[tuple[str, dict[str, int] | None]]:
    """The texts (and their own `expect`) of a JSON-lines file; errors name the line."""
    lines = read_lines(path)
    items: list[tuple[str, dict[str, int] | None]] = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path} line {n}: not JSON ({exc.msg}); each line is a JSON string or "
                             '{"text": ..., "expect": {...}}') from None
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict) or not isinstance(item.get("text"), str) or set(item) - {"text", "expect"}:
            raise ValueError(f'{path} line {n}: expected a JSON string or {{"text": ..., "expect": {{...}}}}')
        if not item["text"].strip():
            raise ValueError(f"{path} line {n}: the text is empty")
        expect = item.get("expect")
        if expect is not None and (not isinstance(expect, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) for v in expect.values())):
            raise ValueError(f'{path} line {n}: "expect" must map field names to integers')
        items.append((item["text"], expect or None))
    if not items:
        raise ValueError(f"{path} holds no texts")
    return items


def _progress(done: int, total: int) -> None:
    print(f"hero: decoded {done}/{total}", file=sys.stderr, flush=True)


def decode_remote_batch(url: str, token: str, texts: list[str], expects: list[dict[str, int] | None],
                        max_level: int) -> None:
    """Many texts through a running service, one JSON result per line in input order: /v1/verify requests of
    REMOTE_CHUNK texts (texts asking the same `expect` together), or one decode job for a large input."""
    import httpx

    from verifier.client import HeroAPIError, HeroClient

    if not url.startswith(("http://", "https://")):
        raise ValueError(f"HERO_URL must start with http:// or https://, got {url[:40]!r}")
    results: list[dict | None] = [None] * len(texts)
    try:
        with HeroClient(url, token, timeout_s=SERVICE_TIMEOUT_S) as client:
            if len(texts) > JOB_THRESHOLD and not any(expects):
                job_id = client.submit_job(texts, max_level)
                print(f"hero: submitted job {job_id} ({len(texts)} texts)", file=sys.stderr, flush=True)
                seen = -1
                while True:
                    j = client._request("GET", f"/v1/jobs/{job_id}", params={"results": "false"}).json()
                    if j["progress"]["done"] != seen:
                        seen = j["progress"]["done"]
                        _progress(seen, len(texts))
                    if j["status"] in ("done", "failed"):
                        break
                    time.sleep(1.0)
                if j["status"] == "failed":
                    raise RuntimeError(f"job {job_id} failed: {j.get('error') or 'unknown error'}")
                for page in client.result_pages(job_id):
                    for r in page["results"]:
                        results[r.pop("index")] = r
            else:
                groups: dict[tuple, list[int]] = {}
                for i, e in enumerate(expects):
                    groups.setdefault(tuple(sorted((e or {}).items())), []).append(i)
                done = 0
                for key, idx in groups.items():
                    for start in range(0, len(idx), REMOTE_CHUNK):
                        part = idx[start:start + REMOTE_CHUNK]
                        body: dict = {"texts": [texts[i] for i in part], "max_level": max_level}
                        if key:
                            body["expect"] = dict(key)
                        try:
                            out = client._request("POST", "/v1/verify", json=body).json()["results"]
                        except HeroAPIError as exc:
                            raise RuntimeError(f"service answered {exc.status} for text {part[0] + 1}"
                                               f"{f'..{part[-1] + 1}' if len(part) > 1 else ''}: {exc.detail}")\
                                from None
                        for i, r in zip(part, out, strict=True):
                            results[i] = r
                        done += len(part)
                        _progress(done, len(texts))
    except HeroAPIError as exc:
        raise RuntimeError(f"service answered {exc.status}: {exc.detail}") from None
    except httpx.TransportError as exc:
        raise RuntimeError(f"cannot reach {url}: {exc.__class__.__name__}") from None
    for r in results:
        emit(r)


def _expect(args: argparse.Namespace) -> dict[str, int]:
    """--expect name=value items as a field mapping (names checked by the decoder's profile or the service)."""
    out: dict[str, int] = {}
    for item in args.expect:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise ValueError(f"--expect expects name=value, got {item!r}")
        try:
            out[name] = int(raw, 0)
        except ValueError:
            raise ValueError(f"--expect {name}: {raw!r} is not an integer") from None
    return out


def decode_local(args: argparse.Namespace, texts: list[str], expects: list[dict[str, int] | None],
                 level: int) -> None:
    """Through the one decode path (verifier.offline.LocalHero -> verifier.verify.runner), as POST /v1/verify:
    the same verdicts, the same shaping and result schema (no receipt: the event is in the local audit log);
    audited as the OS user before anything is printed. One result per line, in order."""
    from verifier.offline import LocalHero

    settings = cli_settings(args)
    if (args.top_k is not None or args.top_p is not None or args.statistic is not None) and not args.model_aware:
        raise ValueError("--top-k/--top-p/--statistic apply to --model-aware scoring")
    hero = LocalHero(settings, args.profile)
    try:
        scorer = None
        if args.model_aware:
            from verifier.verify.scoring import deployment_sampling, model_aware_scorer

            sampling = deployment_sampling(settings.model_copy(update={
                k: v for k, v in (("model_aware_top_k", args.top_k), ("model_aware_top_p", args.top_p))
                if v is not None}))
            scorer = model_aware_scorer(True, "auto", sampling, args.statistic or settings.model_aware_statistic,
                                        settings.model_aware_edit_floors)
        many = args.input is not None
        results = hero.decode(texts, max_level=level, expect=expects, alpha=args.alpha, scorer=scorer,
                              on_done=(lambda n: _progress(n, len(texts))) if many else None)
    finally:
        hero.close()
    for r in results:
        emit(r)
