"""`hero eval --sections attribution`: can the service's naming of users be trusted? (issue 11)

Generation first (resumable, in priority order), then the measurements, each into its own results cell.
"""

from __future__ import annotations

from verifier.evaluation.attribution import build_attr_method
from verifier.evaluation.attribution_data import AttributionData, DataPlan
from verifier.evaluation.methods import UNWATERMARKED
from verifier.evaluation.sampling import PROVIDER, SETTINGS

COLLUSION_SETTING = PROVIDER
ROUND = 50  # prompts per generation round (a multiple of the batch size keeps batch seeds fixed)


class AttributionSection:
    def __init__(self, runner) -> None:
        self.r = runner
        cfg = runner.cfg
        self.plan = DataPlan(prompts=cfg.prompts, tokens=cfg.tokens, **(cfg.attr_plan or {}))
        self.data = AttributionData(runner, self.plan)
        self.settings = [SETTINGS[s] for s in cfg.settings]
        self.methods = {}
        for name in cfg.attr_methods:
            m = build_attr_method(name, cfg.seed)
            if m is None:
                runner.say(f"attribution: {name} unavailable (no spec-v2 default profile yet): skipped")
                runner.results["skipped"].append(f"attribution:{name}")
            else:
                self.methods[name] = m

    def generate_all(self) -> None:
        """Every text the section needs, in rounds of `ROUND` prompts over all main cells, so that a run cut
        short leaves every cell with the same number of texts; diversity and collusion texts after the
        first half of the main cells."""
        r, p = self.r, self.plan
        rounds = [range(a, min(a + ROUND, p.prompts)) for a in range(0, p.prompts, ROUND)]
        half = (len(rounds) + 1) // 2
        for k, idx in enumerate(rounds):
            for s in self.settings:
                for name, m in self.methods.items():
                    r.say(f"attribution data: main {name} {s.name} texts {idx.start}..{idx.stop - 1}")
                    self.data.main(m, s, idx)
            if k == half - 1:
                self._small_sets()

    def _small_sets(self) -> None:
        for s in self.settings:
            for m in self.methods.values():
                for p in range(self.plan.div_prompts):
                    self.data.repeats(m, s, p)
                for p in range(self.plan.user_prompts):
                    self.data.users(m, s, p)
        for name, m in self.methods.items():
            if name.startswith("HeRo") or name == UNWATERMARKED:
                self.r.say(f"attribution data: collusion {name}")
                self.data.collusion(m, COLLUSION_SETTING)

    def run(self) -> None:
        self.generate_all()
        if self.r.cfg.generate_only:
            return
        from verifier.evaluation import attribution_eval

        attribution_eval.evaluate(self)
