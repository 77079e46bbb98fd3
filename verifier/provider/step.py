"""The serving-engine seam: per-request watermark state in slots, for engines with continuous batching, and the
serving policy over it: a request whose draw failed never gets unwatermarked text.

vLLM's plugin (verifier/provider/vllm.py) is this module plus vLLM's translation; SGLang, TGI or llama.cpp
bindings are the same plus theirs (docs/providers.md, "Other serving engines"). What an engine does:

    keys = BundleKeys(private_key_file="/run/hero/x25519.key", bundle_file="/run/hero/bundle", service_key_file=..)
    slots = RequestSlots(max_requests, device, keys.bundle, stop_token=tokenizer.eos_token_id, enforce=False)
    # a request arrives in slot s (its payload from the request's extra arguments, read in one place):
    slots.admit(s, request.extra, temperature=.., top_k=.., top_p=.., min_p=.., prompt=prompt_ids, tokens=resumed)
    # each step, before the engine's sampler: row i of the logits holds the request in slot row_slots[i]
    slots.step(logits, row_slots)      # drawn rows one-hot at their token, refused rows at stop_token, in place
    # a request finished: slots.remove(s)

What the slots hold: the request's payload, its warping parameters, its ids (contexts are built here:
`context_tail`), tokens drawn so far, the log of continuation contexts already marked and its gated opening
(gpu/opening.py), all in tensors on the device, indexed by slot so the engine's batch rows may move (`move`).
A resumed request's ids are replayed into its log after preemption. The bundle is asked for at every `add`: a
rotation applies to new requests, a running one keeps the key tables it started with. A rotation may change keys,
never the profile's shape (`shape_change`): `BundleKeys` refuses such a bundle when it is fetched (one warning
line) and keeps serving with the bundle it has until that one expires. The draw is `FusedSampler.step`, the one
step of every generation path (gpu/step.py).

The serving policy is the seam's, so every engine on it gets it: a payload or state that cannot be set up
(`add`), a malformed payload past admission (`admit`) or a draw that raises ends that request: it is never drawn
again and its rows are forced to `stop_token` (the model's end-of-sequence id); the exception's type is logged
(never its text: it may quote a payload) and kept in `errors[slot]`; the other requests of the batch are drawn as
usual. In enforce mode a request without a payload (and a slot no request was added to) is ended the same way.
Speculative decoding is refused at construction. Admission (`validate_payload`) refuses bad payloads before they
reach a slot.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gpu import prf
from gpu.opening import OpeningGate
from gpu.step import ContextLog, FusedSampler
from verifier.engine.fused import context_tail, make_fused_sampler, new_generator, new_opening
from verifier.engine.payload import encode_payload
from verifier.engine.profile import Profile
from verifier.provider.bundle import BundleError, BundleExpired, GenerationBundle, open_bundle, service_keys
from verifier.provider.refresh import token_subject

__all__ = ["EXTRA_KEY", "GREEDY_EPS", "BundleKeys", "RequestSlots", "context_tail", "new_generator", "one_hot_rows",
           "parse_payload", "profile_shape", "refuse_speculative", "shape_change", "validate_payload"]

log = logging.getLogger("hero.provider.step")

EXTRA_KEY = "hero"  # a request's payload: its extra arguments' "hero" entry, {"model": 37, "user": 1234}
GREEDY_EPS = 1e-5  # a temperature below this is greedy decoding: it cannot carry a watermark


def _field_value(name: str, value: Any) -> int:
    """One payload value: an integer, or a string of decimal digits (an HTTP client may quote it)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise ValueError(f"payload field {name!r} must be an integer")


