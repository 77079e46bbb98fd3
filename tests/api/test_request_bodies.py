"""Request bodies the guards refuse with one clear 4xx (never a 500 nor a million error objects): non-string
items stop at the first one, deep nesting on the fast path, audit filter times past the calendar, the job body
limit only for roles that verify, and OpenAPI declaring what the middleware answers (uvicorn and PostgreSQL
cases: test_body_guard.py, test_key_wal_shred.py)."""

from __future__ import annotations

import pytest

TEXT = "An ordinary sentence that nobody watermarked, long enough to be scored."


def test_large_body_of_non_strings_stops_at_its_first_item():
    """The off-loop parser refuses at item 0 instead of building a million ints (then a million error objects)."""
    from fastapi import HTTPException

    from verifier.api.bodies import parse_flat_object, string_array_fields
    from verifier.jobs.schemas import JobIn

    assert string_array_fields(JobIn) == {"texts"}
    from verifier.api.jobs import router as jobs
    from verifier.api.verify import router as verify

    posts = [r for rt in (jobs, verify) for r in rt.routes
             if r.path in ("/v1/jobs", "/v1/verify") and "POST" in r.methods]
    assert len(posts) == 2
    for route in posts:  # what each route's parser enforces
        assert route.string_arrays == {"texts"}, route.path
    body = '{"texts":[' + ",".join(["1"] * 1_000_000) + "]}"
    with pytest.raises(HTTPException) as err:
        parse_flat_object(body, frozenset({"texts"}))
    assert err.value.status_code == 422 and err.value.detail == "texts.0: Input should be a valid string"
    late = '{"texts":["a","b",' + ",".join(["1"] * 10) + "]}"
    with pytest.raises(HTTPException, match=r"texts\.2"):
        parse_flat_object(late, frozenset({"texts"}))
    assert parse_flat_object('{"texts":["a"],"max_level":1}', frozenset({"texts"})) == {"texts": ["a"], "max_level": 1}


def test_large_verify_body_takes_per_text_expect_objects_and_stops_at_the_first_bad_one():
    """/v1/verify's items are strings or {"text", "expect"} objects: a large body parsed off the loop takes both,
    and an object that is no TextIn is refused at its own index before the rest is built."""
    from fastapi import HTTPException

    from verifier.api.bodies import object_item_fields, parse_flat_object
    from verifier.verify.schemas import VerifyIn

    objects = object_item_fields(VerifyIn)
    assert set(objects) == {"texts"}
    body = '{"texts":["a",{"text":"b","expect":{"model":3}}],"max_level":1}'
    parsed = parse_flat_object(body, frozenset({"texts"}), objects)
    assert VerifyIn.model_validate(parsed).text_expects() == [None, {"model": 3}]
    for bad, where in (('{"texts":["a",' + ",".join(["{}"] * 100_000) + "]}", "texts.1.TextIn.text"),
                       ('{"texts":[{"text":"a","x":1}]}', "texts.0.TextIn.x"), ('{"texts":["a",[1]]}', "texts.1:")):
        with pytest.raises(HTTPException) as err:
            parse_flat_object(bad, frozenset({"texts"}), objects)
        assert err.value.status_code == 422 and err.value.detail.startswith(where), err.value.detail


@pytest.mark.parametrize("n", [1_000_000, 100_000])  # 2 MB (parsed off the loop) and 200 kB (json.loads)
@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/verify"])
def test_non_string_items_give_one_error(lite, path, n):
    if path == "/v1/verify" and n > 300_000:
        n = 400_000  # within /v1/verify's 1 MB limit
    body = '{"texts":[' + ",".join(["1"] * n) + "]}"
    r = lite.client.post(path, content=body, headers={**lite.auth("moderator"), "Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"] == "texts.0: Input should be a valid string"  # one error, not one per item


def test_deeply_nested_json_on_the_fast_path_is_a_400(lite):
    body = '{"texts":["a"],"x":' + "[" * 1000 + "]" * 1000 + "}"
    r = lite.client.post("/v1/verify", content=body,
                         headers={**lite.auth("moderator"), "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert isinstance(r.json()["detail"], str)


@pytest.mark.parametrize("query", ["since=9999-12-31T23:59:59-23:59", "until=9999-12-31T23:59:59-23:59",
                                   "since=0001-01-01T00:00:00%2B23:59"])
def test_audit_filter_times_past_the_calendar_are_a_client_error(lite, query):
    r = lite.client.get(f"/v1/audit/events?{query}", headers=lite.auth("auditor"))
    assert r.status_code == 422, r.text
    assert "years 1..9999" in r.json()["detail"]


def test_job_body_limit_is_for_roles_that_verify(lite):
    big = b'{"texts":["' + TEXT.encode() + b'"]' + b" " * 2_000_000 + b"}"  # over HERO_MAX_BODY_BYTES, under /v1/jobs'
    headers = {"Content-Type": "application/json"}
    r = lite.client.post("/v1/jobs", content=big, headers={**lite.auth("provider", "fleet-1"), **headers})
    assert r.status_code == 413, r.text  # refused before the body is read (it was parsed, then 403)
    r = lite.client.post("/v1/jobs", content=big, headers={**lite.auth("moderator"), **headers})
    assert r.status_code == 202, r.text


def test_openapi_declares_guard_errors_and_metrics_text(lite):
    spec = lite.client.get("/openapi.json").json()
    for path, item in spec["paths"].items():
        for method, op in item.items():
            codes = op["responses"]
            assert "400" in codes, (method, path)
            if path.startswith("/v1/"):
                assert "401" in codes, (method, path)
            if "requestBody" in op:
                assert "413" in codes, (method, path)
    metrics = spec["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]
