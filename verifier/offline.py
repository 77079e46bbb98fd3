"""Generate and decode on this machine, without a service: the offline Python API (docs/offline.md).

    from verifier.offline import LocalHero

    with LocalHero() as hero:                      # HERO_HOME's key store, the deployment's profile
        (gen,) = hero.generate(["The history of the printing press"], [{"model": 37, "user": 3001}],
                               max_new_tokens=120)
        (res,) = hero.decode([gen["text"]], max_level=2, expect=[{"model": 37}])

The same key store, profile rule (verifier.keys.deployment), decode path (verifier.verify.runner) and result
schema as `hero serve`'s POST /v1/verify; the `hero generate` / `hero decode` commands run on it. Every
generation and decode is audited as the OS user (role `cli`) and committed before its result is returned,
as the CLI does: the keys of every level are used here, so nothing leaves without its record.
"""

from __future__ import annotations

import getpass
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verifier.audit.service import Actor
    from verifier.base.settings import Settings
    from verifier.engine.profile import Profile

Progress = Callable[[str], None]


def os_actor() -> Actor:
    """Who local work (the offline API and every audited CLI command) is audited as: the OS user, role `cli`, a
    fresh id `cli-<hex>` for this invocation."""
    from verifier.audit.service import Actor

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = f"uid-{os.getuid()}"
    return Actor(user, "cli", f"cli-{uuid.uuid4().hex}")


def stderr_progress(message: str) -> None:
    print(f"hero: {message}", file=sys.stderr, flush=True)


