"""the web console driven in Debian's chromium (Playwright via executable_path), one test per role's
main flow, with every request to another host blocked and recorded (the console, /docs and /redoc must load
with no network). `scripts/screenshots` runs these tests with HERO_SCREENSHOTS=docs/console to refresh the
README's screenshots from the same flows."""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.sync_api import expect

from tests.helpers.browser import UNMARKED, as_typed, screenshot, sign_in, verify


def test_moderator_verifies_a_text_at_phone_width(browser, live):
    page = browser.page(live.url, width=390, height=844)
    page.goto("/console")
    page.wait_for_selector("body[data-ready='1']")
    assert page.get_by_label("Bearer token (JWT from your identity provider)").is_visible()
    screenshot(page, "signin")
    page.get_by_role("button", name="Sign in as moderator").click()
    page.wait_for_selector("#nav:not([hidden])")
    assert page.locator("#who-text").inner_text().startswith("console-moderator (moderator")
    assert not page.get_by_role("link", name="Keys").is_visible()  # no keys.read
    assert not page.get_by_role("link", name="Audit log").is_visible()

    result = verify(page, live.texts[0])
    assert result.locator("[data-testid=verdict] strong").inner_text() == "Watermarked"
    assert "Strong evidence of the watermark" in result.locator("[data-testid=p-words]").inner_text()
    assert result.locator("section.level").count() == 1  # level 1 only: the moderator's maximum
    assert page.locator("[data-testid=evidence]").count() == 0  # no per-token map (a key oracle) for moderators
    assert result.locator("[data-testid=level-status]").inner_text().startswith("decoded")
    assert re.search(r"model = \d+", result.locator("[data-testid=level-fields]").inner_text())
    assert result.get_by_text(re.compile("Audit receipt")).is_visible()
    fits = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    assert fits, "the verify page scrolls sideways at phone width"
    screenshot(page, "verify-moderator")

    result = verify(page, UNMARKED)
    assert result.locator("[data-testid=verdict] strong").inner_text() == "No watermark found"
    # Keyboard: the form is reachable and submittable without a mouse.
    page.locator("#verify-text").focus()
    page.keyboard.press("Tab")


MIXED = {
    "watermarked": True, "p_value": 1e-9, "key_version": "l1-v1", "tokens_scored": 180, "spec_version": 2,
    "flags": ["mixed-sources"],
    "levels": [
        {"level": 1, "key_version": "l1-v1", "fields": {"model": 1234}, "confidence": 0.999, "p_value": 1e-9,
         "status": "decoded", "reason": None, "candidates": None, "spans": None},
        {"level": 2, "key_version": "l2-v1", "fields": {"user": None}, "confidence": 0.0, "p_value": 1e-7,
         "status": "mixed", "reason": "two values are each significant",
         "candidates": [{"fields": {"user": 3001}, "p_value": 2e-6, "tokens": 90},
                        {"fields": {"user": 42}, "p_value": 5e-5, "tokens": 88}],
         "spans": [{"start": 0, "end": 91, "fields": {"user": 3001}},
                   {"start": 91, "end": 180, "fields": {"user": 42}}]},
    ],
}


def test_auditor_sees_private_levels_mixed_candidates_spans_and_receipt(browser, live):
    page = browser.page(live.url)
    sign_in(page, "auditor")
    result = verify(page, live.texts[1])
    assert result.locator("[data-testid=verdict] strong").inner_text() == "Watermarked"
    levels = result.locator("section.level")
    assert levels.count() == 2
    assert "private" in levels.nth(1).inner_text()
    assert re.search(r"user = \d+", levels.nth(1).locator("[data-testid=level-fields]").inner_text())
    result.get_by_text(re.compile("Audit receipt")).click()
    receipt = json.loads(result.locator("details.receipt pre").inner_text())
    assert receipt["event"]["subject"] == "console-auditor" and receipt["event"]["action"] == "verify"
    screenshot(page, "verify-auditor")

    # Per-token evidence (auditors have `evidence.read`): the text comes back with the marked tokens shaded.
    page.get_by_role("button", name="Show which tokens carry the mark").click()
    view = page.locator("[data-testid=evidence] pre.evidence")
    view.wait_for()
    # the whole text, unchanged, only wrapped; as a textarea holds it (line breaks as LF: generated texts can hold CR)
    assert view.inner_text() == as_typed(live.texts[1])
    assert page.locator("[data-testid=evidence] mark").count() > 20
    screenshot(page, "verify-evidence")

    # A `mixed` level (spliced sources): the service's answer is replayed so the rendering is checked exactly.
    receipt_doc = {"leaf_index": 0, "inclusion_proof": [], "checkpoint": "x", "event": {}}
    page.route("**/v1/verify", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps({"results": [{**MIXED, "receipt": receipt_doc}]})))
    result = verify(page, "a spliced text")
    assert "mixed-sources" in result.inner_text()
    level2 = result.locator("section.level").nth(1)
    assert level2.locator("[data-testid=level-status]").inner_text().startswith("mixed")
    cands = level2.locator("[data-testid=candidates] tbody tr")
    assert cands.count() == 2 and "user = 3001" in cands.nth(0).inner_text()
    spans = level2.locator("[data-testid=spans] tbody tr")
    assert spans.count() == 2 and spans.nth(1).inner_text().startswith("91–180")
    screenshot(page, "verify-mixed")


