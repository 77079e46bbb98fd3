"""The KEK errors, apart from the providers' router (kek.py) so the providers it loads by name (kek_openbao,
kek_awskms, kek_pkcs11) import them without importing it back (no module cycle)."""

from __future__ import annotations

from types import MappingProxyType

from verifier.base.errors import Unavailable

__all__ = ["KekError", "KekUnreachable"]


class KekError(Unavailable):
    """A data key cannot be wrapped/unwrapped (missing KEK, tampered row). Messages name KEK ids, never server
    paths (those go to the log): the API answers a fixed text, the CLI and job errors the message."""

    public_detail = "key material is unavailable (KEK)"


class KekUnreachable(KekError):
    """The KEK service cannot be reached (down, timed out, sealed, refused our token): transient. Nothing was
    changed; callers answer 503 and retry, queued jobs wait for it (`verifier.jobs.drain`)."""

    public_detail = "the key service (KEK provider) is unreachable; retry later"
    headers = MappingProxyType({"Retry-After": "5"})
