"""KEK in OpenBao's (or Vault's) transit engine: the key never leaves the server.

Vault's conventions: `VAULT_ADDR`, `VAULT_TOKEN` (or `~/.vault-token`), `VAULT_CACERT`; the transit key is
`HERO_KEK_KEY_NAME` on the mount `HERO_KEK_TRANSIT_MOUNT`. wrapped = the transit ciphertext
(`vault:v<N>:...`), encrypted with the envelope's associated data (transit's `associated_data`, an
aes256-gcm96 key); KEK id = `openbao-<name>-v<N>`. Rotation (`rotate`) adds a key version; rows move to it by
unwrap then wrap, because transit's rewrap does not take associated data. Retiring old versions is the
server's business (`min_decryption_version`), so `ids()` offers none.
"""

from __future__ import annotations

import base64
import logging
import os
import re
from pathlib import Path

from verifier.keys.kek_errors import KekError, KekUnreachable

log = logging.getLogger("hero.kek")

_CT_RE = re.compile(r"^vault:v(\d{1,9}):[A-Za-z0-9+/=]+$")


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


class OpenBaoKekProvider:
    def __init__(self, addr: str, token: str, key_name: str, *, mount: str = "transit", timeout: float = 5.0,
                 cacert: str | None = None) -> None:
        try:
            import hvac
        except ImportError:
            raise KekError("HERO_KEK_PROVIDER=openbao needs the 'kms' extra (pip install 'hero-verifier[kms]')"
                           ) from None
        self.addr, self.key_name, self.mount = addr, key_name, mount
        self._client = hvac.Client(url=addr, token=token, timeout=timeout, verify=cacert or True)
        self._exc = hvac.exceptions

    def __repr__(self) -> str:
        return f"OpenBaoKekProvider({self.addr!r}, key={self.key_name!r})"  # never the token

    __str__ = __repr__

    @property
    def _transit(self):
        return self._client.secrets.transit

    def _call(self, what: str, fn, *args, **kwargs):
        """One transit call; transport failures and server-side refusals become KekUnreachable (503, retry),
        a failed authentication of our ciphertext a KekError. Messages never quote the server's reply."""
        try:
            return fn(*args, **kwargs)
        except self._exc.InvalidRequest as exc:
            if "authentication failed" in str(exc) or "invalid ciphertext" in str(exc):
                raise KekError("data key failed authentication (wrong KEK or tampered row)") from None
            log.error("openbao refused a transit call", extra={"op": what, "error": exc.__class__.__name__})
            raise KekError(f"OpenBao refused the transit {what} (key {self.key_name!r})") from None
        except self._exc.InvalidPath:
            raise KekError(f"OpenBao has no transit key {self.key_name!r} on mount {self.mount!r}; create it "
                           f"with 'bao write -f {self.mount}/keys/{self.key_name}'") from None
        except Exception as exc:  # connection refused, timeout, sealed (503), 403 token expired, ...
            log.error("openbao unreachable", extra={"op": what, "error": exc.__class__.__name__})
            raise KekUnreachable(f"OpenBao at {self.addr} is unreachable or refused the token ({what})") from None

    def _kid(self, version: int) -> str:
        return f"openbao-{self.key_name}-v{version}"

    def current_id(self) -> str:
        data = self._call("read", self._transit.read_key, self.key_name, mount_point=self.mount)["data"]
        return self._kid(int(data["latest_version"]))

    def wrap(self, dek: bytes, aad: bytes) -> tuple[str, bytes]:
        resp = self._call("encrypt", self._transit.encrypt_data, self.key_name, plaintext=_b64(dek),
                          associated_data=_b64(aad), mount_point=self.mount)
        ct = resp["data"]["ciphertext"]
        m = _CT_RE.match(ct)
        if m is None:
            raise KekError("OpenBao returned a malformed ciphertext")
        return self._kid(int(m.group(1))), ct.encode()

    def unwrap(self, kek_id: str, wrapped: bytes, aad: bytes) -> bytes:
        # `name` may be an older transit key of this server (HERO_KEK_KEY_NAME changed since)
        name, _, version = kek_id.removeprefix("openbao-").rpartition("-v")
        m = _CT_RE.match(wrapped.decode("ascii", "replace"))
        if m is None or m.group(1) != version:
            raise KekError("wrapped data key does not match its KEK id (tampered row)")
        resp = self._call("decrypt", self._transit.decrypt_data, name, ciphertext=wrapped.decode(),
                          associated_data=_b64(aad), mount_point=self.mount)
        return base64.b64decode(resp["data"]["plaintext"])

    def rotate(self) -> str:
        self._call("rotate", self._transit.rotate_key, self.key_name, mount_point=self.mount)
        return self.current_id()

    def ids(self) -> list[str]:
        return []

    def retire(self, kek_id: str) -> None:
        raise KekError("retire OpenBao key versions on the server (min_decryption_version)")


def _token() -> str:
    token = os.environ.get("VAULT_TOKEN")
    if not token:
        path = Path.home() / ".vault-token"
        token = path.read_text().strip() if path.is_file() else ""
    if not token:
        raise KekError("HERO_KEK_PROVIDER=openbao needs VAULT_TOKEN (or ~/.vault-token)")
    return token


def from_settings(settings, *, current: bool = True) -> OpenBaoKekProvider:
    addr = os.environ.get("VAULT_ADDR")
    if not addr:
        raise KekError("HERO_KEK_PROVIDER=openbao needs VAULT_ADDR")
    return OpenBaoKekProvider(addr, _token(), settings.kek_key_name, mount=settings.kek_transit_mount,
                              timeout=settings.kek_timeout_seconds, cacert=os.environ.get("VAULT_CACERT"))