class LocalHero:
    """The key store of HERO_HOME (or `settings`) and the profile the deployment serves (`profile` overrides,
    as --profile does). Models, tokenizers and decode tables load on first use and stay for later calls, so
    a batch pays each load once."""

    def __init__(self, settings: Settings | None = None, profile: str | None = None, *,
                 actor: Actor | None = None, progress: Progress | None = None) -> None:
        from verifier import process
        from verifier.base.settings import Settings
        from verifier.engine.profile import resolve_profile
        from verifier.keys.deployment import deployment_profile

        self.settings = settings or Settings()
        self.store = process.open_store(self.settings)
        self.profile: Profile = resolve_profile(deployment_profile(profile or self.settings.profile, self.store.db))
        self.actor = actor or os_actor()
        self.progress = progress or (lambda _m: None)
        self._models: dict[str, tuple[Any, Any]] = {}
        self._runner = None

    def __repr__(self) -> str:
        return f"LocalHero(profile={self.profile.name!r})"

    def __enter__(self) -> LocalHero:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self.store.db.dispose()

    # -- generation ------------------------------------------------------------------------------
    def model(self, name: str = "smollm2") -> tuple[Any, Any]:
        """(model, tokenizer), loaded once; says on `progress` what the first load does and how long it took. The
        profile's own model (`name` is its tokenizer) loads at the hub revision the profile pins."""
        if name not in self._models:
            revision = self.profile.tokenizer_revision if name == self.profile.tokenizer else None
            from verifier.lm import cache_dir, is_builtin, load_model

            if is_builtin(name) and not (cache_dir(name) / "config.json").is_file():
                self.progress(f"first use of {name!r}: converting its GGUF weights to a float32 model under "
                              f"{cache_dir(name)} (30-100 s, once; later runs load the converted copy)")
            self.progress(f"loading {name!r}...")
            t0 = time.perf_counter()
            self._models[name] = load_model(name) if revision is None else load_model(name, revision=revision)
            self.progress(f"loaded {name!r} in {time.perf_counter() - t0:.1f} s")
        return self._models[name]

    def generate(self, prompts: Sequence[str], fields: Sequence[Mapping[str, int]], *, model: str = "smollm2",
                 max_new_tokens: int = 200, min_new_tokens: int = 0, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, opening_nats: float | None = None,
                 chat: bool = False, batch_size: int = 8, on_step: Callable[[], None] | None = None) -> list[dict]:
        """Watermarked continuations, one dict per prompt: text, payload, key_versions, tokens. `chat`: each
        prompt is a user message under the model's chat template. Audited before they are returned."""
        from verifier.engine.payload import encode_payload
        from verifier.provider.generation import generate_watermarked

        if len(prompts) != len(fields):
            raise ValueError(f"{len(prompts)} prompts but {len(fields)} payloads")
        payloads = [dict(f) for f in fields]
        for i, (p, f) in enumerate(zip(prompts, payloads, strict=True), start=1):
            if not isinstance(p, str) or not p.strip():
                raise ValueError(f"prompt {i} is empty")
            encode_payload(self.profile, f)  # a bad field is named before the slow model load
        if not 1 <= max_new_tokens <= 4096:
            raise ValueError("max_new_tokens must be in 1..4096")
        if not 0 <= min_new_tokens <= max_new_tokens:
            raise ValueError("min_new_tokens must be in 0..max_new_tokens")
        from verifier.provider.chat import chat_prompt

        keyset = self.store.active_keyset(self.profile)
        lm, tokenizer = self.model(model)
        texts = [chat_prompt(tokenizer, p) for p in prompts] if chat else list(prompts)
        versions = {str(t.level): t.version for t in keyset.tables}
        out: list[dict] = []
        for start in range(0, len(texts), max(1, batch_size)):
            part = slice(start, start + max(1, batch_size))
            t0 = time.perf_counter()
            gens = generate_watermarked(
                lm, tokenizer, texts[part], payloads[part], self.profile, keyset, max_new_tokens=max_new_tokens,
                min_new_tokens=min_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, on_step=on_step,
                opening_nats=opening_nats)
            done = [{"text": g.text, "payload": f, "key_versions": versions, "tokens": len(g.token_ids)}
                    for g, f in zip(gens, payloads[part], strict=True)]
            self._audit_generation(done)
            out += done
            took = time.perf_counter() - t0
            made = sum(d["tokens"] for d in done)
            self.progress(f"generated {len(out)}/{len(texts)}: {made} tokens in {took:.1f} s "
                          f"({made / max(took, 1e-9):.1f} tokens/s)")
        return out

    def _audit_generation(self, gens: Sequence[dict]) -> None:
        """A local generation uses every level's key, the private ones included, to mark a text with any
        payload: text that decodes as "user 1234" is what attribution rests on. So it is on the record like a
        decode (payload claimed, versions used, the text's digest), committed before the text is returned."""
        from verifier.audit.service import AuditEvent, record, text_digest

        a = self.actor
        events = []
        for g in gens:
            payload = " ".join(f"{k}={v}" for k, v in sorted(g["payload"].items()))
            levels = [int(lv) for lv in g["key_versions"]]
            events.append(AuditEvent.of(a, "generate", levels, ",".join(g["key_versions"].values()),
                                        text_digest(g["text"]), "generated", f"payload {payload}"))
        record(self.store.db, events)

    # -- decoding --------------------------------------------------------------------------------
    def runner(self, scorer: Any = None):
        """The one decode runner (verifier.verify.runner.Runner) over this store, made once; its tokenizer from
        tokenizer.json alone when the model's converted copy has one (no transformers import: a cold decode
        starts in a fraction of the time)."""
        if self._runner is None:
            from verifier.lm import TokenizerCache, decode_tokenizer
            from verifier.verify.runner import Runner

            self._runner = Runner(self.store, TokenizerCache(decode_tokenizer), self.settings.alpha, scorer=scorer)
        return self._runner

    def decode(self, texts: Sequence[str], *, max_level: int = 1,
               expect: Mapping[str, int] | Sequence[Mapping[str, int] | None] | None = None,
               alpha: float | None = None, scorer: Any = None, batch_size: int = 32,
               on_done: Callable[[int], None] | None = None) -> list[dict]:
        """Results in the API's schema, one per text, in order. `expect`: one mapping for every text, or one
        (or None) per text ("is text 3 from model 37?"). Levels 1..max_level, with the operator's grant."""
        from verifier.audit.service import record, text_digest
        from verifier.auth.policy import OPERATOR
        from verifier.verify.admission import check_texts
        from verifier.verify.disclosure import audit_events
        from verifier.verify.runner import DecodeJob
        from verifier.verify.schemas import ResultOut
        from verifier.verify.service import expected_levels

        if max_level > self.profile.depth:
            raise ValueError(f"profile {self.profile.name!r} has only {self.profile.depth} levels")
        texts = list(texts)
        per_text = _per_text(expect, len(texts))
        grant = OPERATOR.grant(self.profile, max_level)
        asked = [expected_levels(self.profile, e, grant.level) for e in per_text]
        check_texts(texts, max(1, len(texts)), self.settings.max_text_chars)
        alpha = self.settings.alpha if alpha is None else alpha
        runner = self.runner(scorer)
        results: list[dict | None] = [None] * len(texts)
        # one decode per run of texts asking the same values (a job has one `expect`), at most batch_size texts
        groups: dict[tuple, list[int]] = {}
        for i, a in enumerate(asked):
            groups.setdefault(a, []).append(i)
        done = 0
        for a, idx in groups.items():
            for start in range(0, len(idx), max(1, batch_size)):
                part = idx[start:start + max(1, batch_size)]
                outs = runner.decode(DecodeJob(self.profile, tuple(texts[i] for i in part), grant.level, alpha,
                                               expect=a))
                # a disclosure like any other: audited (and committed) before anything is returned
                record(self.store.db, audit_events(self.actor, [text_digest(texts[i]) for i in part], outs,
                                                   action="decode"))
                for i, o in zip(part, outs, strict=True):
                    results[i] = ResultOut.model_validate(o).model_dump(mode="json", by_alias=True)
                done += len(part)
                if on_done is not None:
                    on_done(done)
        return [r for r in results if r is not None]


def _per_text(expect: Mapping[str, int] | Sequence[Mapping[str, int] | None] | None, n: int) -> list:
    if expect is None or isinstance(expect, Mapping):
        return [expect] * n
    per = list(expect)
    if len(per) != n:
        raise ValueError(f"expect names {len(per)} texts, texts has {n}")
    return per
