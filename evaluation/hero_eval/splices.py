"""Two-user splices: the opening of user A's text followed by the opening of user B's text.

A splice is made on the generator's token ids (A's first round(ratio * total) tokens, then B's first
total - that), detokenised and re-tokenised as a verifier would receive it. Pairs are (i, i + 1 mod n)
over the texts of one cell, skipping pairs whose two users share the same value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Splice:
    a: int  # index of A's text
    b: int
    ratio: float  # A's share of the tokens
    users: tuple[int, int]
    ids: tuple[int, ...]  # generator token ids: A's part then B's part

    @property
    def n_a(self) -> int:
        return round(self.ratio * len(self.ids))


def splice_ids(ids_a: Sequence[int], ids_b: Sequence[int], ratio: float, total: int) -> list[int]:
    if not 0 < ratio < 1:
        raise ValueError("ratio must be strictly between 0 and 1")
    n_a = round(ratio * total)
    if len(ids_a) < n_a or len(ids_b) < total - n_a:
        raise ValueError(f"texts too short for a {total}-token splice at ratio {ratio}")
    return list(ids_a[:n_a]) + list(ids_b[: total - n_a])


def build_splices(
    ids: Sequence[Sequence[int]], users: Sequence[int], ratio: float, total: int
) -> tuple[list[Splice], int]:
    """Splices of pairs (i, i + 1 mod n); returns (splices, number of pairs skipped for equal users)."""
    out, skipped = [], 0
    n = len(ids)
    for i in range(n):
        j = (i + 1) % n
        if users[i] == users[j]:
            skipped += 1
            continue
        out.append(Splice(i, j, ratio, (users[i], users[j]), tuple(splice_ids(ids[i], ids[j], ratio, total))))
    return out, skipped


def classify(named: set[int], users: tuple[int, int], status: str) -> str:
    """What a decoder said about a splice: both | one | none | third (a value neither user carried)."""
    if named - set(users):
        return "third"
    if set(users) <= named and status == "mixed":
        return "both"
    return "one" if named else "none"
