"""Transparency-log primitives, importable with no database or web framework (a third party's verifier).

Merkle tree (RFC 9162 §2.1): leaf hash = SHA-256(0x00 || leaf data), node hash = SHA-256(0x01 || left ||
right); the tree over n leaves splits at the largest power of two below n. Leaf data of audit event `idx`
is the event's canonical JSON (the same bytes its chain hash covers: `encode_event`, in the canonicalisation the
event's own hashed `canon` field names); its leaf index is `idx - 1`.

Checkpoints (C2SP tlog-checkpoint) are signed notes (C2SP signed-note, Ed25519):

    <origin>\\n<tree size>\\n<base64 root hash>\\n
    \\n
    — <key name> <base64(key id[4] || signature[64])>\\n

with key id = SHA-256(key name || 0x0A || 0x01 || public key)[:4], and the verifier key written
`<name>+<hex key id>+<base64(0x01 || public key)>`.

`verify_receipt` checks a receipt (event + leaf index + inclusion proof + signed checkpoint) offline;
`verify_consistency` checks that a later checkpoint extends an earlier one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

EMPTY_ROOT = hashlib.sha256(b"").digest()
SIG_ED25519 = 0x01
SIG_COSIGNATURE_V1 = 0x04  # C2SP tlog-cosignature, Ed25519
EM_DASH = "\u2014"
MAX_NOTE_BYTES = 1 << 20
MAX_PROOF_LEN = 128


class TransparencyError(ValueError):
    """A proof, checkpoint or receipt does not verify; the message names what is wrong."""


# -- hashing ---------------------------------------------------------------------------------------
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)  # json.dumps makes one per call


def canonical(fields: dict[str, object]) -> bytes:
    """Python json's canonical form: sorted keys, no spaces, ASCII (`\\uXXXX` escapes). Events without a `canon`
    field (all written before RFC 8785) are hashed in it, and receipts issued before JCS bound results in it."""
    return _CANONICAL.encode(fields).encode()


# Which canonicalisation an event's hashed bytes use is named by the event itself, in its hashed field `canon`
# (a column of hero_audit_events too): absent = Python json's form (`canonical`, every event written before),
# "jcs" = RFC 8785. A verifier reads it and never tries both. Downgrade: stripping or changing the marker of a JCS
# event (in the row or in a receipt) cannot keep its hash. Both forms are JSON texts that parse back to exactly the
# object they encode (str, int and null values), so equal bytes would mean equal objects; but the object hashed
# had `"canon": "jcs"` and the altered one has another marker or none. So the bytes differ, and so do the chain
# hash and the leaf (short of a SHA-256 collision): the event fails at its own index. The same holds the other way
# (marking an old event as JCS), and an unknown marker is refused, never guessed.
CANON_KEY = "canon"
CANON_JCS = "jcs"
# Receipt versions: 1 (no `version` key) proves an event without `canon`; 2 one with `canon` = "jcs". The version
# is outside the signed data: `verify_receipt` only checks that it agrees with the hashed marker.
RECEIPT_CANON: dict[int, str | None] = {1: None, 2: CANON_JCS}
RECEIPT_VERSION: dict[str | None, int] = {canon: version for version, canon in RECEIPT_CANON.items()}


def jcs(fields: dict[str, object]) -> bytes:
    """RFC 8785 (JCS) canonical JSON: sorted keys, no spaces, UTF-8 with only `"`, `\\` and controls escaped."""
    return rfc8785.dumps(fields)


def encode_event(fields: dict[str, object]) -> bytes:
    """The bytes an event's chain hash and leaf cover: its hashed fields in the canonicalisation its own `canon`
    field names (see CANON_KEY); raises TransparencyError for a marker this code does not know."""
    canon = fields.get(CANON_KEY)
    if canon is None and CANON_KEY not in fields:
        return canonical(fields)
    if canon == CANON_JCS:
        return jcs(fields)
    raise TransparencyError(f"event names an unknown canonicalisation ({CANON_KEY}={canon!r})")


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """Largest power of two strictly below n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaf_hashes: Iterable[bytes]) -> tuple[int, bytes]:
    """(size, MTH) of a stream of leaf hashes in O(log n) memory."""
    stack: list[tuple[int, bytes]] = []  # perfect subtrees, sizes strictly decreasing
    size = 0
    for h in leaf_hashes:
        size += 1
        cur = (1, h)
        while stack and stack[-1][0] == cur[0]:
            s, left = stack.pop()
            cur = (2 * s, node_hash(left, cur[1]))
        stack.append(cur)
    if not stack:
        return 0, EMPTY_ROOT
    root = stack[-1][1]
    for _, h in reversed(stack[:-1]):
        root = node_hash(h, root)
    return size, root


