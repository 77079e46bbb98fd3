"""The console in Chromium: the `expect` box ("is it model 37?") for moderators and auditors, files
that are not UTF-8 refused, job-file errors with their line / item number, only the current job's results on
screen, superscript exponents, readable audit details, and an over-long text offered as its first 20,000
characters or as a job of excerpts (messages number texts from 1)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from playwright.sync_api import expect

from tests.helpers.browser import live_server, sign_in
from tests.helpers.service import make_settings
from tests.helpers.workers import make_texts


@pytest.fixture(scope="module")
def live(tmp_path_factory, browser):
    home = tmp_path_factory.mktemp("console-v3")
    settings = make_settings(home, f"sqlite:///{home / 'service.db'}", log_level="WARNING", profile="v3",
                             max_text_chars=2000)
    with live_server(settings) as srv:
        from verifier.audit.service import Actor

        srv.ctx.store.initialize(srv.ctx.profile, Actor("setup", "cli", "setup"))
        srv.texts = make_texts(SimpleNamespace(ctx=srv.ctx), 2, steps=120, seed=5)  # model = 0, then 7
        yield srv


@pytest.mark.parametrize("role", ["moderator", "auditor"])
def test_asking_about_one_model_with_superscript_exponents(browser, live, role):
    page = browser.page(live.url)
    sign_in(page, role)
    page.get_by_label("Text", exact=True).fill(live.texts[1])
    page.get_by_label(re.compile("Ask about one value")).fill("model=7")
    page.get_by_role("button", name="Verify", exact=True).click()
    asked = page.locator("#verify-result [data-testid=expected]")
    expect(asked).to_contain_text("Is it model = 7? Yes")
    assert re.search(r"10[⁻¹²³⁴⁵⁶⁷⁸⁹⁰]+", asked.inner_text()) and "^" not in page.locator("#verify-result").inner_text()
    page.get_by_label(re.compile("Ask about one value")).fill("model=8")
    page.get_by_role("button", name="Verify", exact=True).click()
    expect(page.locator("#verify-result [data-testid=expected]")).to_contain_text("Is it model = 8? Not shown")
    page.get_by_label(re.compile("Ask about one value")).fill("model is 7")
    page.get_by_role("button", name="Verify", exact=True).click()
    expect(page.locator("#status")).to_contain_text("name=number")
    # an empty submit says so (never a stale "Verified.")
    page.get_by_label(re.compile("Ask about one value")).fill("")
    page.get_by_label("Text", exact=True).fill("   ")
    page.get_by_role("button", name="Verify", exact=True).click()
    expect(page.locator("#status")).to_have_text("Paste a text first.")


def test_non_utf8_files_are_refused(browser, live):
    page = browser.page(live.url)
    sign_in(page, "moderator")
    page.locator("#verify-file").set_input_files(files=[{"name": "random.txt", "mimeType": "text/plain",
                                                         "buffer": bytes(range(128, 256)) * 4}])
    expect(page.locator("#status")).to_have_text("random.txt is not UTF-8 text")
    assert page.locator("#verify-text").input_value() == ""


@pytest.mark.parametrize(("name", "body", "message"), [
    ("texts.jsonl", b'"one"\n\nnot json\n', "texts.jsonl line 3: not JSON"),
    ("texts.jsonl", b'"one"\n{"txt": "two"}\n', 'texts.jsonl line 2: expected a JSON string or {"text": ...}'),
    ("texts.json", json.dumps(["one", 2]).encode(), "texts.json item 2 is not a text"),
    ("texts.json", b"{nope", "texts.json: not JSON"),
    ("bytes.txt", b"\xff\xfe\xfa", "bytes.txt is not UTF-8 text"),
])
def test_job_file_errors_say_where(browser, live, name, body, message):
    page = browser.page(live.url)
    sign_in(page, "auditor")
    page.get_by_role("link", name="Jobs").click()
    page.locator("#job-file").set_input_files(files=[{"name": name, "mimeType": "text/plain", "buffer": body}])
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#status")).to_contain_text(message)


def test_a_new_job_shows_only_its_own_results(browser, live):
    page = browser.page(live.url)
    sign_in(page, "auditor")
    page.get_by_role("link", name="Jobs").click()
    for texts, n in ((live.texts, 2), (live.texts[:1], 1)):
        page.locator("#job-file").set_input_files(files=[{
            "name": "t.json", "mimeType": "application/json", "buffer": json.dumps(texts).encode()}])
        page.get_by_role("button", name="Submit job").click()
        page.locator("[data-testid=job-progress]").get_by_text("done").wait_for(timeout=600_000)
        expect(page.locator("#job-detail article.result")).to_have_count(n)


def test_an_over_long_text_is_offered_in_part_or_as_excerpts(browser, live):
    page = browser.page(live.url)
    sign_in(page, "moderator")
    long = (live.texts[0] + "\n") * (2000 // len(live.texts[0]) + 2)
    assert len(long) > 2000
    page.get_by_label("Text", exact=True).fill(long)
    page.get_by_role("button", name="Verify", exact=True).click()
    offer = page.locator("[data-testid=too-long]")
    expect(page.locator("#status")).to_contain_text("at most 2,000 characters per text")
    offer.get_by_role("button", name="Verify the first 2,000 characters").click()
    page.wait_for_selector("#verify-result [data-testid=verdict]")
    expect(page.locator("#status")).to_have_text("Verified the first 2,000 characters.")
    page.get_by_role("button", name="Verify", exact=True).click()
    parts = -(-len(long) // 2000)
    button = page.locator("[data-testid=too-long]").get_by_role("button", name=re.compile("Submit as a job of"))
    n = int(re.search(r"of (\d+) excerpts", button.inner_text()).group(1))
    assert n >= parts
    button.click()
    page.locator("[data-testid=job-progress]").get_by_text("done").wait_for(timeout=600_000)
    expect(page.locator("#job-detail article.result")).to_have_count(n)
    # the service's own message for a text over the limit: 1-based, only the limit hit
    r = page.request.post(live.url + "/v1/verify", data=json.dumps({"texts": ["ok", long]}), headers={
        "Authorization": "Bearer " + page.evaluate("sessionStorage.getItem('hero.console.token')"),
        "Content-Type": "application/json"})
    assert r.status == 413 and r.json()["detail"] == f"text 2 is too long: {len(long)} characters (at most 2000 " \
        "characters per text)"


def test_audit_details_are_readable(browser, live):
    page = browser.page(live.url)
    sign_in(page, "admin")
    page.get_by_role("link", name="Audit log").click()
    expect(page.locator("#audit-chain")).to_contain_text("Chain intact")
    cell = page.locator("#audit-table tbody tr td:last-child").first
    width = cell.evaluate("c => c.getBoundingClientRect().width")
    assert width >= 200  # the detail column is never squeezed to a sliver
    clipped = page.evaluate("""() => [...document.querySelectorAll('#audit-table td:last-child')]
        .some(c => c.scrollWidth > c.clientWidth + 1)""")
    assert not clipped
