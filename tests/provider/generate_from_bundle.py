"""Run as a separate process by the provider end-to-end test: generate from a sealed bundle only.

    python tests/provider/generate_from_bundle.py BUNDLE_FILE PRIVATE_KEY_FILE SPEC_JSON

SPEC_JSON also names the pinned service key (`service_key`, as `GET /v1/audit/public-key` answered) and the
provider id: the bundle opens only when the service's signature checks and it names this provider.

No database URL, no KEK, and FastAPI / SQLAlchemy / pydantic-settings imports are blocked: everything the
watermark needs comes from the bundle. Prints one JSON line: the texts and the key versions used.
"""

from __future__ import annotations

import json
import sys


class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("fastapi", "sqlalchemy", "pydantic_settings", "starlette", "alembic"):
            raise ImportError(f"blocked in the provider process: {name}")


def main() -> None:
    sys.meta_path.insert(0, _Block())
    import os
    from pathlib import Path

    assert not any(k.startswith(("HERO_DATABASE", "HERO_KEK")) for k in os.environ), "service settings leaked"
    from verifier.provider import generate, load_model, new_generator, open_bundle

    bundle_file, key_file, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    bundle = open_bundle(Path(bundle_file).read_text().strip(), Path(key_file).read_bytes(),
                         service_key=spec["service_key"], provider_id=spec["provider_id"])
    model, tokenizer = load_model("smollm2")
    gens = generate(model, tokenizer, bundle, spec["prompts"], spec["payloads"], max_new_tokens=spec["tokens"],
                    min_new_tokens=spec["tokens"], generator=new_generator())
    print(json.dumps({
        "texts": [g.text for g in gens],
        "key_versions": [{str(k): v for k, v in g.key_versions.items()} for g in gens],
        "bundle_id": bundle.bundle_id,
        "blocked_loaded": sorted({"fastapi", "sqlalchemy", "pydantic_settings"} & {m.partition(".")[0]
                                                                                   for m in sys.modules}),
    }))


if __name__ == "__main__":
    main()
