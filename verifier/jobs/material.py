"""The single place where a job's decoder obtains key material.

`tables_for(store, profile, job, policy)` decrypts only levels 1..min(job.max_level, the role's current
policy limit); `handed_summary` describes what was handed over (levels and versions, never bytes) and is
stored on the job row so it can be audited and asserted on.
"""

from __future__ import annotations

from verifier.auth.policy import Policy
from verifier.engine.profile import Profile
from verifier.jobs.service import JobInfo
from verifier.keys.decodable import VerificationMaterial
from verifier.keys.errors import KeyStoreError
from verifier.keys.service import DbKeyStore


def allowed_level(job: JobInfo, profile: Profile, policy: Policy | None) -> int:
    level = min(job.max_level, profile.depth)
    if policy is not None:  # the policy may have tightened since the job was accepted
        role = policy.role(job.role)
        if role is None:
            raise KeyStoreError(f"role {job.role!r} is no longer allowed by server policy")
        level = min(level, role.level_limit(profile.depth))
    return level


def tables_for(store: DbKeyStore, profile: Profile, job: JobInfo, policy: Policy | None = None) -> VerificationMaterial:
    return store.verification_material(profile, allowed_level(job, profile, policy))


def handed_summary(material: VerificationMaterial) -> dict[int, list[str]]:
    return {lv: sorted(t.version for t in ts) for lv, ts in material.tables.items()}
