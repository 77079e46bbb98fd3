"""`hero keys ...`: create keys and list versions (metadata only, never key material). Every change is
audited (subject = the OS user, role `cli`) in the transaction that makes it."""

from __future__ import annotations

import argparse

from verifier.cli.common import (
    add_profile_arg,
    cli_settings,
    command_profile,
    emit,
    open_store,
    resolve_profile,
)
from verifier.offline import os_actor


def register(sub: argparse._SubParsersAction) -> None:
    keys = sub.add_parser("keys", help="manage per-level watermark keys")
    ks = keys.add_subparsers(dest="keys_command", required=True)
    init = ks.add_parser("init", help="create keys for every level of a profile")
    add_profile_arg(init)
    init.add_argument("--models", default=None, metavar="ID[,ID...]",
                      help="the model ids this deployment issues (e.g. 37,41): keys are made for the deployment's "
                           "own copy of the profile (NAME-deployment under $HERO_HOME/profiles) that searches and "
                           "generates those ids only; more later with `hero profile issue`")
    init.set_defaults(handler=cmd_init)
    ls = ks.add_parser("list", help="list key versions and their status")
    add_profile_arg(ls)
    ls.set_defaults(handler=cmd_list)
    rot = ks.add_parser("rotate", help="new active version for a level; the old one becomes verify-only")
    add_profile_arg(rot)
    rot.add_argument("--level", type=int, required=True, help="the level to rotate (1: the public level)")
    rot.set_defaults(handler=cmd_rotate)
    dis = ks.add_parser("disable", help="stop decoding with a (non-active) version")
    add_profile_arg(dis)
    dis.add_argument("--level", type=int, required=True, help="the level of the version")
    dis.add_argument("--version", required=True, help="e.g. l1-v1")
    dis.set_defaults(handler=cmd_disable)
    ena = ks.add_parser("enable", help="decode with a disabled version again (it becomes verify-only)")
    add_profile_arg(ena)
    ena.add_argument("--level", type=int, required=True, help="the level of the version")
    ena.add_argument("--version", required=True, help="e.g. l1-v1")
    ena.set_defaults(handler=cmd_enable)
    des = ks.add_parser("destroy", help="irreversibly erase a (non-active) version's key material")
    add_profile_arg(des)
    des.add_argument("--level", type=int, required=True, help="the level of the version")
    des.add_argument("--version", required=True, help="e.g. l1-v1")
    des.add_argument("--confirm", required=True, help="repeat the version id to confirm")
    des.set_defaults(handler=cmd_destroy)
    mov = ks.add_parser(
        "move-profile",
        help="relabel a profile's keys (upgrade to spec v2: --from default --to v1, then 'keys init --profile "
             "default')",
    )
    mov.add_argument("--from", dest="source", required=True, help="profile name the keys are stored under")
    mov.add_argument("--to", dest="target", required=True, help="profile (name or YAML path) they belong to now")
    mov.add_argument("--confirm", required=True, help="repeat the source profile name to confirm")
    mov.set_defaults(handler=cmd_move_profile)


def cmd_init(args: argparse.Namespace) -> None:
    """Keys for the deployment's profile. Keys for a second profile beside existing ones only when --profile
    names it: two profiles in one deployment decode the same text differently, so that is never a default."""
    import sys

    from verifier.keys.deployment import choose_profile, recorded_profile, stored_profiles

    settings = cli_settings(args)
    store = open_store(settings)
    stored = stored_profiles(store.db)
    name = args.profile or choose_profile(settings.profile, stored, recorded_profile(store.db))
    others = [p for p in stored if p != resolve_profile(name).name]
    if others and not args.profile and resolve_profile(name).name not in stored:
        raise ValueError(
            f"this deployment already has keys for profile {', '.join(repr(p) for p in others)}; keys for {name!r} "
            f"(HERO_PROFILE) would be a second profile beside them. Unset HERO_PROFILE to use the existing keys, "
            f"or pass --profile {name} to create the second profile anyway"
        )
    from verifier.cli.profile import issued_copy, pin_tokenizer

    if args.models is not None:
        base = resolve_profile(name)
        from verifier.keys.issued import own_copy_name

        own = own_copy_name(base.name)
        name = issued_copy(base, own, _model_ids(args.models))[0].name
        others = [p for p in stored if p != name]
        if others and not args.profile:
            raise ValueError(f"this deployment already has keys for profile {', '.join(repr(p) for p in others)}; "
                             f"pass --profile to make keys for a second profile beside them")
    profile = pin_tokenizer(name, resolve_profile(name))  # checked here; the key store records its fingerprint
    versions = store.initialize(profile, os_actor())
    if others:
        print(f"hero: note: this deployment now has keys for profiles {', '.join([*others, profile.name])}; "
              f"a command uses HERO_PROFILE or --profile to choose", file=sys.stderr)
    emit({"profile": profile.name, "versions": [v.to_dict() for v in versions]})




def _model_ids(text: str) -> list[int]:
    """`--models 37,41` -> [37, 41], one clear line for anything else."""
    try:
        ids = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ValueError(f"--models takes comma-separated model ids (e.g. 37,41), not {text!r}") from None
    if not ids:
        raise ValueError("--models needs at least one model id")
    return ids


def cmd_list(args: argparse.Namespace) -> None:
    """The versions of one profile, with the profile the deployment serves and every profile it has keys for."""
    from verifier.keys.deployment import choose_profile, recorded_profile, stored_profiles

    settings = cli_settings(args)
    store = open_store(settings)
    stored = stored_profiles(store.db)
    served = choose_profile(settings.profile, stored, recorded_profile(store.db))
    profile = resolve_profile(args.profile or served)
    emit({"profile": profile.name, "deployment_profile": served, "profiles": stored,
          "versions": [v.to_dict() for v in store.versions(profile)]})


def cmd_rotate(args: argparse.Namespace) -> None:
    store = open_store(cli_settings(args))
    profile = command_profile(args, store)
    v = store.rotate(profile, args.level, os_actor())
    emit({"profile": profile.name, "version": v.to_dict()})


def cmd_disable(args: argparse.Namespace) -> None:
    from verifier.keys.service import version_meta

    store = open_store(cli_settings(args))
    profile = command_profile(args, store)
    row = store.disable(profile, args.level, args.version, os_actor())
    emit({"profile": profile.name, "version": version_meta(row)})


def cmd_enable(args: argparse.Namespace) -> None:
    from verifier.keys.service import version_meta

    store = open_store(cli_settings(args))
    profile = command_profile(args, store)
    row = store.enable(profile, args.level, args.version, os_actor())
    emit({"profile": profile.name, "version": version_meta(row)})


def cmd_destroy(args: argparse.Namespace) -> None:
    from verifier.keys.service import version_meta

    store = open_store(cli_settings(args))
    profile = command_profile(args, store)
    row = store.destroy(profile, args.level, args.version, confirm=args.confirm, actor=os_actor())
    emit({"profile": profile.name, "version": version_meta(row)})


def cmd_move_profile(args: argparse.Namespace) -> None:
    if args.confirm != args.source:
        raise ValueError(f"--confirm must repeat the source profile name ({args.source!r})")
    target = resolve_profile(args.target)
    rows = open_store(cli_settings(args)).move_profile(args.source, target, os_actor())
    emit({"from": args.source, "profile": target.name, "moved": [r.version for r in rows]})
