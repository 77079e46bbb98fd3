"""Key-encryption-key (KEK) providers: wrap/unwrap per-row data keys.

`KekProvider` is the seam for Vault Transit / cloud KMS: implement `current_id`, `wrap`, `unwrap`
(and optionally `rotate`) and select it in `make_kek_provider`. The embedded default keeps 32-byte
AES-256 KEKs in files (mode 0600) under $HERO_HOME/kek, one file per KEK id, plus a `current` pointer.
"""

from __future__ import annotations

import re
import secrets
import threading
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from verifier.errors import Unavailable
from verifier.secretfile import write_secret

_ID_RE = re.compile(r"^[a-z0-9-]{1,64}$")


class KekError(Unavailable):
    """A data key cannot be wrapped/unwrapped (missing KEK, tampered row). The message names paths: the API
    answers a fixed text, the CLI and job errors the message."""

    public_detail = "key material is unavailable (KEK)"


class KekProvider(Protocol):
    def current_id(self) -> str: ...

    def wrap(self, dek: bytes, aad: bytes) -> tuple[str, bytes]: ...

    def unwrap(self, kek_id: str, wrapped: bytes, aad: bytes) -> bytes: ...


class LocalKekProvider:
    """KEKs in local files. wrapped = nonce(12) || AES-256-GCM(KEK, nonce, dek, aad)."""

    def __init__(self, directory: Path, *, create: bool = True) -> None:
        self.dir = Path(directory)
        self._lock = threading.Lock()
        self._cache: dict[str, AESGCM] = {}
        if create and not (self.dir / "current").exists():
            self.rotate()

    def __repr__(self) -> str:
        return f"LocalKekProvider({str(self.dir)!r})"

    def current_id(self) -> str:
        try:
            kid = (self.dir / "current").read_text().strip()
        except FileNotFoundError:
            raise KekError(f"no KEK under {self.dir}; run 'hero kek rotate' or set HERO_KEK_DIR") from None
        if not _ID_RE.match(kid):
            raise KekError("KEK pointer file is malformed")
        return kid

    def _aead(self, kek_id: str) -> AESGCM:
        if not _ID_RE.match(kek_id):
            raise KekError("malformed KEK id")
        with self._lock:
            if kek_id not in self._cache:
                try:
                    raw = (self.dir / f"{kek_id}.key").read_bytes()
                except FileNotFoundError:
                    raise KekError(f"KEK {kek_id!r} is not available in {self.dir}") from None
                if len(raw) != 32:
                    raise KekError(f"KEK {kek_id!r} has the wrong length")
                self._cache[kek_id] = AESGCM(raw)
            return self._cache[kek_id]

    def wrap(self, dek: bytes, aad: bytes) -> tuple[str, bytes]:
        kid = self.current_id()
        nonce = secrets.token_bytes(12)
        return kid, nonce + self._aead(kid).encrypt(nonce, dek, b"hero/kek/v1|" + aad)

    def unwrap(self, kek_id: str, wrapped: bytes, aad: bytes) -> bytes:
        if len(wrapped) < 12 + 16:
            raise KekError("wrapped data key is truncated")
        try:
            return self._aead(kek_id).decrypt(wrapped[:12], wrapped[12:], b"hero/kek/v1|" + aad)
        except InvalidTag:
            raise KekError("data key failed authentication (wrong KEK or tampered row)") from None

    def rotate(self) -> str:
        """New KEK becomes current; older KEK files stay until `retire` (after a rewrap)."""
        kid = f"local-{secrets.token_hex(6)}"
        write_secret(self.dir / f"{kid}.key", secrets.token_bytes(32))
        write_secret(self.dir / "current", kid.encode())
        return kid

    def ids(self) -> list[str]:
        return sorted(p.stem for p in self.dir.glob("local-*.key"))

    def retire(self, kek_id: str) -> None:
        if kek_id == self.current_id():
            raise KekError("cannot retire the current KEK")
        path = self.dir / f"{kek_id}.key"
        if path.exists():
            size = path.stat().st_size
            with path.open("r+b") as fh:  # best-effort overwrite before unlinking
                fh.write(b"\0" * size)
            path.unlink()
        with self._lock:
            self._cache.pop(kek_id, None)


def make_kek_provider(settings) -> KekProvider:
    if settings.kek_provider == "local":
        return LocalKekProvider(settings.kek_path)
    raise KekError(f"unknown KEK provider {settings.kek_provider!r}")  # pragma: no cover
