"""Model-aware scoring's cost bound, measured through the API (HERO_MODEL_AWARE=1, the shipped SmolLM2).

Two requests against an in-process service (SQLite, dev tokens), after a warm-up request that loads the model:

- `emoji`: one text of 20,000 emoji (about 60,000 LM tokens, the model's context is 8,192): refused (413 naming
  HERO_MODEL_AWARE_MAX_TOKENS) before any quota or LM work; seconds and RSS growth;
- `caps`: `--texts` texts of random words, each `--tokens` LM tokens long (default 32 x 256 = 8,192 tokens:
  HERO_MODEL_AWARE_MAX_REQUEST_TOKENS at its default), scored: seconds, peak RSS above the warm process
  (sampled every 10 ms), CPU seconds.

    python benchmarks/bench_model_aware_bound.py [--texts 32 --tokens 256 --request-tokens 8192
                                                   --batch-tokens 4096 --threads N]

One JSON line per request. The peak is bounded by HERO_MODEL_AWARE_BATCH_TOKENS (activations of one forward pass)
and the position chunk (engine/model_aware.DEFAULT_CHUNK), not by the request: docs/performance.md.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path

from _common import emit


class Peak:
    """Peak RSS of this process while the block runs, sampled every 10 ms."""

    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.base = self.top = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.top = max(self.top, self.proc.memory_info().rss)
            time.sleep(0.01)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.top = max(self.top, self.proc.memory_info().rss)

    @property
    def growth_mb(self) -> float:
        return (self.top - self.base) / 2**20


def texts_of(tokenizer, n: int, tokens: int, seed: int = 0) -> list[str]:
    """n texts of random vocabulary words, each exactly `tokens` LM tokens when tokenized again."""
    rng = random.Random(seed)
    words = [w for w in (tokenizer.decode([i]).strip() for i in range(1000, 20000)) if w.isalpha() and len(w) > 2]
    out = []
    for _ in range(n):
        ids: list[int] = []
        while len(ids) < tokens + 64:
            words64 = " " + " ".join(rng.choice(words) for _ in range(64))
            ids += tokenizer(words64, add_special_tokens=False)["input_ids"]
        text = tokenizer.decode(ids[:tokens])
        while len(tokenizer(text, add_special_tokens=False)["input_ids"]) > tokens:
            text = text[: -1]
        out.append(text)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--request-tokens", type=int, default=8192)
    ap.add_argument("--deadline", type=float, default=3600.0)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    import psutil
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    home = Path(tempfile.mkdtemp(prefix="hero-bound-"))  # the service's; the model cache stays where it is
    from fastapi.testclient import TestClient

    from verifier.api.app import create_app
    from verifier.auth.devkeys import mint_token
    from verifier.base.settings import Settings
    from verifier.lm import load_model

    settings = Settings(home=home, dev_mode=True, auto_migrate=True, model_aware=True, worker_device="cpu",
                        model_aware_max_request_tokens=args.request_tokens,
                        model_aware_batch_tokens=args.batch_tokens, model_aware_deadline_seconds=args.deadline)
    _, tokenizer = load_model("smollm2", "cpu")
    with TestClient(create_app(settings)) as client:
        def auth(role: str) -> dict:
            return {"Authorization": f"Bearer {mint_token(settings, role, 'bench', 3600)}"}

        assert client.post("/v1/keys/init", headers=auth("admin")).status_code == 201
        warm = client.post("/v1/verify", headers=auth("auditor"), json={"texts": texts_of(tokenizer, 2, 64, 1)})
        assert warm.status_code == 200, warm.text
        proc = psutil.Process()
        with Peak() as peak:
            t0 = time.perf_counter()
            r = client.post("/v1/verify", headers=auth("auditor"), json={"texts": ["\U0001F600" * 20000]})
            secs = time.perf_counter() - t0
        emit({"request": "emoji", "status": r.status_code, "detail": r.json().get("detail"), "seconds": round(secs, 3),
              "rss_growth_mb": round(peak.growth_mb, 1)})
        texts = texts_of(tokenizer, args.texts, args.tokens)
        cpu0 = proc.cpu_times()
        with Peak() as peak:
            t0 = time.perf_counter()
            r = client.post("/v1/verify", headers=auth("auditor"), json={"texts": texts})
            secs = time.perf_counter() - t0
        cpu1 = proc.cpu_times()
        assert r.status_code == 200, r.text
        emit({"request": "caps", "texts": args.texts, "tokens_per_text": args.tokens,
              "tokens": args.texts * args.tokens, "batch_tokens": args.batch_tokens, "status": r.status_code,
              "seconds": round(secs, 2), "cpu_s": round((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), 1),
              "peak_rss_growth_mb": round(peak.growth_mb, 1), "rss_before_mb": round(peak.base / 2**20),
              "threads": torch.get_num_threads(), "scoring": r.json()["results"][0]["scoring"]})


if __name__ == "__main__":
    main()
