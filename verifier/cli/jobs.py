"""`hero jobs`: decode jobs on a running service (HERO_URL or --url; the bearer token in HERO_TOKEN).

`hero jobs submit FILE` posts the file's texts (one JSON string per line, or `-` for stdin) with an
Idempotency-Key and prints JSON {"job_id", "texts", "idempotency_key"}; `hero jobs status ID`; `hero jobs results
ID` follows the result pages (cursor) to the end and prints one result per line (NDJSON, each with its `index`),
so a 100,000-text job never sits in one document.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="decode jobs on a running service (HERO_URL, HERO_TOKEN): submit, status, results")
    js = p.add_subparsers(dest="jobs_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=None, help="the service's base URL (default: HERO_URL)")
    sb = js.add_parser("submit", parents=[common], help="queue a job: FILE holds one JSON string per line ('-': stdin)")
    sb.add_argument("file", help="the texts: one JSON string per line ('-': stdin)")
    sb.add_argument("--max-level", type=int, default=None, help="deepest level to decode (default: the role's)")
    sb.add_argument("--idempotency-key", default=None, help="default: a new UUID (retries reuse it)")
    sb.set_defaults(handler=cmd_submit)
    st = js.add_parser("status", parents=[common], help="a job's status and progress (no results)")
    st.add_argument("job_id", help="the id `hero jobs submit` printed")
    st.set_defaults(handler=cmd_status)
    rs = js.add_parser("results", parents=[common], help="a done job's results, page after page, as NDJSON")
    rs.add_argument("job_id", help="the id `hero jobs submit` printed")
    rs.add_argument("--page-size", type=int, default=1000, help="results per page (1-10000)")
    rs.add_argument("--receipts", metavar="FILE", default=None,
                    help="also write each page read's transparency-log receipt here (one JSON per line)")
    rs.set_defaults(handler=cmd_results)


def _client(args: argparse.Namespace):
    from verifier.client import HeroClient

    url = args.url or os.environ.get("HERO_URL")
    if not url:
        raise ValueError("give --url or set HERO_URL")
    token = os.environ.get("HERO_TOKEN", "")
    if not token:
        raise ValueError("set HERO_TOKEN (a bearer token whose role may verify)")
    return HeroClient(url.rstrip("/"), token)


def _api(call):
    from verifier.client import HeroAPIError

    try:
        return call()
    except HeroAPIError as exc:
        raise RuntimeError(f"service answered {exc}") from None


def cmd_submit(args: argparse.Namespace) -> None:
    raw = sys.stdin.read() if args.file == "-" else Path(args.file).read_text("utf-8")
    texts = [json.loads(line) for line in raw.splitlines() if line.strip()]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("every line must be one JSON string")
    key = args.idempotency_key or str(uuid.uuid4())  # printed: a retry with it makes no second job
    with _client(args) as hero:
        job_id = _api(lambda: hero.submit_job(texts, args.max_level, key))
    print(json.dumps({"job_id": job_id, "texts": len(texts), "idempotency_key": key}))


def cmd_status(args: argparse.Namespace) -> None:
    with _client(args) as hero:
        doc = _api(lambda: hero._request("GET", f"/v1/jobs/{args.job_id}", params={"results": "false"}).json())
    doc.pop("results", None)
    doc.pop("receipt", None)
    print(json.dumps(doc))


def cmd_results(args: argparse.Namespace) -> int:
    if not 1 <= args.page_size <= 10_000:
        raise ValueError("--page-size must be 1-10000")
    from verifier.client import HeroAPIError

    receipts = open(args.receipts, "w", encoding="utf-8") if args.receipts else None
    n = 0
    try:
        with _client(args) as hero:
            for page in hero.result_pages(args.job_id, limit=args.page_size):  # one page in memory at a time
                for r in page["results"]:
                    sys.stdout.write(json.dumps(r, separators=(",", ":")) + "\n")
                    n += 1
                if receipts is not None:
                    receipts.write(json.dumps(page.get("receipt")) + "\n")
    except HeroAPIError as exc:
        raise RuntimeError(f"service answered {exc} (after {n} results)") from None
    finally:
        if receipts is not None:
            receipts.close()
    print(f"hero: {n} results", file=sys.stderr)
    return 0
