// HeRo Verifier console: plain JS, no dependencies. Talks only to this origin's API with the user's token.
"use strict";
(function () {
  const TOKEN_KEY = "hero.console.token";
  const state = { me: null, config: null, jobsOffset: 0, auditAfter: 0, pollTimer: null, page: null, jobTexts: {},
    watching: null, epoch: 0, blobUrls: [] };
  const $ = (id) => document.getElementById(id);

  // DOM builder: text nodes only (no HTML parsing of strings), so nothing from a response is ever parsed as HTML.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }

  function say(msg, isError) {
    const s = $("status");
    s.textContent = msg || "";
    s.className = "status" + (isError ? " error" : "");
  }

  function token() { return sessionStorage.getItem(TOKEN_KEY); }

  // An answer that arrives after a sign-out (or a new sign-in) belongs to the previous user: it is dropped (the
  // promise never settles, so no caller renders it), never shown to whoever is signed in now.
  const DROPPED = new Promise(() => {});
  async function api(method, path, body) {
    const epoch = state.epoch;
    const headers = {};
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store" });
    const text = await r.text();
    if (epoch !== state.epoch) return DROPPED;
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
    if (!r.ok) {
      const detail = data && data.detail ? data.detail : r.status + " " + r.statusText;
      const err = new Error(detail);
      err.status = r.status;
      if (r.status === 401 && path !== "/console/whoami") { signOut("Your session ended: " + detail); }
      throw err;
    }
    return { data, response: r };
  }

  // ---- words for numbers -------------------------------------------------------------------------
  function sci(p) {
    if (p === 0) return "0";
    if (p >= 0.001) return p.toPrecision(2);
    const e = Math.floor(Math.log10(p));
    const m = p / Math.pow(10, e);
    return (Math.round(m * 10) / 10) + "×10" + sup(e);
  }
  // an exponent as superscript characters (10⁻²⁵), readable in text, titles and copies alike
  const SUP = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };
  function sup(e) { return Array.from(String(e)).map((c) => SUP[c]).join(""); }
  function oneIn(p) {
    if (p <= 0) return "practically never";
    const n = 1 / p;
    if (n < 1e6) return "about once in " + Math.round(n).toLocaleString("en") + " texts";
    const e = Math.floor(Math.log10(n));
    return "about once in 10" + sup(e) + " texts";
  }
  function pWords(p, alpha, scored, watermarked) {
    if (!scored) return "No tokens could be scored: the text is too short or too repetitive to tell.";
    if (p <= alpha || watermarked) return "Strong evidence of the watermark: a text without it scores this high " + oneIn(p) +
      " (p = " + sci(p) + ", threshold " + sci(alpha) + ").";
    if (p <= 0.01) return "Some evidence, but not enough to call the text watermarked (p = " + sci(p) +
      ", threshold " + sci(alpha) + "). A longer excerpt may settle it.";
    return "No evidence of the watermark: unmarked text scores like this often (p = " + sci(p) + ").";
  }
  const STATUS_WORDS = {
    decoded: "decoded: this level's own evidence supports one value",
    detected: "detected: this level's own evidence is significant, but its value is withheld (see the reason)",
    absent: "absent: not significant (this level's p-value misses the threshold; see the reason)",
    mixed: "mixed: two or more values are each supported (e.g. text from several sources)",
    undecodable: "undecodable",
  };
  const FLAG_WORDS = {
    "inconsistent-levels": "level 1 decoded but a deeper level you hold shows no sign of its mark (p >= 0.01 " +
      "over 100 or more tokens): made with level-1 keys only, or heavily edited",
    "mixed-sources": "some level carries more than one value",
  };
  function fieldsText(fields) {
    if (!fields) return "—";
    const parts = Object.entries(fields).map(([k, v]) => k + " = " + (v === null ? "—" : v));
    return parts.length ? parts.join(", ") : "—";
  }

  // ---- result rendering ---------------------------------------------------------------------------
  function excerpt(text) {
    const flat = text.replace(/\s+/g, " ").trim();
    const chars = Array.from(flat);  // code points: never half of a character outside the BMP
    return chars.length > 140 ? chars.slice(0, 140).join("") + "…" : flat;
  }

  // `index`/`total`: the card's place among a job's results (numbered as in the file); `text` when known.
  function renderResult(res, text, index, total) {
    const alpha = state.config ? state.config.alpha : 1e-4;
    const card = el("article", { class: "card result", "aria-label": "Result" + (index !== undefined ? " " + (index + 1) : "") });
    if (index !== undefined) {
      card.append(el("h4", { class: "result-no", "data-testid": "result-number" }, "Text " + (index + 1) + (total ? " of " + total : "")));
      card.append(el("p", { class: "excerpt", "data-testid": "result-excerpt" },
        text ? "“" + excerpt(text) + "”" : "(text not shown: it was submitted from another browser tab or session)"));
    }
    const cls = res.watermarked ? "yes" : (res.flags && res.flags.length ? "warn" : "no");
    card.append(el("div", { class: "verdict " + cls, "data-testid": "verdict" },
      el("strong", {}, res.watermarked ? "Watermarked" : "No watermark found"),
      el("span", { "data-testid": "p-words" }, pWords(res.p_value, alpha, res.tokens_scored, res.watermarked))));
    if (res.flags && res.flags.length) {
      card.append(el("p", {}, "Warnings: ", res.flags.map((f) => el("span", { class: "flag", title: FLAG_WORDS[f] || "" }, f + (FLAG_WORDS[f] ? " — " + FLAG_WORDS[f] : "")))));
    }
    card.append(el("dl", { class: "facts" },
      el("dt", {}, "p-value (all levels you may see)"), el("dd", {}, sci(res.p_value)),
      el("dt", {}, "Tokens scored"), el("dd", {}, res.tokens_scored),
      el("dt", {}, "Level-1 key version"), el("dd", {}, res.key_version || "none"),
      el("dt", {}, "Spec version"), el("dd", {}, res.spec_version == null ? "—" : res.spec_version)));
    for (const ex of res.expected || []) card.append(renderExpected(ex));
    for (const lv of res.levels || []) card.append(renderLevel(lv));
    if (res.receipt) {
      card.append(el("details", { class: "receipt" }, el("summary", {}, "Audit receipt (transparency log, event #" + (res.receipt.leaf_index + 1) + ")"),
        el("p", { class: "muted" }, "Proof that this disclosure is in the signed audit log; check it offline with the log's public key (docs/transparency.md)."),
        el("pre", {}, JSON.stringify(res.receipt, null, 1))));
    }
    if (text && index === undefined) card.append(el("details", {}, el("summary", {}, "Text"), el("pre", { class: "text" }, text)));
    return card;
  }

  // The one-value test of a value the caller asked about (`expect`): "is this text from model 37?"
  function renderExpected(ex) {
    const value = fieldsText(ex.fields);
    return el("section", { class: "expected " + (ex.matches ? "yes" : "no"), "data-testid": "expected",
      "aria-label": "Asked about " + value },
      el("h4", {}, "Is it " + value + "? ", el("strong", {}, ex.matches ? "Yes" : "Not shown")),
      el("p", {}, ex.matches
        ? "The text carries this value's mark: text not made with it scores this high " + oneIn(ex.p_value) + " (p = " + sci(ex.p_value) + ")."
        : "This text does not show this value's mark at the threshold (p = " + sci(ex.p_value) + "): it may be another value's, unmarked, or too short.") ,
      ex.values_asked > 1 ? el("p", { class: "muted" }, "Corrected for the " + ex.values_asked + " values you have asked about for this text.") : null);
  }

  function renderLevel(lv) {
    const priv = lv.level > 1;
    const box = el("section", { class: "level" + (priv ? " private" : ""), "aria-label": "Level " + lv.level });
    box.append(el("h4", {}, "Level " + lv.level, el("span", { class: "tag" }, priv ? "private" : "public")));
    const facts = el("dl", { class: "facts" },
      el("dt", {}, "Status"), el("dd", { class: "st st-" + lv.status, "data-testid": "level-status" }, STATUS_WORDS[lv.status] || lv.status),
      el("dt", {}, "Fields"), el("dd", { "data-testid": "level-fields" }, fieldsText(lv.fields)),
      el("dt", {}, "Confidence"), el("dd", {}, lv.confidence ? (100 * lv.confidence).toFixed(2) + "% that the value is exactly right" : "no value released"),
      el("dt", {}, "Level p-value"), el("dd", {}, sci(lv.p_value)),
      el("dt", {}, "Key version"), el("dd", {}, lv.key_version || "none"));
    if (lv.reason) facts.append(el("dt", {}, "Reason"), el("dd", {}, lv.reason));
    box.append(facts);
    if (lv.candidates && lv.candidates.length) {
      box.append(el("div", { class: "scroll" }, el("table", { "aria-label": "Candidates of level " + lv.level, "data-testid": "candidates" },
        el("caption", { class: "sr" }, "Candidate values"),
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Candidate value"), el("th", { scope: "col" }, "p-value"), el("th", { scope: "col" }, "Tokens"))),
        el("tbody", {}, lv.candidates.map((c) => el("tr", {}, el("td", {}, fieldsText(c.fields)), el("td", {}, sci(c.p_value)), el("td", {}, c.tokens)))))));
    }
    if (lv.spans && lv.spans.length) {
      box.append(el("div", { class: "scroll" }, el("table", { "aria-label": "Spans of level " + lv.level, "data-testid": "spans" },
        el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Tokens"), el("th", { scope: "col" }, "Value carried"))),
        el("tbody", {}, lv.spans.map((s) => el("tr", {}, el("td", {}, s.start + "–" + s.end), el("td", {}, fieldsText(s.fields))))))));
    }
    return box;
  }

  // ---- pages --------------------------------------------------------------------------------------
  const PAGES = ["signin", "verify", "jobs", "keys", "audit"];
  function allowed(page) {
    if (!state.me) return page === "signin";
    if (page === "keys") return state.me.actions.includes("keys.read");
    if (page === "audit") return state.me.actions.includes("audit.read");
    return page !== "signin";
  }
  async function route() {
    let page = (location.hash || "#verify").slice(1);
    if (!PAGES.includes(page)) page = "verify";
    if (!state.me && token()) await loadMe();
    if (!allowed(page)) page = state.me ? "verify" : "signin";
    if (state.page !== null && state.page !== page) say("");  // a status line belongs to the page that set it
    state.page = page;
    for (const p of PAGES) $("page-" + p).hidden = p !== page;
    for (const a of document.querySelectorAll("nav a")) {
      if (a.dataset.page === page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
      a.hidden = !allowed(a.dataset.page);
    }
    $("nav").hidden = !state.me;
    $("who").hidden = !state.me;
    document.title = page[0].toUpperCase() + page.slice(1) + " · HeRo Verifier console";
    if (page === "jobs") loadJobs(true);
    if (page === "keys") loadKeys();
    if (page === "audit") loadAudit(true);
  }

  async function loadMe() {
    try {
      state.me = (await api("GET", "/console/whoami")).data;
      const levels = state.me.max_level === 1 ? "level 1" : "levels 1–" + state.me.max_level;
      $("who-text").textContent = state.me.subject + " (" + state.me.role + ", " + levels + ")";
    } catch (e) {
      sessionStorage.removeItem(TOKEN_KEY);
      state.me = null;
      say("Sign-in failed: " + e.message, true);
    }
  }

  // Everything a sign-in put on screen or in memory goes on sign-out: the forms (text, `expect`, files, filters,
  // the token box), results, job progress and detail, the tables, download links and any answer still in flight,
  // so whoever signs in next on this browser sees none of it and sends nothing of it.
  function forget() {
    state.epoch += 1;
    clearTimeout(state.pollTimer);
    state.pollTimer = null;
    state.watching = null;
    state.me = null;
    state.jobTexts = {};
    state.jobsOffset = 0;
    state.auditAfter = 0;
    for (const u of state.blobUrls) URL.revokeObjectURL(u);
    state.blobUrls = [];
    for (const f of document.querySelectorAll("form")) f.reset();
    for (const id of ["verify-text", "verify-expect", "verify-file", "job-file", "job-separator", "token",
      "destroy-confirm"]) $(id).value = "";
    for (const id of ["verify-result", "job-current", "job-detail"]) $(id).replaceChildren();
    for (const id of ["jobs-table", "keys-table", "audit-table"]) $(id).tBodies[0].replaceChildren();
    $("audit-chain").textContent = "";
    $("who-text").textContent = "";
    $("jobs-more").hidden = true;
    $("audit-more").hidden = true;
    if ($("destroy-dialog").open) $("destroy-dialog").close();
  }

  function signOut(msg) {
    sessionStorage.removeItem(TOKEN_KEY);
    forget();
    location.hash = "#signin";
    route();
    say(msg || "Signed out.");  // after the page change, which clears the previous page's line
  }

  async function signIn(t) {
    forget();  // nothing of an earlier sign-in in this tab carries over (a token pasted over another one)
    sessionStorage.setItem(TOKEN_KEY, t.trim());
    await loadMe();
    if (state.me) { location.hash = "#verify"; await route(); say("Signed in as " + state.me.role + "."); $("main").focus(); }
  }

  // verify
  // "model=37" or "model=37, user=12" -> {"model": 37, ...}; null when empty; an Error naming what is wrong
  function parseExpect(raw) {
    if (!raw.trim()) return null;
    const out = {};
    for (const part of raw.split(",")) {
      const m = /^\s*([a-z][a-z0-9_]*)\s*=\s*(\d+)\s*$/.exec(part);
      if (!m) throw new Error("Ask about a value as name=number, e.g. model=37 (got \u201c" + part.trim() + "\u201d)");
      out[m[1]] = Number(m[2]);
    }
    return out;
  }
  function maxChars() { return (state.config && state.config.max_text_chars) || 20000; }

  async function onVerify(ev, override) {
    if (ev) ev.preventDefault();
    const text = override === undefined ? $("verify-text").value : override;
    const out = $("verify-result");
    out.replaceChildren();
    if (!text.trim()) { say("Paste a text first.", true); return; }
    let expect;
    try { expect = parseExpect($("verify-expect").value); } catch (e) { say(e.message, true); return; }
    const limit = maxChars();
    if (Array.from(text).length > limit) { offerLong(text, limit, expect); return; }
    say("Verifying…");
    try {
      const { data } = await api("POST", "/v1/verify", expect ? { texts: [text], expect } : { texts: [text] });
      out.replaceChildren(renderResult(data.results[0], null));
      // offered when level 1's own evidence is significant (it then names a key version): the map is level 1's
      if (state.me.actions.includes("evidence.read") && data.results[0].levels[0].key_version) {
        const holder = el("div", { "data-testid": "evidence" });
        holder.append(el("button", { type: "button", class: "secondary",
          onclick: () => showEvidence(text, holder) }, "Show which tokens carry the mark"));
        out.append(holder);
      }
      say(override === undefined ? "Verified." : "Verified the first " + limit.toLocaleString("en") + " characters.");
    } catch (e) { say("Verify failed: " + e.message, true); }
  }

  // A text over the service's limit per text: verify its start, or submit it as a job of excerpts (each within
  // the limit, cut at a line or space where there is one): long documents are verified in excerpts.
  function excerpts(text, limit) {
    const chars = Array.from(text);
    const parts = [];
    for (let at = 0; at < chars.length;) {
      let end = Math.min(at + limit, chars.length);
      if (end < chars.length) {
        const window = chars.slice(at, end).join("");
        const cut = Math.max(window.lastIndexOf("\n"), window.lastIndexOf(" "));
        if (cut > limit / 2) end = at + Array.from(window.slice(0, cut + 1)).length;
      }
      const part = chars.slice(at, end).join("");
      if (part.trim()) parts.push(part);
      at = end;
    }
    return parts;
  }
  function offerLong(text, limit, expect) {
    const n = Array.from(text).length;
    const parts = excerpts(text, limit);
    say("The text is " + n.toLocaleString("en") + " characters long; the service verifies at most " +
      limit.toLocaleString("en") + " characters per text.", true);
    $("verify-result").replaceChildren(el("div", { class: "card", "data-testid": "too-long" },
      el("p", {}, "Verify part of it, or all of it in excerpts:"),
      el("div", { class: "row" },
        el("button", { type: "button", onclick: () => onVerify(null, Array.from(text).slice(0, limit).join("")) },
          "Verify the first " + limit.toLocaleString("en") + " characters"),
        el("button", { type: "button", class: "secondary", onclick: () => submitJob(parts) },
          "Submit as a job of " + parts.length + " excerpts")),
      expect ? el("p", { class: "muted" }, "A job decodes without the value asked about: ask about it on an excerpt here.") : null));
  }

  // Per-token level-1 evidence (trusted roles only: the map is a key oracle, so the API audits each use).
  // Each scored token's score is Exp(1) without the mark; >= 2 is shaded, >= 4 strongly.
  async function showEvidence(text, holder) {
    say("Scoring tokens…");
    try {
      const { data } = await api("POST", "/v1/verify/evidence", { text });
      const view = el("pre", { class: "text evidence", "aria-label": "Text with per-token evidence" });
      // The API's offsets count code points (Python str indices); JS strings count UTF-16 units, which differ
      // from the first character outside the BMP (an emoji) on.
      const chars = Array.from(text);
      const cut = (a, b) => chars.slice(a, b).join("");
      let at = 0;
      let marked = 0;
      for (const t of data.tokens) {
        if (t.start < at) continue;
        if (t.start > at) view.append(cut(at, t.start));
        const level = t.evidence >= 4 ? "strong" : t.evidence >= 2 ? "some" : null;
        const piece = cut(t.start, t.end);
        if (level) { marked += 1; view.append(el("mark", { class: level, title: "evidence " + t.evidence.toFixed(2) }, piece)); }
        else view.append(piece);
        at = t.end;
      }
      if (at < chars.length) view.append(cut(at, chars.length));
      holder.replaceChildren(
        el("h3", {}, "Where the level-1 mark is"),
        el("p", { class: "muted" }, data.tokens.length + " scored tokens, " + marked + " marked (evidence ≥ 2; ≥ 4 darker). " +
          "Unmarked text averages 1 per token; single tokens are noisy, stretches are what matter. This view was audited" +
          (data.receipt ? " (event #" + (data.receipt.leaf_index + 1) + ")." : ".")),
        view);
      say("Evidence shown.");
    } catch (e) { say("Evidence failed: " + e.message, true); }
  }

  function readOne(f) {
    return new Promise((resolve, reject) => {
      const r = new FileReader();
      r.onload = () => {
        try { resolve({ name: f.name, text: new TextDecoder("utf-8", { fatal: true }).decode(r.result) }); }
        catch (e) { reject(new Error(f.name + " is not UTF-8 text")); }  // as `hero decode --file` refuses it
      };
      r.onerror = () => reject(new Error("cannot read " + f.name));
      r.readAsArrayBuffer(f);
    });
  }
  function readFile(input) {
    const f = input.files && input.files[0];
    return f ? readOne(f) : Promise.reject(new Error("choose a file"));
  }
  function readFiles(input) {
    const files = Array.from(input.files || []);
    return files.length ? Promise.all(files.map(readOne)) : Promise.reject(new Error("choose a file"));
  }

  // How a file becomes texts (the form says the same): .jsonl = one JSON string (or {"text"}) per line; .json = a
  // list of strings or {"texts": [...]}; anything else = the whole file is one text, unless a separator is given:
  // then the file is split at every line that is exactly that separator. Blank lines never split a text.
  function parseTexts(name, raw, separator) {
    const lower = name.toLowerCase();
    if (lower.endsWith(".jsonl")) {
      const out = [];
      raw.split("\n").forEach((l, i) => {
        if (!l.trim()) return;
        let v;
        try { v = JSON.parse(l); } catch (e) { throw new Error(name + " line " + (i + 1) + ": not JSON (" + e.message + ")"); }
        const t = typeof v === "string" ? v : (v && typeof v.text === "string" ? v.text : null);
        if (t === null) throw new Error(name + " line " + (i + 1) + ': expected a JSON string or {"text": ...}');
        out.push(t);
      });
      return out;
    }
    if (lower.endsWith(".json")) {
      let v;
      try { v = JSON.parse(raw); } catch (e) { throw new Error(name + ": not JSON (" + e.message + ")"); }
      const list = Array.isArray(v) ? v : (v && Array.isArray(v.texts) ? v.texts : null);
      if (list === null) throw new Error(name + ': expected a list of texts or {"texts": [...]}');
      list.forEach((t, i) => { if (typeof t !== "string") throw new Error(name + " item " + (i + 1) + " is not a text (a JSON string)"); });
      return list;
    }
    if (!separator) return raw.trim() ? [raw] : [];  // as `hero decode --file`: the file, unchanged, is the text
    const parts = [];
    let cur = [];
    for (const line of raw.split("\n")) {
      if (line.trim() === separator) { parts.push(cur.join("\n")); cur = []; } else cur.push(line);
    }
    parts.push(cur.join("\n"));
    return parts.filter((t) => t.trim());
  }

  // jobs
  function progressBar(job) {
    const p = job.progress;
    return el("progress", { max: p.total || 1, value: p.done, "aria-label": "Job " + job.job_id.slice(0, 8) + " progress" },
      p.done + " of " + p.total);
  }
  async function onJobSubmit(ev) {
    ev.preventDefault();
    let texts = [];
    try {
      const separator = $("job-separator").value.trim();
      for (const f of await readFiles($("job-file"))) {
        const part = parseTexts(f.name, f.text, separator);
        if (!Array.isArray(part) || part.some((t) => typeof t !== "string")) throw new Error(f.name + ": not a list of texts");
        texts = texts.concat(part);
      }
      if (!texts.length) throw new Error("no texts found");
    } catch (e) { say("Cannot use this file: " + e.message, true); return; }
    await submitJob(texts);
  }
  async function submitJob(texts) {
    try {
      const { data, response } = await api("POST", "/v1/jobs", { texts });
      state.jobTexts[data.job_id] = texts;  // this tab's own copy, to label the results (the API never returns texts)
      if (location.hash !== "#jobs") { location.hash = "#jobs"; await route(); }
      say("Job submitted: " + texts.length + (texts.length === 1 ? " text." : " texts."));
      watchJob(response.headers.get("Location") || "/v1/jobs/" + data.job_id);
      loadJobs(true);
    } catch (e) { say("Submit failed: " + e.message, true); }
  }

  function watchJob(url) {
    clearTimeout(state.pollTimer);
    state.watching = url;
    $("job-detail").replaceChildren();  // only the results of the job on screen
    const box = $("job-current");
    const tick = async () => {
      try {
        const { data } = await api("GET", url);
        if (state.watching !== url) return;  // another job was opened meanwhile
        box.replaceChildren(el("div", { class: "card", "data-testid": "job-progress" },
          el("p", {}, "Job ", el("code", {}, data.job_id), ": ", el("span", { class: "st st-" + data.status }, data.status),
            " — " + data.progress.done + " of " + data.progress.total + " texts"),
          progressBar(data),
          data.status === "done" ? downloadLink(data) : null,
          data.error ? el("p", { class: "st st-failed" }, data.error) : null));
        if (data.status === "done") { showJob(data); loadJobs(true); return; }
        if (data.status !== "failed") state.pollTimer = setTimeout(tick, 700);
      } catch (e) { say("Job status failed: " + e.message, true); }
    };
    tick();
  }

  function downloadLink(data) {
    const blob = new Blob([JSON.stringify(data, null, 1)], { type: "application/json" });
    const href = URL.createObjectURL(blob);
    state.blobUrls.push(href);  // revoked on sign-out
    return el("a", { href, download: "hero-job-" + data.job_id + ".json", class: "download" },
      "Download results (JSON)");
  }

  function showJob(data) {
    const box = $("job-detail");
    box.replaceChildren(el("h3", {}, "Results of job " + data.job_id.slice(0, 8)),
      data.receipt ? el("p", { class: "muted" }, "This read is audited (jobs.read, event #" + (data.receipt.leaf_index + 1) + ").") : null,
      ...(data.results || []).map((r, i, all) => renderResult(r, (state.jobTexts[data.job_id] || [])[i] || null, i, all.length)));
  }

  async function loadJobs(reset) {
    if (reset) state.jobsOffset = 0;
    const body = $("jobs-table").tBodies[0];
    try {
      const { data } = await api("GET", "/v1/jobs?limit=20&offset=" + state.jobsOffset);
      if (reset) body.replaceChildren();
      for (const j of data.jobs) {
        body.append(el("tr", {}, el("td", {}, (j.created_at || "").replace("T", " ").replace("Z", "")),
          el("td", {}, el("code", {}, j.job_id.slice(0, 8))), el("td", {}, j.subject + " (" + j.role + ")"),
          el("td", { class: "st st-" + j.status }, j.status), el("td", {}, progressBar(j)),
          el("td", {}, el("button", { type: "button", class: "small", onclick: () => watchJob("/v1/jobs/" + j.job_id) },
            j.status === "done" ? "Open" : "Watch"))));
      }
      if (!body.rows.length) body.append(el("tr", {}, el("td", { colspan: 6 }, "No jobs yet.")));
      state.jobsOffset = data.next_offset || state.jobsOffset;
      $("jobs-more").hidden = data.next_offset === null;
    } catch (e) { say("Cannot list jobs: " + e.message, true); }
  }

  // keys
  async function loadKeys() {
    const body = $("keys-table").tBodies[0];
    const admin = state.me.actions.includes("keys.write");
    try {
      const { data } = await api("GET", "/v1/keys");
      body.replaceChildren();
      const levels = [...new Set(data.versions.map((v) => v.level))].sort();
      for (const v of data.versions) {
        const acts = [];
        if (admin && v.status === "active") acts.push(keyButton("Rotate level " + v.level, () => keyAction("POST", "/v1/keys/" + v.level + "/rotate", "rotated level " + v.level)));
        if (admin && v.status === "verify-only") acts.push(keyButton("Disable", () => keyAction("POST", "/v1/keys/" + v.level + "/versions/" + v.version + "/disable", "disabled " + v.version)));
        if (admin && v.status === "disabled") acts.push(keyButton("Enable", () => keyAction("POST", "/v1/keys/" + v.level + "/versions/" + v.version + "/enable", "enabled " + v.version)));
        if (admin && (v.status === "verify-only" || v.status === "disabled")) acts.push(keyButton("Destroy…", () => askDestroy(v), "danger small"));
        body.append(el("tr", {}, el("td", {}, v.level), el("td", {}, el("code", {}, v.version)),
          el("td", { class: "st st-" + v.status }, v.status), el("td", {}, v.created_at || ""), el("td", {}, v.status_changed_at || ""),
          el("td", {}, acts.length ? acts : "—")));
      }
      if (!data.versions.length) {
        body.append(el("tr", {}, el("td", { colspan: 6 }, "No keys yet. ",
          admin ? keyButton("Create keys", () => keyAction("POST", "/v1/keys/init", "created keys for " + levels.length + " levels")) : null)));
      }
    } catch (e) { say("Cannot list keys: " + e.message, true); }
  }
  function keyButton(label, fn, cls) {
    return el("button", { type: "button", class: cls || "small", onclick: fn }, label);
  }
  async function keyAction(method, path, done, body) {
    try { await api(method, path, body); say("Done: " + done + "."); } catch (e) { say("Failed: " + e.message, true); }
    loadKeys();
  }
  function askDestroy(v) {
    const dlg = $("destroy-dialog");
    $("destroy-version").textContent = v.version;
    const input = $("destroy-confirm");
    input.value = "";
    $("destroy-ok").disabled = true;
    input.oninput = () => { $("destroy-ok").disabled = input.value !== v.version; };
    $("destroy-cancel").onclick = () => dlg.close();
    $("destroy-form").onsubmit = (ev) => {
      ev.preventDefault();
      if (input.value !== v.version) return;
      dlg.close();
      keyAction("POST", "/v1/keys/" + v.level + "/versions/" + v.version + "/destroy", "destroyed " + v.version, { confirm: input.value });
    };
    dlg.showModal();
    input.focus();
  }

  // audit
  function auditQuery() {
    const q = new URLSearchParams();
    const f = $("audit-form");
    for (const name of ["subject", "action", "level"]) if (f.elements[name].value) q.set(name, f.elements[name].value);
    for (const name of ["since", "until"]) if (f.elements[name].value) q.set(name, f.elements[name].value + "Z");
    return q;
  }
  // Key versions an event names; older events recorded "l1-none" for a level that matched none: not a version.
  function versionsText(kv) {
    const named = (kv || "").split(",").filter((v) => v && !/^l\d+-none$/.test(v));
    return named.length ? named.join(", ") : "—";
  }
  async function loadAudit(reset) {
    if (reset) state.auditAfter = 0;
    const q = auditQuery();
    q.set("limit", "50");
    q.set("after", String(state.auditAfter));
    const body = $("audit-table").tBodies[0];
    try {
      const { data } = await api("GET", "/v1/audit/events?" + q);
      if (reset) body.replaceChildren();
      for (const e of data.events) {
        body.append(el("tr", {}, el("td", {}, e.idx), el("td", {}, e.created_at.slice(0, 19).replace("T", " ")),
          el("td", {}, e.action), el("td", {}, e.subject), el("td", {}, e.role), el("td", {}, e.levels.join(", ")),
          el("td", {}, versionsText(e.key_version)), el("td", {}, e.outcome), el("td", {}, e.detail || "")));
      }
      if (!body.rows.length) body.append(el("tr", {}, el("td", { colspan: 9 }, "No matching events.")));
      if (data.next_after !== null) state.auditAfter = data.next_after;
      $("audit-more").hidden = data.next_after === null;
      if (reset) {
        const chain = (await api("GET", "/v1/audit/verify")).data;
        $("audit-chain").textContent = chain.valid ? "Chain intact: " + chain.events + " events, hashes and signed checkpoint check out."
          : "Chain BROKEN at event " + chain.first_broken_index + ": " + chain.reason;
      }
    } catch (e) { say("Cannot read the audit log: " + e.message, true); }
  }

  // ---- wiring -------------------------------------------------------------------------------------
  async function start() {
    try { state.config = (await api("GET", "/console/config")).data; } catch (e) { state.config = { dev_mode: false, roles: [], alpha: 1e-4, audit_actions: [] }; }
    if (state.config.dev_mode) {
      $("dev-signin").hidden = false;
      for (const role of state.config.roles) {
        $("dev-buttons").append(el("button", { type: "button", class: "secondary", onclick: async () => {
          try { await signIn((await api("POST", "/console/dev-token?role=" + encodeURIComponent(role))).data.token); }
          catch (e) { say("Dev sign-in failed: " + e.message, true); }
        } }, "Sign in as " + role));
      }
    }
    for (const a of state.config.audit_actions || []) $("f-action").append(el("option", {}, a));
    $("signin-form").addEventListener("submit", (ev) => { ev.preventDefault(); signIn($("token").value); });
    $("signout").addEventListener("click", () => signOut());
    $("verify-form").addEventListener("submit", onVerify);
    $("verify-file").addEventListener("change", async () => {
      try { $("verify-text").value = (await readFile($("verify-file"))).text; say("Loaded the file's text."); }
      catch (e) { say(e.message, true); }
    });
    $("job-form").addEventListener("submit", onJobSubmit);
    $("jobs-more").addEventListener("click", () => loadJobs(false));
    $("audit-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadAudit(true); });
    $("audit-more").addEventListener("click", () => loadAudit(false));
    window.addEventListener("hashchange", route);
    await route();
    document.body.dataset.ready = "1";
  }
  start();
})();
