"""A 405 names every method of its path in `Allow` (schemathesis ST205, found by a fuzzing run): Starlette named
only the first matching route's, so OPTIONS /v1/providers answered `Allow: POST` where GET is served too."""

from __future__ import annotations


def test_a_405_names_every_method_of_the_path(lite):
    r = lite.client.request("OPTIONS", "/v1/providers", headers=lite.auth("admin", "root"))
    assert r.status_code == 405 and r.headers["Allow"] == "GET, POST"
    r = lite.client.delete("/v1/verify", headers=lite.auth("admin", "root"))
    assert r.status_code == 405 and r.headers["Allow"] == "POST"
    assert r.json() == {"detail": "Method Not Allowed"}
