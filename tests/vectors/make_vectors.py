"""Regenerates tests/vectors/hero_v1.json ... hero_v5.json from the pure-Python reference.

The files are frozen: once released, a change to any value is a breaking change of the spec
(docs/spec.md). Run only to add new vectors: `python tests/vectors/make_vectors.py [v1|v2|v3]`.
Key derivations use `cryptography`'s HKDF directly (not the engine's helper) so the vectors check it.
"""

from __future__ import annotations

import json
import math
import random
import struct
import sys
from pathlib import Path

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from verifier.engine import reference as R
from verifier.engine.keys import entry_key, position_key

OUT = Path(__file__).with_name("hero_v1.json")
OUT_V2 = Path(__file__).with_name("hero_v2.json")
OUT_V3 = Path(__file__).with_name("hero_v3.json")
OUT_V4 = Path(__file__).with_name("hero_v4.json")
OUT_V5 = Path(__file__).with_name("hero_v5.json")


def hexb(b: bytes) -> str:
    return b.hex()


def main() -> None:
    rng = random.Random(20261125)
    rb = lambda n: bytes(rng.randrange(256) for _ in range(n))  # noqa: E731
    v: dict = {"spec_version": 1}
    key = bytes(range(16))
    v["siphash24_128"] = [
        {
            "key": hexb(key),
            "msg": hexb(bytes(range(n))),
            "lo": f"{R.siphash24(key, bytes(range(n)))[0]:016x}",
            "hi": f"{R.siphash24(key, bytes(range(n)))[1]:016x}",
        }
        for n in (0, 1, 7, 8, 15, 16, 17, 63)
    ]
    v["philox4x32_10"] = []
    for ctr, k in [
        ((0, 0, 0, 0), (0, 0)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0)),
    ]:
        v["philox4x32_10"].append({"ctr": list(ctr), "key": list(k), "out": list(R.philox4x32_10(ctr, k))})
    v["hkdf"] = []
    for level, value in [(1, 0), (1, 3), (2, 0), (2, 255), (8, 1)]:
        master = rb(32)
        v["hkdf"].append(
            {
                "master": hexb(master),
                "level": level,
                "value": value,
                "entry_key": hexb(entry_key(master, level, value)),
                "position_key": hexb(position_key(master)),
            }
        )
    v["prf"] = []
    for h in (1, 2, 3, 4, 5, 8):
        k = rb(16)
        ctx = [rng.randrange(262144) for _ in range(h)]
        s0, s1 = R.prf_seed(k, ctx)
        words = []
        for j in [0, 1, 2, 3, 4, 5, 19, 20, 1023, 49151, 262143, 2**32 + 5]:
            u = R.random_u32((s0, s1), j)
            words.append({"j": j, "u32": u, "uniform": R.u32_to_uniform(u), "evidence": R.evidence(u)})
        v["prf"].append(
            {
                "key": hexb(k),
                "context": ctx,
                "s0": f"{s0:016x}",
                "s1": f"{s1:016x}",
                "position_K6": R.position((s0, s1), 6),
                "position_K97": R.position((s0, s1), 97),
                "words": words,
            }
        )
    v["routing"] = []
    for vocab, sched in [(49152, [20]), (32000, [20]), (262144, [20, 4, 4]), (100, [7, 3, 2]), (10, [4, 3])]:
        toks = sorted({0, vocab - 1, *[rng.randrange(vocab) for _ in range(20)]})
        v["routing"].append(
            {"vocab_size": vocab, "schedule": sched, "paths": {str(t): R.routing_path(t, vocab, sched) for t in toks}}
        )
    v["sample"] = []
    for vocab, sched in [(64, [4]), (200, [20]), (97, [5, 3]), (50, [])]:
        for _ in range(4):
            logits = [rng.gauss(0, 2) for _ in range(vocab)]
            m = max(logits)

            z = sum(math.exp(x - m) for x in logits)
            probs = [math.exp(x - m) / z for x in logits]
            keys = [rb(16) for _ in range(len(sched) + 1)]
            ctx = [rng.randrange(vocab) for _ in range(4)]
            v["sample"].append(
                {
                    "logits": logits,
                    "schedule": sched,
                    "keys": [hexb(k) for k in keys],
                    "context": ctx,
                    "token": R.hero_sample(probs, sched, keys, ctx),
                }
            )
    v["decode"] = []
    for vocab, sched, bits, segs, h in [
        (49152, [20], [2, 2], 6, 4),
        (32000, [], [3], 8, 4),
        (500, [5, 3], [1, 2, 1], 3, 2),
    ]:
        ids = [rng.randrange(vocab) for _ in range(40)]
        ids += ids[10:18]  # repeated contexts must be skipped
        pos = rb(16)
        tables = [(lv + 1, [rb(16) for _ in range(1 << b)]) for lv, b in enumerate(bits)]
        scores, counts = R.segment_scores(ids, h, vocab, sched, segs, pos, tables)
        v["decode"].append(
            {
                "vocab_size": vocab,
                "schedule": sched,
                "segments": segs,
                "context_width": h,
                "ids": ids,
                "position_key": hexb(pos),
                "tables": [{"level": lv, "keys": [hexb(k) for k in ks]} for lv, ks in tables],
                "scores": scores,
                "counts": counts,
                "scored_positions": R.scored_positions(ids, h),
            }
        )
    # Interleaved routing layout (spec section 6), appended so earlier vectors stay byte-identical.
    v["interleave"] = []
    for vocab, stride in [(49152, 20), (32000, 20), (262144, 20), (100, 7), (21, 20)]:
        toks = sorted({0, 1, stride - 1, stride, vocab - 1, *[rng.randrange(vocab) for _ in range(10)]})
        v["interleave"].append({"vocab_size": vocab, "stride": stride,
                                "rho": {str(t): R.interleave(t, vocab, stride) for t in toks},
                                "paths": {str(t): R.routing_path(t, vocab, [stride], stride) for t in toks}})
    v["sample_interleaved"] = []
    for vocab, sched in [(64, [4]), (200, [20]), (97, [5, 3])]:
        for _ in range(3):
            logits = [rng.gauss(0, 2) for _ in range(vocab)]
            m = max(logits)
            z = sum(math.exp(x - m) for x in logits)
            probs = [math.exp(x - m) / z for x in logits]
            keys = [rb(16) for _ in range(len(sched) + 1)]
            ctx = [rng.randrange(vocab) for _ in range(4)]
            v["sample_interleaved"].append({"logits": logits, "schedule": sched, "stride": sched[0],
                                            "keys": [hexb(k) for k in keys], "context": ctx,
                                            "token": R.hero_sample(probs, sched, keys, ctx, sched[0])})
    v["decode_interleaved"] = []
    for vocab, sched, bits, segs, h in [(49152, [20], [2, 2], 6, 4), (500, [5, 3], [1, 2, 1], 3, 2)]:
        ids = [rng.randrange(vocab) for _ in range(40)]
        ids += ids[10:18]
        pos = rb(16)
        tables = [(lv + 1, [rb(16) for _ in range(1 << b)]) for lv, b in enumerate(bits)]
        scores, counts = R.segment_scores(ids, h, vocab, sched, segs, pos, tables, sched[0])
        v["decode_interleaved"].append({"vocab_size": vocab, "schedule": sched, "stride": sched[0], "segments": segs,
                                        "context_width": h, "ids": ids, "position_key": hexb(pos),
                                        "tables": [{"level": lv, "keys": [hexb(k) for k in ks]} for lv, ks in tables],
                                        "scores": scores, "counts": counts})
    OUT.write_text(json.dumps(v, indent=1) + "\n")
    print(f"wrote {OUT}")


