"""Role policy from policies/roles.yaml: role -> maximum disclosure level and allowed actions.

`Policy.grant(role, profile, requested)` is the one level decision: made once per request or job, the
`Grant` it returns is carried to the runner, which decrypts and releases levels 1..grant.level and no more.
Nothing downstream clamps or re-decides a level.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from verifier.base.errors import Forbidden
from verifier.base.ratelimit import RoleLimits

if TYPE_CHECKING:
    from verifier.engine.profile import Profile

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

    def top(self, profile: Profile) -> int:
        """The deepest level this role may see under `profile` (a ceiling, not a grant: nothing is decoded on it)."""
        return profile.depth if self.max_level is None else min(self.max_level, profile.depth)

    def grant(self, profile: Profile, requested: int | None = None) -> Grant:
        """Levels 1..requested (default: this role's maximum within the profile); more than that is 403."""
        top = self.top(profile)
        level = top if requested is None else requested
        if level > top:
            raise Forbidden(f"level {level} not allowed for role {self.name!r} (maximum {top})")
        return Grant(self.name, level)


@dataclass(frozen=True)
class Grant:
    """The levels a caller may have decoded and released: 1..level (decided by `Role.grant`, never clamped later)."""

    role: str
    level: int


OPERATOR = Role("cli", None, frozenset())
"""`hero decode --local`: the operator of the key store's machine, who may ask for every level of the profile."""


MULTIPLE_ROLES = ("refuse", "highest")


@dataclass(frozen=True)
class Policy:
    roles: dict[str, Role]
    # A token that maps to several HeRo roles (an IdP group list): `refuse` (403, the default) or `highest`: the
    # first of them in `role_order` (roles.yaml, highest first) acts.
    multiple_roles: str = "refuse"
    role_order: tuple[str, ...] = ()

    def role(self, name: str) -> Role | None:
        return self.roles.get(name)

    def resolve(self, roles: tuple[str, ...] | list[str]) -> str:
        """The one role a token acts as. None mapped: 403; several: 403 unless the policy names the highest."""
        if not roles:
            raise Forbidden("the token carries no role this service maps (HERO_JWT_ROLE_CLAIM, HERO_ROLE_MAP)")
        if len(roles) == 1:
            return roles[0]
        if self.multiple_roles == "highest":
            ranked = [r for r in self.role_order if r in roles]
            if ranked:
                return ranked[0]
        names = ", ".join(r[:64] for r in list(roles)[:8])
        raise Forbidden(f"the token maps to several roles ({names}) and the server policy does not choose between "
                        "them (roles.yaml multiple_roles: refuse): use a token with one HeRo role")

    def known(self, role: str) -> Role:
        """The role named `role`, or 403 for one the policy does not know."""
        r = self.roles.get(role)
        if r is None:
            raise Forbidden("role not allowed by server policy")
        return r

    def grant(self, role: str, profile: Profile, requested: int | None = None) -> Grant:
        """The one level decision for a request or a job (403 for a role the policy does not know)."""
        return self.known(role).grant(profile, requested)


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
    multiple = data.get("multiple_roles", "refuse")
    if multiple not in MULTIPLE_ROLES:
        raise PolicyError(f"{path}: multiple_roles must be one of {list(MULTIPLE_ROLES)}")
    order = data.get("role_order", [])
    if not isinstance(order, list) or not all(isinstance(r, str) for r in order) or len(set(order)) != len(order) \
            or set(order) - set(roles):
        raise PolicyError(f"{path}: role_order must list roles of this file, each once")
    if multiple == "highest" and set(order) != set(roles):
        raise PolicyError(f"{path}: multiple_roles: highest needs role_order to rank every role (highest first)")
    return Policy(roles, multiple, tuple(order))
