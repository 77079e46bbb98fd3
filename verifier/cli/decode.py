"""`hero decode`: detect and decode a text for the requested levels, as JSON.

With HERO_URL (or --url) set, the text goes to that running service's POST /v1/verify with the bearer token
in HERO_TOKEN: no tokenizer or key loading per call, and the service audits the disclosure under the token's
identity. Otherwise it decodes locally with the key store of this machine (audited as the OS user)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from verifier.cli.common import add_profile_arg, cli_actor, cli_settings, emit, open_store, resolve_profile

SERVICE_TIMEOUT_S = 120.0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("decode", help="decode the payload of a text (via HERO_URL's service when set)")
    p.add_argument("--levels", default="1", help="levels to decode: '1' or '1,2' (must start at 1)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text")
    src.add_argument("--file", help="file holding the text: the whole file is one text, blank lines included "
                                    "('-' = stdin)")
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
    text = read_text(args)
    if not text.strip():
        raise ValueError("text is empty")
    url = service_url(args)
    if url is not None:
        if args.alpha is not None:
            raise ValueError("--alpha applies to a local decode; the service uses its HERO_ALPHA (or pass --local)")
        if args.model_aware or args.top_k is not None or args.top_p is not None or args.statistic is not None:
            raise ValueError("--model-aware applies to a local decode; the service scores as its HERO_MODEL_AWARE "
                             "says (or pass --local)")
        token = os.environ.get("HERO_TOKEN", "").strip()
        if not token:
            raise ValueError("HERO_URL is set but HERO_TOKEN is empty: export a bearer token (or pass --local)")
        emit(decode_remote(url, token, text, max_level, expect=_expect(args) or None))
        return
    decode_local(args, text, max_level)


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


def decode_local(args: argparse.Namespace, text: str, level: int) -> None:
    """Through the one decode path (verifier.verify.runner), as POST /v1/verify: the same verdicts (missing and
    unavailable levels included), the same shaping and result schema (no receipt: the event is in the local
    audit log); audited as the OS user before anything is printed."""
    from verifier.audit.service import record, text_digest
    from verifier.auth.policy import OPERATOR
    from verifier.lm import TokenizerCache
    from verifier.verify.release import audit_events, check_texts
    from verifier.verify.runner import DecodeJob, Runner
    from verifier.verify.schemas import ResultOut
    from verifier.verify.service import expected_levels

    settings = cli_settings(args)
    profile = resolve_profile(args.profile)
    if level > profile.depth:
        raise ValueError(f"profile {profile.name!r} has only {profile.depth} levels")
    check_texts([text], 1, settings.max_text_chars)  # the service's limit (HERO_MAX_TEXT_CHARS), here too
    grant = OPERATOR.grant(profile, level)
    asked = expected_levels(profile, _expect(args), grant.level)
    alpha = settings.alpha if args.alpha is None else args.alpha
    store = open_store(settings)
    scorer = None
    if (args.top_k is not None or args.top_p is not None or args.statistic is not None) and not args.model_aware:
        raise ValueError("--top-k/--top-p/--statistic apply to --model-aware scoring")
    if args.model_aware:
        from verifier.verify.scoring import deployment_sampling, model_aware_scorer

        sampling = deployment_sampling(settings.model_copy(update={
            k: v for k, v in (("model_aware_top_k", args.top_k), ("model_aware_top_p", args.top_p)) if v is not None}))
        scorer = model_aware_scorer(True, "auto", sampling, args.statistic or settings.model_aware_statistic,
                                    settings.model_aware_edit_floors)
    runner = Runner(store, TokenizerCache(), settings.alpha, scorer=scorer)
    try:
        (out,) = runner.decode(DecodeJob(profile, (text,), grant.level, alpha, expect=asked))
        # A disclosure like any other: audited (and committed) before anything is printed, or nothing is.
        record(store.db, audit_events(cli_actor(), [text_digest(text)], [out], action="decode"))
    finally:
        runner.close()
        store.db.dispose()
    emit(ResultOut.model_validate(out).model_dump(mode="json", by_alias=True))  # the API's result schema
