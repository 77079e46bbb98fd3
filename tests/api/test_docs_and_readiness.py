"""the OpenAPI documents the 4xx answers each route gives; outside dev mode /docs, /redoc and
/openapi.json are served only with HERO_PUBLIC_DOCS=1; /readyz says ready or not (the profile only in dev mode).

Before (7ed75c2): `GET /v1/keys` answered a 403 its OpenAPI did not list, a production service served its API
description to anyone (HERO_DOCS_EXPOSURE defaulted to public) and /readyz named the profile it serves."""

from __future__ import annotations


def test_production_hides_the_docs_and_the_profile(make_service, sqlite_url):
    svc = make_service(sqlite_url, dev_mode=False)
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert svc.client.get(path).status_code == 404, path
    assert svc.client.get("/readyz").json() == {"status": "ready"}


def test_public_docs_on_request(make_service, sqlite_url):
    svc = make_service(sqlite_url, dev_mode=False, public_docs=True)
    assert svc.client.get("/openapi.json").status_code == 200 and svc.client.get("/docs").status_code == 200
    off = make_service(sqlite_url, dev_mode=True, public_docs=False)
    assert off.client.get("/openapi.json").status_code == 404


def test_every_authenticated_route_documents_401_and_403(lite):
    spec = lite.client.get("/openapi.json").json()
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if path.startswith("/v1/") or "security" in op:
                assert {"401", "403"} <= set(op["responses"]), (method, path)
    assert "403" in spec["paths"]["/v1/keys"]["get"]["responses"]
    assert "400" in spec["paths"]["/v1/jobs/{job_id}/results"]["get"]["responses"]
    r = lite.client.get("/v1/keys", headers=lite.auth("moderator"))
    assert r.status_code == 403  # the answer the spec now lists
