"""The texts the attribution section evaluates, all generated through the resumable cache.

- main: `prompts` BBC prompts x `tokens` new tokens per method and sampling setting, one user per text;
- diversity: `repeats` copies of one request (same prompt, same user) per prompt, and `users` different
  users on one prompt (first `prefix` tokens), per method and setting;
- collusion: `col_users` accounts x `col_prompts` shared prompts (the same prompts for every account).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from gpu.opening import OPENING_NATS
from hero_eval.attribution import SCHEME, payload_for, user_value
from hero_eval.methods import UNWATERMARKED, HeroMethod, Method
from hero_eval.sampling import Sampling


@dataclass(frozen=True)
class DataPlan:
    prompts: int = 200
    tokens: int = 200
    div_prompts: int = 4
    repeats: int = 20
    div_tokens: int = 24
    users: int = 32
    user_prompts: int = 6
    prefix: int = 8
    col_users: int = 16
    col_prompts: int = 6
    col_tokens: int = 64
    cost_texts: int = 100  # decode-cost texts (0: not measured, e.g. in the second of two per-setting runs)


class AttributionData:
    def __init__(self, runner, plan: DataPlan) -> None:
        self.r, self.plan, self.seed = runner, plan, runner.cfg.seed
        self.read_only = False  # measure-only: a text not in the cache is an error, not a generation

    def _scheme(self, m: Method, extra: str = "") -> str:
        if m.name == UNWATERMARKED and not extra:
            return ""
        return SCHEME + _profile_tag(m) + extra

    def main(self, m: Method, s: Sampling, indices: Sequence[int] | None = None) -> list[dict]:
        m = getattr(m, "base", m)  # a model-aware method decodes its base method's texts
        p = self.plan
        if self.read_only:
            want = list(range(p.prompts)) if indices is None else list(indices)
            path = self.r.gen_cache.path(m, p.tokens, s, self._scheme(m))
            have = self.r.gen_cache.load(path)
            if missing := [i for i in want if i not in have]:
                raise RuntimeError(f"--measure-only: {m.name} {s.name} texts {missing[:3]}... are not cached yet")
            return [have[i] for i in want]
        return self.r.gen_cache.get(
            m,
            self.r.prompts[: p.prompts],
            p.tokens,
            f"attr {s.name}",
            lambda i: payload_for(m, self.seed, user_value(self.seed, i)),
            sampling=s,
            scheme=self._scheme(m),
            indices=indices,
        )

    def repeats(self, m: Method, s: Sampling, prompt: int) -> list[dict]:
        """`repeats` identical requests: prompt `prompt`, user user_value(seed, prompt)."""
        p = self.plan
        u = user_value(self.seed, prompt)
        return self.r.gen_cache.get(
            m,
            [self.r.prompts[prompt]] * p.repeats,
            p.div_tokens,
            f"repeat{prompt} {s.name}",
            lambda i: payload_for(m, self.seed, u),
            sampling=s,
            scheme=self._scheme(m, f"_rep{prompt}"),
        )

    def users(self, m: Method, s: Sampling, prompt: int) -> list[dict]:
        """`users` requests on one prompt, request j from user user_value(seed, 10_000 + j)."""
        p = self.plan
        return self.r.gen_cache.get(
            m,
            [self.r.prompts[prompt]] * p.users,
            p.prefix,
            f"users{prompt} {s.name}",
            lambda j: payload_for(m, self.seed, user_value(self.seed, 10_000 + j)),
            sampling=s,
            scheme=self._scheme(m, f"_users{prompt}"),
        )

    def collusion_user(self, k: int) -> int:
        """Account k's user value (distinct accounts get distinct values)."""
        seen: list[int] = []
        j = 20_000
        while len(seen) <= k:
            v = user_value(self.seed, j)
            if v not in seen:
                seen.append(v)
            j += 1
        return seen[k]

    def collusion(self, m: Method, s: Sampling) -> list[dict]:
        """Record k = account * col_prompts + prompt; every account answers the same prompts."""
        p = self.plan
        users = [self.collusion_user(a) for a in range(p.col_users)]
        prompts = [self.r.prompts[j] for _ in range(p.col_users) for j in range(p.col_prompts)]
        return self.r.gen_cache.get(
            m,
            prompts,
            p.col_tokens,
            f"collusion {s.name}",
            lambda k: payload_for(m, self.seed, users[k // p.col_prompts]),
            sampling=s,
            scheme=self._scheme(m, "_collude"),
        )


def _profile_tag(m: Method) -> str:
    """A spec-v2 profile's fingerprint, so texts made under one v2 default are never decoded under another
    (K_1 or h of the default may change), and the gated opening's threshold (texts made before the gate, or
    under another threshold, are other texts); '' for v1 and the baselines (their cache names stay)."""
    if isinstance(m, HeroMethod) and m.profile.spec_version >= 2:
        blob = json.dumps(m.profile.to_dict(), sort_keys=True).encode()
        return "_" + hashlib.sha256(blob).hexdigest()[:8] + f"_open{OPENING_NATS:g}"
    return ""
