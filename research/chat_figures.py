"""The chat report's detection, calibration, quality and natural-length figures from the cached chat texts.

Reads the generations `hero eval --sections chat` cached under $HERO_HOME/eval-cache/seed<S>/chat-chat/ and
computes, with the chat section's own functions: detection at p <= 1e-3 at 50 / 100 / 200 tokens for HeRo
(moderator: level-1 keys only; auditor: all levels, model-free) and SynthID-Text (binomial test), SynthID's
wrong-key calibration, the texts' median perplexity and mean entropy, perplexity paired against plain sampling,
distinct outputs of 20 identical requests, and the natural-length answers. No model is loaded (tokenizer only).

    python research/chat_figures.py --hero 50 --synthid 75 --plain 50 [--seed 0] [--profile v3]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
from pathlib import Path

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hero", type=int, default=50)
    ap.add_argument("--synthid", type=int, default=75)
    ap.add_argument("--plain", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", default="v3")
    a = ap.parse_args()
    torch.set_num_threads(1)
    from scipy import stats

    from hero_eval.attribution import build_attr_method, hero_name
    from hero_eval.attribution_data import _profile_tag
    from hero_eval.baselines.synthid import SynthIDDetector, synthid_keys
    from hero_eval.chat import WRONG_KEYS, _natural_summary, paired_ppl
    from hero_eval.methods import _decode_safe
    from hero_eval.metrics import median_ci, proportion
    from verifier.engine.decoder import Decoder
    from verifier.lm import load_tokenizer

    tok = load_tokenizer("smollm2")
    root = Path(os.environ.get("HERO_HOME") or "~/.hero").expanduser() / "eval-cache" / f"seed{a.seed}" / "chat-chat"
    hero = build_attr_method(hero_name(a.profile), a.seed)
    tag = _profile_tag(hero)

    def load(name: str, n: int | None = None) -> list[dict]:
        recs: dict[int, dict] = {}
        path = root / name
        if not path.exists():
            return []
        for line in path.read_text().splitlines():
            r = json.loads(line)
            recs[r["i"]] = r
        return [recs[i] for i in sorted(recs)][:n] if n else [recs[i] for i in sorted(recs)]

    def seen(recs: list[dict], t: int | None) -> list[list[int]]:
        return [tok(tok.decode(r["ids"][:t] if t else r["ids"], skip_special_tokens=True),
                    add_special_tokens=False)["input_ids"] for r in recs]

    s = "_k50p0.9"
    hname = f"{hero.name}_{hero.total_bits}b"
    H = load(f"{hname}_200t_user12{tag}{s}.jsonl", a.hero)
    S = load(f"SynthID-Text_0b_200t_user12{s}.jsonl", a.synthid)
    U = load(f"unwatermarked_24b_200t{s}.jsonl", a.plain)
    out: dict = {"texts": {}}
    for name, recs in (("hero", H), ("synthid", S), ("plain", U)):
        out["texts"][name] = {"n": len(recs), "ppl": median_ci([r["gen_ppl"] for r in recs]),
                              "entropy": float(np.mean([r["entropy"] for r in recs]))}
    moderator = Decoder(hero.profile, {1: [hero.keyset.tables[0]]})
    det = SynthIDDetector(synthid_keys(a.seed), tok.eos_token_id)
    for t in (50, 100, 200):
        mod = [0.0 if r is None else -r.log10_p_value for r in _decode_safe(moderator, seen(H, t))]
        aud = [d.score for d in hero.decode(seen(H, t))]
        syn = [x.p_value for x in det.score(seen(S, t))]
        out[f"{t}"] = {"hero_moderator": proportion(sum(x >= 3 for x in mod), len(mod)),
                       "hero_auditor": proportion(sum(x >= 3 for x in aud), len(aud)),
                       "synthid": proportion(sum(p <= 1e-3 for p in syn), len(syn))}
    full = seen(S, None)
    wrong = [x.p_value for k in range(WRONG_KEYS)
             for x in SynthIDDetector(synthid_keys(a.seed, f"wrong{k}"), tok.eos_token_id).score(full)]
    out["synthid_wrong_keys"] = {"n": len(wrong), "p_le_0.01": proportion(sum(p <= 1e-2 for p in wrong), len(wrong)),
                                 "p_le_0.001": proportion(sum(p <= 1e-3 for p in wrong), len(wrong)),
                                 "ks_p": float(stats.kstest(wrong, "uniform").pvalue)}
    out["paired_ppl"] = {"hero": paired_ppl(H, U), "synthid": paired_ppl(S, U)}
    out["distinct_of_20"] = {Path(f).name: len({tuple(r["ids"]) for r in load(Path(f).name)})
                             for f in sorted(glob.glob(str(root / f"*_50t_user12*_rep*{s}.jsonl")))}
    nat = load(f"{hname}_256t_natural_user12{tag}{s}.jsonl")
    if nat:
        sc = [0.0 if r is None else -r.log10_p_value for r in _decode_safe(moderator, seen(nat, None))]
        summary = _natural_summary(nat, sc)
        summary.pop("lengths")
        out["natural_hero"] = summary
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
