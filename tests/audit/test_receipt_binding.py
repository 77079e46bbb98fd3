"""A verify receipt binds the result as served: changing any released field (top level or inside a level)
makes `verify_receipt` fail, on the fast path and the routed one."""

from __future__ import annotations

import copy

import pytest

TEXT = "An ordinary sentence that nobody watermarked, long enough to be scored."


def _changed(result: dict) -> list[dict]:
    """The result with one field changed at a time (top level and inside each level)."""
    out = []
    for key, value in result.items():
        if key == "receipt":
            continue
        r = copy.deepcopy(result)
        if key == "levels":
            for i, level in enumerate(value):
                for lk, lv in level.items():
                    r2 = copy.deepcopy(result)
                    r2["levels"][i][lk] = (lv + 1) if isinstance(lv, int | float) and not isinstance(lv, bool) \
                        else "changed" if not isinstance(lv, dict) else {**lv, "user": 9999}
                    out.append(r2)
            continue
        r[key] = (not value) if isinstance(value, bool) else (value + 1) if isinstance(value, int | float) \
            else ["changed"] if isinstance(value, list) else "changed"
        out.append(r)
    return out


def test_receipt_binds_the_result_as_served(lite):
    from verifier.audit.transparency import TransparencyError, verify_receipt

    lite.init_keys()
    vkey = lite.ctx.signer.vkey
    for path in ("fast", "route"):
        lite.ctx.settings.__dict__["verify_fast_path"] = path == "fast"  # the same body either way
        r = lite.client.post("/v1/verify", headers=lite.auth("auditor"), json={"texts": [TEXT]})
        assert r.status_code == 200, r.text
        served = r.json()["results"][0]
        cp = verify_receipt(served["receipt"], vkey, text=TEXT, result=served)
        assert cp.size >= 1
        variants = _changed(served)
        assert len(variants) > 10
        for v in variants:
            with pytest.raises(TransparencyError, match="different result"):
                verify_receipt(v["receipt"], vkey, text=TEXT, result=v)
    forged = copy.deepcopy(served)
    forged["levels"][0]["fields"] = {k: 9999 for k in forged["levels"][0]["fields"] or {"user": 1}}
    with pytest.raises(TransparencyError):
        verify_receipt(forged["receipt"], vkey, text=TEXT, result=forged)
