"""Bundle figures for a profile: size, derive+seal+sign time (service side), check+open time (provider side), for
the `hero-bundle-3` the service issues (HPKE X25519 seal, Ed25519 signature).

    python benchmarks/bench_provider_bundle.py [--profile default] [--repeat 20]
"""

from __future__ import annotations

import argparse
import base64
import statistics
import time
from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.audit.transparency import raw_public, verifier_key
from verifier.engine.keys import KeySet, derive_level_table, new_master_secret
from verifier.engine.profile import resolve_profile
from verifier.provider.bundle import generate_keypair, open_bundle, seal_bundle_v3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="default")
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    profile = resolve_profile(args.profile)
    masters = [new_master_secret() for _ in profile.levels]
    sk, pk = generate_keypair()
    log_key = Ed25519PrivateKey.generate()
    vkey = verifier_key("bench/log", raw_public(log_key.public_key()))
    now = datetime.now(UTC)
    seal_ms, open_ms = [], []
    bundle = b""
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ks = KeySet(tuple(derive_level_table(m, profile, lv, f"l{lv}-v1") for lv, m in enumerate(masters, 1)))
        header = {"bundle_id": "b", "provider_id": "p", "profile": profile.to_dict(),
                  "key_versions": {str(t.level): t.version for t in ks.tables}, "issued_at": now.isoformat(),
                  "expires_at": (now + timedelta(hours=1)).isoformat(), "etag": "e"}
        bundle = seal_bundle_v3(header, ks, pk, "x25519", log_key, "bench/log")
        t1 = time.perf_counter()
        open_bundle(bundle, sk, service_key=vkey, provider_id="p")
        t2 = time.perf_counter()
        seal_ms.append((t1 - t0) * 1e3)
        open_ms.append((t2 - t1) * 1e3)
    sizes = [1 << lv.key_bits for lv in profile.levels]
    print(f"profile {profile.name} (spec v{profile.spec_version}): table sizes {sizes}, bundle {len(bundle)} bytes "
          f"({len(base64.b64encode(bundle))} base64)")
    print(f"derive+seal+sign median {statistics.median(seal_ms):.1f} ms, "
          f"check+open median {statistics.median(open_ms):.1f} ms over {args.repeat} runs")


if __name__ == "__main__":
    main()
