"""Per-request CPU cost of /v1/verify below HTTP, step by step, before (per-request material) and after
(cached material and decoder), for one ~220-token BBC text. Prints one JSON line per role.

    python benchmarks/bench_verify_breakdown.py [--reps 200] [--profile default] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from _common import emit


def _ms(fn, reps: int) -> float:
    fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return round(statistics.median(out) * 1000, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--database-url", default=None)
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hero-breakdown-"))
    os.environ["HERO_HOME"] = str(home)
    from verifier.api.context import build_context
    from verifier.audit.service import Actor, record_with_receipts, text_digest
    from verifier.audit.signer import signer_from_settings
    from verifier.base.settings import Settings
    from verifier.cli.bench_figures import bench_texts
    from verifier.engine.decoder import make_decoder
    from verifier.engine.profile import resolve_profile
    from verifier.lm import load_tokenizer
    from verifier.verify.disclosure import audit_events, shape

    settings = Settings(home=home, database_url=a.database_url, auto_migrate=True, profile=a.profile)
    ctx = build_context(settings)
    profile = resolve_profile(a.profile)
    ctx.store.initialize(profile)
    tok = load_tokenizer(profile.tokenizer)
    text = bench_texts(tok, 1)[0]
    signer = signer_from_settings(settings)
    actor = Actor("bench", "moderator", "jti")
    for role, level in (("moderator", 1), ("auditor", profile.depth)):
        mat = ctx.store.verification_material(profile, level)
        dec = make_decoder(profile, mat.tables, alpha=settings.alpha, unavailable=mat.unavailable)
        ids = tok([text], add_special_tokens=False)["input_ids"]
        raw = [r.to_dict() for r in dec.decode_ids(ids)]

        def audit(raw=raw, level=level):
            results = [shape(r, level) for r in raw]
            record_with_receipts(ctx.db, audit_events(actor, [text_digest(text)], results), signer,
                                 settings.checkpoint_interval_seconds)

        cache = ctx.runner.cache  # type: ignore[attr-defined]
        emit({
            "bench": "verify-breakdown", "role": role, "profile": profile.name, "database": ctx.db.dialect,
            "tokens": len(ids[0]),
            "before_material_ms": _ms(lambda level=level: ctx.store.verification_material(profile, level), a.reps // 4),
            "before_decoder_setup_ms": _ms(lambda mat=mat: make_decoder(profile, mat.tables, alpha=settings.alpha,
                                                                        unavailable=mat.unavailable), a.reps // 4),
            "after_material_ms": _ms(lambda level=level, cache=cache: cache.get(profile, level), a.reps),
            "tokenize_ms": _ms(lambda: tok([text], add_special_tokens=False), a.reps),
            "decode_ms": _ms(lambda dec=dec, ids=ids: dec.decode_ids(ids), a.reps),
            "audit_commit_ms": _ms(audit, a.reps),
            "load_avg_1m": round(os.getloadavg()[0], 2),
        })
    ctx.close()


if __name__ == "__main__":
    main()