def test_the_evidence_view_keeps_characters_outside_the_bmp(browser, live):
    """Token offsets count code points; the view once sliced UTF-16 units, so from the first emoji on it shaded
    the wrong characters (and could cut one in half)."""
    page = browser.page(live.url)
    sign_in(page, "auditor")
    head, tail = live.texts[1][:300], live.texts[1][300:]
    text = as_typed(f"\U0001d518nicode \U0001f600 {head} \U0001f389\U0001f389 {tail} \U0001f44d")
    assert verify(page, text).locator("[data-testid=verdict] strong").inner_text() == "Watermarked"
    with page.expect_response("**/v1/verify/evidence") as answer:
        page.get_by_role("button", name="Show which tokens carry the mark").click()
    view = page.locator("[data-testid=evidence] pre.evidence")
    view.wait_for()
    marked, at = [], 0
    for t in answer.value.json()["tokens"]:  # what the view shades: each scored token's own characters
        if t["start"] < at:
            continue
        if t["evidence"] >= 2:
            marked.append(text[t["start"] : t["end"]])
        at = t["end"]
    assert view.inner_text() == text
    assert len(marked) > 20 and page.locator("[data-testid=evidence] mark").all_inner_texts() == marked


def test_admin_manages_key_versions_and_filters_the_audit_log(browser, live):
    page = browser.page(live.url)
    sign_in(page, "admin")
    page.get_by_role("link", name="Keys").click()
    rows = page.locator("#keys-table tbody tr")
    rows.first.wait_for()

    def row(version):
        return page.locator("#keys-table tbody tr", has=page.locator("code", has_text=re.compile(f"^{version}$")))

    before = rows.count()
    page.get_by_role("button", name="Rotate level 2").click()
    row("l2-v2").wait_for()
    assert rows.count() == before + 1
    assert "verify-only" in row("l2-v1").inner_text() and "active" in row("l2-v2").inner_text()
    row("l2-v1").get_by_role("button", name="Disable").click()
    expect(page.locator("#status")).to_contain_text("disabled l2-v1")
    row("l2-v1").get_by_role("button", name="Enable").wait_for()
    row("l2-v1").get_by_role("button", name="Enable").click()
    expect(page.locator("#status")).to_contain_text("enabled l2-v1")

    row("l2-v1").get_by_role("button", name="Destroy…").click()
    dialog = page.get_by_role("dialog")
    ok = dialog.get_by_role("button", name="Destroy")
    assert ok.is_disabled()
    dialog.get_by_label("Type l2-v1 to confirm").fill("l2-v")
    assert ok.is_disabled()  # typed confirmation must match exactly
    dialog.get_by_label("Type l2-v1 to confirm").fill("l2-v1")
    screenshot(page, "keys-destroy")
    ok.click()
    expect(page.locator("#status")).to_contain_text("destroyed l2-v1")
    expect(row("l2-v1")).to_contain_text("destroyed")
    screenshot(page, "keys")

    page.get_by_role("link", name="Audit log").click()
    expect(page.locator("#audit-chain")).to_contain_text("Chain intact")
    page.get_by_label("Action").select_option("keys.destroy")
    page.get_by_role("button", name="Filter").click()
    shown = page.locator("#audit-table tbody tr")
    expect(shown).to_have_count(1)
    expect(shown.first).to_contain_text("keys.destroy")
    assert "console-admin" in shown.first.inner_text()
    page.get_by_label("Action").select_option("")
    page.get_by_label("Subject").fill("console-admin")
    page.get_by_role("button", name="Filter").click()
    expect(shown.first).not_to_contain_text("keys.destroy")
    assert shown.count() >= 4 and all("console-admin" in t for t in shown.all_inner_texts())
    screenshot(page, "audit")


