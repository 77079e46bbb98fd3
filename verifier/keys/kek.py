"""Key-encryption-key (KEK) providers: wrap/unwrap per-row data keys.

`KekProvider` is the seam: `current_id`, `wrap`, `unwrap`, `rotate`, `ids`, `retire`. The embedded default
(`local`) keeps 32-byte AES-256 KEKs in files (mode 0600) under $HERO_HOME/kek, one file per KEK id, plus a
`current` pointer; OpenBao/Vault transit, AWS KMS and PKCS#11 HSMs live in `kek_openbao`, `kek_awskms` and
`kek_pkcs11`; `KekRouter` wraps with the configured one (`HERO_KEK_PROVIDER`) and unwraps with the one that
made a stored KEK id.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
from importlib import import_module
from pathlib import Path
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from verifier.base.secretfile import private_dir, write_secret
from verifier.keys.kek_errors import KekError as KekError  # re-exported: the KEK errors live in kek_errors
from verifier.keys.kek_errors import KekUnreachable as KekUnreachable

log = logging.getLogger("hero.kek")

_ID_RE = re.compile(r"^[a-z0-9-]{1,64}$")


class KekProvider(Protocol):
    def current_id(self) -> str: ...

    def wrap(self, dek: bytes, aad: bytes) -> tuple[str, bytes]: ...

    def unwrap(self, kek_id: str, wrapped: bytes, aad: bytes) -> bytes: ...

    def rotate(self) -> str: ...

    def ids(self) -> list[str]: ...

    def retire(self, kek_id: str) -> None: ...


class LocalKekProvider:
    """KEKs in local files. wrapped = nonce(12) || AES-256-GCM(KEK, nonce, dek, aad)."""

    def __init__(self, directory: Path, *, create: bool = True) -> None:
        self.dir = Path(directory)
        self.configured = create  # False: a migration's source (KekRouter), whose last KEK may be retired
        if create:
            private_dir(self.dir)
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
            log.error("no KEK pointer file", extra={"path": str(self.dir)})
            raise KekError("no KEK is configured; run 'hero kek rotate' or set HERO_KEK_DIR") from None
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
                    log.error("KEK file missing", extra={"kek_id": kek_id, "path": str(self.dir)})
                    raise KekError(f"KEK {kek_id!r} is not available (retired or not mounted)") from None
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
        if self.configured and kek_id == self.current_id():
            raise KekError("cannot retire the current KEK")
        path = self.dir / f"{kek_id}.key"
        if path.exists():
            size = path.stat().st_size
            with path.open("r+b") as fh:  # best-effort overwrite before unlinking
                fh.write(b"\0" * size)
            path.unlink()
        with self._lock:
            self._cache.pop(kek_id, None)


# -- routing between providers --------------------------------------------------------------------------------
# The service wraps with the configured provider (`HERO_KEK_PROVIDER`) and unwraps with whichever provider made
# the stored KEK id (its prefix), so a migration between providers is one `hero kek rotate`: switch the
# provider, keep the old one's settings (files, address, key) in place, rotate; every row is unwrapped by its old
# provider and wrapped by the new one; `--retire-old` then removes what the service itself may remove (local KEK
# files, HSM key objects). Providers are loaded by module name, on first use only.
# name in HERO_KEK_PROVIDER -> (KEK id prefix, "module:factory(settings)")
PROVIDERS: dict[str, tuple[str, str]] = {
    "local": ("local-", "verifier.keys.kek:_local"),
    "openbao": ("openbao-", "verifier.keys.kek_openbao:from_settings"),
    "aws-kms": ("awskms-", "verifier.keys.kek_awskms:from_settings"),
    "pkcs11": ("pkcs11-", "verifier.keys.kek_pkcs11:from_settings"),
}


def _local(settings, *, current: bool = True) -> KekProvider:
    # Only the configured local provider creates a first KEK; as a migration's source it only reads files.
    return LocalKekProvider(settings.kek_path, create=current)


def provider_of(kek_id: str) -> str:
    for name, (prefix, _) in PROVIDERS.items():
        if kek_id.startswith(prefix):
            return name
    raise KekError("KEK id names no known provider")


class KekRouter:
    """Thread-safe; one per process. Rotation and retirement act on the configured provider."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.name: str = settings.kek_provider
        self._lock = threading.Lock()
        self._built: dict[str, KekProvider] = {}
        self.current = self._provider(self.name)

    def __repr__(self) -> str:
        return f"KekRouter({self.name!r})"

    __str__ = __repr__

    def _provider(self, name: str) -> KekProvider:
        with self._lock:
            if name not in self._built:
                if name not in PROVIDERS:
                    raise KekError(f"unknown KEK provider {name!r}")
                module, _, factory = PROVIDERS[name][1].partition(":")
                make = getattr(import_module(module), factory)
                self._built[name] = make(self.settings, current=name == self.name)
            return self._built[name]

    def current_id(self) -> str:
        return self.current.current_id()

    def wrap(self, dek: bytes, aad: bytes) -> tuple[str, bytes]:
        return self.current.wrap(dek, aad)

    def unwrap(self, kek_id: str, wrapped: bytes, aad: bytes) -> bytes:
        return self._provider(provider_of(kek_id)).unwrap(kek_id, wrapped, aad)

    def rotate(self) -> str:
        return self.current.rotate()

    def ids(self) -> list[str]:
        """The KEK ids the service may retire: the configured provider's, and local files left by a migration."""
        out = list(self.current.ids())
        if self.name != "local" and (self.settings.kek_path / "current").exists():
            out += self._provider("local").ids()
        return out

    def retire(self, kek_id: str) -> None:
        self._provider(provider_of(kek_id)).retire(kek_id)


def make_kek_provider(settings) -> KekProvider:
    """The configured provider, behind a router that unwraps ids made by any other (a migration's old rows)."""
    private_dir(settings.home)  # HERO_HOME: 0700, whatever the umask
    return KekRouter(settings)
