"""result_sha256 is RFC 8785 (JCS) canonical JSON: an independent implementation (Node's JSON.stringify with
sorted keys, which is JCS for these values) recomputes the digest of a released result."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from verifier.audit.transparency import legacy_result_digest, result_digest

NODE_JCS = r"""
const crypto = require("crypto");
const jcs = v => Array.isArray(v) ? "[" + v.map(jcs).join(",") + "]"
  : (v !== null && typeof v === "object")
    ? "{" + Object.keys(v).sort().map(k => JSON.stringify(k) + ":" + jcs(v[k])).join(",") + "}"
    : JSON.stringify(v);
let input = "";
process.stdin.on("data", d => input += d).on("end", () => {
  for (const r of JSON.parse(input)) {
    delete r.receipt;  // as the service: the receipt is not part of the digest
    console.log(crypto.createHash("sha256").update(jcs(r), "utf8").digest("hex"));
  }
});
"""

RESULTS = [
    {"watermarked": True, "p_value": 1e-07, "key_version": "l1-v1", "tokens_scored": 37, "flags": [],
     "levels": [{"level": 1, "status": "decoded", "fields": {"model": 37}, "confidence": 0.9990234375,
                 "p_value": 3.2e-05, "reason": None},
                {"level": 2, "status": "withheld", "fields": {}, "confidence": 0.5, "p_value": 1.0,
                 "reason": "ünïcode — «reason»"}],
     "receipt": {"leaf_index": 3}},
    {"p_value": 1.7179502829559516e-53, "big": 123456789012, "neg": -0.0, "half": 0.5, "e21": 1e21, "e20": 1e20},
]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_recomputes_the_result_digest():
    out = subprocess.run(["node", "-e", NODE_JCS], input=json.dumps(RESULTS), capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == [result_digest(r) for r in RESULTS]
    assert result_digest(RESULTS[0]) != legacy_result_digest(RESULTS[0])  # Python's json wrote 1e-07
