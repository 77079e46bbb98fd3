"""An app wired to a test database in dev mode, a client, and dev tokens per role."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from fastapi.testclient import TestClient

_TOKENIZERS: dict[str, object] = {}
_TOK_LOCK = threading.Lock()


def cached_tokenizer_loader(name: str):
    """The real tokenizer, loaded once per test session (apps wrap it in their own TokenizerCache)."""
    from verifier.lm import load_tokenizer

    with _TOK_LOCK:
        if name not in _TOKENIZERS:
            _TOKENIZERS[name] = load_tokenizer(name)
        return _TOKENIZERS[name]


def make_settings(home: Path, url: str, **kw):
    from verifier.base.settings import Settings

    # profile: the service tests are written for the spec v2 `default` (a new deployment would get v3)
    base = dict(home=home, database_url=url, auto_migrate=True, dev_mode=True, jwks_file=None, jwks_url=None,
                profile="default")
    base.update(kw)
    return Settings(**base)


class Service:
    """An app + client + token minting for one database."""

    def __init__(self, settings, client: TestClient) -> None:
        self.settings = settings
        self.client = client
        self.app = client.app
        self.ctx = client.app.state.ctx

    def token(self, role: str, sub: str = "alice", ttl: int | None = None, **extra) -> str:
        """A dev token; by default it lives as long as the settings allow (a day), far beyond any test run, so
        a test that holds one across slow steps (a loaded machine) never meets its expiry."""
        from verifier.auth.devkeys import mint_token

        return mint_token(self.settings, role, sub, ttl or self.settings.jwt_max_ttl_seconds, **extra)

    def auth(self, role: str, sub: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(role, sub)}"}

    def init_keys(self) -> dict:
        r = self.client.post("/v1/keys/init", headers=self.auth("admin"))
        assert r.status_code == 201, r.text
        return r.json()


def service_factory(hero_home: Path, cls: type[Service] = Service) -> Iterator[Callable[..., Service]]:
    """Yields factory(url, **settings) -> cls; closes every client afterwards."""
    from verifier.api.app import create_app

    clients: list[TestClient] = []

    def factory(url: str, **kw) -> Service:
        settings = make_settings(hero_home, url, **kw)
        if not settings.dev_mode:  # production settings start only with the secrets `hero kek init` makes
            from verifier.keys.bootstrap import init_secrets

            init_secrets(settings)
        app = create_app(settings, tokenizer_loader=cached_tokenizer_loader)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return cls(settings, client)

    yield factory
    for c in clients:
        c.__exit__(None, None, None)


def secret_forms(svc: Service) -> list[bytes]:
    """Every raw master secret and derived table entry of the service's keys, in raw / hex / base64 forms."""
    import base64

    store, prof = svc.ctx.store, svc.ctx.profile
    out = []
    for row in store.version_rows(prof):
        if row.ciphertext is None:
            continue
        master = store._open(row)
        table = store._table(prof, row)
        for raw in [master, *table.entries, *([table.position] if table.position else [])]:
            out += [
                raw,
                raw.hex().encode(),
                raw.hex().upper().encode(),
                base64.b64encode(raw),
                base64.urlsafe_b64encode(raw),
                base64.urlsafe_b64encode(raw).rstrip(b"="),
            ]
    return out


def matched_version(result: dict, level: int, alpha: float = 1e-4) -> str | None:
    """The key version a verify result names at `level`: exactly when the level is decodable and its own p-value
    is at most `alpha` (spec 13.2), so a test can accept `None` where a short text carried too little of that level's
    evidence (probabilistic)."""
    lv = result["levels"][level - 1]
    named = lv["status"] != "undecodable" and lv["p_value"] <= alpha  # undecodable: its level-1 version is gone
    assert (lv["key_version"] is not None) == named, lv
    if level == 1:
        assert result["key_version"] == lv["key_version"], result
    return lv["key_version"]
