"""Service commands: `hero serve`, `hero token`, `hero db upgrade`, `hero audit verify`, `hero kek rotate`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from verifier.cli.common import cli_settings, emit, open_database, open_store
from verifier.offline import os_actor

log = logging.getLogger("hero.serve")


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="start the verification API (uvicorn)")
    serve.add_argument("--host", default=None, help="bind address (default HERO_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default HERO_PORT or 8000)")
    serve.add_argument("--workers", type=_workers_arg, default="auto",
                       help="worker processes, or auto: one per core (at most 8) when quotas cannot be "
                       "multiplied (no role has limits, or they are shared: HERO_RATE_LIMIT_URL / a Redis broker) "
                       "and the database is shared; else 1, with a warning (docs/operations.md)")
    serve.set_defaults(handler=cmd_serve)

    tok = sub.add_parser("token", help="mint a dev JWT (only with HERO_DEV_MODE=1); prints only the token")
    tok.add_argument("--role", required=True, help="the token's role, one of the role policy's (e.g. moderator)")
    tok.add_argument("--sub", required=True, help="the token's subject: who the caller is")
    tok.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds")
    tok.set_defaults(handler=cmd_token)

    db = sub.add_parser("db", help="service database")
    dbs = db.add_subparsers(dest="db_command", required=True)
    up = dbs.add_parser("upgrade", help="apply Alembic migrations (alembic upgrade head)")
    up.set_defaults(handler=cmd_db_upgrade)
    wait = dbs.add_parser("wait", help="wait until the database is at this version's migration head (a pod's init "
                                       "container: the new image's pods wait for the migration Job)")
    wait.add_argument("--timeout", type=float, default=600.0, help="seconds to wait before exit 1")
    wait.add_argument("--interval", type=float, default=2.0, help="seconds between checks")
    wait.set_defaults(handler=cmd_db_wait)

    audit = sub.add_parser("audit", help="audit log")
    aus = audit.add_subparsers(dest="audit_command", required=True)
    ver = aus.add_parser(
        "verify", help="check the chain, the Merkle tree and signed checkpoints; exit 1 naming the first problem"
    )
    ver.add_argument("--against", metavar="FILE",
                     help="a checkpoint published earlier (signed note): detect truncation, rewrites and forks")
    ver.set_defaults(handler=cmd_audit_verify)
    cp = aus.add_parser("checkpoint", help="print the newest signed checkpoint (signing one if events were added)")
    cp.set_defaults(handler=cmd_audit_checkpoint)
    pk = aus.add_parser("public-key", help="print the log's verifier key (pin it to check receipts offline)")
    pk.set_defaults(handler=cmd_audit_public_key)

    kek = sub.add_parser("kek", help="key-encryption keys (wrap the per-row data keys)")
    ks = kek.add_subparsers(dest="kek_command", required=True)
    kinit = ks.add_parser("init", help="make the local KEK and the log signing key where missing (never replaces)")
    kinit.set_defaults(handler=cmd_kek_init)
    rot = ks.add_parser("rotate", help="new KEK and re-wrap every row (watermark keys do not change)")
    rot.add_argument("--retire-old", action="store_true",
                     help="delete the old local KEK files afterwards (refused while any data key still uses one)")
    rot.set_defaults(handler=cmd_kek_rotate)


MAX_AUTO_WORKERS = 8


def _workers_arg(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError("--workers takes a positive number or 'auto'") from None
    if n < 1:
        raise argparse.ArgumentTypeError("--workers takes a positive number or 'auto'")
    return n


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_workers(requested: int | str, settings, cores: int | None = None) -> tuple[int, str | None]:
    """(worker processes, warning or None). Why not always one per core: quota counters in process memory
    count per process, so N workers would let each subject through N times its configured quota; and an
    in-memory SQLite database is private to one process."""
    from sqlalchemy.engine import make_url

    from verifier.auth.policy import load_policy
    from verifier.base.ratelimit import shared_counter_url

    quotas = any(r.limits is not None and r.limits.buckets(r.name, "-")
                 for r in load_policy(settings.roles_file).roles.values())
    per_process = quotas and shared_counter_url(settings) is None
    url = make_url(settings.db_url)
    private_db = url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")
    if requested != "auto":
        n = int(requested)
        if n > 1 and per_process:
            return n, (f"{n} workers with quotas counted in process memory: each subject may get up to {n}x "
                       "its configured quota (set HERO_RATE_LIMIT_URL to share the counters in Redis)")
        return n, None
    if private_db:
        return 1, None
    if per_process:
        return 1, ("--workers auto: 1 worker, because quotas are configured and counted in process memory; "
                   "set HERO_RATE_LIMIT_URL (Redis) to serve with one worker per core")
    return max(1, min(MAX_AUTO_WORKERS, cores or _cores())), None


def cmd_serve(args: argparse.Namespace) -> None:
    from verifier.base.logs import configure_logging
    from verifier.cli.loopback import reserve_loopback_twin

    settings = cli_settings(args)
    configure_logging(settings.log_level)
    from verifier.keys.bootstrap import require_secrets

    require_secrets(settings)  # outside dev mode: one line naming `hero kek init`, never minted secrets
    host, port = args.host or settings.host, args.port or settings.port
    twin = reserve_loopback_twin(host, port)  # held while serving: [::1]:port beside 127.0.0.1:port
    workers, warning = resolve_workers(args.workers, settings)
    if warning:
        log.warning(warning)
    log.info(f"serving with {workers} worker process{'es' if workers > 1 else ''}", extra={"workers": workers})
    if workers > 1:  # each worker builds its own app from the environment (uvicorn factory)
        from verifier.cli.serve_workers import compute_in_calling_threads

        compute_in_calling_threads()  # the processes are the parallelism: no thread pools in each
        from verifier.base.metrics import prepare_multiprocess

        prepare_multiprocess(settings.home)  # one /metrics view: every worker's samples, summed
        target, factory = "verifier.api.app:app_from_env", True
    else:
        from verifier.api.app import create_app, freeze_startup_heap

        target, factory = create_app(settings), False
        ctx = target.state.ctx
        ctx.tokenizers.for_profile(ctx.profile)  # load now, not on the first request
        freeze_startup_heap()
    if settings.metrics_port:  # a separate bind (e.g. only reachable from the monitoring network)
        from prometheus_client import start_http_server

        from verifier.base.db import Database
        from verifier.jobs.observe import api_public_registry

        # no token on this bind: the public view (no verdict or disclosure counts), plus the job-queue and log
        # gauges read from the database at each scrape (one small pool of this process's own)
        gauges_db = Database(settings.db_url, settings.sqlite_synchronous, pool_size=1, max_overflow=1,
                             pgbouncer=settings.db_pgbouncer)
        start_http_server(settings.metrics_port, addr=settings.metrics_host,
                          registry=api_public_registry(gauges_db))  # type: ignore[arg-type]
    from verifier.cli.serve_workers import run_workers  # several workers: connections dealt out in turn

    try:
        run_workers(target, workers=workers, host=host, port=port,
                    factory=factory, log_config=None, access_log=False, proxy_headers=False, **_fast_server())
    finally:
        if twin is not None:
            twin.close()


def _fast_server() -> dict:
    """uvloop + httptools when importable (measured faster, docs/performance.md), else uvicorn's pure-Python ones."""
    import importlib.util

    out = {}
    if importlib.util.find_spec("uvloop") is not None:
        out["loop"] = "uvloop"
    if importlib.util.find_spec("httptools") is not None:
        out["http"] = "httptools"
    return out


