"""The log's checkpoint signing key (Ed25519), kept owner-only in a file like the KEKs.

Every API process and CLI of one deployment must share this file (same volume or secret mount), as
they share the database: the key names the log, and verifiers pin its public key (`vkey`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from verifier.audit.transparency import Checkpoint, NoteVerifier, raw_public, sign_note, verifier_key
from verifier.base.secretfile import write_secret


class SignerError(RuntimeError):
    pass


@dataclass(frozen=True, repr=False)
class LogSigner:
    origin: str
    key: Ed25519PrivateKey = field(repr=False)

    def __repr__(self) -> str:
        return f"LogSigner({self.origin!r})"

    @property
    def vkey(self) -> str:
        return verifier_key(self.origin, raw_public(self.key.public_key()))

    @property
    def verifier(self) -> NoteVerifier:
        return NoteVerifier.parse(self.vkey)

    def sign(self, size: int, root: bytes) -> str:
        return sign_note(Checkpoint(self.origin, size, root).body(), self.origin, self.key)


def load_signer(origin: str, path: Path, *, create: bool = True) -> LogSigner:
    path = Path(path)
    if not path.exists():
        if not create:
            raise SignerError(f"no checkpoint signing key at {path} (HERO_LOG_KEY_FILE): run `hero kek init` once "
                              "where every process reads it (HERO_DEV_MODE=1 creates it)")
        write_secret(path, Ed25519PrivateKey.generate().private_bytes_raw(), replace=False)
    raw = path.read_bytes()
    if len(raw) != 32:
        raise SignerError(f"checkpoint signing key {path} is not a raw 32-byte Ed25519 seed")
    return LogSigner(origin, Ed25519PrivateKey.from_private_bytes(raw))


def signer_from_settings(settings, *, create: bool | None = None) -> LogSigner:
    """The deployment's checkpoint signer. `create` (default: dev mode only) makes a missing key: outside dev
    mode only `hero kek init` does, or each host would sign with a key of its own (issue 52, N8)."""
    return load_signer(settings.log_origin, settings.log_key_path,
                       create=bool(settings.dev_mode) if create is None else create)