def hkdf16(master: bytes, salt: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=16, salt=salt, info=info).derive(master)


def v2_table(master: bytes, level: int, key_bits: int, per_value: bool) -> list[bytes]:
    label = b"hero/v2/value" if per_value else b"hero/v2/table"
    return [hkdf16(master, b"HeRo-watermark-v2", label + struct.pack(">BI", level, a)) for a in range(1 << key_bits)]


def main_v2() -> None:
    """Spec v2 (docs/spec.md sections 11-14): key derivation, window scores, one generation step."""
    rng = random.Random(20261126)
    rb = lambda n: bytes(rng.randrange(256) for _ in range(n))  # noqa: E731
    v: dict = {"spec_version": 2}
    v["hkdf"] = []
    for level, value, per_value in [(1, 0, False), (1, 3, False), (2, 0, True), (2, 4095, True), (3, 77, True)]:
        master = rb(32)
        label = b"hero/v2/value" if per_value else b"hero/v2/table"
        v["hkdf"].append({"master": hexb(master), "level": level, "value": value, "per_value": per_value,
                          "entry_key": hexb(hkdf16(master, b"HeRo-watermark-v2",
                                                   label + struct.pack(">BI", level, value))),
                          "position_key": hexb(hkdf16(master, b"HeRo-watermark-v2", b"hero/v2/position"))})
    v["decode"] = []
    # (vocab, schedule, bits per level, segments, h, windows, per-value flags, stride)
    for vocab, sched, bits, segs, h, windows, flags, stride in [
        (49152, [80], [2, 2], 3, 4, 8, [False, True], 0),  # default shape, 6-bit private value
        (49152, [20], [2, 4], 2, 3, 8, [False, True], 20),  # 8-bit private value, interleaved routing
        (500, [5, 3], [1, 1, 2], 3, 2, 3, [False, True, True], 0),
    ]:
        ids = [rng.randrange(vocab) for _ in range(60)]
        ids += ids[10:18]  # repeated contexts must be skipped
        pos = rb(16)
        tables = [(lv + 1, [rb(16) for _ in range(1 << (b * segs if pv else b))], pv)
                  for lv, (b, pv) in enumerate(zip(bits, flags, strict=True))]
        scores, counts = R.window_scores(ids, h, vocab, sched, segs, pos, tables, stride, windows)
        v["decode"].append({"vocab_size": vocab, "schedule": sched, "segments": segs, "context_width": h,
                            "windows": windows, "stride": stride, "ids": ids, "position_key": hexb(pos),
                            "tables": [{"level": lv, "per_value": pv, "keys": [hexb(k) for k in ks]}
                                       for lv, ks, pv in tables],
                            "scores": scores, "counts": counts, "scored_positions": R.scored_positions(ids, h)})
    # One generation step from master secrets: position segment, per-value key of the whole value.
    v["sample"] = []
    for vocab, sched, bits, segs in [(64, [4], [2, 3], 3), (200, [20], [2, 4], 2)]:
        for _ in range(3):
            masters = [rb(32) for _ in bits]
            flags = [False] + [True] * (len(bits) - 1)
            tabs = [v2_table(m, lv + 1, b * segs if pv else b, pv)
                    for lv, (m, b, pv) in enumerate(zip(masters, bits, flags, strict=True))]
            pos = hkdf16(masters[0], b"HeRo-watermark-v2", b"hero/v2/position")
            values = [rng.randrange(1 << (b * segs)) for b in bits]
            ctx = [rng.randrange(vocab) for _ in range(4)]
            k = R.position(R.prf_seed(pos, ctx), segs)
            level_keys = []
            for (b, pv, tab, val) in zip(bits, flags, tabs, values, strict=True):
                entry = val if pv else (val >> (b * (segs - 1 - k))) & ((1 << b) - 1)
                level_keys.append(tab[entry])
            logits = [rng.gauss(0, 2) for _ in range(vocab)]
            m = max(logits)
            z = sum(math.exp(x - m) for x in logits)
            probs = [math.exp(x - m) / z for x in logits]
            v["sample"].append({"vocab_size": vocab, "schedule": sched, "bits": bits, "segments": segs,
                                "masters": [hexb(x) for x in masters], "values": values, "context": ctx,
                                "logits": logits, "segment": k, "token": R.hero_sample(probs, sched, level_keys, ctx)})
    OUT_V2.write_text(json.dumps(v, indent=1) + "\n")
    print(f"wrote {OUT_V2}")