def cmd_token(args: argparse.Namespace) -> None:
    from verifier.auth.devkeys import mint_token
    from verifier.auth.policy import load_policy

    settings = cli_settings(args)
    if not settings.dev_mode:
        raise RuntimeError("hero token only works in dev mode (HERO_DEV_MODE=1)")
    if load_policy(settings.roles_file).role(args.role) is None:
        raise ValueError(f"role {args.role!r} is not in {settings.roles_file}")
    sys.stdout.write(mint_token(settings, args.role, args.sub, args.ttl) + "\n")


def cmd_db_upgrade(args: argparse.Namespace) -> None:
    from verifier.base.db import upgrade

    upgrade(cli_settings(args).db_url)
    emit({"database": "upgraded", "revision": "head"})


def cmd_db_wait(args: argparse.Namespace) -> int:
    """Poll the schema revision (never migrate: that is `hero db upgrade`'s, once per image) until it is this
    version's head; an unreachable database counts as not yet. Exit 1 with the last reason past --timeout."""
    import time

    from verifier.base.db import Database, SchemaNotCurrent, check_schema
    from verifier.base.logs import configure_logging

    settings = cli_settings(args)
    configure_logging(settings.log_level)
    db = Database(settings.db_url, settings.sqlite_synchronous, pool_size=1, max_overflow=0,
                  pgbouncer=settings.db_pgbouncer)
    deadline = time.monotonic() + args.timeout
    reason, said = "", ""
    try:
        while True:
            try:
                check_schema(db)
                emit({"database": "at head"})
                return 0
            except SchemaNotCurrent as exc:
                reason = str(exc)
            except Exception as exc:  # not reachable yet (DNS, refused, starting): keep waiting
                reason = f"the database is not reachable ({exc.__class__.__name__})"
            if reason != said:  # one log line per change of state, not per poll
                log.info(f"waiting for the migrations: {reason}")
                said = reason
            if time.monotonic() >= deadline:
                print(f"hero: error: gave up after {args.timeout:g} s: {reason}", file=sys.stderr)
                return 1
            time.sleep(args.interval)
    finally:
        db.dispose()


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from verifier.audit.signer import signer_from_settings
    from verifier.audit.verification import verify_against, verify_chain

    settings = cli_settings(args)
    db = open_database(settings)
    vkey = signer_from_settings(settings).vkey
    if args.against:
        try:
            note = Path(args.against).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read checkpoint {args.against}: {exc.__class__.__name__}") from None
        report = verify_against(db, note, vkey, settings.log_origin)
    else:
        report = verify_chain(db, vkey)
    if not report.valid and args.against:
        print(f"hero: audit: {report.reason}", file=sys.stderr)  # one line naming the problem
        return 1
    emit(report.to_dict())
    return 0 if report.valid else 1


def cmd_audit_checkpoint(args: argparse.Namespace) -> None:
    from verifier.audit.merkle import current_checkpoint
    from verifier.audit.signer import signer_from_settings

    settings = cli_settings(args)
    db = open_database(settings)
    _, note = current_checkpoint(db, signer_from_settings(settings), settings.checkpoint_interval_seconds)
    sys.stdout.write(note)


def cmd_audit_public_key(args: argparse.Namespace) -> None:
    from verifier.audit.signer import signer_from_settings

    sys.stdout.write(signer_from_settings(cli_settings(args)).vkey + "\n")


def cmd_kek_init(args: argparse.Namespace) -> None:
    from verifier.keys.bootstrap import init_secrets

    emit(init_secrets(cli_settings(args)))


def cmd_kek_rotate(args: argparse.Namespace) -> None:
    from verifier.jobs.kek_rotation import rotate_kek

    # audited with the re-wrap, one transaction; an old KEK is retired only when nothing uses it any more
    emit(rotate_kek(open_store(cli_settings(args)), os_actor(), retire_old=args.retire_old))
