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
