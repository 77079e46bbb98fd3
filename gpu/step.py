"""The fused generation step: one call per step for a whole batch, the repeated-context check on the device.

`FusedSampler.step(logits, contexts, payload, generated, log)` is the one sampling step of every generation path
(`hero generate`, the provider SDK, `HeroWatermarkingConfig`, serving engines through verifier/provider/step.py).
Per row: decide whether the row is marked (the rule written out in verifier/engine/reference.py `is_marked`: spec
v2: not while the context touches the prompt, i.e. generated < h, nor while an `OpeningGate` holds the
row; never for a context already in the row's log), derive the position segment and one seed per level,
route over chunk masses and Gumbel-max inside the chunk, or draw from the same distribution with fresh
randomness when unmarked. The per-row state lives in tensors on the sampler's device (`generated` [B] int64,
a `ContextLog` and an optional `OpeningGate`), so no step needs a host sync.

Backends (same tokens for marked rows, the reference's draw):
  native  the C extension (gpu/_native/hero_kernels.c `sample_step`), CPU tensors; chunk masses from one fused
          pass over the logits (float32 lanes first on AVX2 + FMA, then float64), each routing decision taken
          only when it leads by a margin far above that tier's error, else redone by the next tier and at last
          with libm's exp, the spec's arithmetic (`fast_step(False)` forces that exact path);
  triton  one kernel per step (gpu/triton_step.py), CUDA or the Triton interpreter (TRITON_INTERPRET=1);
  torch   element-wise torch (gpu/prf.py + gpu/sampler.route_and_sample), any device: the readable fallback.
A new spec version adds one branch where the level seeds are derived (`HeroSampler.level_seeds` for torch,
`level_seed` in the C source, `_level_seed` in the Triton kernel); everything else is shared. Spec v3 (one
SipHash seed per token and level XOR the value key) has its branch in all three; v4 and v5 take v3's.
Spec v5 (position-multiplexed levels, reference.py `v5_sample`) changes which seed a marked row draws under, in
all three backends (`_multiplexed_seed` here, `step_row` in the C source, the SPEC >= 5 branch of the Triton
kernel): no routing (empty schedule, contiguous layout); the lane q = (word 0 of the position stream * 100) >> 32
and the slot's generated count before the step (front_tokens, front_public, public: `self.multiplex`) pick one
level, whose seed alone is derived from segment 0's whole value; Gumbel-max over the whole vocabulary.

The context log stores each continuation context's packed SipHash message words (h//2 + 1 int64), so the
check is exact equality of the h-gram, not a hash. Its capacity grows on the host side (`ensure`), from
counts the caller already knows (tokens generated so far), never by reading the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from gpu import prf
from gpu.backend import BACKENDS, select_backend
from gpu.opening import OpeningGate
from gpu.sampler import HeroSampler, route_and_sample

__all__ = ["BACKENDS", "SPEC_VERSIONS", "ContextLog", "FusedSampler", "message_words"]
SPEC_VERSIONS = (1, 2, 3, 4, 5)  # every backend implements every one of them (v4: v3's construction)
LANES = 100  # spec v5: lanes of a position (word 0 of its position stream, scaled); verifier.engine.profile


def message_words(h: int) -> int:
    """Packed words per h-gram (SipHash message incl. the length/tail block)."""
    return h // 2 + 1


@dataclass
class ContextLog:
    """Per-row log of continuation contexts already drawn: words [B, cap, NW] int64, counts [B] int64."""

    words: Tensor
    counts: Tensor

    @classmethod
    def empty(cls, rows: int, h: int, device: torch.device | str = "cpu", capacity: int = 64) -> ContextLog:
        nw = message_words(h)
        return cls(torch.zeros(rows, capacity, nw, dtype=torch.int64, device=device),
                   torch.zeros(rows, dtype=torch.int64, device=device))

    @property
    def capacity(self) -> int:
        return self.words.shape[1]

    def ensure(self, entries: int) -> None:
        """Room for `entries` contexts per row (doubling); `entries` = a host-side bound, e.g. steps so far + 1."""
        if entries <= self.capacity:
            return
        cap = self.capacity
        while cap < entries:
            cap *= 2
        grown = self.words.new_zeros(self.words.shape[0], cap, self.words.shape[2])
        grown[:, : self.capacity] = self.words
        self.words = grown

    def reset(self, rows: Tensor | list[int]) -> None:
        """Forget the contexts of `rows` (a recycled batch slot starts a new request)."""
        idx = torch.as_tensor(rows, dtype=torch.int64, device=self.counts.device)
        self.counts.index_fill_(0, idx, 0)


class FusedSampler:
    """A `HeroSampler`'s key tables plus what the step needs to know of the profile (h, spec version)."""

    def __init__(self, sampler: HeroSampler, context_width: int, spec_version: int,
                 multiplex: tuple[int, int, int] | None = None) -> None:
        """`multiplex` (spec v5 only, required there): (front_tokens, front_public, public) of the profile's
        `Multiplex`: the public share of lanes, in percent, before and after the front."""
        if spec_version not in SPEC_VERSIONS:
            raise ValueError(f"fused step: spec version {spec_version} not supported (have {SPEC_VERSIONS})")
        if (spec_version >= 5) != (multiplex is not None) or (spec_version >= 5) != sampler.multiplexed:
            raise ValueError("spec v5 (and only it) needs a multiplexed sampler and its multiplex schedule")
        self.multiplex = tuple(int(x) for x in multiplex) if multiplex is not None else None
        self.base = sampler
        self.h = context_width
        self.spec_version = spec_version
        self.device = sampler.k0.device
        self._schedule = torch.tensor(sampler.schedule, dtype=torch.int64, device=self.device)
        self._cpu_schedule = torch.tensor(sampler.schedule, dtype=torch.int64)
        # read once here: a per-step int(tensor) would sync with the device
        self.position_key = (int(sampler.pos_k0), int(sampler.pos_k1))
        self.position_words = torch.stack([sampler.pos_k0, sampler.pos_k1]).to(torch.int64)
        # spec v3: each level's SipHash key words (zeros for v1/v2): [L, 2] on the device (Triton), and the two
        # columns as host arrays (the native step; () for v1/v2)
        zero = torch.zeros(1, dtype=torch.int64, device=self.device)
        words = [w if w is not None else (zero, zero) for w in sampler.seed_words]
        self.seed_key_words = torch.stack([torch.cat([w[0].reshape(1), w[1].reshape(1)]) for w in words]).to(
            torch.int64).contiguous()
        self._cpu_seed_keys: tuple = ()
        if spec_version >= 3:
            host = self.seed_key_words.cpu()
            self._cpu_seed_keys = (host[:, 0].contiguous().numpy(), host[:, 1].contiguous().numpy())

    def __repr__(self) -> str:  # never the key words
        return f"FusedSampler(levels={self.base.levels}, h={self.h}, spec_version={self.spec_version})"  # no keys

    def new_log(self, rows: int, capacity: int = 64) -> ContextLog:
        return ContextLog.empty(rows, self.h, self.device, capacity)

    def step(
        self,
        logits: Tensor,
        contexts: Tensor,
        payload: Tensor,
        generated: Tensor,
        log: ContextLog,
        generator: torch.Generator | None = None,
        backend: str | None = None,
        with_marks: bool = False,
        slots: Tensor | None = None,
        opening: OpeningGate | None = None,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Token ids [B] int64 (with_marks: also [B] bool, True where the row was watermarked).

        logits [B, V] (warped), contexts [B, h]. Per-request state is indexed by slot: row b uses slot
        `slots[b]` (default: slot b) of payload [S, K, L], generated [S] int64 (tokens drawn so far; advanced
        in place) and `log` (S rows; appended in place; call `log.ensure(max generated + 1)` first when rows
        can outgrow it). Slots let a serving engine keep state in place while its batch rows move.
        `opening` (S slots): rows still in their gated opening are drawn fresh (gpu/opening.py).
        """
        backend = select_backend(logits.device, backend or "auto", native="sample_step")
        b = logits.shape[0]
        n = generated.shape[0]
        if slots is None:
            if n < b:
                raise ValueError("fewer state slots than batch rows")
            slots = torch.arange(b, device=logits.device)
        if contexts.shape != (b, self.h) or slots.shape != (b,):
            raise ValueError("contexts [B, h] and slots [B] must match the logits' rows")
        if payload.shape[0] != n or log.words.shape[0] != n or generated.dim() != 1:
            raise ValueError("payload [S, K, L], generated [S] and the context log must have the same S slots")
        slots = slots.to(torch.int64)
        if opening is not None and opening.nats > 0:
            # every backend marks only rows with generated >= h: a gated row is shown as a response's first token
            gen = generated[slots]
            held = opening.held(gen, slots)
            shown = generated.clone()
            shown[slots] = torch.where(held, torch.zeros_like(gen), gen)
            out = self.step(logits, contexts, payload, shown, log, generator, backend, with_marks, slots)
            opening.account(logits, out[0] if with_marks else out, held, slots)
            generated[slots] = gen + 1
            return out
        args = (logits, contexts, payload, generated, log, generator, slots)
        if backend == "native":
            tokens, marks = self._native(*args)
        elif backend == "triton":
            from gpu import triton_step

            tokens, marks = triton_step.fused_step(self, *args)
        else:
            tokens, marks = self._torch(*args)
        return (tokens, marks.to(torch.bool)) if with_marks else tokens

    # -- backends ------------------------------------------------------------------------------------

    def _native(self, logits, contexts, payload, generated, log, generator, slots) -> tuple[Tensor, Tensor]:
        from gpu import cpu_kernel

        s = self.base
        b, v = logits.shape
        x = logits.detach()
        dbl = x.dtype == torch.float64
        x = x.contiguous() if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32).contiguous()
        ctx = contexts.to(torch.int64).contiguous()
        pay = payload.to(torch.int64).contiguous()
        rand = torch.rand(b, dtype=torch.float64, generator=generator)
        out = torch.empty(b, dtype=torch.int64)
        marks = torch.empty(b, dtype=torch.int64)
        if not (generated.is_contiguous() and log.words.is_contiguous() and log.counts.is_contiguous()):
            raise ValueError("generated and the context log must be contiguous")
        mask = (1 << 64) - 1
        cpu_kernel.load().sample_step(
            x.numpy(), dbl, b, v, ctx.numpy(), self.h, pay.numpy(), pay.shape[1], pay.shape[2],
            s.k0.contiguous().numpy(), s.k1.contiguous().numpy(), s.k0.shape[1],
            self.position_key[0] & mask, self.position_key[1] & mask, self._cpu_schedule.numpy(), s.segments, s.stride,
            self.spec_version, slots.contiguous().numpy(), generated.shape[0], generated.numpy(), log.words.numpy(),
            log.counts.numpy(), log.capacity,
            rand.numpy(), out.numpy(), marks.numpy(), torch.get_num_threads(), *self._cpu_seed_keys,
            *(self.multiplex or ()),  # spec v5: front_tokens, front_public, public (after the level keys)
        )
        return out, marks

    def _torch(self, logits, contexts, payload, generated, log, generator, slots) -> tuple[Tensor, Tensor]:
        ctx = contexts.to(torch.int64)
        msg = torch.stack(prf.context_words(ctx), dim=1)  # [B, NW]
        words, counts, gen = log.words[slots], log.counts[slots], generated[slots]
        cap = log.capacity
        live = torch.arange(cap, device=ctx.device).unsqueeze(0) < counts.unsqueeze(1)
        found = ((words == msg.unsqueeze(1)).all(-1) & live).any(1)
        cont = gen >= self.h
        mark = torch.where(cont, ~found, torch.full_like(cont, self.spec_version < 2))
        new = cont & ~found
        slot_in_log = counts.clamp(max=cap - 1)
        log.words[slots, slot_in_log] = torch.where(new.unsqueeze(1), msg, words[torch.arange(len(slots)), slot_in_log])
        log.counts[slots] = counts + new.to(torch.int64)
        generated[slots] = gen + 1
        # the marked draw for every row (no data-dependent indexing: no host sync beyond route_and_sample's)
        pay = payload.to(torch.int64)[slots]
        if self.multiplex is not None:
            marked = route_and_sample(logits, [self._multiplexed_seed(ctx, pay[:, 0, :], gen)], ())
        else:
            marked = self._routed_draw(logits, ctx, pay)
        probs = torch.softmax(logits.to(torch.float32), dim=-1)
        race = torch.empty_like(probs).exponential_(generator=generator)
        plain = (probs / race).argmax(dim=1)
        return torch.where(mark, marked, plain), mark

    def _routed_draw(self, logits: Tensor, ctx: Tensor, pay: Tensor) -> Tensor:
        """Spec v1-v4: the position segment's values, one seed per level, routing then Gumbel-max in the chunk."""
        s = self.base
        k = s.positions(ctx)
        values = pay.gather(1, k.view(-1, 1, 1).expand(-1, 1, s.levels)).squeeze(1)
        seeds = [s.level_seeds(lv, values[:, lv], ctx) for lv in range(s.levels)]  # the spec-version branch
        return route_and_sample(logits, seeds, s.schedule, s.stride)

    def _multiplexed_seed(self, ctx: Tensor, values: Tensor, gen: Tensor) -> tuple[Tensor, Tensor]:
        """Spec v5 (docs/spec.md section 19): the seed of the one level each row's lane assigns at its generator
        index `gen` (whole values [B, L]); reference.v5_level written out element-wise."""
        s = self.base
        front, front_public, public = self.multiplex  # type: ignore[misc]
        lane = s.positions(ctx, LANES)
        pct = torch.where(gen < front, torch.full_like(gen, front_public), torch.full_like(gen, public))
        deeper = 1 + (lane - pct).clamp(min=0) * (s.levels - 1) // (LANES - pct).clamp(min=1)
        level = torch.where(lane < pct, torch.zeros_like(lane), deeper)
        seeds = [s.level_seeds(lv, values[:, lv], ctx) for lv in range(s.levels)]
        s0 = torch.stack([sd[0] for sd in seeds], 1).gather(1, level.view(-1, 1)).squeeze(1)
        s1 = torch.stack([sd[1] for sd in seeds], 1).gather(1, level.view(-1, 1)).squeeze(1)
        return s0, s1
