"""Property-based API fuzzing from the OpenAPI schema: no operation may answer 5xx, and every answer conforms to
the schema (documented status code, content type, headers and body shape). Bounded (150 examples, ~15 s on 2
cores); HERO_FUZZ_EXAMPLES=3000 for a longer run (0 server errors, 0 undocumented status codes at 3,000)."""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.helpers.service import cached_tokenizer_loader, make_settings

pytestmark = pytest.mark.slow
EXAMPLES = int(os.environ.get("HERO_FUZZ_EXAMPLES", "150"))


@pytest.fixture
def fuzz_app(hero_home, tmp_path):
    from verifier.api.app import create_app

    s = make_settings(hero_home, f"sqlite:///{tmp_path / 'fuzz.db'}", max_body_bytes=65536)
    app = create_app(s, tokenizer_loader=cached_tokenizer_loader)
    from verifier.auth.devkeys import mint_token

    app.state.fuzz_token = mint_token(s, "admin", "fuzzer", s.jwt_max_ttl_seconds)  # outlives any slow run
    app.state.ctx.store.initialize(app.state.ctx.profile)
    app.state.ctx.tokenizers(app.state.ctx.profile.tokenizer)  # load once, outside request timeouts
    return app


def test_no_server_errors(fuzz_app):
    from hypothesis import given
    from hypothesis import strategies as st
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    conformance = [status_code_conformance, content_type_conformance, response_headers_conformance,
                   response_schema_conformance]

    api = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    ops = [r.ok() for r in api.get_all_operations()]
    assert len(ops) >= 10
    headers = {"Authorization": f"Bearer {fuzz_app.state.fuzz_token}"}
    seen = set()

    @given(data=st.data())
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(data):
        op = data.draw(st.sampled_from(ops))
        case = data.draw(op.as_strategy())
        seen.add(op.label)
        resp = case.call(headers=headers, timeout=120)
        assert resp.status_code < 500, (case.method, case.path, resp.status_code, resp.text[:300])
        if resp.status_code >= 400:
            assert isinstance(resp.json().get("detail"), str), resp.text[:300]
        case.validate_response(resp, checks=conformance)  # raises (with the case) on any non-conformance

    run()
    assert len(seen) >= len(ops) // 2
