"""Shared bits of the benchmark scripts: import path, JSON-line output, A/B rounds, inputs no product module
needs (watermarked ids without a model, a vLLM bundle environment). Benchmarks import no test module."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def alternate(commands: list[tuple[list[str], str]], rounds: int) -> list[list[float]]:
    """A/B rounds between worker processes, one per checkout: each (argv, checkout dir) is started there (no
    HERO_* variables), must print "ready <dir>", then answers each "go" line with one number. Rounds
    alternate which side goes first, so a machine whose speed drifts slows both alike. Per side, its numbers."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_")}
    procs = [subprocess.Popen(argv, cwd=d, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for argv, d in commands]
    try:
        for (_, d), p in zip(commands, procs, strict=True):
            if p.stdout.readline().split() != ["ready", d]:
                raise SystemExit(f"the worker for {d} failed to start or ran other code (is its C kernel built?)")
        out: list[list[float]] = [[] for _ in procs]
        for r in range(rounds):
            for k in (range(len(procs)) if r % 2 == 0 else reversed(range(len(procs)))):
                procs[k].stdin.write("go\n")
                procs[k].stdin.flush()
                out[k].append(float(procs[k].stdout.readline()))
        return out
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(60)


def marked_ids(profile, keyset, payloads: list[dict[str, int]], steps: int, *, sigma: float = 2.0, seed: int = 0):
    """Watermarked continuation ids [len(payloads), steps] without a model: random logits N(0, sigma^2) per step,
    drawn by the product's own step (verifier.engine.fused, as every generation path builds it, with its gated
    opening), so the texts pass the level tests and a decoder takes the expensive branch on them."""
    import torch

    from verifier.engine.fused import make_fused_sampler, new_opening
    from verifier.engine.payload import encode_payload

    g = torch.Generator().manual_seed(seed)
    h, v, rows = profile.context_width, profile.vocab_size, len(payloads)
    fs = make_fused_sampler(profile, keyset)
    pay = torch.tensor([encode_payload(profile, p) for p in payloads])
    ids = torch.randint(0, v, (rows, h), generator=g)
    generated = torch.zeros(rows, dtype=torch.int64)
    log = fs.new_log(rows, capacity=steps + 1)
    opening = new_opening(profile, rows)
    for _ in range(steps):
        tok = fs.step(torch.randn(rows, v, generator=g) * sigma, ids[:, -h:], pay, generated, log, g,
                      opening=opening)
        ids = torch.cat([ids, tok.unsqueeze(1)], dim=1)
    return ids[:, h:]


def vllm_bundle_env(home: Path, profile) -> dict[str, str]:
    """The vLLM plugin's environment for a bench: a `hero-bundle-3` of fresh keys for `profile`, sealed to a new
    provider key and signed by a stand-in service key whose verifier key is pinned, all written under `home`
    (what `POST /v1/keys/generation-bundle` hands a provider, without a service)."""
    from datetime import UTC, datetime, timedelta

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from verifier.audit.transparency import raw_public, verifier_key
    from verifier.engine.keys import KeySet, derive_level_table, new_master_secret
    from verifier.provider.bundle import generate_keypair, seal_bundle_v3

    origin, provider = "hero.bench/log", "bench"
    keyset = KeySet(tuple(derive_level_table(new_master_secret(), profile, lv, f"l{lv}-bench")
                          for lv in range(1, profile.depth + 1)))
    signing = Ed25519PrivateKey.generate()
    sk, pk = generate_keypair()
    now = datetime.now(UTC).replace(microsecond=0)
    header = {"bundle_id": "bench", "provider_id": provider, "profile": profile.to_dict(),
              "key_versions": {str(t.level): t.version for t in keyset.tables}, "issued_at": now.isoformat(),
              "expires_at": (now + timedelta(days=1)).isoformat(), "etag": "bench"}
    (home / "bundle").write_bytes(seal_bundle_v3(header, keyset, pk, "x25519", signing, origin))
    (home / "key").write_bytes(sk)
    (home / "service.vkey").write_text(verifier_key(origin, raw_public(signing.public_key())) + "\n")
    return {"HERO_VLLM_BUNDLE": str(home / "bundle"), "HERO_VLLM_PRIVATE_KEY": str(home / "key"),
            "HERO_VLLM_SERVICE_KEY": str(home / "service.vkey"), "HERO_VLLM_PROVIDER_ID": provider}
