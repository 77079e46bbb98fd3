"""The attribution section's "HeRo-v1 (engine before v2)" rows: the v1 default profile's texts decoded by
the engine as it was before spec v2 (every level with a scored token released its fields).

Run at a commit before the spec-v2 engine (3135472 for the committed rows) with the attribution
section's generation cache filled (only cached texts are used; nothing is generated when the first
N texts of HeRo-v1 and unwatermarked exist in both settings):

    HERO_HOME=... python research/eval_v1_engine_rows.py 50 docs/evaluation/attribution_v1_engine.json

`hero eval --sections attribution --out docs/evaluation` then adds the saved rows to the report.
"""

from __future__ import annotations

import json
import sys

import torch

from hero_eval.attribution_eval import MethodEval
from hero_eval.attribution_extra import decode_cost
from hero_eval.attribution_section import AttributionSection
from hero_eval.runner import Config, Runner


def main(n: int, out_path: str) -> None:
    try:
        from verifier.lm import load_model
    except ImportError:  # the commit this is meant to run at kept the models under the engine
        from verifier.engine.models import load_model

    torch.set_num_threads(1)
    cfg = Config(
        seed=0,
        prompts=200,
        small=32,
        humans=2000,
        tokens=200,
        batch_size=50,
        sections=(),
        attr_methods=("HeRo-v1", "unwatermarked"),
        out="",
        attr_caps={"HeRo-v1": n, "unwatermarked": n},
    )
    model, tok = load_model("smollm2")
    sec = AttributionSection(Runner(cfg, model, tok))
    out: dict = {}
    for s in sec.settings:
        recs = sec.data.main(sec.methods["HeRo-v1"], s, range(n))
        unw = sec.data.main(sec.methods["unwatermarked"], s, range(n))
        res = MethodEval(sec, sec.methods["HeRo-v1"], recs, unw).run()
        res.pop("gen_ppl", None)  # the PPL rows belong to the main HeRo-v1 cell (same texts)
        res.pop("ppl", None)
        out[s.name] = res
        print(s.name, {k: v["exact"]["p"] for k, v in res["prefix"].items()}, res["fa_human"], flush=True)
    sec.methods = {"HeRo-v1": sec.methods["HeRo-v1"]}
    out["decode_cost"] = decode_cost(sec)
    with open(out_path, "w") as fh:
        json.dump(out, fh)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
