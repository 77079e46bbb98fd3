"""`hero profile new` / `hero profile issue`: a deployment's own profiles under HERO_PROFILES_DIR (its tokenizer by
hub id or local path; spec v4's issued model ids).

The profile file records the tokenizer's fingerprint and vocabulary size, and a local tokenizer directory relative
to the profiles folder (`./tok` or `../tokenizers/own`: the folder can move, e.g. into a ConfigMap mount). The key
store records the fingerprint again whenever keys are made, by any command (verifier.keys.service: key-time
pinning), so a hand-written profile without one is pinned too, and a profile file edited later cannot swap the
tokenizer under existing keys. A tokenizer whose fingerprint differs from either record is refused in one line.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from verifier.cli.common import emit
from verifier.keys.issued import (  # noqa: F401  (re-exported: the CLI's names)
    issued_copy,
    issued_level,
    issued_of,
    relative_tokenizer,
    write_profile,
)

if TYPE_CHECKING:
    from verifier.engine.profile import Profile

_NEW_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="a deployment's own profiles (HERO_PROFILES_DIR)")
    ps = p.add_subparsers(dest="profile_command", required=True)
    new = ps.add_parser("new", help="write HERO_PROFILES_DIR/NAME.yaml: a profile on another tokenizer, or a spec v4 "
                                    "profile with this deployment's issued model ids")
    new.add_argument("name", help="the new profile's name (lowercase letters, digits, _ and -)")
    new.add_argument("--from", dest="source", required=True, help="the profile (name or YAML path) to copy")
    new.add_argument("--tokenizer", default=None,
                     help="a built-in model name, a Hugging Face hub id (from the local cache) or a local directory "
                          "(default: the copied profile's)")
    new.add_argument("--revision", default=None, help="pin a hub revision (branch, tag or commit)")
    new.add_argument("--issued", nargs="+", type=int, default=None, metavar="VALUE",
                     help="spec v4: the values this deployment has issued at the level of --field (they replace the "
                          "copied list; the decoder searches only these)")
    new.add_argument("--field", default="model", help="the field whose level --issued lists")
    new.set_defaults(handler=cmd_new)
    issue = ps.add_parser("issue", help="append newly issued values (e.g. a new model id) to a spec v4 profile of "
                                        "this deployment; the list only grows")
    issue.add_argument("name", help="a profile under HERO_PROFILES_DIR")
    issue.add_argument("values", nargs="+", type=int, metavar="VALUE", help="the values to issue (e.g. model ids)")
    issue.add_argument("--field", default="model", help="the field whose level lists the values")
    issue.set_defaults(handler=cmd_issue)
    use = ps.add_parser("use", help="serve profile NAME from now on (one step): keys for it when it has none, and the "
                                    "choice recorded with the keys; texts made under earlier profiles keep decoding")
    use.add_argument("name", help="a profile name (shipped, or under the deployment's profiles folder)")
    use.set_defaults(handler=cmd_use)


def model_vocab_size(tokenizer_name: str, revision: str | None, tokenizer_size: int) -> int:
    """The logits width: the tokenizer's size, or the model's config.json vocab_size when that is larger
    (models pad their embedding, e.g. Qwen 151,936 over 151,665 tokens)."""
    from verifier.lm import tokenizer_dir

    folder = tokenizer_dir(tokenizer_name, revision)
    config = folder / "config.json" if folder is not None else None
    if config is not None and config.is_file():
        try:
            declared = json.loads(config.read_text()).get("vocab_size")
        except (OSError, ValueError):
            declared = None
        if isinstance(declared, int) and not isinstance(declared, bool):
            return max(declared, tokenizer_size)
    return tokenizer_size


def cmd_new(args: argparse.Namespace) -> None:

    from verifier.engine.profile import PROFILES_DIR, deployment_profiles_dir, resolve_profile
    from verifier.lm import load_tokenizer, tokenizer_fingerprint, tokenizer_vocab_size

    folder = deployment_profiles_dir()
    if not _NEW_NAME_RE.match(args.name):
        raise ValueError(f"profile name {args.name!r} must match {_NEW_NAME_RE.pattern}")
    if (PROFILES_DIR / f"{args.name}.yaml").exists():
        raise ValueError(f"{args.name!r} is a shipped profile's name; choose another")
    target = folder / f"{args.name}.yaml"
    if target.exists():
        raise ValueError(f"{target} exists; remove it first or choose another name")
    base = resolve_profile(args.source)
    data = base.to_dict()
    data["name"] = args.name
    if base.tokenizer_written is not None:  # relative to the source's folder: to the copy's from now on
        data["tokenizer"] = relative_tokenizer(Path(base.tokenizer), folder)
    if args.tokenizer is None and args.issued is None:
        raise ValueError("give --tokenizer (a profile on another tokenizer) or --issued (spec v4's issued values)")
    if args.tokenizer is not None:
        size = tokenizer_vocab_size(load_tokenizer(args.tokenizer, args.revision))
        if size is None:
            raise ValueError(f"tokenizer {args.tokenizer!r} does not report its vocabulary size")
        path = Path(args.tokenizer).expanduser()
        data.update(tokenizer=relative_tokenizer(path, folder) if path.is_dir() else args.tokenizer,
                    vocab_size=model_vocab_size(args.tokenizer, args.revision, size),
                    tokenizer_fingerprint=tokenizer_fingerprint(args.tokenizer, args.revision))
        data.pop("revision", None)
        if args.revision:
            data["revision"] = args.revision
    elif args.revision:
        raise ValueError("--revision pins the tokenizer given with --tokenizer")
    if args.issued is not None:
        issued_level(data, args.field)["issued"] = sorted(set(args.issued))
    profile = write_profile(target, data)
    emit({"profile": profile.name, "path": str(target), "tokenizer": profile.tokenizer,
          "revision": profile.tokenizer_revision, "vocab_size": profile.vocab_size,
          "tokenizer_fingerprint": profile.tokenizer_fingerprint, "issued": issued_of(profile)})


def cmd_issue(args: argparse.Namespace) -> None:
    """Issue new values at a deployment's spec v4+ level (verifier/keys/issued.py: the list only grows), audited
    (`keys.issue`) like POST /v1/keys/issued."""
    from verifier.cli.common import cli_settings, open_store
    from verifier.keys.issued import issue_detail, issue_values
    from verifier.offline import os_actor

    store = open_store(cli_settings(args))  # first: no file written without the database its audit record goes to
    done = issue_values(args.name, args.values, args.field)
    store.record_issue(done.profile.name, issue_detail(done), os_actor())
    emit(done.to_dict())


def cmd_use(args: argparse.Namespace) -> None:
    """`hero profile use NAME`: the one step that moves a deployment to another profile: keys for NAME when it has
    none, and NAME recorded as the served profile in the key store's database (every process reads it; HERO_PROFILE
    still overrides). Keys of the profiles served before stay, so their texts keep decoding (each result names the
    profile that matched)."""
    import sys

    from verifier.cli.common import cli_settings, open_store, resolve_profile
    from verifier.offline import os_actor

    settings = cli_settings(args)
    store = open_store(settings)
    profile = pin_tokenizer(args.name, resolve_profile(args.name))
    rows, before = store.use_profile(profile, os_actor())
    from verifier.keys.deployment import stored_profiles

    if settings.profile and settings.profile != profile.name:
        print(f"hero: note: HERO_PROFILE={settings.profile} overrides the recorded profile in this environment; "
              "unset it to serve the recorded one", file=sys.stderr)
    emit({"profile": profile.name, "before": before, "profiles": stored_profiles(store.db),
          "created": [r.version for r in rows]})


def pin_tokenizer(name: str, profile: Profile) -> Profile:
    """At `hero keys init`: a profile on a tokenizer by hub id or path must match the fingerprint its file records
    (when it records one) and fit its vocabulary. The profile file is never written (it may be a read-only
    ConfigMap): the key store records the tokenizer's fingerprint beside the keys it makes. Built-in tokenizers
    are pinned by their package version."""
    from verifier.lm import check_profile_tokenizer, is_builtin, load_tokenizer

    if not is_builtin(profile.tokenizer):
        check_profile_tokenizer(profile, load_tokenizer(profile.tokenizer, profile.tokenizer_revision))
    return profile