def v3_keys(master: bytes, level: int, key_bits: int, per_value: bool) -> tuple[bytes, list[bytes]]:
    """(level key, value keys) of spec v3 section 15, with cryptography's HKDF."""
    salt, label = b"HeRo-watermark-v3", b"hero/v3/value" if per_value else b"hero/v3/table"
    level_key = hkdf16(master, salt, b"hero/v3/level" + struct.pack(">B", level))
    return level_key, [hkdf16(master, salt, label + struct.pack(">BI", level, a)) for a in range(1 << key_bits)]


def main_v3(spec_version: int = 3) -> None:
    """Spec v3 (docs/spec.md section 15): keys, level seed ^ value key draws, window scores, generation step.
    Spec v4 (section 18) keeps v3's construction: its vectors are the same kinds of case from another seed, with
    the v4 profile's shape (K_1 = 80, h = 3, 8-bit per-value levels) among the decode cases."""
    rng = random.Random(20261127 if spec_version == 3 else 20261129)
    rb = lambda n: bytes(rng.randrange(256) for _ in range(n))  # noqa: E731
    v: dict = {"spec_version": spec_version}
    v["hkdf"] = []
    for level, value, per_value in [(1, 0, True), (1, 255, True), (1, 3, False), (2, 4095, True), (3, 77, True)]:
        master = rb(32)
        label = b"hero/v3/value" if per_value else b"hero/v3/table"
        v["hkdf"].append({"master": hexb(master), "level": level, "value": value, "per_value": per_value,
                          "level_key": hexb(hkdf16(master, b"HeRo-watermark-v3",
                                                   b"hero/v3/level" + struct.pack(">B", level))),
                          "value_key": hexb(hkdf16(master, b"HeRo-watermark-v3",
                                                   label + struct.pack(">BI", level, value))),
                          "position_key": hexb(hkdf16(master, b"HeRo-watermark-v3", b"hero/v3/position"))})
    v["draw"] = []
    for h in (1, 3, 4, 5):
        level_key, value_key = rb(16), rb(16)
        ctx = [rng.randrange(262144) for _ in range(h)]
        seed = R.prf_seed(level_key, ctx)
        s0, s1 = R.v3_seed(seed, value_key)
        words = [{"j": j, "u32": R.random_u32((s0, s1), j), "evidence": R.evidence(R.random_u32((s0, s1), j))}
                 for j in (0, 1, 3, 4, 79, 613, 49151)]
        v["draw"].append({"level_key": hexb(level_key), "value_key": hexb(value_key), "context": ctx,
                          "level_s0": f"{seed[0]:016x}", "level_s1": f"{seed[1]:016x}",
                          "s0": f"{s0:016x}", "s1": f"{s1:016x}", "words": words})
    v["decode"] = []
    # (vocab, schedule, bits per level, segments, h, windows, per-value flags, stride)
    v4_shape = [(49152, [80], [2, 2], 4, 3, 8, [True, True], 0)] if spec_version == 4 else []  # 8-bit values
    for vocab, sched, bits, segs, h, windows, flags, stride in [
        *v4_shape,
        (49152, [80], [2, 3], 2, 3, 8, [True, True], 0),  # v3 shape: public 4-bit and private 6-bit values
        (49152, [20], [2, 2], 3, 4, 8, [False, True], 20),  # segmented level 1 under the v3 construction
        (500, [5, 3], [1, 1, 2], 3, 2, 3, [True, False, True], 0),
    ]:
        ids = [rng.randrange(vocab) for _ in range(60)]
        ids += ids[10:18]  # repeated contexts must be skipped
        pos = rb(16)
        tables = [(lv + 1, [rb(16) for _ in range(1 << (b * segs if pv else b))], pv, rb(16))
                  for lv, (b, pv) in enumerate(zip(bits, flags, strict=True))]
        scores, counts = R.window_scores(ids, h, vocab, sched, segs, pos, tables, stride, windows)
        v["decode"].append({"vocab_size": vocab, "schedule": sched, "segments": segs, "context_width": h,
                            "windows": windows, "stride": stride, "ids": ids, "position_key": hexb(pos),
                            "tables": [{"level": lv, "per_value": pv, "level_key": hexb(lk),
                                        "keys": [hexb(k) for k in ks]} for lv, ks, pv, lk in tables],
                            "scores": scores, "counts": counts, "scored_positions": R.scored_positions(ids, h)})
    v["sample"] = []
    for vocab, sched, bits, segs in [(64, [4], [2, 3], 2), (200, [20], [2, 4], 2)] + (
            [(1000, [80], [2, 3], 2)] if spec_version == 4 else []):
        for _ in range(3):
            masters = [rb(32) for _ in bits]
            tabs = [v3_keys(m, lv + 1, b * segs, True) for lv, (m, b) in enumerate(zip(masters, bits, strict=True))]
            values = [rng.randrange(1 << (b * segs)) for b in bits]
            ctx = [rng.randrange(vocab) for _ in range(4)]
            logits = [rng.gauss(0, 2) for _ in range(vocab)]
            m = max(logits)
            z = sum(math.exp(x - m) for x in logits)
            probs = [math.exp(x - m) / z for x in logits]
            token = R.hero_sample(probs, sched, [t[1][val] for t, val in zip(tabs, values, strict=True)], ctx,
                                  seed_keys=[t[0] for t in tabs])
            v["sample"].append({"vocab_size": vocab, "schedule": sched, "bits": bits, "segments": segs,
                                "masters": [hexb(x) for x in masters], "values": values, "context": ctx,
                                "logits": logits, "token": token})
    out = OUT_V3 if spec_version == 3 else OUT_V4
    out.write_text(json.dumps(v, indent=1) + "\n")
    print(f"wrote {out}")


