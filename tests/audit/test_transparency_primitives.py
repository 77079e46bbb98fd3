"""Transparency-log primitives: RFC 6962 reference vectors, proofs for every tree shape, signed notes."""

from __future__ import annotations

import base64
import subprocess
import sys

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.audit import transparency as tl

# Certificate Transparency reference tree (RFC 6962 test data): leaf inputs and the root for sizes 0..8.
CT_LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                        "606162636465666768696a6b6c6d6e6f")]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
CT_PROOF_0_8 = ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]


def _reference_mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 §2.1.1 recursion, straight from the definition."""
    if not leaves:
        return tl.EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return tl.node_hash(_reference_mth(leaves[:k]), _reference_mth(leaves[k:]))


def test_roots_match_rfc6962_reference():
    hashes = [tl.leaf_hash(d) for d in CT_LEAVES]
    tree = tl.MemoryTree()
    assert tree.root().hex() == CT_ROOTS[0]
    for n in range(1, 9):
        tree.append(hashes[n - 1])
        assert tree.root().hex() == CT_ROOTS[n]
        assert tl.root_of(hashes[:n]) == (n, bytes.fromhex(CT_ROOTS[n]))
    assert [p.hex() for p in tree.inclusion_proof(0, 8)] == CT_PROOF_0_8


def test_leaf_and_node_hashes_are_domain_separated():
    a, b = tl.leaf_hash(b"x"), tl.leaf_hash(b"y")
    # An interior node can never pass for a leaf whose data is the two child hashes.
    assert tl.node_hash(a, b) != tl.leaf_hash(a + b)


def test_every_inclusion_and_consistency_proof_verifies_and_tampering_fails():
    leaves = [tl.leaf_hash(bytes([i, i * 7 % 256])) for i in range(40)]
    tree = tl.MemoryTree(leaves)
    for n in range(1, 41):
        root = tl.root_of(leaves[:n])[1]
        assert tree.mth(0, n) == root == _reference_mth(leaves[:n])
        for i in range(n):
            proof = tree.inclusion_proof(i, n)
            tl.verify_inclusion(leaves[i], i, n, proof, root)
            with pytest.raises(tl.TransparencyError):
                tl.verify_inclusion(leaves[(i + 1) % n] if n > 1 else b"\0" * 32, i, n, proof, root)
            if proof:
                bad = [*proof[:-1], bytes(32)]
                with pytest.raises(tl.TransparencyError):
                    tl.verify_inclusion(leaves[i], i, n, bad, root)
        for m in range(0, n + 1):
            proof = tree.consistency_proof(m, n)
            old = tl.root_of(leaves[:m])[1]
            tl.verify_consistency(m, n, proof, old, root)
            if 0 < m < n:
                with pytest.raises(tl.TransparencyError):
                    tl.verify_consistency(m, n, proof, tl.leaf_hash(b"other"), root)  # rewritten history
                with pytest.raises(tl.TransparencyError):
                    tl.verify_consistency(m, n, proof[:-1], old, root)


def test_consistency_names_truncation_and_forks():
    with pytest.raises(tl.TransparencyError, match="truncated"):
        tl.verify_consistency(5, 4, [], bytes(32), bytes(32))
    with pytest.raises(tl.TransparencyError, match="forked"):
        tl.verify_consistency(4, 4, [], bytes(32), b"\1" * 32)


def _signer(name="hero.example/audit"):
    key = Ed25519PrivateKey.generate()
    return key, tl.verifier_key(name, tl.raw_public(key.public_key()))


def test_signed_checkpoint_round_trip_and_rejections():
    key, vkey = _signer()
    cp = tl.Checkpoint("hero.example/audit", 8, bytes.fromhex(CT_ROOTS[8]))
    note = tl.sign_note(cp.body(), "hero.example/audit", key)
    body, sigs = note.split("\n\n")
    assert body.splitlines() == ["hero.example/audit", "8", base64.b64encode(cp.root).decode()]
    assert sigs.startswith("\u2014 hero.example/audit ")
    assert tl.open_checkpoint(note, vkey, "hero.example/audit") == cp
    with pytest.raises(tl.TransparencyError, match="origin"):
        tl.open_checkpoint(note, vkey, "other.example/log")
    forged = note.replace("\n8\n", "\n9\n", 1)
    with pytest.raises(tl.TransparencyError, match="invalid"):
        tl.open_checkpoint(forged, vkey)
    _, other_vkey = _signer()
    with pytest.raises(tl.TransparencyError, match="not signed"):
        tl.open_checkpoint(note, other_vkey)
    # A witness's extra signature line is ignored, not an error.
    wkey, _ = _signer("witness.example")
    cosigned = note + tl.sign_note(cp.body(), "witness.example", wkey).split("\n\n")[1]
    assert tl.open_checkpoint(cosigned, vkey) == cp


def test_receipt_verifies_offline_and_binds_event_and_text():
    key, vkey = _signer("o")
    events = [{"idx": i + 1, "action": "verify", "text_sha256": f"{i:064x}"} for i in range(6)]
    tree = tl.MemoryTree([tl.event_leaf(e) for e in events])
    note = tl.sign_note(tl.Checkpoint("o", 6, tree.root()).body(), "o", key)
    receipt = tl.make_receipt(events[3], 3, tree.inclusion_proof(3, 6), note)
    assert tl.verify_receipt(receipt, vkey).size == 6
    with pytest.raises(tl.TransparencyError, match="different text"):
        tl.verify_receipt(receipt, vkey, text="some other text")
    edited = {**receipt, "event": {**events[3], "action": "keys.rotate"}}
    with pytest.raises(tl.TransparencyError, match="root"):
        tl.verify_receipt(edited, vkey)
    with pytest.raises(tl.TransparencyError):
        tl.verify_receipt({**receipt, "leaf_index": 2}, vkey)


def test_verifier_module_needs_no_database_or_web_framework():
    code = (
        "import sys; import verifier.audit.transparency as t; "
        "bad = [m for m in ('sqlalchemy', 'fastapi', 'starlette', 'pydantic', 'torch') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_frontier_emits_exactly_the_perfect_subtrees():
    leaves = [tl.leaf_hash(bytes([i])) for i in range(37)]
    mem, fr = tl.MemoryTree(), tl.Frontier()
    for h in leaves:
        assert fr.append(h) == mem.append(h)
        assert fr.root() == mem.root()


def test_witness_cosignature_round_trip_and_quorum():
    key, vkey = _signer("o")
    wkey = Ed25519PrivateKey.generate()
    wvkey = tl.verifier_key("witness.example/w1", tl.raw_public(wkey.public_key()), tl.SIG_COSIGNATURE_V1)
    events = [{"idx": i + 1, "action": "verify"} for i in range(3)]
    tree = tl.MemoryTree([tl.event_leaf(e) for e in events])
    note = tl.sign_note(tl.Checkpoint("o", 3, tree.root()).body(), "o", key)
    receipt = tl.make_receipt(events[1], 1, tree.inclusion_proof(1, 3), note)
    with pytest.raises(tl.TransparencyError, match="0 valid witness"):
        tl.verify_receipt(receipt, vkey, witnesses=[wvkey], quorum=1)
    cosigned = note + tl.cosign(note, "witness.example/w1", wkey, 1_700_000_000)
    assert tl.verify_cosignature(cosigned, wvkey) == 1_700_000_000
    assert tl.verify_receipt({**receipt, "checkpoint": cosigned}, vkey, witnesses=[wvkey], quorum=1).size == 3
    # The log's own key cannot pass for a witness (different signature type, different key id).
    forged = note + tl.cosign(note, "witness.example/w1", key, 1_700_000_000)
    with pytest.raises(tl.TransparencyError):
        tl.verify_cosignature(forged, wvkey)


def test_witnesses_count_once_and_an_unmet_quorum_fails():
    """a witness listed twice counted twice towards quorum=2; witnesses with quorum 0 were ignored."""
    key, vkey = _signer("o")
    w1, w2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    v1 = tl.verifier_key("witness.example/w1", tl.raw_public(w1.public_key()), tl.SIG_COSIGNATURE_V1)
    v2 = tl.verifier_key("witness.example/w2", tl.raw_public(w2.public_key()), tl.SIG_COSIGNATURE_V1)
    events = [{"idx": i + 1, "action": "verify"} for i in range(3)]
    tree = tl.MemoryTree([tl.event_leaf(e) for e in events])
    note = tl.sign_note(tl.Checkpoint("o", 3, tree.root()).body(), "o", key)
    one = note + tl.cosign(note, "witness.example/w1", w1, 1_700_000_000)
    receipt = tl.make_receipt(events[1], 1, tree.inclusion_proof(1, 3), one)
    with pytest.raises(tl.TransparencyError, match="more than once"):
        tl.verify_receipt(receipt, vkey, witnesses=[v1, v1], quorum=2)
    with pytest.raises(tl.TransparencyError, match="1 valid witness"):  # quorum 0 = every witness named
        tl.verify_receipt(receipt, vkey, witnesses=[v1, v2])
    with pytest.raises(tl.TransparencyError, match="cannot be met"):
        tl.verify_receipt(receipt, vkey, witnesses=[v1], quorum=2)
    with pytest.raises(tl.TransparencyError, match="cannot be met"):
        tl.verify_receipt(receipt, vkey, quorum=1)
    assert tl.verify_receipt(receipt, vkey, witnesses=[v1, v2], quorum=1).size == 3
    both = one + tl.cosign(note, "witness.example/w2", w2, 1_700_000_001)
    assert tl.verify_receipt({**receipt, "checkpoint": both}, vkey, witnesses=[v1, v2]).size == 3
