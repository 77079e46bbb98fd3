"""`hero providers add|list|revoke`: the provider registry (public keys only). Audited as the OS user, role `cli`."""

from __future__ import annotations

import argparse

from verifier.cli.common import cli_settings, emit, open_database
from verifier.offline import os_actor


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("providers", help="register / list / revoke generation providers (sealed key bundles)")
    ps = p.add_subparsers(dest="providers_command", required=True)
    add = ps.add_parser("add", help="register a provider and its public key (X25519 or ML-KEM-768 + X25519)")
    add.add_argument("--id", required=True, dest="provider_id", help="provider id (the sub of its tokens)")
    add.add_argument("--public-key", required=True, help="base64 of the raw public key (32 bytes for x25519)")
    add.add_argument("--key-type", default="x25519", choices=["x25519", "mlkem768-x25519"],
                     help="the HPKE KEM bundles are sealed with (hero-bundle-3)")
    add.add_argument("--issuer", default=None,
                     help="the issuer of the provider's tokens (default: the one issuer the service trusts; "
                          "required when it trusts several)")
    add.add_argument("--expires-at", default=None, help="ISO-8601 time after which bundle requests are refused")
    add.set_defaults(handler=cmd_add)
    ls = ps.add_parser("list", help="list providers (public keys and status)")
    ls.set_defaults(handler=cmd_list)
    rev = ps.add_parser("revoke", help="refuse the provider's bundle requests from now on")
    rev.add_argument("--id", required=True, dest="provider_id", help="the provider to revoke")
    rev.set_defaults(handler=cmd_revoke)


def cmd_add(args: argparse.Namespace) -> None:
    from datetime import datetime

    from verifier.registry.service import provider_meta, register, trusted_issuers

    expires = None
    if args.expires_at:
        try:
            expires = datetime.fromisoformat(args.expires_at.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError("--expires-at must be an ISO-8601 time") from None
    settings = cli_settings(args)
    row = register(open_database(settings), args.provider_id, args.public_key, os_actor(), expires, args.key_type,
                   issuer=args.issuer, trusted=trusted_issuers(settings))
    emit(provider_meta(row))


def cmd_list(args: argparse.Namespace) -> None:
    from verifier.registry.service import list_providers, provider_meta

    emit({"providers": [provider_meta(r) for r in list_providers(open_database(cli_settings(args)))]})


def cmd_revoke(args: argparse.Namespace) -> None:
    from verifier.registry.service import provider_meta, revoke

    emit(provider_meta(revoke(open_database(cli_settings(args)), args.provider_id, os_actor())))
