"""Provider SDK: open a sealed generation-key bundle and generate watermarked text without the service DB.

Importable without FastAPI, SQLAlchemy or pydantic-settings (the base install; the service is the `service`
extra). The torch-based parts (`BundleSampler`, `logits_processor`, `generate`, `RequestState`), the HTTP refresher
(`BundleSource`) and the self-test detector (`HeroWatermarkDetector`) load on first use.

    from verifier.provider import open_bundle, generate
    bundle = open_bundle(b64_from_service, private_key, service_key=pinned_vkey, provider_id="fleet-1")
    # raises BundleError on a signature the pinned service key did not make, another provider's bundle,
    # an unsigned (hero-bundle-2/-1) bundle, a wrong key or tampering
    [g] = generate(model, tokenizer, bundle, ["Prompt"], [{"model": 37, "user": 1234}], max_new_tokens=200)
    g.text, g.key_versions
"""

from __future__ import annotations

from typing import Any

from verifier.provider.bundle import (
    BundleError,
    BundleExpired,
    GenerationBundle,
    generate_keypair,
    open_bundle,
    parse_public_key,
    public_key_of,
    read_header,
)

_LAZY = {
    "BundleSampler": "verifier.provider.sampling",
    "RequestState": "verifier.provider.sampling",
    "ProviderGeneration": "verifier.provider.sampling",
    "generate": "verifier.provider.sampling",
    "logits_processor": "verifier.provider.sampling",
    "new_generator": "verifier.provider.sampling",
    "load_model": "verifier.provider.sampling",  # verifier.lm.load_model(name="smollm2", device="cpu")
    "HeroWatermarkingConfig": "verifier.provider.hf",  # model.generate(..., watermarking_config=...)
    "BundleSource": "verifier.provider.refresh",
    "BundleFetchError": "verifier.provider.refresh",
    "HeroWatermarkDetector": "verifier.provider.detector",  # a provider's self-test, as transformers' detector
    "HeroWatermarkDetectorOutput": "verifier.provider.detector",
}

__all__ = ["BundleError", "BundleExpired", "GenerationBundle", "generate_keypair", "open_bundle",
           "parse_public_key", "public_key_of", "read_header", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'verifier.provider' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
