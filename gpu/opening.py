"""The gated opening: each response starts with fresh randomness until its opening is improbable enough.

Why: a watermarked draw is a function of (keys, payload, context). Spec v2 draws the first h tokens (contexts
that touch the prompt) fresh, but at top-k / top-p those few tokens are often near-certain, and two identical
requests whose first h tokens coincide then coincide for good (measured: 15.5 distinct outputs of 20 identical
requests at top-k 50 / top-p 0.9 against 20 for plain sampling). The generator knows each step's distribution,
so the gate keeps a row unmarked until the surprisal of the tokens it drew fresh, sum of -log p(x_t), reaches
`nats`, or until `cap` tokens have been drawn (a near-deterministic response still gets its mark).

The guarantee (spec 12.1): every opening the gate ends has probability at most e^-nats, so two identical
requests share it with probability at most e^-nats (sum over openings of P^2 <= e^-nats * sum of P), and 20
identical requests have at most 190 e^-nats coincident pairs in expectation (0.06 at 8 nats); after the opening
their contexts differ. Only a response that reaches the cap first can do worse. Nothing changes for a verifier:
a fresh token scores as noise, like any unmarked one.

    OpeningGate.need  [S] float32: nats each request slot still needs before its tokens are marked (<= 0: open)
    token_surprisal   logits [B, V] (warped; -inf = excluded), tokens [B] -> [B] float32 nats, -log p(token)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

OPENING_NATS = 8.0  # 20 identical requests: <= 190 e^-8 = 0.06 coincident pairs expected (plain sampling's level)
OPENING_CAP = 24  # tokens: past this the gate opens whatever the surprisal (bounds what the mark loses)


def token_surprisal(logits: Tensor, tokens: Tensor) -> Tensor:
    """-log softmax(logits)[b, tokens[b]] per row, [B, V], [B] -> [B] float32 nats: logsumexp minus the token's
    logit, a row reduction (no [B, V] log-probabilities written: this runs every step on a device)."""
    x = logits.float()
    return torch.logsumexp(x, dim=-1) - x.gather(1, tokens.to(torch.int64).unsqueeze(1)).squeeze(1)


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

    def held(self, generated: Tensor, slots: Tensor) -> Tensor:
        """Rows [B] still in their opening (draw them fresh): generated [B] tokens each row has drawn so far,
        slots [B] the rows' state slots."""
        if self.nats <= 0:
            return torch.zeros(slots.shape[0], dtype=torch.bool, device=slots.device)
        return (self.need[slots] > 0) & (generated.to(self.need.device) < self.cap)

    def account(self, logits: Tensor, tokens: Tensor, held: Tensor, slots: Tensor,
                select: bool | None = None) -> None:
        """Subtract the surprisal of the tokens the `held` rows drew this step (logits [B, V] warped).

        `select` (default: on the CPU) computes only the held rows' surprisal; else every row's, masked (on a
        device: no host sync). Both give the same state."""
        if self.nats <= 0:
            return
        if select if select is not None else logits.device.type == "cpu":
            rows = held.nonzero().squeeze(1)
            if rows.numel():
                self.need[slots[rows]] -= token_surprisal(logits[rows], tokens[rows]).to(self.need.device)
        else:
            s = token_surprisal(logits, tokens).to(self.need.device)
            self.need[slots] -= torch.where(held, s, torch.zeros_like(s))
