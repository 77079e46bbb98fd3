"""The entropy-gated opening: each response starts with fresh randomness until its opening holds enough entropy.

Why: a watermarked draw is a function of (keys, payload, context). Spec v2 draws the first h tokens (contexts
that touch the prompt) fresh, but at top-k / top-p those few tokens often carry little entropy, and two
identical requests whose first h tokens coincide then coincide for good (measured: 15.5 distinct outputs of 20
identical requests at top-k 50 / top-p 0.9 against 20 for plain sampling). The generator knows each step's
distribution, so the gate keeps a row unmarked until the Shannon entropy of its fresh steps sums to `nats`, or
until `cap` tokens have been drawn (a low-entropy response still gets its mark). Nothing changes for a
verifier: a fresh token scores as noise, like any unmarked one.

    OpeningGate.need  [S] float32: nats each request slot still needs before its tokens are marked (<= 0: open)
    row_entropy       logits [B, V] (warped; -inf = excluded) -> [B] float32 nats
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

OPENING_NATS = 8.0  # benchmarks/opening_diversity.py: where repeated requests become as distinct as plain sampling
OPENING_CAP = 24  # tokens: past this the gate opens whatever the entropy (bounds what the mark loses)


def row_entropy(logits: Tensor) -> Tensor:
    """Shannon entropy (nats) of softmax(logits) per row, [B, V] -> [B] float32; -inf entries carry no mass."""
    x = logits.to(torch.float32)
    logp = torch.log_softmax(x, dim=-1)
    p = logp.exp()
    return -torch.where(p > 0, p * logp, torch.zeros((), dtype=p.dtype, device=p.device)).sum(dim=-1)


@dataclass
class OpeningGate:
    """Per-slot opening state of up to S requests; `nats` = 0 turns the gate off (spec v2's first h tokens only)."""

    need: Tensor
    nats: float = OPENING_NATS
    cap: int = OPENING_CAP

    @classmethod
    def new(cls, slots: int, nats: float = OPENING_NATS, cap: int = OPENING_CAP,
            device: torch.device | str = "cpu") -> OpeningGate:
        if nats < 0 or cap < 0:
            raise ValueError("opening nats and cap must be >= 0")
        return cls(torch.full((slots,), float(nats), dtype=torch.float32, device=device), float(nats), int(cap))

    def reset(self, slots: Tensor | list[int], opened: bool = False) -> None:
        """A slot starts a new request (`opened`: a resumed one whose opening was already drawn)."""
        idx = torch.as_tensor(slots, dtype=torch.int64, device=self.need.device)
        self.need.index_fill_(0, idx, 0.0 if opened else self.nats)

    def advance(self, logits: Tensor, generated: Tensor, slots: Tensor, select: bool | None = None) -> Tensor:
        """Rows [B] still in their opening (draw them fresh), and account this step's entropy for them.

        logits [B, V] warped; generated [B] tokens each row has drawn so far; slots [B] the rows' state slots.
        `select` (default: on the CPU) computes only the gated rows' entropy; else every row's, masked (on a
        device: no host sync). Both give the same state."""
        if self.nats <= 0:
            return torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
        need = self.need[slots]
        gated = (need > 0) & (generated.to(need.device) < self.cap)
        if select if select is not None else logits.device.type == "cpu":
            rows = gated.nonzero().squeeze(1)
            if rows.numel():
                self.need[slots[rows]] = need[rows] - row_entropy(logits[rows])
        else:
            self.need[slots] = need - torch.where(gated, row_entropy(logits), 0.0)
        return gated
