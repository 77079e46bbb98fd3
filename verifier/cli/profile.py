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
    new.add_argument("--field", default="model", help="the field whose level --issued lists (default: model)")
    new.set_defaults(handler=cmd_new)
    issue = ps.add_parser("issue", help="append newly issued values (e.g. a new model id) to a spec v4 profile of "
                                        "this deployment; the list only grows")
    issue.add_argument("name", help="a profile under HERO_PROFILES_DIR")
    issue.add_argument("values", nargs="+", type=int, metavar="VALUE")
    issue.add_argument("--field", default="model", help="the field whose level lists the values (default: model)")
    issue.set_defaults(handler=cmd_issue)


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
        _issued_level(data, args.field)["issued"] = sorted(set(args.issued))
    profile = _write(target, data)
    emit({"profile": profile.name, "path": str(target), "tokenizer": profile.tokenizer,
          "revision": profile.tokenizer_revision, "vocab_size": profile.vocab_size,
          "tokenizer_fingerprint": profile.tokenizer_fingerprint, "issued": _issued_of(profile)})


def cmd_issue(args: argparse.Namespace) -> None:
    """Issue new values at a deployment's spec v4 level: keys and routing do not change (texts made earlier keep
    decoding; their p-values are corrected for the larger count, docs/spec.md 18.1), so appending is the one edit a
    profile in use allows. Removing a value is not offered: its texts would stop being named."""
    import yaml

    from verifier.engine.profile import deployment_profiles_dir, profile_path

    folder = deployment_profiles_dir()
    path = profile_path(args.name)
    if not path.resolve().is_relative_to(folder.resolve()) or not path.is_file():
        raise ValueError(f"{args.name!r} is not a profile under {folder} (the deployment's profiles: "
                         "HERO_PROFILES_DIR, else $HERO_HOME/profiles; shipped profiles are read-only; write one with "
                         "`hero keys init --models ...` or `hero profile new NAME --from v5 --issued ...`)")
    data = yaml.safe_load(path.read_text())
    level = _issued_level(data, args.field)
    if "issued" not in level:
        raise ValueError(f"profile {args.name!r}: the level of {args.field!r} lists no issued values (spec v4 only)")
    had = set(level["issued"])
    level["issued"] = sorted(had | set(args.values))
    profile = _write(path, data)
    emit({"profile": profile.name, "path": str(path), "field": args.field, "issued": _issued_of(profile, args.field),
          "added": sorted(set(args.values) - had), "already_issued": sorted(set(args.values) & had)})


def issued_copy(base: Profile, name: str, values: list[int], field: str = "model") -> tuple[Profile, Path]:
    """Write the deployment's own copy of `base` named `name` whose `field` level issues `values` (spec v4+):
    `hero keys init --models`. An existing copy is kept when it issues at least these values (re-running init is
    harmless); one that lacks some is refused (issue them with `hero profile issue`)."""
    from verifier.engine.profile import deployment_profiles_dir, profile_from_dict

    if base.spec_version < 4:
        raise ValueError(f"profile {base.name!r} is spec v{base.spec_version}: issued model ids need spec v4 or v5")
    target = deployment_profiles_dir() / f"{name}.yaml"
    data = base.to_dict()
    data["name"] = name
    if base.tokenizer_written is not None:  # relative to the source's folder: to the copy's from now on
        data["tokenizer"] = relative_tokenizer(Path(base.tokenizer), target.parent)
    _issued_level(data, field)["issued"] = sorted(set(values))
    if target.exists():
        from verifier.engine.profile import load_profile

        have = load_profile(target)
        missing = sorted(set(values) - set(_issued_of(have, field) or []))
        if missing:
            raise ValueError(f"{target} exists without {field} {missing}: issue them with `hero profile issue {name} "
                             f"{' '.join(map(str, missing))}`")
        return have, target
    profile_from_dict(data)  # every rule checked before anything is written
    return _write(target, data), target


def _issued_level(data: dict, field: str) -> dict:
    for level in data.get("levels", []):
        if any(f.get("name") == field for f in level.get("fields", [])):
            return level
    raise ValueError(f"the profile has no field {field!r}")


def _issued_of(profile: Profile, field: str = "model") -> list[int] | None:
    for level in profile.levels:
        if any(f.name == field for f in level.fields):
            return list(level.issued) if level.issued is not None else None
    return None


def _write(target: Path, data: dict) -> Profile:
    """Check every profile rule (a chunk schedule that fits the vocabulary, issued values in range, spec v4 for a
    list), then replace the file atomically."""
    import yaml

    from verifier.engine.profile import profile_from_dict

    profile = profile_from_dict(data)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(yaml.safe_dump(profile.to_dict(), sort_keys=False))
    tmp.replace(target)
    return profile


def relative_tokenizer(path: Path, folder: Path) -> str:
    """A local tokenizer directory as a profile in `folder` writes it: relative to the folder, `./` or `../` first
    (what marks a path rather than a hub id; verifier.engine.profile.load_profile resolves it)."""
    import os

    rel = Path(os.path.relpath(path.resolve(), folder.resolve())).as_posix()
    return rel if rel.startswith("../") else f"./{rel}"


def pin_tokenizer(name: str, profile: Profile) -> Profile:
    """At `hero keys init`: a profile on a tokenizer by hub id or path must match the fingerprint its file records
    (when it records one) and fit its vocabulary. The profile file is never written (it may be a read-only
    ConfigMap): the key store records the tokenizer's fingerprint beside the keys it makes. Built-in tokenizers
    are pinned by their package version."""
    from verifier.lm import check_profile_tokenizer, is_builtin, load_tokenizer

    if not is_builtin(profile.tokenizer):
        check_profile_tokenizer(profile, load_tokenizer(profile.tokenizer, profile.tokenizer_revision))
    return profile