def parse_payload(extra: Mapping[str, Any] | None, key: str = EXTRA_KEY) -> Mapping[str, int] | None:
    """A request's payload fields from its extra arguments (None: not watermarked). The one place a serving
    engine's request payload is read; ValueError when it is malformed.

    Two spellings: nested, `{"hero": {"model": 37, "user": 1234}}` (the Python API), and flat,
    `{"hero_model": 37, "hero_user": 1234}` (one `hero_<field>` per field): vLLM's OpenAI server passes
    `vllm_xargs` as extra arguments and allows only flat values there. A request may not use both."""
    extra = extra or {}
    fields = extra.get(key)
    prefix = f"{key}_"
    flat = {k[len(prefix):]: v for k, v in extra.items() if isinstance(k, str) and k.startswith(prefix)}
    if fields is None and not flat:
        return None
    if fields is not None and flat:
        raise ValueError(f"give the payload either as extra_args[{key!r}] or as {prefix}<field> keys, not both")
    if flat:
        if not all(flat):
            raise ValueError(f"a flat payload key is {prefix}<field>, e.g. {prefix}user")
        return {name: _field_value(f"{prefix}{name}", v) for name, v in flat.items()}
    if not isinstance(fields, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in fields.items()
    ):
        raise ValueError(f"extra_args[{key!r}] must map field names to integers")
    return fields


def validate_payload(fields: Mapping[str, int], temperature: float | None,
                     bundles: Callable[[], GenerationBundle | None], where: str = "") -> None:
    """Admission check of a watermarked request: ValueError (an engine's HTTP 400) naming what is wrong.
    `where`: how this engine configures its bundle (said when none is)."""
    if (temperature or 0.0) < GREEDY_EPS:
        raise ValueError("a watermarked request needs sampling (temperature > 0)")
    bundle = bundles()
    if bundle is None:
        raise ValueError(f"this engine has no HeRo bundle configured{f' ({where})' if where else ''}")
    encode_payload(bundle.profile, fields)  # PayloadError (a ValueError) names the bad field


def profile_shape(profile: Profile) -> dict[str, Any]:
    """What an engine's state is built for: the logits' width, the payload tensors' layout, the routing, the fields
    and the tokenizer. Everything of the profile but its keys and spec v4's issued lists (a deployment appends the
    model ids it issues: same keys, same routing, so a bundle with a longer list swaps in)."""
    levels = " ".join(
        f"{lv.bits}b{f'/K={lv.chunks}' if lv.chunks is not None else ''}/{lv.encoding}"
        f"[{','.join(f'{f.name}:{f.bits}' for f in lv.fields)}]" for lv in profile.levels)
    return {"vocab_size": profile.vocab_size, "context_width": profile.context_width, "segments": profile.segments,
            "spec_version": profile.spec_version, "routing": profile.routing, "levels": levels,
            "tokenizer": profile.tokenizer, "revision": profile.tokenizer_revision,
            "tokenizer_fingerprint": (profile.tokenizer_fingerprint or "")[:16] or None}


def shape_change(engine: Profile, new: Profile) -> str | None:
    """None when `new` has the shape of the profile the engine serves, else what differs, in one line."""
    a, b = profile_shape(engine), profile_shape(new)
    diff = [f"{k} {a[k]} -> {b[k]}" for k in a if a[k] != b[k]]
    if not diff:
        return None
    return (f"its profile {new.name!r} differs in shape from the profile {engine.name!r} this engine serves "
            f"({'; '.join(diff)}); restart the engine to serve it")


