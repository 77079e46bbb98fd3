"""Role policy from policies/roles.yaml: role -> maximum disclosure level and allowed actions."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from verifier.ratelimit import RoleLimits

ACTIONS = frozenset({"verify", "keys.read", "keys.write", "audit.read", "jobs.read_all", "metrics.read",
                     "providers.read", "providers.write", "keys.bundle", "evidence.read"})


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class Role:
    name: str
    max_level: int | None  # None = all levels of the profile
    actions: frozenset[str]
    limits: RoleLimits | None = None  # quotas on texts verified; None = unlimited

    def level_limit(self, depth: int) -> int:
        return depth if self.max_level is None else min(self.max_level, depth)


@dataclass(frozen=True)
class Policy:
    roles: dict[str, Role]

    def role(self, name: str) -> Role | None:
        return self.roles.get(name)


def _limits(path: Path, name: str, raw: object) -> RoleLimits | None:
    if raw is None:
        return None
    fields = set(RoleLimits.__dataclass_fields__)
    if not isinstance(raw, dict) or set(raw) - fields:
        raise PolicyError(f"{path}: role {name!r}: limits must be a mapping with keys among {sorted(fields)}")
    for k, v in raw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise PolicyError(f"{path}: role {name!r}: limits.{k} must be a positive integer")
    return RoleLimits(**raw)


def load_policy(path: Path) -> Policy:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise PolicyError(f"cannot read roles file {path}: {exc.strerror}") from None
    if not isinstance(data, dict) or not isinstance(data.get("roles"), dict) or not data["roles"]:
        raise PolicyError(f"{path}: expected a non-empty 'roles' mapping")
    roles = {}
    for name, spec in data["roles"].items():
        if not isinstance(name, str) or not isinstance(spec, dict):
            raise PolicyError(f"{path}: role {name!r} must map to a mapping")
        raw = spec.get("max_level")
        if raw == "all":
            max_level = None
        elif isinstance(raw, int) and not isinstance(raw, bool) and raw >= 1:
            max_level = raw
        else:
            raise PolicyError(f"{path}: role {name!r}: max_level must be a positive integer or 'all'")
        actions = spec.get("actions", [])
        if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
            raise PolicyError(f"{path}: role {name!r}: actions must be a list of strings")
        unknown = set(actions) - ACTIONS
        if unknown:
            raise PolicyError(f"{path}: role {name!r}: unknown actions {sorted(unknown)}")
        roles[name] = Role(name, max_level, frozenset(actions), _limits(path, name, spec.get("limits")))
    return Policy(roles)