def test_job_submitted_from_a_file_shows_progress_and_downloads_results(browser, live, tmp_path):
    page = browser.page(live.url)
    sign_in(page, "auditor")
    page.get_by_role("link", name="Jobs").click()
    texts = [live.texts[2], UNMARKED]
    page.locator("#job-file").set_input_files(files=[{
        "name": "texts.json", "mimeType": "application/json", "buffer": json.dumps({"texts": texts}).encode()}])
    page.get_by_role("button", name="Submit job").click()
    box = page.locator("[data-testid=job-progress]")
    box.get_by_text("done").wait_for(timeout=600_000)
    bar = box.locator("progress")
    assert bar.get_attribute("value") == bar.get_attribute("max") == "2"
    page.wait_for_selector("#job-detail article.result")
    assert page.locator("#job-detail article.result").count() == 2
    assert page.locator("#jobs-table tbody tr", has_text="done").count() >= 1
    screenshot(page, "jobs")
    with page.expect_download() as dl:
        box.get_by_role("link", name="Download results (JSON)").click()
    path = tmp_path / "job.json"
    dl.value.save_as(path)
    doc = json.loads(Path(path).read_text())
    assert doc["status"] == "done" and len(doc["results"]) == 2
    assert doc["results"][0]["watermarked"] is True and doc["results"][1]["watermarked"] is False


def test_api_docs_render_with_no_network(browser, live):
    page = browser.page(live.url)
    page.goto("/docs")
    page.locator(".swagger-ui .info .title").get_by_text("HeRo Verifier").wait_for()
    page.get_by_text("/v1/verify").first.wait_for()
    screenshot(page, "docs")
    page.goto("/redoc")
    page.get_by_role("heading", name=re.compile("HeRo Verifier")).first.wait_for()


def test_sign_out_forgets_the_text_expect_results_and_jobs(browser, live):
    """after sign-out the console kept the previous user's text, `expect` and result on screen,
    so a second role signing in on a shared browser saw them and silently sent the same `expect`. Now sign-out
    clears the forms, results, job progress and detail, the tables and the tab's storage, and drops any answer
    still in flight."""
    page = browser.page(live.url)
    sign_in(page, "auditor")
    page.get_by_label("Text", exact=True).fill(live.texts[0])
    page.locator("#verify-expect").fill("user=5")  # level 2 (the default profile segments level 1)
    page.get_by_role("button", name="Verify", exact=True).click()
    page.wait_for_selector("#verify-result [data-testid=expected]")
    page.get_by_role("link", name="Jobs").click()
    page.locator("#job-separator").fill("---")
    page.locator("#job-file").set_input_files(files=[{
        "name": "texts.json", "mimeType": "application/json", "buffer": json.dumps([live.texts[0]]).encode()}])
    page.get_by_role("button", name="Submit job").click()
    page.locator("[data-testid=job-progress]").get_by_text("done").wait_for(timeout=600_000)
    page.wait_for_selector("#job-detail article.result")
    assert "console-auditor" in page.locator("#jobs-table tbody").inner_text()

    # A verify still in flight when the auditor signs out: its answer must never reach the next user's screen.
    held = []
    page.route("**/v1/verify", lambda route: held.append(route))
    page.get_by_role("link", name="Verify").click()
    page.get_by_role("button", name="Verify", exact=True).click()
    expect(page.locator("#status")).to_contain_text("Verifying")
    for _ in range(1800):  # the route handler runs while Playwright waits
        if held:
            break
        page.wait_for_timeout(100)
    assert len(held) == 1
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_selector("#page-signin:not([hidden])")
    assert page.evaluate("sessionStorage.length") == 0
    assert page.locator("#token").input_value() == ""

    page.get_by_role("button", name="Sign in as moderator").click()
    page.wait_for_selector("#nav:not([hidden])")
    assert page.locator("#who-text").inner_text().startswith("console-moderator")
    receipt_doc = {"leaf_index": 0, "inclusion_proof": [], "checkpoint": "x", "event": {}}
    held[0].fulfill(status=200, content_type="application/json",  # the auditor's answer arrives now
                    body=json.dumps({"results": [{**MIXED, "receipt": receipt_doc}]}))
    page.unroute("**/v1/verify")
    page.wait_for_timeout(500)  # time for the held answer to be rendered, had it been kept
    assert page.get_by_label("Text", exact=True).input_value() == ""
    assert page.locator("#verify-expect").input_value() == ""
    assert page.locator("#verify-result").inner_text() == ""
    assert page.locator("#verify-result *").count() == 0
    page.get_by_role("link", name="Jobs").click()
    assert page.locator("#job-current").inner_text() == "" and page.locator("#job-detail").inner_text() == ""
    assert page.locator("#job-separator").input_value() == ""
    assert page.locator("#job-file").evaluate("f => f.files.length") == 0
    expect(page.locator("#jobs-table tbody")).to_contain_text("No jobs yet.")
    assert "console-auditor" not in page.locator("body").inner_text()
    assert page.locator("a.download").count() == 0

    # The moderator's own verify sends no `expect` it did not type.
    page.get_by_role("link", name="Verify").click()
    page.get_by_label("Text", exact=True).fill(UNMARKED)
    with page.expect_request("**/v1/verify") as sent:
        page.get_by_role("button", name="Verify", exact=True).click()
    assert json.loads(sent.value.post_data) == {"texts": [UNMARKED]}
    page.wait_for_selector("#verify-result [data-testid=verdict]")
    assert page.locator("#verify-result [data-testid=expected]").count() == 0