def main_v5() -> None:
    """Spec v5 (docs/spec.md section 19): lanes, the level a lane carries, whole-token draws under that level's
    stream (keys as v3), and per-token evidence of a text under one level key (what each level reads)."""
    rng = random.Random(20261206)
    rb = lambda n: bytes(rng.randrange(256) for _ in range(n))  # noqa: E731
    v: dict = {"spec_version": 5, "lanes": 100}
    v["lane"] = []
    for h in (1, 3, 4):
        pos = rb(16)
        ctxs = [[rng.randrange(262144) for _ in range(h)] for _ in range(6)]
        v["lane"].append({"position_key": hexb(pos), "contexts": ctxs, "lanes": [R.v5_lane(pos, c) for c in ctxs]})
    v["level"] = [{"lane": q, "percent": pct, "depth": d, "level": R.v5_level(q, pct, d)}
                  for q, pct, d in [(0, 50, 2), (49, 50, 2), (50, 50, 2), (99, 50, 2), (99, 100, 2), (34, 35, 3),
                                    (35, 35, 3), (67, 35, 3), (68, 35, 3), (99, 35, 3), (0, 1, 4), (98, 1, 4)]]
    v["sample"] = []
    # (vocab, bits per level, segments, h, multiplex (front_tokens, front_public, public), generator index)
    for vocab, bits, segs, h, mx, t in [
        (97, [2, 3], 2, 3, (50, 100, 50), 10), (97, [2, 3], 2, 3, (50, 100, 50), 60),
        (1000, [2, 3], 4, 3, (50, 100, 35), 70), (1000, [1, 2, 2], 2, 2, (0, 10, 10), 5),
        (1000, [2, 3], 4, 3, (20, 80, 20), 25), (4000, [2, 3], 4, 3, (50, 100, 50), 90),
    ]:
        for _ in range(3):
            masters = [rb(32) for _ in bits]
            tabs = [v3_keys(m, lv + 1, b * segs, True) for lv, (m, b) in enumerate(zip(masters, bits, strict=True))]
            pos = hkdf16(masters[0], b"HeRo-watermark-v3", b"hero/v3/position")
            values = [rng.randrange(1 << (b * segs)) for b in bits]
            ctx = [rng.randrange(vocab) for _ in range(h)]
            logits = [struct.unpack("<f", struct.pack("<f", rng.gauss(0, 2)))[0] for _ in range(vocab)]  # float32-exact
            m = max(logits)
            z = sum(math.exp(x - m) for x in logits)
            probs = [math.exp(x - m) / z for x in logits]
            pct = mx[1] if t < mx[0] else mx[2]
            lane = R.v5_lane(pos, ctx)
            token = R.v5_sample(probs, [tb[1][val] for tb, val in zip(tabs, values, strict=True)],
                                [tb[0] for tb in tabs], pos, ctx, pct)
            v["sample"].append({"vocab_size": vocab, "bits": bits, "segments": segs, "context_width": h,
                                "multiplex": list(mx), "generated": t, "masters": [hexb(x) for x in masters],
                                "values": values, "context": ctx, "logits": logits, "lane": lane,
                                "level": R.v5_level(lane, pct, len(bits)), "token": token})
    v["decode"] = []
    for vocab, h, ncand in [(49152, 3, 4), (1000, 2, 8), (262144, 4, 3)]:
        ids = [rng.randrange(vocab) for _ in range(40)]
        ids += ids[5:12]  # repeated contexts are skipped
        pos, level_key = rb(16), rb(16)
        value_keys = [rb(16) for _ in range(ncand)]
        rows = R.v5_token_evidence(ids, h, pos, level_key, value_keys)
        v["decode"].append({"vocab_size": vocab, "context_width": h, "ids": ids, "position_key": hexb(pos),
                            "level_key": hexb(level_key), "value_keys": [hexb(k) for k in value_keys],
                            "positions": [r[0] for r in rows], "lanes": [r[1] for r in rows],
                            "evidence": [r[2] for r in rows]})
    OUT_V5.write_text(json.dumps(v, indent=1) + "\n")
    print(f"wrote {OUT_V5}")


if __name__ == "__main__":
    which = sys.argv[1:] or ["v1", "v2", "v3", "v4", "v5"]
    if "v1" in which:
        main()
    if "v2" in which:
        main_v2()
    if "v3" in which:
        main_v3()
    if "v4" in which:
        main_v3(4)
    if "v5" in which:
        main_v5()
