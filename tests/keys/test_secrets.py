"""Key material never appears in logs or error responses."""

from __future__ import annotations

import logging

from tests.helpers.service import secret_forms


class LeakyRunner:
    """A job runner whose failure message quotes key material (worst case)."""

    def __init__(self, store, profile):
        self.store, self.profile = store, profile

    def decode(self, job, timeout=None):
        t = self.store.active_keyset(self.profile).tables[0]
        raise RuntimeError(f"decoder exploded with key {t.entries[0].hex()} {t.entries[0]!r}")

    def close(self):
        pass


def test_no_key_material_in_logs_or_errors(make_service, sqlite_url, caplog):
    caplog.set_level(logging.DEBUG)
    svc = make_service(sqlite_url)
    c, admin, aud = svc.client, svc.auth("admin"), svc.auth("auditor")
    bodies = []
    bodies.append(svc.init_keys())
    for path in ("/v1/keys/1/rotate", "/v1/keys/2/rotate"):
        bodies.append(c.post(path, headers=admin).json())
    bodies.append(c.post("/v1/keys/1/versions/l1-v1/destroy", headers=admin, json={"confirm": "l1-v1"}).json())
    for body in ({"texts": ["an ordinary text for checking"]}, {"texts": [""]}, {"texts": [3]}, {}):
        bodies.append(c.post("/v1/verify", headers=aud, json=body).json())
    bodies.append(c.post("/v1/verify", headers={"Authorization": "Bearer x.y.z"}, json={}).json())
    bodies.append(c.get("/v1/keys", headers=admin).json())
    bodies.append(c.get("/v1/audit/events", headers=admin).json())

    # A failure deep inside decoding whose message carries key bytes: 500 with a generic message.
    leaky = make_service(sqlite_url)
    leaky.ctx.runner = LeakyRunner(leaky.ctx.store, leaky.ctx.profile)
    r = leaky.client.post("/v1/verify", headers=leaky.auth("auditor"), json={"texts": ["some text"]})
    assert r.status_code == 500 and r.json() == {"detail": "internal error"}
    bodies.append(r.json())

    forms = secret_forms(svc)
    assert len(forms) > 20
    haystack = ("\n".join(map(str, bodies)) + "\n" + caplog.text).encode()
    haystack += "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records).encode()
    for f in forms:
        assert f not in haystack
