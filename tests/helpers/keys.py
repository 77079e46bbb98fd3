"""Synthetic key sets for engine tests."""

from __future__ import annotations


def make_keyset(profile, seed: int = 0):
    """Key set with fresh CSPRNG masters (seed only names the versions)."""
    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret

    return KeySet(
        tuple(
            derive_level_table(new_master_secret(), profile, lv, f"l{lv}-v{seed}")
            for lv in range(1, profile.depth + 1)
        )
    )


def fixed_keyset(profile, seed: int = 0, label: str = "tests"):
    """Key set with masters derived from `label` and `seed` (SHA-256): for statistical tests whose bound holds per
    key set with high probability but not always, so one measured key set keeps CI deterministic. Never for
    anything but tests."""
    import hashlib

    from verifier.engine.keys import KeySet, derive_level_table

    return KeySet(
        tuple(
            derive_level_table(hashlib.sha256(f"{label}/{seed}/{lv}".encode()).digest(), profile, lv, f"l{lv}-v{seed}")
            for lv in range(1, profile.depth + 1)
        )
    )
