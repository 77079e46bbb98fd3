"""`hero eval --sections attribution`: can the service's naming of users be trusted? (issue 11)

Generation first (resumable, in priority order), then the measurements, each into its own results cell.
"""

from __future__ import annotations

from hero_eval.attribution import build_attr_method
from hero_eval.attribution_data import AttributionData, DataPlan
from hero_eval.methods import UNWATERMARKED, ModelAwareMethod
from hero_eval.sampling import COLLUSION_SETTING, SETTINGS

ROUND = 50  # prompts per generation round (a multiple of the batch size keeps batch seeds fixed)


class AttributionSection:
    def __init__(self, runner) -> None:
        self.r = runner
        cfg = runner.cfg
        self.plan = DataPlan(prompts=cfg.prompts, tokens=cfg.tokens, **(cfg.attr_plan or {}))
        self.data = AttributionData(runner, self.plan)
        self.settings = [SETTINGS[s] for s in cfg.settings]
        self.human_cache: dict = {}  # (method, tokens) -> results on the human texts (setting-independent)
        self.methods = {}
        for name in cfg.attr_methods:
            m = build_attr_method(name, cfg.seed, model=runner.model, store=runner.cache / "lm-probs")
            if m is None:
                runner.say(f"attribution: {name} unavailable (no such profile or no model here): skipped")
                runner.results["skipped"].append(f"attribution:{name}")
            else:
                self.methods[name] = m

    def texts(self, name: str, setting: str | None = None) -> int:
        """Main-cell texts of a method: `prompts`, or fewer where `attr_caps` says so (time on 2 cores);
        a cap 'METHOD@SETTING' applies to one sampling setting and wins over 'METHOD'."""
        caps = self.r.cfg.attr_caps or {}
        cap = caps.get(f"{name}@{setting}", caps.get(name, self.plan.prompts))
        return min(self.plan.prompts, cap)

    def humans(self, name: str) -> int:
        """Human texts a method is measured on: all, or fewer where a cap 'METHOD@humans' says so (a
        model-aware decode re-runs the LM: about a CPU-second per 200-token text)."""
        return (self.r.cfg.attr_caps or {}).get(f"{name}@humans", len(self.r.human_bodies))

    def generate_all(self) -> None:
        """Every text the section needs, in rounds of `ROUND` prompts over all main cells (each up to its
        cap), so that a run cut short leaves the cells with similar numbers of texts; diversity and
        collusion texts after the first round."""
        r, p = self.r, self.plan
        for k, start in enumerate(range(0, p.prompts, ROUND)):
            for s in self.settings:
                for name, m in self.generators().items():
                    idx = range(start, min(start + ROUND, self.texts(name, s.name)))
                    if len(idx):
                        r.say(f"attribution data: main {name} {s.name} texts {idx.start}..{idx.stop - 1}")
                        self.data.main(m, s, idx)
            if k == 0:
                self._small_sets()

    def _small_sets(self) -> None:
        """Diversity (HeRo against plain sampling) and collusion texts."""
        for s in self.settings:
            for m in self.diversity_methods().values():
                for p in range(self.plan.div_prompts):
                    self.data.repeats(m, s, p)
                for p in range(self.plan.user_prompts):
                    self.data.users(m, s, p)
        for name, m in self.diversity_methods().items() if self.plan.col_users else ():
            self.r.say(f"attribution data: collusion {name}")
            self.data.collusion(m, COLLUSION_SETTING)

    def generators(self) -> dict:
        """The methods that make texts: a model-aware method reads its base method's texts."""
        out = {}
        for name, m in self.methods.items():
            if isinstance(m, ModelAwareMethod):
                out.setdefault(m.base.name, m.base)
            else:
                out[name] = m
        return out

    def diversity_methods(self) -> dict:
        """HeRo and plain sampling (unwatermarked): the baselines sample with fresh randomness anyway."""
        return {n: m for n, m in self.generators().items() if n.startswith("HeRo") or n == UNWATERMARKED}

    def run(self) -> None:
        if self.r.cfg.measure_only:  # another process generates: reading only, never appending to its files
            self.data.read_only = True
        else:
            self.generate_all()
        if self.r.cfg.generate_only:
            return
        from hero_eval import attribution_eval

        attribution_eval.evaluate(self)
