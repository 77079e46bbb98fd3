"""In Chromium: what a newcomer meets in the console. A status line belongs to the page that set it; the
header names the caller's levels in plain words; p-values read "about once in N texts"; the audit filter offers
every audited action (from the service's one list) and the log shows only real key versions; job result cards
carry their number and an excerpt of their text; a plain-text file is one text unless a separator is given."""

from __future__ import annotations

import json

from playwright.sync_api import expect

from tests.helpers.browser import UNMARKED, sign_in, verify
from verifier.audit.service import AUDIT_ACTIONS


def test_the_status_line_does_not_follow_to_other_pages_and_the_header_names_levels(browser, live):
    page = browser.page(live.url)
    sign_in(page, "moderator")
    assert page.locator("#who-text").inner_text() == "console-moderator (moderator, level 1)"
    verify(page, UNMARKED)
    expect(page.locator("#status")).to_have_text("Verified.")
    page.get_by_role("link", name="Jobs").click()
    expect(page.locator("#status")).to_have_text("")
    page.get_by_role("button", name="Sign out").click()
    expect(page.locator("#status")).to_have_text("Signed out.")  # a message the page change itself brings stays

    sign_in(page, "admin")
    assert page.locator("#who-text").inner_text() == "console-admin (admin, levels 1–2)"
    for link in ("Keys", "Jobs", "Audit log"):
        page.get_by_role("link", name="Verify").click()
        verify(page, UNMARKED)
        expect(page.locator("#status")).to_have_text("Verified.")
        page.get_by_role("link", name=link).click()
        expect(page.locator("#page-" + {"Audit log": "audit"}.get(link, link.lower()))).to_be_visible()
        expect(page.locator("#status")).not_to_have_text("Verified.")


def test_p_value_words_count_texts(browser, live):
    page = browser.page(live.url)
    sign_in(page, "moderator")
    level = {"level": 1, "key_version": "l1-v1", "fields": {"model": 7}, "confidence": 0.99, "p_value": 3.0282e-5,
             "status": "decoded", "reason": None, "candidates": None, "spans": None}
    answer = {"watermarked": True, "p_value": 3.0282e-5, "key_version": "l1-v1", "tokens_scored": 90, "flags": [],
              "spec_version": 2, "levels": [level], "receipt": None}
    page.route("**/v1/verify", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps({"results": [answer]})))
    words = verify(page, "any text").locator("[data-testid=p-words]").inner_text()
    assert "scores this high about once in 33,023 texts (p = " in words, words


def test_audit_filter_offers_every_action_and_the_log_shows_only_real_versions(browser, live):
    page = browser.page(live.url)
    sign_in(page, "admin")
    verify(page, UNMARKED)  # names no key version at any level
    page.get_by_role("link", name="Audit log").click()
    options = page.locator("#f-action option").all_inner_texts()
    assert options == ["any", *AUDIT_ACTIONS]
    for action in ("verify.evidence", "keys.bundle", "providers.add", "providers.revoke", "keys.move_profile"):
        assert action in options
    page.get_by_label("Action").select_option("verify")
    page.get_by_role("button", name="Filter").click()
    rows = page.locator("#audit-table tbody tr")
    expect(rows.first).to_contain_text("verify")
    cells = page.locator("#audit-table tbody tr td:nth-child(7)").all_inner_texts()
    assert cells and not any("none" in c for c in cells), cells
    assert "—" in cells  # the unmarked text's event: no version


def _submit(page, files, separator=""):
    page.get_by_role("link", name="Jobs").click()
    page.get_by_label("Separator line (optional)", exact=False).fill(separator)
    page.locator("#job-file").set_input_files(files=files)
    page.get_by_role("button", name="Submit job").click()
    page.locator("[data-testid=job-progress]").get_by_text("done").wait_for()
    page.wait_for_selector("#job-detail article.result")
    return page.locator("#job-detail article.result")


def test_job_results_carry_their_number_and_an_excerpt(browser, live):
    page = browser.page(live.url)
    sign_in(page, "auditor")
    texts = [live.texts[0], UNMARKED, live.texts[2]]
    cards = _submit(page, [{"name": "texts.jsonl", "mimeType": "application/json",
                            "buffer": "\n".join(json.dumps(t) for t in texts).encode()}])
    expect(cards).to_have_count(3)
    for i, text in enumerate(texts):
        card = cards.nth(i)
        assert card.locator("[data-testid=result-number]").inner_text() == f"Text {i + 1} of 3"
        shown = card.locator("[data-testid=result-excerpt]").inner_text().strip("“”…")
        assert shown and " ".join(text.split()).startswith(shown), (shown, text[:80])
    assert cards.nth(1).locator("[data-testid=verdict] strong").inner_text() == "No watermark found"

    # Opened from the list in another tab: numbered, and saying why no excerpt is shown.
    other = browser.page(live.url)
    sign_in(other, "auditor")
    other.get_by_role("link", name="Jobs").click()
    other.get_by_role("button", name="Open").first.click()
    other.wait_for_selector("#job-detail article.result")
    first = other.locator("#job-detail article.result").first
    assert first.locator("[data-testid=result-number]").inner_text().startswith("Text 1 of ")
    assert "another browser tab" in first.locator("[data-testid=result-excerpt]").inner_text()


def test_a_plain_text_file_is_one_text_unless_a_separator_is_given(browser, live):
    page = browser.page(live.url)
    sign_in(page, "auditor")
    paragraphs = f"{UNMARKED}\n\nA second paragraph of the same text.\n\n\nAnd a third one, after two blank lines.\n"
    cards = _submit(page, [{"name": "one.txt", "mimeType": "text/plain", "buffer": paragraphs.encode()}])
    expect(cards).to_have_count(1)  # paragraph breaks stay inside the text (they used to make three texts)
    expect(page.locator("#status")).to_contain_text("Job submitted: 1 text.")

    two_files = [{"name": "a.txt", "mimeType": "text/plain", "buffer": paragraphs.encode()},
                 {"name": "b.txt", "mimeType": "text/plain", "buffer": UNMARKED.encode()}]
    expect(_submit(page, two_files)).to_have_count(2)  # one text per file

    split = f"{UNMARKED}\n\nsame text\n---\n{live.texts[1]}\n --- \nthe third text\n"
    cards = _submit(page, [{"name": "many.txt", "mimeType": "text/plain", "buffer": split.encode()}], "---")
    expect(cards).to_have_count(3)
    assert cards.nth(2).locator("[data-testid=result-excerpt]").inner_text() == "“the third text”"