class BundleKeys:
    """This process's current bundle: a sealed file, opened once, and/or a `BundleSource` kept current from the
    service (the file is then only the starting point). Holds paths and the opened bundle, never the raw key.

    Built once, at engine start: the first bundle (the file's, else the first fetched) fixes the profile shape the
    engine serves. A refreshed bundle of another shape is refused when it is fetched (one warning line) and the
    bundle in force keeps serving until it expires; a rotation of the same shape swaps in."""

    def __init__(self, private_key_file: str | Path | None, bundle_file: str | Path | None = None,
                 url: str | None = None, token_file: str | Path | None = None, refresh_s: float = 60.0, *,
                 service_key_file: str | Path | None = None, provider_id: str | None = None) -> None:
        """`service_key_file`: the service's verifier key (`GET /v1/audit/public-key`): only bundles it signed are
        used. `provider_id`: this provider's registered id (default: the `sub` of the token in `token_file`)."""
        self._source = None
        self._bundle: GenerationBundle | None = None
        self._shape: Profile | None = None  # the profile (shape) this engine serves: its first bundle's
        self._shape_lock = threading.Lock()
        if not private_key_file:
            return
        if not service_key_file:
            raise BundleError("a bundle needs the service's verifier key (service_key_file) to check its signature")
        service_key = service_keys(Path(service_key_file))
        private_key = Path(private_key_file).read_bytes()
        if provider_id is None and token_file is not None:
            provider_id = token_subject(Path(token_file).read_text().strip())
        if bundle_file and Path(bundle_file).is_file():
            data = Path(bundle_file).read_bytes()
            if data[:3] != b"HRB":  # base64 text may end in a newline; a raw bundle's last bytes are ciphertext
                data = data.strip()
            self._bundle = open_bundle(data, private_key, service_key=service_key, provider_id=provider_id or "")
            self._shape = self._bundle.profile
        if url:
            from verifier.provider.refresh import BundleRefused, BundleSource

            if token_file is None:
                raise ValueError("a bundle URL needs a token file")
            token = Path(token_file)
            source = BundleSource(private_key, lambda: token.read_text().strip(), base_url=url,
                                  service_key=service_key, provider_id=provider_id, interval_s=float(refresh_s),
                                  accept=self._accept)
            try:
                source.start()
            except BundleRefused:  # the service's bundle has another shape than the file's (logged by the source)
                source.start(fetch_first=False)
            except Exception as exc:
                if self._bundle is None:  # nothing to serve with: the engine does not start
                    raise
                # The file bundle serves until a poll succeeds; the service is never waited on per request.
                log.warning("verifier unreachable at start (%s); using the file bundle", type(exc).__name__)
                source.start(fetch_first=False)
            self._source = source
        del private_key

    def __repr__(self) -> str:
        b = self._bundle
        return f"BundleKeys(bundle_id={b.bundle_id if b else None!r}, refreshed={self._source is not None})"

    def _accept(self, new: GenerationBundle) -> str | None:
        """BundleSource's check of a fetched bundle: None (install it) when it has the engine's shape; the first
        bundle, when there is no file bundle, sets that shape."""
        with self._shape_lock:
            if self._shape is None:
                self._shape = new.profile
                return None
            return shape_change(self._shape, new.profile)

    def bundle(self) -> GenerationBundle | None:
        """The bundle in force (the refreshed one, else the file's); never waits on the service. BundleExpired
        when it has expired: watermarked generation stops (a refresh that installs a fresh one resumes it)."""
        current = self._source.current if self._source is not None else None
        bundle = current or self._bundle
        if bundle is not None and bundle.expired():
            refused = self._source.refused if self._source is not None else None
            raise BundleExpired(f"the HeRo bundle {bundle.bundle_id} expired at {bundle.expires_at.isoformat()}: "
                                "watermarked generation is stopped until a fresh bundle is installed"
                                f"{f'; the service offers only a {refused}' if refused else ''}")
        return bundle


@dataclass
class _Ids:
    """A request's ids, for its contexts: the prompt's, and the output's (the engine's live list, read each step;
    or the seam's own, to which it appends the tokens it forces)."""

    prompt: list[int]
    output: list[int]
    own: bool


