"""Service commands: `hero serve`, `hero token`, `hero db upgrade`, `hero audit verify`, `hero kek rotate`."""

from __future__ import annotations

import argparse
import sys

from verifier.cli.common import cli_settings, emit, open_database, open_store


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="start the verification API (uvicorn)")
    serve.add_argument("--host", default=None, help="bind address (default HERO_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default HERO_PORT or 8000)")
    serve.set_defaults(handler=cmd_serve)

    tok = sub.add_parser("token", help="mint a dev JWT (only with HERO_DEV_MODE=1); prints only the token")
    tok.add_argument("--role", required=True)
    tok.add_argument("--sub", required=True)
    tok.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    tok.set_defaults(handler=cmd_token)

    db = sub.add_parser("db", help="service database")
    dbs = db.add_subparsers(dest="db_command", required=True)
    up = dbs.add_parser("upgrade", help="apply Alembic migrations (alembic upgrade head)")
    up.set_defaults(handler=cmd_db_upgrade)

    audit = sub.add_parser("audit", help="audit log")
    aus = audit.add_subparsers(dest="audit_command", required=True)
    ver = aus.add_parser("verify", help="check the hash chain; exit 1 and report the first broken index")
    ver.set_defaults(handler=cmd_audit_verify)

    kek = sub.add_parser("kek", help="key-encryption keys (wrap the per-row data keys)")
    ks = kek.add_subparsers(dest="kek_command", required=True)
    rot = ks.add_parser("rotate", help="new KEK and re-wrap every row (watermark keys do not change)")
    rot.add_argument("--retire-old", action="store_true", help="delete the old local KEK files afterwards")
    rot.set_defaults(handler=cmd_kek_rotate)


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from verifier.app import create_app
    from verifier.logs import configure_logging

    settings = cli_settings(args)
    configure_logging(settings.log_level)
    app = create_app(settings)
    ctx = app.state.ctx
    ctx.tokenizers(ctx.profile.tokenizer)  # load now, not on the first request
    uvicorn.run(
        app,
        host=args.host or settings.host,
        port=args.port or settings.port,
        log_config=None,
        access_log=False,
        proxy_headers=False,
    )


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
    from verifier.db import upgrade

    upgrade(cli_settings(args).db_url)
    emit({"database": "upgraded", "revision": "head"})


def cmd_audit_verify(args: argparse.Namespace) -> int:
    from verifier.audit.service import verify_chain

    report = verify_chain(open_database(cli_settings(args)))
    emit(report.to_dict())
    return 0 if report.valid else 1


def cmd_kek_rotate(args: argparse.Namespace) -> None:
    store = open_store(cli_settings(args))
    kek = store.kek
    old = kek.ids()
    new_id = kek.rotate()
    n = store.rewrap_all()
    retired = []
    if args.retire_old:
        for kid in old:
            kek.retire(kid)
            retired.append(kid)
    emit({"kek_id": new_id, "rewrapped": n, "retired": retired})