# -- proofs from stored perfect subtrees ---------------------------------------------------------
T = TypeVar("T")
SubtreeGetter = Callable[[int, int], bytes]  # (level, index) -> hash of leaves [index*2^level, (index+1)*2^level)


def _same(h: bytes) -> bytes:
    return h


class TreeView:
    """RFC 9162 MTH / PATH / PROOF over any store of perfect-subtree hashes (DB rows or memory)."""

    def __init__(self, get: SubtreeGetter) -> None:
        self._get = get
        # Hashes of the ranges that are not stored perfect subtrees (the right edge of a tree), remembered for
        # the view's life: the inclusion proofs of a batch of new leaves share them (a view is of fixed data).
        self._edges: dict[tuple[int, int], bytes] = {}

    def mth(self, lo: int, hi: int) -> bytes:
        n = hi - lo
        if n <= 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and lo % n == 0:
            return self._get(n.bit_length() - 1, lo // n)
        h = self._edges.get((lo, hi))
        if h is None:
            k = _split(n)
            h = self._edges[(lo, hi)] = node_hash(self.mth(lo, lo + k), self.mth(lo + k, hi))
        return h

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        if not 0 <= index < size:
            raise TransparencyError(f"leaf {index} is not in a tree of size {size}")
        return self._path(index, 0, size)

    def _path(self, m: int, lo: int, hi: int) -> list[bytes]:
        n = hi - lo
        if n == 1:
            return []
        k = _split(n)
        if m < k:
            return [*self._path(m, lo, lo + k), self.mth(lo + k, hi)]
        return [*self._path(m - k, lo + k, hi), self.mth(lo, lo + k)]

    def inclusion_proofs(self, first: int, end: int, size: int, encode: Callable[[bytes], T] = _same) -> list[list[T]]:
        """`inclusion_proof(m, size)` for each leaf m in [first, end), with each node as `encode(node)`, in one walk:
        neighbouring leaves share all but their lowest nodes, so each node is read (and encoded) once, not once
        per leaf."""
        if not 0 <= first < end <= size:
            raise TransparencyError(f"leaves [{first}, {end}) are not in a tree of size {size}")
        out: list[list[T]] = []
        self._paths(first, end, 0, size, [], encode, out)
        return out

    def _paths(self, a: int, b: int, lo: int, hi: int, above: list, encode: Callable, out: list) -> None:
        """Appends to `out` the paths of the leaves of [a, b) in subtree [lo, hi) (which holds some), each followed
        by `above` (the path from that subtree up): `_path` for many leaves at once, same recursion."""
        n = hi - lo
        if n == 1:
            out.append(above)  # a list made for this leaf alone
            return
        mid = lo + _split(n)
        if a < mid:
            self._paths(a, b, lo, mid, [encode(self.mth(mid, hi)), *above], encode, out)
        if b > mid:
            self._paths(a, b, mid, hi, [encode(self.mth(lo, mid)), *above], encode, out)

    def consistency_proof(self, first: int, second: int) -> list[bytes]:
        if not 0 <= first <= second:
            raise TransparencyError(f"no consistency proof from size {first} to {second}")
        if first == 0 or first == second:
            return []
        return self._subproof(first, 0, second, True)

    def _subproof(self, m: int, lo: int, hi: int, whole: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if whole else [self.mth(lo, hi)]
        k = _split(n)
        if m <= k:
            return [*self._subproof(m, lo, lo + k, whole), self.mth(lo + k, hi)]
        return [*self._subproof(m - k, lo + k, hi, False), self.mth(lo, lo + k)]


class MemoryTree(TreeView):
    """All perfect subtrees of a list of leaf hashes in memory (tests, small logs)."""

    def __init__(self, leaves: Sequence[bytes] = ()) -> None:
        self.levels: list[list[bytes]] = [[]]
        super().__init__(lambda level, idx: self.levels[level][idx])
        for h in leaves:
            self.append(h)

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def append(self, h: bytes) -> list[tuple[int, int, bytes]]:
        """Adds a leaf; returns the new perfect subtrees as (level, index, hash)."""
        new = [(0, len(self.levels[0]), h)]
        self.levels[0].append(h)
        for level, idx, node in new_parents(lambda lv, i: self.levels[lv][i], 0, new[0][1], h):
            while len(self.levels) <= level:
                self.levels.append([])
            self.levels[level].append(node)
            new.append((level, idx, node))
        return new

    def root(self) -> bytes:
        return self.mth(0, self.size)


class Frontier:
    """The last subtree hash of each level: enough to extend a log leaf by leaf in O(log n) memory."""

    def __init__(self) -> None:
        self.size = 0
        self.last: list[bytes] = []

    def append(self, h: bytes) -> list[tuple[int, int, bytes]]:
        new = [(0, self.size, h), *new_parents(lambda lv, _i: self.last[lv], 0, self.size, h)]
        for level, _idx, node in new:
            if level == len(self.last):
                self.last.append(node)
            else:
                self.last[level] = node
        self.size += 1
        return new

    def root(self) -> bytes:
        """MTH of the leaves so far: the subtrees of the binary decomposition of size, folded right to left."""
        root: bytes | None = None
        for level, _idx in reversed(frontier_nodes(self.size)):
            root = self.last[level] if root is None else node_hash(self.last[level], root)
        return EMPTY_ROOT if root is None else root


def frontier_nodes(n: int) -> list[tuple[int, int]]:
    """(level, idx) of the perfect subtrees that make up leaves [0, n), largest first: what appending leaf n
    and later ones builds on, and the left-hand part of every root and inclusion proof from then on."""
    out, lo = [], 0
    for level in range(n.bit_length() - 1, -1, -1):
        if n >> level & 1:
            out.append((level, lo >> level))
            lo += 1 << level
    return out


def new_subtrees(left: dict[int, bytes], first: int, leaves: Iterable[bytes]) -> list[tuple[int, int, bytes]]:
    """The perfect subtrees (level, index, hash) completed by appending `leaves` at leaf index `first`, in
    `MemoryTree.append` order (each leaf, then the parents it completes). `left`: level -> hash of the node of
    `frontier_nodes(first)` at that level. One pass with no lookups: a new node's left sibling is always the
    newest even-index node of its level, either made earlier in the batch or in the frontier."""
    last = dict(left)
    out = []
    for i, h in enumerate(leaves, first):
        out.append((0, i, h))
        level = 0
        while i & 1:
            h = node_hash(last[level], h)
            level, i = level + 1, i >> 1
            out.append((level, i, h))
        last[level] = h
    return out


def new_parents(get: SubtreeGetter, level: int, idx: int, h: bytes) -> list[tuple[int, int, bytes]]:
    """Perfect subtrees completed by adding node (level, idx) = h: its ancestors while it is a right child."""
    out = []
    while idx % 2 == 1:
        h = node_hash(get(level, idx - 1), h)
        level, idx = level + 1, idx // 2
        out.append((level, idx, h))
    return out


# -- proof verification (RFC 9162 §2.1.3.2 and §2.1.4.2) -------------------------------------------
def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> None:
    if not 0 <= index < size:
        raise TransparencyError(f"leaf index {index} is outside the tree of size {size}")
    if len(proof) > MAX_PROOF_LEN:
        raise TransparencyError("inclusion proof is too long")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise TransparencyError("inclusion proof is too long for this tree")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise TransparencyError("inclusion proof is too short for this tree")
    if r != root:
        raise TransparencyError("inclusion proof does not lead to the checkpoint's root hash")


def verify_consistency(first: int, second: int, proof: Sequence[bytes], first_root: bytes, second_root: bytes) -> None:
    if not 0 <= first <= second:
        raise TransparencyError(f"tree size went backwards ({first} -> {second}): the log was truncated")
    if len(proof) > MAX_PROOF_LEN:
        raise TransparencyError("consistency proof is too long")
    if first == second:
        if proof or first_root != second_root:
            raise TransparencyError(f"two different roots for tree size {first}: the log forked")
        return
    if first == 0:
        if proof:
            raise TransparencyError("consistency proof from an empty tree must be empty")
        return
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_root)
    if not path:
        raise TransparencyError("consistency proof is empty")
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise TransparencyError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise TransparencyError("consistency proof is too short")
    if fr != first_root:
        raise TransparencyError(f"the first {first} events differ from the earlier checkpoint: history was rewritten")
    if sr != second_root:
        raise TransparencyError("consistency proof does not lead to the later checkpoint's root hash")


# -- checkpoints and signed notes ----------------------------------------------------------------
@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = field(default_factory=tuple)

    def body(self) -> str:
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return "\n".join(lines) + "\n"

    @classmethod
    def parse(cls, body: str) -> Checkpoint:
        lines = body.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise TransparencyError("checkpoint must have an origin, a size and a root hash line")
        origin, size_s, root_s, *ext = lines[:-1]
        if not origin:
            raise TransparencyError("checkpoint origin is empty")
        if not size_s.isdigit() or (size_s.startswith("0") and size_s != "0"):
            raise TransparencyError("checkpoint tree size is not a decimal number")
        root = _b64(root_s, "checkpoint root hash")
        if len(root) != 32:
            raise TransparencyError("checkpoint root hash is not 32 bytes")
        if any(not e for e in ext):
            raise TransparencyError("checkpoint has an empty extension line")
        return cls(origin, int(size_s), root, tuple(ext))


def _b64(s: str, what: str) -> bytes:
    try:
        return base64.b64decode(s.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise TransparencyError(f"{what} is not base64") from None


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise TransparencyError(f"invalid key name {name!r} (no spaces or '+')")


def key_id(name: str, public_key: bytes, sig_type: int = SIG_ED25519) -> bytes:
    return hashlib.sha256(name.encode() + b"\n" + bytes([sig_type]) + public_key).digest()[:4]


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def verifier_key(name: str, public_key: bytes, sig_type: int = SIG_ED25519) -> str:
    """`<name>+<hex key id>+<base64(type || public key)>` (the text a log or witness publishes)."""
    _check_name(name)
    kid = key_id(name, public_key, sig_type).hex()
    return f"{name}+{kid}+{base64.b64encode(bytes([sig_type]) + public_key).decode()}"


@dataclass(frozen=True)
class NoteVerifier:
    name: str
    key_id: bytes
    public_key: Ed25519PublicKey
    sig_type: int = SIG_ED25519

    @classmethod
    def parse(cls, vkey: str, sig_type: int = SIG_ED25519) -> NoteVerifier:
        parts = vkey.strip().split("+", 2)
        if len(parts) != 3:
            raise TransparencyError("verifier key must be <name>+<key id>+<key>")
        name, kid_hex, key_b64 = parts
        _check_name(name)
        raw = _b64(key_b64, "verifier key")
        if len(raw) != 33 or raw[0] != sig_type:
            raise TransparencyError(f"verifier key is not an Ed25519 key of signature type {sig_type:#04x}")
        kid = key_id(name, raw[1:], sig_type)
        if kid_hex.lower() != kid.hex():
            raise TransparencyError("verifier key id does not match its key")
        return cls(name, kid, Ed25519PublicKey.from_public_bytes(raw[1:]), sig_type)


def sign_note(body: str, name: str, private_key: Ed25519PrivateKey) -> str:
    _check_name(name)
    if not body.endswith("\n") or "\n\n" in body:
        raise TransparencyError("note text must end in one newline and contain no blank line")
    pub = raw_public(private_key.public_key())
    sig = private_key.sign(body.encode())
    return f"{body}\n{EM_DASH} {name} {base64.b64encode(key_id(name, pub) + sig).decode()}\n"


def open_note(note: str, verifier: NoteVerifier) -> str:
    """The note's text if a signature line of `verifier` is valid; raises otherwise."""
    if len(note.encode()) > MAX_NOTE_BYTES:
        raise TransparencyError("signed note is too large")
    if any(ord(c) < 0x20 and c != "\n" for c in note):
        raise TransparencyError("signed note contains control characters")
    cut = note.rfind("\n\n")
    if cut < 0 or not note.endswith("\n"):
        raise TransparencyError("not a signed note (no blank line before the signatures)")
    body, sig_lines = note[: cut + 1], note[cut + 2 :].split("\n")[:-1]
    if not sig_lines or len(sig_lines) > 100:
        raise TransparencyError("signed note has no (or too many) signature lines")
    for line in sig_lines:
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != EM_DASH:
            raise TransparencyError("malformed signature line")
        raw = _b64(parts[2], "signature")
        if parts[1] != verifier.name or raw[:4] != verifier.key_id:
            continue  # another signer (e.g. a witness cosignature): ignored here
        if len(raw) != 4 + 64:
            raise TransparencyError("signature has the wrong length")
        try:
            verifier.public_key.verify(raw[4:], body.encode())
        except InvalidSignature:
            raise TransparencyError(f"signature of {verifier.name} is invalid") from None
        return body
    raise TransparencyError(f"checkpoint is not signed by {verifier.name}")


def _split_note(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    cut = note.rfind("\n\n")
    if cut < 0 or not note.endswith("\n"):
        raise TransparencyError("not a signed note (no blank line before the signatures)")
    out = []
    for line in note[cut + 2 :].split("\n")[:-1]:
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != EM_DASH:
            raise TransparencyError("malformed signature line")
        out.append((parts[1], _b64(parts[2], "signature")))
    return note[: cut + 1], out


def cosign(note: str, name: str, key: Ed25519PrivateKey, timestamp: int) -> str:
    """A witness's C2SP tlog-cosignature/v1 (Ed25519) line over a checkpoint it checked for consistency."""
    body, _ = _split_note(note)
    msg = f"cosignature/v1\ntime {timestamp}\n{body}".encode()
    kid = key_id(name, raw_public(key.public_key()), SIG_COSIGNATURE_V1)
    sig = kid + timestamp.to_bytes(8, "big") + key.sign(msg)
    return f"{EM_DASH} {name} {base64.b64encode(sig).decode()}\n"


def verify_cosignature(note: str, witness_vkey: str | NoteVerifier) -> int:
    """The timestamp of a valid cosignature of `note` by the witness; raises when there is none."""
    w = witness_vkey if isinstance(witness_vkey, NoteVerifier) else NoteVerifier.parse(
        witness_vkey, SIG_COSIGNATURE_V1
    )
    body, sigs = _split_note(note)
    for name, raw in sigs:
        if name != w.name or raw[:4] != w.key_id:
            continue
        if len(raw) != 4 + 8 + 64:
            raise TransparencyError("cosignature has the wrong length")
        ts = int.from_bytes(raw[4:12], "big")
        try:
            w.public_key.verify(raw[12:], f"cosignature/v1\ntime {ts}\n{body}".encode())
        except InvalidSignature:
            raise TransparencyError(f"cosignature of {w.name} is invalid") from None
        return ts
    raise TransparencyError(f"checkpoint is not cosigned by {w.name}")


def open_checkpoint(note: str, vkey: str | NoteVerifier, origin: str | None = None) -> Checkpoint:
    verifier = vkey if isinstance(vkey, NoteVerifier) else NoteVerifier.parse(vkey)
    cp = Checkpoint.parse(open_note(note, verifier))
    if origin is not None and cp.origin != origin:
        raise TransparencyError(f"checkpoint origin {cp.origin!r} is not the expected {origin!r}")
    return cp


# -- receipts -------------------------------------------------------------------------------------
def event_leaf(event: dict[str, object]) -> bytes:
    """Leaf hash of an audit event given as its hashed fields (what a receipt's `event` holds). `levels` is hashed
    as stored ("1,2"): a receipt shows it as a list ([1, 2], as /v1/audit/events does), older receipts as the string."""
    levels = event.get("levels")
    if isinstance(levels, list):
        event = {**event, "levels": ",".join(str(x) if type(x) is int else repr(x) for x in levels)}
    return leaf_hash(encode_event(event))


def _shown(event: dict[str, object]) -> dict[str, object]:
    """The event as a receipt shows it: `levels` as a list of ints (the stored "1,2" is hashed, not shown)."""
    levels = event.get("levels")
    if isinstance(levels, str) and all(x.isdigit() for x in levels.split(",") if x):
        return {**event, "levels": [int(x) for x in levels.split(",") if x]}
    return event


def make_receipt(event: dict[str, object], index: int, proof: Sequence[bytes], checkpoint_note: str) -> dict:
    return receipt_of(event, index, [b64(p) for p in proof], checkpoint_note)


def b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


def receipt_of(event: dict[str, object], index: int, proof_b64: list[str], checkpoint_note: str) -> dict:
    """A receipt from its parts, the proof already in base64 (the one place that fixes its keys and their order).
    An event hashed in JCS gets version 2 (`"version": 2` first); any other keeps the version-1 form, no key."""
    receipt = {"leaf_index": index, "inclusion_proof": proof_b64, "checkpoint": checkpoint_note,
               "event": _shown(event)}
    canon = event.get(CANON_KEY)
    version = RECEIPT_VERSION.get(canon) if canon is None or isinstance(canon, str) else None
    if version is None:
        raise TransparencyError(f"no receipt version proves events with {CANON_KEY}={canon!r}")
    return receipt if version == 1 else {"version": version, **receipt}


RESULT_DIGEST_KEY = "result_sha256"


def result_digest(result: dict) -> str:
    """SHA-256 of a released result as served (its JSON object, the `receipt` key left out) in RFC 8785 (JCS)
    canonical JSON, which JavaScript's or Go's serializers recompute (Python's `json` writes `1e-07` where JCS
    and ECMAScript write `1e-7`).

    The service writes it into the result's audit event (`detail`: `result_sha256=<hex>`), so the receipt's leaf
    commits to exactly what was released: a result with any field changed no longer matches it."""
    return hashlib.sha256(rfc8785.dumps({k: v for k, v in result.items() if k != "receipt"})).hexdigest()


def legacy_result_digest(result: dict) -> str:
    """The digest receipts issued before JCS bind (sorted-key ASCII JSON of Python's `json`): still accepted."""
    return hashlib.sha256(canonical({k: v for k, v in result.items() if k != "receipt"})).hexdigest()


def bound_result_digest(event: dict) -> str | None:
    """The `result_sha256` an event's detail names, or None."""
    detail = event.get("detail")
    if not isinstance(detail, str):
        return None
    for word in detail.split():
        key, eq, value = word.partition("=")
        if eq and key == RESULT_DIGEST_KEY:
            return value
    return None


def _witness_quorum(note: str, witnesses: Sequence[str], quorum: int) -> None:
    """At least `quorum` distinct witnesses (all of them when quorum is 0) cosigned the checkpoint."""
    if quorum < 0:
        raise TransparencyError("quorum must not be negative")
    parsed = [NoteVerifier.parse(w, SIG_COSIGNATURE_V1) for w in witnesses]
    if len({(w.name, w.key_id) for w in parsed}) != len(parsed):
        raise TransparencyError("a witness is listed more than once")
    need = quorum or len(parsed)
    if need > len(parsed):
        raise TransparencyError(f"quorum {need} cannot be met by {len(parsed)} witness(es)")
    ok = 0
    for w in parsed:
        try:
            verify_cosignature(note, w)
            ok += 1
        except TransparencyError:
            continue
    if ok < need:
        raise TransparencyError(f"checkpoint has {ok} valid witness cosignature(s); {need} required")


def verify_receipt(
    receipt: dict,
    vkey: str,
    *,
    origin: str | None = None,
    text: str | None = None,
    result: dict | None = None,
    witnesses: Sequence[str] = (),
    quorum: int = 0,
) -> Checkpoint:
    """Offline check that `receipt`'s event is in the log the signed checkpoint commits to.

    With `text`, also checks that the event is about that text (its SHA-256); with `result` (the result object
    as served, its `receipt` key ignored), that the event binds exactly that result (`result_digest`). With
    `witnesses` (their cosignature vkeys, each once), at least `quorum` of them (all when quorum is 0) must
    have cosigned the checkpoint: a log that shows different histories to different people cannot get the
    same witnesses to sign both. Both receipt versions verify: 1 (no `version`; the event in Python json's form)
    and 2 (the event in RFC 8785, marked `canon` = "jcs"); the version must agree with the event's marker. Returns
    the checkpoint.
    """
    try:
        version = receipt.get("version", 1)
        event = receipt["event"]
        index = receipt["leaf_index"]
        proof = [_b64(p, "inclusion proof hash") for p in receipt["inclusion_proof"]]
        note = receipt["checkpoint"]
    except (KeyError, TypeError, AttributeError):
        raise TransparencyError("receipt lacks event, leaf_index, inclusion_proof or checkpoint") from None
    if not isinstance(event, dict) or not isinstance(index, int) or not isinstance(note, str):
        raise TransparencyError("receipt fields have the wrong types")
    if type(version) is not int or version not in RECEIPT_CANON:
        raise TransparencyError(f"unknown receipt version {version!r} (this verifier knows {sorted(RECEIPT_CANON)})")
    want = RECEIPT_CANON[version]
    if event.get(CANON_KEY) != want:
        of = f"without {CANON_KEY!r}" if want is None else f"with {CANON_KEY}={want!r}"
        raise TransparencyError(f"receipt version {version} proves events {of}; this event has "
                                f"{CANON_KEY}={event.get(CANON_KEY)!r}")
    if event.get("idx") != index + 1:
        raise TransparencyError("receipt event index does not match its leaf index")
    if text is not None and event.get("text_sha256") != hashlib.sha256(text.encode("utf-8")).hexdigest():
        raise TransparencyError("receipt is about a different text")
    if result is not None:
        bound = bound_result_digest(event)
        if bound is None:
            raise TransparencyError("receipt does not bind a result")
        try:
            same = isinstance(result, dict) and bound in (result_digest(result), legacy_result_digest(result))
        except (TypeError, ValueError):  # not JSON data (rfc8785's errors are ValueErrors)
            same = False
        if not same:
            raise TransparencyError("receipt is about a different result")
    cp = open_checkpoint(note, vkey, origin)
    if witnesses or quorum:
        _witness_quorum(note, witnesses, quorum)
    verify_inclusion(event_leaf(event), index, cp.size, proof, cp.root)
    return cp
