"""Pure-torch evidence kernel: the readable statement of the batched algorithm and the fallback on any
device (gpu/scoring.py has the contract). Evidence sums agree with the reference to ~1e-12 relative
(torch's float64 log may differ from libm in the last bit; index_add_ order is not specified).
"""

from __future__ import annotations

import torch
from torch import Tensor

from gpu import prf
from gpu.partition import routing_paths
from gpu.scoring import LevelKeys, ScoringSpec, empty_outputs, read_tokens, scored_tokens

CHUNK_ELEMENTS = 1 << 20  # tokens x candidates per PRF pass (bounds the int64 temporaries)


def candidate_seeds(table: LevelKeys, context: Tensor) -> tuple[Tensor, Tensor]:
    """Seeds [n, C] of every candidate at contexts [n, h]: SipHash per candidate key (v1/v2), or one level
    seed per context XOR each candidate's value key (v3)."""
    if table.seed_key is None:
        return prf.prf_seed(table.k0, table.k1, context.unsqueeze(1))
    s0, s1 = prf.prf_seed(table.seed_key[0], table.seed_key[1], context)  # [n]
    return s0.unsqueeze(1) ^ table.k0, s1.unsqueeze(1) ^ table.k1


def segment_scores(
    ids: Tensor, lengths: Tensor, spec: ScoringSpec, position_key: tuple[Tensor, Tensor], tables: list[LevelKeys]
) -> tuple[list[Tensor], Tensor]:
    b = ids.shape[0]
    st = scored_tokens(ids, lengths, spec.context_width, spec.windows)
    scores, counts = empty_outputs(b, spec, tables, ids.device)
    if st.row.numel() == 0:
        return scores, counts
    s0, s1 = prf.prf_seed(position_key[0], position_key[1], st.context)
    st, seg = read_tokens(st, prf.position_of(s0, s1, spec.segments), spec, b)
    if st.row.numel() == 0:
        return scores, counts
    rw = st.row * spec.windows + st.window
    counts = torch.bincount(rw * spec.segments + seg, minlength=b * spec.windows * spec.segments)
    counts = counts.view(b, spec.windows, spec.segments)
    paths = routing_paths(st.token, spec.vocab_size, spec.schedule, spec.stride)
    for table, out in zip(tables, scores, strict=True):
        c = table.candidates
        cells = table.cells(spec)
        cell = rw * cells + (0 if table.per_value else seg)
        flat = out.view(-1, c)
        step = max(1, CHUNK_ELEMENTS // max(c, 1))
        for lo in range(0, st.row.numel(), step):
            hi = lo + step
            ls0, ls1 = candidate_seeds(table, st.context[lo:hi])  # [n, C]
            idx = paths[lo:hi, table.level - 1].unsqueeze(1).expand(-1, c)
            ev = prf.u32_to_evidence(prf.random_u32_indexed(ls0, ls1, idx))
            flat.index_add_(0, cell[lo:hi], ev)
    return scores, counts
