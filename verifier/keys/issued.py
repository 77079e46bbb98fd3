"""A deployment's issued values (spec v4+: e.g. its model ids), kept in its own profile file under the profiles
folder (HERO_PROFILES_DIR, else $HERO_HOME/profiles): `hero keys init --models` writes the copy
(`issued_copy`), `hero profile issue` and POST /v1/keys/issued append (`issue_values`). The list only grows:
keys and routing do not change when a value is issued (texts made earlier keep decoding; their p-values are
corrected for the larger count, docs/spec.md 18.1), and removing a value would stop its texts being named.
Shipped profiles (policies/profiles) are read-only."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from verifier.engine.profile import Profile, deployment_profiles_dir, profile_from_dict, profile_path

DEPLOYMENT_SUFFIX = "-deployment"  # `hero keys init --models`: the deployment's own copy of its profile NAME


def own_copy_name(base: str) -> str:
    """The name of the deployment's own copy of profile `base` (`v5` -> `v5-deployment`; a copy keeps its name)."""
    return base if base.endswith(DEPLOYMENT_SUFFIX) else f"{base}{DEPLOYMENT_SUFFIX}"


class NotDeploymentProfile(ValueError):
    """The profile is not one of the deployment's own files (a shipped profile is read-only)."""


class NotIssuing(ValueError):
    """The profile lists no issued values at the field's level (spec v4+ only)."""


@dataclass(frozen=True)
class Issued:
    profile: Profile
    path: Path
    field: str
    issued: list[int]
    added: list[int]
    already_issued: list[int]

    def to_dict(self) -> dict:
        return {"profile": self.profile.name, "path": str(self.path), "field": self.field, "issued": self.issued,
                "added": self.added, "already_issued": self.already_issued}


def issue_detail(done: Issued) -> str:
    """The audit detail of an issue: profile, field and the values added."""
    return f"{done.profile.name} {done.field} +{','.join(map(str, done.added)) or 'none'}"


def own_profile_path(name: str) -> Path:
    """The deployment's own file of profile `name`, or NotDeploymentProfile saying how to make one."""
    folder = deployment_profiles_dir()
    path = profile_path(name)
    if not path.resolve().is_relative_to(folder.resolve()) or not path.is_file():
        raise NotDeploymentProfile(
            f"{name!r} is not a profile under {folder} (the deployment's profiles: HERO_PROFILES_DIR, else "
            "$HERO_HOME/profiles; shipped profiles are read-only; write one with `hero keys init --models ...` or "
            "`hero profile new NAME --from v5 --issued ...`)")
    return path


def issued_of(profile: Profile, field: str = "model") -> list[int] | None:
    """The issued values at the level of `field` (None: that level searches every value)."""
    for level in profile.levels:
        if any(f.name == field for f in level.fields):
            return list(level.issued) if level.issued is not None else None
    return None


def issue_values(name: str, values: list[int], field: str = "model") -> Issued:
    """Append `values` to the issued list of the deployment's profile `name` (checked against every profile rule
    first: values in range, spec v4+), replacing the file atomically."""
    path = own_profile_path(name)
    data = yaml.safe_load(path.read_text())
    level = issued_level(data, field)
    if "issued" not in level:
        raise NotIssuing(f"profile {name!r}: the level of {field!r} lists no issued values (spec v4 and later)")
    had = set(level["issued"])
    level["issued"] = sorted(had | set(values))
    profile = write_profile(path, data)
    return Issued(profile, path, field, issued_of(profile, field) or [], sorted(set(values) - had),
                  sorted(set(values) & had))


def issued_copy(base: Profile, name: str, values: list[int], field: str = "model") -> tuple[Profile, Path]:
    """Write the deployment's own copy of `base` named `name` whose `field` level issues `values` (spec v4+):
    `hero keys init --models`. An existing copy is kept when it issues at least these values (re-running init is
    harmless); one that lacks some is refused (issue them with `hero profile issue`)."""
    from verifier.engine.profile import load_profile

    if base.spec_version < 4:
        raise ValueError(f"profile {base.name!r} is spec v{base.spec_version}: issued model ids need spec v4 or v5")
    target = deployment_profiles_dir() / f"{name}.yaml"
    data = base.to_dict()
    data["name"] = name
    if base.tokenizer_written is not None:  # relative to the source's folder: to the copy's from now on
        data["tokenizer"] = relative_tokenizer(Path(base.tokenizer), target.parent)
    issued_level(data, field)["issued"] = sorted(set(values))
    if target.exists():
        have = load_profile(target)
        missing = sorted(set(values) - set(issued_of(have, field) or []))
        if missing:
            raise ValueError(f"{target} exists without {field} {missing}: issue them with `hero profile issue {name} "
                             f"{' '.join(map(str, missing))}`")
        return have, target
    profile_from_dict(data)  # every rule checked before anything is written
    return write_profile(target, data), target


def issued_level(data: dict, field: str) -> dict:
    for level in data.get("levels", []):
        if any(f.get("name") == field for f in level.get("fields", [])):
            return level
    raise ValueError(f"the profile has no field {field!r}")


def write_profile(target: Path, data: dict) -> Profile:
    """Check every profile rule (a chunk schedule that fits the vocabulary, issued values in range, spec v4 for a
    list), then replace the file atomically."""
    profile = profile_from_dict(data)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(yaml.safe_dump(profile.to_dict(), sort_keys=False))
    tmp.replace(target)
    return profile


def relative_tokenizer(path: Path, folder: Path) -> str:
    """A local tokenizer directory as a profile in `folder` writes it: relative to the folder, `./` or `../` first
    (what marks a path rather than a hub id; verifier.engine.profile.load_profile resolves it)."""
    rel = Path(os.path.relpath(path.resolve(), folder.resolve())).as_posix()
    return rel if rel.startswith("../") else f"./{rel}"
