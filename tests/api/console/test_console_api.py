"""job listing (own jobs, paged; admins all), `Location` on 202, job metrics, audit
filters, the console's own endpoints, offline /docs and /redoc, and field descriptions in OpenAPI."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from prometheus_client import REGISTRY

from verifier.auth.principal import Principal

TEXT = "An ordinary sentence that nobody watermarked, long enough to be scored by the detector."


def _submit(svc, role, sub, n=1):
    r = svc.client.post("/v1/jobs", headers=svc.auth(role, sub), json={"texts": [f"{TEXT} {i}" for i in range(n)]})
    assert r.status_code == 202, r.text
    return r


def _listed(svc, role, sub, query=""):
    r = svc.client.get(f"/v1/jobs{query}", headers=svc.auth(role, sub))
    assert r.status_code == 200, r.text
    return r.json()


def test_job_list_shows_own_jobs_and_admins_all(svc):
    svc.init_keys()
    mine = [_submit(svc, "moderator", "mo").json()["job_id"] for _ in range(3)]
    theirs = _submit(svc, "auditor", "mo").json()["job_id"]  # same subject, other role: not the moderator's
    other = _submit(svc, "moderator", "zed").json()["job_id"]

    listed = _listed(svc, "moderator", "mo")
    assert {j["job_id"] for j in listed["jobs"]} == set(mine)
    assert all(j["subject"] == "mo" and j["role"] == "moderator" for j in listed["jobs"])
    assert "results" not in listed["jobs"][0] and listed["next_offset"] is None
    assert {j["job_id"] for j in _listed(svc, "auditor", "mo")["jobs"]} == {theirs}
    everyone = {j["job_id"] for j in _listed(svc, "admin", "root", "?limit=200")["jobs"]}
    assert {*mine, theirs, other} <= everyone

    # Paged, newest first, no job twice.
    p1 = _listed(svc, "moderator", "mo", "?limit=2")
    assert len(p1["jobs"]) == 2 and p1["next_offset"] == 2
    p2 = _listed(svc, "moderator", "mo", f"?limit=2&offset={p1['next_offset']}")
    assert len(p2["jobs"]) == 1 and p2["next_offset"] is None
    ids = [j["job_id"] for j in p1["jobs"] + p2["jobs"]]
    assert sorted(ids) == sorted(mine)
    created = [j["created_at"] for j in p1["jobs"] + p2["jobs"]]
    assert created == sorted(created, reverse=True)
    assert svc.client.get("/v1/jobs?limit=0", headers=svc.auth("moderator", "mo")).status_code == 422
    assert svc.client.get("/v1/jobs").status_code == 401


def test_job_list_never_shows_a_job_above_the_readers_level(lite):
    from verifier.jobs.service import list_jobs

    lite.init_keys()
    deep = _submit(lite, "auditor", "ann").json()["job_id"]
    reader = Principal("x", "ops", "j", 1, frozenset({"verify", "jobs.read_all"}), lite.settings.jwt_issuer)
    assert deep not in {j["job_id"] for j in list_jobs(lite.ctx.db, reader, 100)}
    reader2 = Principal("x", "ops", "j", 2, frozenset({"verify", "jobs.read_all"}), lite.settings.jwt_issuer)
    assert deep in {j["job_id"] for j in list_jobs(lite.ctx.db, reader2, 100)}


def test_accepted_job_has_location_and_metrics_count_its_texts(lite):
    lite.init_keys()
    before = REGISTRY.get_sample_value("hero_job_texts_total", {"outcome": "submitted"}) or 0.0
    jobs_before = REGISTRY.get_sample_value("hero_jobs_total", {"outcome": "submitted"}) or 0.0
    r = _submit(lite, "moderator", "mo", n=3)
    assert r.headers["location"] == f"/v1/jobs/{r.json()['job_id']}"
    assert lite.client.get(r.headers["location"], headers=lite.auth("moderator", "mo")).status_code == 200
    assert REGISTRY.get_sample_value("hero_job_texts_total", {"outcome": "submitted"}) == before + 3
    assert REGISTRY.get_sample_value("hero_jobs_total", {"outcome": "submitted"}) == jobs_before + 1


def _events(svc, query):
    r = svc.client.get(f"/v1/audit/events?limit=1000&{query}", headers=svc.auth("auditor", "aud"))
    assert r.status_code == 200, r.text
    return r.json()["events"]


def test_audit_events_filter_by_subject_action_level_and_time(svc):
    svc.init_keys()
    for role, sub in (("moderator", "mo"), ("auditor", "au"), ("moderator", "mo")):
        r = svc.client.post("/v1/verify", headers=svc.auth(role, sub), json={"texts": [TEXT]})
        assert r.status_code == 200, r.text
    assert svc.client.post("/v1/keys/2/rotate", headers=svc.auth("admin", "root")).status_code == 201

    everything = _events(svc, "")
    assert len(everything) >= 5
    by_mo = _events(svc, "subject=mo")
    assert len(by_mo) == 2 and all(e["subject"] == "mo" for e in by_mo)
    rotations = _events(svc, "action=keys.rotate")
    assert len(rotations) == 1 and rotations[0]["subject"] == "root"
    level2 = _events(svc, "level=2")
    assert level2 and all(2 in e["levels"] for e in level2)
    assert any(e["subject"] == "au" for e in level2) and not any(e["subject"] == "mo" for e in level2)
    assert _events(svc, "subject=mo&action=keys.rotate") == []  # filters combine

    first, last = everything[0]["created_at"], everything[-1]["created_at"]
    t_last = datetime.fromisoformat(last)
    assert len(_events(svc, "since=" + (t_last + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ"))) == 0
    assert _events(svc, "until=" + datetime.fromisoformat(first).strftime("%Y-%m-%dT%H:%M:%S")) == [] or \
        datetime.fromisoformat(first).microsecond == 0
    since_all = _events(svc, "since=2000-01-01T00:00:00Z&until=" + (t_last + timedelta(days=1)).isoformat()
                        .replace("+00:00", "Z"))
    assert [e["idx"] for e in since_all] == [e["idx"] for e in everything]
    exact = _events(svc, "since=" + last.replace("+", "%2B"))  # inclusive lower bound
    assert exact and exact[0]["created_at"] == last

    for bad in ("since=yesterday", "level=0", "until=2026-13-01T00:00:00Z"):
        r = svc.client.get(f"/v1/audit/events?{bad}", headers=svc.auth("auditor", "aud"))
        assert r.status_code == 422 and "yesterday" not in r.text, (bad, r.text)
    assert svc.client.get("/v1/audit/events?subject=mo", headers=svc.auth("moderator", "mo")).status_code == 403


def test_console_page_and_assets_are_local_and_locked_down(lite):
    r = lite.client.get("/console")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    refs = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert refs and all(u.startswith(("/", "#")) for u in refs), refs
    for url in (u for u in refs if u.startswith("/console/")):
        assert lite.client.get(url).status_code == 200, url
    js = lite.client.get("/console/assets/app.js").text
    assert "innerHTML" not in js and "://" not in js  # text nodes only; no other host
    assert lite.client.get("/console/assets/../endpoints.py").status_code == 404
    assert lite.client.get("/console/assets/nope.js").status_code == 404


def test_dev_sign_in_mints_a_working_token_per_role_only_in_dev_mode_and_locally(lite):
    from fastapi.testclient import TestClient

    cfg = lite.client.get("/console/config").json()
    assert cfg["dev_mode"] is True and {"moderator", "auditor", "admin"} <= set(cfg["roles"])
    # no `with`: the app's lifespan runs once, in lite; a loopback Host, as a browser on this machine sends
    local = TestClient(lite.app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 40000))
    for role, level in (("moderator", 1), ("auditor", 2), ("admin", 2)):
        r = local.post(f"/console/dev-token?role={role}")
        assert r.status_code == 200, r.text
        me = local.get("/console/whoami", headers={"Authorization": "Bearer " + r.json()["token"]}).json()
        assert me["role"] == role and me["max_level"] == level and me["subject"] == f"console-{role}"
    assert local.post("/console/dev-token?role=root").status_code == 422
    assert local.get("/console/whoami").status_code == 401
    remote = TestClient(lite.app, client=("203.0.113.7", 40000))
    assert remote.post("/console/dev-token?role=admin").status_code == 403  # not from this machine

    lite.ctx.settings = lite.settings.model_copy(update={"dev_mode": False})
    assert remote.post("/console/dev-token?role=admin").status_code == 404
    assert remote.get("/console/config").json() == {"dev_mode": False, "roles": [], "alpha": cfg["alpha"],
                                                     "audit_actions": cfg["audit_actions"],
                                                     "max_text_chars": lite.settings.max_text_chars}


def _recorded_actions() -> set[str]:
    """Every action literal the service's code passes where it makes an audit event: AuditEvent(action=... or first
    argument), AuditEvent.of(actor, action), disclosure.audit_events(action=...) and its default, and the keys /
    providers helpers that build one (_audit(s, actor, ACTION, ..), _event(actor, ACTION))."""
    import ast
    from pathlib import Path

    import verifier

    # AuditEvent.of(actor, ACTION, ..) and disclosure.audit_events(.., action=ACTION) (its default counts too)
    position = {"AuditEvent": 0, "of": 1, "_event": 1, "_audit": 2, "audit_events": 4}
    found: set[str] = set()
    for path in Path(verifier.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in position:
                args = node.args.args[len(node.args.args) - len(node.args.defaults):]
                found |= {d.value for a, d in zip(args, node.args.defaults, strict=True)
                          if a.arg == "action" and isinstance(d, ast.Constant) and isinstance(d.value, str)}
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", None))
            if name not in position:
                continue
            args = [kw.value for kw in node.keywords if kw.arg == "action"]
            args += node.args[position[name] : position[name] + 1]
            found |= {a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return found


def test_the_audit_actions_come_from_one_list(lite):
    """The console's audit filter offers what AUDIT_ACTIONS lists, and that list holds every action the code
    records (an action added without joining the list fails here, so the filter can never miss it again)."""
    from verifier.audit.service import AUDIT_ACTIONS

    assert lite.client.get("/console/config").json()["audit_actions"] == list(AUDIT_ACTIONS)
    recorded = _recorded_actions()
    assert {"verify", "verify.evidence", "keys.bundle", "providers.add", "providers.revoke", "keys.move_profile",
            "kek.rotate", "decode", "jobs.read", "keys.destroy"} <= recorded, recorded
    assert recorded == set(AUDIT_ACTIONS), recorded ^ set(AUDIT_ACTIONS)


def test_docs_and_redoc_load_only_local_assets(lite):
    for page in ("/docs", "/redoc"):
        r = lite.client.get(page)
        assert r.status_code == 200
        assert "://" not in r.text, page  # no CDN, no fonts from elsewhere
        csp = r.headers["content-security-policy"]  # and the browser may fetch nothing from another host
        assert "default-src 'self'" in csp and "img-src 'self' data:" in csp and "http" not in csp
        refs = re.findall(r"""(?:src|href)=["']([^"']+)["']""", r.text)
        refs += re.findall(r"""url: ?['"]([^'"]+)['"]""", r.text)
        assert any(u.endswith(".js") for u in refs), refs
        for url in refs:
            assert url.startswith("/"), url
            got = lite.client.get(url)
            assert got.status_code == 200 and len(got.content) > 100, url
    assert lite.client.get("/docs/assets/secret.txt").status_code == 404


def test_every_result_field_is_described_in_openapi(lite):
    schemas = lite.client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("ResultOut", "VerifiedOut", "LevelOut", "CandidateOut", "SpanOut", "JobOut", "JobSummary",
                 "JobListOut", "Progress", "ReceiptOut", "WhoAmI"):
        props = schemas[name]["properties"]
        missing = [f for f, spec in props.items() if f != "job_id" and not spec.get("description")]
        assert missing == [], (name, missing)
    assert "Fisher" in schemas["ResultOut"]["properties"]["p_value"]["description"]
    assert "roles" in schemas["ResultOut"]["properties"]["p_value"]["description"]