class RequestSlots:
    """Payloads, warping parameters, step counters, context logs and gated openings of up to `n` requests, and
    the serving policy over them: which rows are drawn watermarked, which are ended (forced to `stop_token`).

    `stop_token`: the model's end-of-sequence id, what a refused row is forced to. `enforce`: every request must
    carry a payload (a slot given none, or never given a request, is refused). `speculative`: the engine runs
    speculative decoding (refused here: draft tokens are not watermarked draws)."""

    def __init__(self, n: int, device: torch.device | str, bundles: Callable[[], GenerationBundle | None], *,
                 stop_token: int, enforce: bool = False, speculative: bool = False,
                 generator: torch.Generator | None = None) -> None:
        refuse_speculative(speculative)
        if isinstance(stop_token, bool) or not isinstance(stop_token, int) or stop_token < 0:
            raise ValueError("stop_token must be the model's end-of-sequence token id")
        self.n, self.device = n, torch.device(device)
        self.stop_token, self.enforce = stop_token, bool(enforce)
        self._bundles = bundles
        self._lock = threading.Lock()
        self.sampler: FusedSampler | None = None
        self._bundle_id: str | None = None
        self.samplers: list[FusedSampler | None] = [None] * n  # the tables each request started with
        self.errors: dict[int, str] = {}  # slot -> why its request is not watermarked (exception type)
        self.refused: list[bool] = [self.enforce] * n  # slot -> its rows are forced to stop_token
        self._ids: list[_Ids | None] = [None] * n
        self.generator = generator if generator is not None else new_generator(self.device)
        self.payload: torch.Tensor | None = None
        self.generated = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.log: ContextLog | None = None
        self.opening: OpeningGate | None = None
        self.temperature = torch.ones(n, device=self.device)
        self.min_p = torch.zeros(n, device=self.device)
        self.top_k = torch.zeros(n, dtype=torch.int64, device=self.device)
        self.top_p = torch.ones(n, device=self.device)
        self.host = [dict(temperature=1.0, min_p=0.0, top_k=0, top_p=1.0) for _ in range(n)]

    def __repr__(self) -> str:  # never the key words
        marked = sum(s is not None for s in self.samplers)
        return f"RequestSlots(n={self.n}, device={self.device}, watermarked={marked}, enforce={self.enforce})"

    def _current(self) -> FusedSampler:
        """The sampler of the bundle in force now (rebuilt when it rotates; the profile's shape may not change:
        `BundleKeys` refuses such a bundle at refresh, and a bundle source that does not is refused here)."""
        bundle = self._bundles()
        if bundle is None:
            raise ValueError("no HeRo bundle configured")
        with self._lock:
            if self.sampler is None or bundle.bundle_id != self._bundle_id:
                profile = bundle.profile
                changed = shape_change(self.profile, profile) if self.sampler is not None else None
                if changed is not None:
                    raise ValueError(f"a bundle rotation may change keys, not the profile's shape: bundle "
                                     f"{bundle.bundle_id}: {changed}")
                self.sampler = make_fused_sampler(profile, bundle.keyset, self.device)
                self._bundle_id = bundle.bundle_id
                self.profile = profile
                if self.payload is None:
                    self.payload = torch.zeros(self.n, profile.segments, profile.depth, dtype=torch.int64,
                                               device=self.device)
                    self.log = self.sampler.new_log(self.n)
                    self.opening = new_opening(profile, self.n, device=self.device)
            return self.sampler

    # --- requests in and out ----------------------------------------------------------------------------

    def admit(self, slot: int, extra: Mapping[str, Any] | None, **params: Any) -> bool:
        """`add` from a request's extra arguments (`parse_payload`): a malformed payload that got past admission
        ends its request (refused), never the batch. `params`: `add`'s keywords."""
        try:
            fields = parse_payload(extra)
        except ValueError as exc:
            self.remove(slot)
            self.fail(slot, exc)
            return False
        return self.add(slot, fields, **params)

    def add(self, slot: int, fields: Mapping[str, int] | None, *, temperature: float = 1.0, top_k: int = 0,
            top_p: float = 1.0, min_p: float = 0.0, tokens: Sequence[int] | None = None,
            prompt: Sequence[int] | None = None, output: list[int] | None = None) -> bool:
        """(Re)initialise `slot` for a request; True when it is watermarked. `fields` None: a plain request
        (refused in enforce mode). A request whose state cannot be set up is refused (False; the reason in
        `errors[slot]`), never the batch.

        The ids its contexts are built from (`step` without `contexts`): `prompt`, and either `output`, the
        engine's own live list of the request's output ids (read each step, never written), or `tokens`, the
        output ids already generated, to which the seam appends each token it forces. A resumed request's ids
        (in `output` or `tokens`) are replayed into its context log."""
        self.remove(slot)
        drawn = list(output if output is not None else tokens or [])
        self._ids[slot] = _Ids(list(prompt or []), output if output is not None else drawn, output is None)
        if fields is None:
            return False
        self.refused[slot] = False
        try:
            sampler = self._current()
            pay = encode_payload(self.profile, fields)
            self.payload[slot] = torch.tensor(pay, dtype=torch.int64, device=self.device)
            temperature = max(float(temperature), GREEDY_EPS)
            self.temperature[slot] = temperature
            top_k = max(int(top_k or 0), 0)
            self.host[slot] = dict(temperature=temperature, min_p=float(min_p or 0.0), top_k=top_k,
                                   top_p=float(top_p or 1.0))
            self.min_p[slot], self.top_k[slot], self.top_p[slot] = (self.host[slot][k] for k in ("min_p", "top_k",
                                                                                                  "top_p"))
            self.generated[slot] = len(drawn)
            self.log.counts[slot] = 0
            if self.opening is not None:  # a resumed request drew its opening before it was preempted
                self.opening.reset([slot], opened=bool(drawn))
            if drawn:
                self.replay(slot, drawn)
        except Exception as exc:
            self.fail(slot, exc)
            return False
        self.samplers[slot] = sampler
        return True

    def remove(self, slot: int) -> None:
        """The slot's request has finished: the slot is free (refused in enforce mode until a request comes)."""
        self.samplers[slot] = None
        self.errors.pop(slot, None)
        self.refused[slot] = self.enforce
        self._ids[slot] = None

    def fail(self, slot: int, exc: BaseException) -> None:
        """End `slot`'s request: its state is broken, so it is never drawn again and its rows are forced to
        `stop_token` (no unwatermarked text leaves for a request that asked for a watermark). Only the exception's
        type is logged (its text may quote a payload)."""
        self.samplers[slot] = None
        self.refused[slot] = True
        self.errors[slot] = type(exc).__name__
        log.error("request slot %d ended (refused): %s", slot, type(exc).__name__)

    def watermarked(self, slot: int) -> bool:
        """The slot's request is drawn watermarked."""
        return self.samplers[slot] is not None

    def replay(self, slot: int, ids: Sequence[int]) -> None:
        """Log the continuation contexts of output `ids` already drawn (token g >= h has context ids[g-h:g]): a
        request resumed after preemption marks no repeat of a context it marked before."""
        h = self.sampler.h
        seen: dict[tuple[int, ...], None] = {}
        for g in range(h, len(ids)):
            seen.setdefault(tuple(ids[g - h: g]), None)
        if seen:
            self.log.ensure(len(seen) + 1)
            words = torch.stack(prf.context_words(torch.tensor(list(seen), dtype=torch.int64)), dim=1)
            self.log.words[slot, : len(seen)] = words.to(self.device)
            self.log.counts[slot] = len(seen)

    def move(self, a: int, b: int, swap: bool) -> None:
        """Slot a -> b (a batch row moved: the legacy vLLM runner's condense) or a <-> b."""
        tensors = [self.generated, self.temperature, self.min_p, self.top_k, self.top_p]
        if self.payload is not None:
            tensors += [self.payload, self.log.words, self.log.counts]
        if self.opening is not None:
            tensors.append(self.opening.need)
        idx = torch.tensor([a, b] if swap else [a], device=self.device)
        dst = torch.tensor([b, a] if swap else [b], device=self.device)
        for t in tensors:
            t[dst] = t[idx]
        ea, eb = self.errors.pop(a, None), self.errors.pop(b, None)
        host = (self.samplers, self.host, self.refused, self._ids)
        if swap:
            for lst in host:
                lst[a], lst[b] = lst[b], lst[a]
            if eb is not None:
                self.errors[a] = eb
        else:
            for lst in host:
                lst[b] = lst[a]
            self.samplers[a], self.refused[a], self._ids[a] = None, self.enforce, None
        if ea is not None:
            self.errors[b] = ea

    # --- one step ---------------------------------------------------------------------------------------

    def contexts(self, slots: Sequence[int]) -> torch.Tensor:
        """[R, h] int64 on the device: each slot's last h ids of prompt + output (`context_tail`), from the ids
        given at `add`."""
        h = self.sampler.h
        rows = []
        for s in slots:
            ids = self._ids[s]
            rows.append(context_tail(ids.prompt, ids.output, h) if ids is not None else [0] * h)
        return torch.tensor(rows, dtype=torch.int64, device=self.device).reshape(len(rows), h)

    def step(self, logits: torch.Tensor, slots: Sequence[int], *, contexts: torch.Tensor | None = None,
             generated: torch.Tensor | Sequence[int] | None = None, capacity: int | None = None,
             device_slots: torch.Tensor | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
        """The serving policy over one step's `logits` [R, V] (changed in place, and returned), row i holding
        the request in slot `slots[i]`: a watermarked request's row is drawn and forced to its token; a refused
        request's row (enforce mode without a payload, a failed set-up, a draw that raised: `errors`) is forced
        to `stop_token`, so no unwatermarked text leaves for it; a plain request's row is left as it is.

        Contexts: by default built from the ids given at `add` (and the tokens forced here, when the seam keeps
        the output). An engine with its own token history on the device gives `contexts` [R, h] int64 and
        `generated` [R] (tokens each row's request has drawn), and `capacity`, a host bound on the most
        tokens any row has drawn + 1 (else read from `generated`). `device_slots`: `slots` on the device already."""
        slots = [int(s) for s in slots]
        if logits.shape[0] != len(slots):
            raise ValueError(f"{logits.shape[0]} logits rows but {len(slots)} slots")
        marked = [i for i, s in enumerate(slots) if self.samplers[s] is not None]
        every = len(marked) == len(slots)
        if marked:
            ms = [slots[i] for i in marked]
            sel = None if every else torch.tensor(marked, device=logits.device)
            own = contexts is None
            if own:
                ctx = self.contexts(ms)
                gen: torch.Tensor | Sequence[int] = [len(self._ids[s].output) for s in ms]
            else:
                if generated is None:
                    raise ValueError("give `generated` with `contexts`")
                ctx = contexts if every else contexts[sel.to(contexts.device)]
                gen = generated if every or not isinstance(generated, torch.Tensor) else \
                    generated[sel.to(generated.device)]
                if not isinstance(gen, torch.Tensor) and not every:
                    gen = [gen[i] for i in marked]
            dslots = device_slots if every else None
            tokens, drawn = self.draw(logits if every else logits[sel], ms, ctx, gen, generator,
                                      capacity=capacity, device_slots=dslots)
            tokens = tokens.to(logits.device)
            if every and not self.errors.keys() & set(ms):  # the usual case: every row drawn
                one_hot_rows(logits, None, tokens, every_row=True)
                if own:
                    self._record(ms, tokens)
                return logits
            keep = drawn.to(logits.device)
            rows = torch.arange(len(slots), device=logits.device) if every else sel
            one_hot_rows(logits, rows[keep], tokens[keep])
            if own:
                self._record([s for s, k in zip(ms, drawn.tolist(), strict=True) if k], tokens[keep])
        refused = [i for i, s in enumerate(slots) if self.refused[s]]
        if refused:
            rows = torch.tensor(refused, device=logits.device)
            one_hot_rows(logits, rows, torch.full((len(refused),), self.stop_token, device=logits.device))
        return logits

    def _record(self, slots: list[int], tokens: torch.Tensor) -> None:
        """Append the forced tokens to the outputs the seam keeps (not an engine's live list)."""
        for s, t in zip(slots, tokens.tolist(), strict=True):
            ids = self._ids[s]
            if ids is not None and ids.own:
                ids.output.append(t)

    def warp(self, logits: torch.Tensor, slots: torch.Tensor, host_slots: list[int]) -> torch.Tensor:
        """vLLM's order: temperature, min_p, top-k, top-p; per row (slot) parameters. Rows that need none of
        them (temperature 1, no truncation: the plain sampling setting) are handed on as they are, uncopied."""
        hp = [self.host[s] for s in host_slots]
        if logits.dtype == torch.float32 and all(p["temperature"] == 1.0 and p["min_p"] <= 0 and p["top_k"] <= 0
                                                 and p["top_p"] >= 1.0 for p in hp):
            return logits
        x = logits.to(torch.float32) / self.temperature[slots].unsqueeze(1)
        if any(p["min_p"] > 0 for p in hp):
            probs = torch.softmax(x, dim=-1)
            floor = probs.amax(dim=-1, keepdim=True) * self.min_p[slots].unsqueeze(1)
            x = x.masked_fill(probs < floor, float("-inf"))
        if any(p["top_k"] > 0 or p["top_p"] < 1.0 for p in hp):
            vals, idx = x.sort(dim=-1, descending=True)
            rank = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
            k = self.top_k[slots].unsqueeze(1)
            drop = (k > 0) & (rank >= k)
            vals = vals.masked_fill(drop, float("-inf"))
            p = torch.softmax(vals, dim=-1)
            before = p.cumsum(dim=-1) - p  # mass strictly above each rank
            vals = vals.masked_fill((before >= self.top_p[slots].unsqueeze(1)) & (rank > 0), float("-inf"))
            x = torch.full_like(x, float("-inf")).scatter_(1, idx, vals)
        return x

    def draw(self, logits: torch.Tensor, slots: Sequence[int], contexts: torch.Tensor,
             generated: torch.Tensor | Sequence[int], generator: torch.Generator | None = None, *,
             capacity: int | None = None,
             device_slots: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(token ids, drawn) for the rows of `logits` [R, V], row i the request in slot `slots[i]` at
        `contexts[i]` having drawn `generated[i]` tokens; grouped by the tables each request uses. `drawn` [R]
        bool: False for an unwatermarked request's row and for the rows of a group whose draw raised (their
        requests are failed: `errors`, refused). The draw alone: `step` applies the serving policy around it."""
        slots = [int(s) for s in slots]
        dslots = device_slots if device_slots is not None else torch.tensor(slots, dtype=torch.int64,
                                                                            device=self.device)
        out = torch.zeros(len(slots), dtype=torch.int64, device=logits.device)
        drawn = torch.zeros(len(slots), dtype=torch.bool, device=logits.device)
        groups: dict[int, list[int]] = {}
        for i, s in enumerate(slots):
            groups.setdefault(id(self.samplers[s]), []).append(i)
        if all(self.samplers[slots[m[0]]] is None for m in groups.values()):
            return out, drawn
        gen = generated if isinstance(generated, torch.Tensor) else torch.tensor(list(generated), dtype=torch.int64)
        gen = gen.to(self.device, torch.int64)
        if capacity is None:
            capacity = (int(gen.max()) if gen.numel() else 0) + 1
        self.generated[dslots] = gen
        self.log.ensure(capacity)
        warped = self.warp(logits, dslots, slots)
        for members in groups.values():
            sampler = self.samplers[slots[members[0]]]
            if sampler is None:  # unwatermarked rows: the caller keeps their logits
                continue
            try:
                if len(groups) == 1:
                    out = sampler.step(warped, contexts, self.payload, self.generated, self.log, generator or
                                       self.generator, slots=dslots, opening=self.opening)
                    drawn[:] = True
                    break
                sel = torch.tensor(members, device=logits.device)
                out[sel] = sampler.step(warped[sel], contexts[sel.to(contexts.device)], self.payload, self.generated,
                                        self.log, generator or self.generator, slots=dslots[sel.to(dslots.device)],
                                        opening=self.opening)
                drawn[sel] = True
            except Exception as exc:  # confined to this group's requests
                for i in members:
                    self.fail(slots[i], exc)
        return out, drawn


def refuse_speculative(speculative: bool) -> None:
    """Engine start: speculative decoding is refused (draft tokens are not watermarked draws)."""
    if speculative:
        raise ValueError("the HeRo watermark does not support speculative decoding (draft tokens are not "
                         "watermarked draws); turn it off on engines that serve watermarked requests")


def one_hot_rows(logits: torch.Tensor, rows: torch.Tensor | None, tokens: torch.Tensor,
                 every_row: bool = False) -> None:
    """Force `tokens` at `rows` of `logits` in place: 0 at the token, -inf elsewhere (the engine's own sampler
    then returns exactly them)."""
    if every_row:  # in place, as transformers' processors do: no index_put over [B, V]
        logits.fill_(float("-inf")).scatter_(1, tokens.unsqueeze(1), 0.0)
        return
    logits[rows] = float("-inf")
    logits[rows, tokens] = 0.0
