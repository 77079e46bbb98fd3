"""KEK in a PKCS#11 token (an HSM; SoftHSM2 for tests): non-extractable AES-256 keys, AES-GCM with the
envelope's associated data, computed inside the token.

Settings: `HERO_KEK_PKCS11_MODULE` (the vendor's .so), `HERO_KEK_PKCS11_TOKEN` (token label),
`HERO_KEK_KEY_LABEL` and `HERO_KEK_PKCS11_PIN_FILE` (the user PIN). Versions of the KEK are secret-key objects
with that label and CKA_ID `v<N>`; the highest is current; `rotate` generates the next one in the token
(sensitive, never extractable), and the first is generated when none exists. KEK id = `pkcs11-<label>-v<N>`;
wrapped = nonce(12) || ciphertext || tag(16). One session per process, serialised by a lock (sessions are
not thread-safe) and reopened once when the token drops it.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from pathlib import Path

from verifier.keys.kek_errors import KekError, KekUnreachable

log = logging.getLogger("hero.kek")

_AAD_PREFIX = b"hero/kek/pkcs11/v1|"
_VER_RE = re.compile(rb"^v(\d{1,9})$")
RESCAN_S = 30.0  # another process's `hero kek rotate` is picked up (as the current KEK) within this long


class Pkcs11KekProvider:
    def __init__(self, module: Path, token_label: str, key_label: str, pin_file: Path, *,
                 create: bool = True) -> None:
        try:
            import pkcs11
        except ImportError:
            raise KekError("HERO_KEK_PROVIDER=pkcs11 needs the 'kms' extra (pip install 'hero-verifier[kms]')"
                           ) from None
        self._p11 = pkcs11
        self.module, self.token_label, self.label = Path(module), token_label, key_label
        self._pin_file = Path(pin_file)
        self._lock = threading.Lock()
        self._session = None
        self._keys: dict[int, object] = {}
        self._scanned = 0.0
        if create:
            with self._lock:
                if not self._versions():
                    self._generate(1)

    def __repr__(self) -> str:
        return f"Pkcs11KekProvider(token={self.token_label!r}, key={self.label!r})"  # never the PIN

    __str__ = __repr__

    # -- session (call with the lock held) ------------------------------------------------------------
    def _open(self):
        if self._session is None:
            p11 = self._p11
            try:
                pin = self._pin_file.read_text().strip()
            except OSError:
                raise KekError("the PKCS#11 PIN file cannot be read (HERO_KEK_PKCS11_PIN_FILE)") from None
            try:
                token = self._token()
                try:
                    self._session = token.open(user_pin=pin, rw=True)
                except p11.exceptions.UserAlreadyLoggedIn:  # the login is per process: another session holds it
                    self._session = token.open(rw=True)
            except p11.exceptions.PinIncorrect:
                raise KekError("the PKCS#11 token refused the PIN") from None
            except Exception as exc:  # module missing, token absent, device error
                log.error("pkcs11 token unavailable", extra={"error": exc.__class__.__name__})
                raise KekUnreachable(f"PKCS#11 token {self.token_label!r} is unavailable") from None
            finally:
                del pin
            self._keys.clear()
        return self._session

    def _token(self):
        """The token; once it was lost, the module is re-initialised first (C_Finalize + C_Initialize): a
        module learns of a token that came back (an HSM reconnected, SoftHSM's store restored) only then."""
        lib = self._p11.lib(str(self.module))
        try:
            return lib.get_token(token_label=self.token_label)
        except (self._p11.exceptions.NoSuchToken, self._p11.exceptions.TokenNotPresent,
                self._p11.exceptions.DeviceRemoved, self._p11.exceptions.DeviceError,
                self._p11.exceptions.GeneralError):  # SoftHSM: its object store went away
            lib.reinitialize()
            return lib.get_token(token_label=self.token_label)

    def _run(self, what: str, fn):
        """fn(session) with one reopen if the token dropped the session; PKCS#11 errors never leave raw."""
        p11 = self._p11
        for attempt in (0, 1):
            session = self._open()
            try:
                return fn(session)
            except (p11.exceptions.EncryptedDataInvalid, p11.exceptions.EncryptedDataLenRange):
                raise KekError("data key failed authentication (wrong KEK or tampered row)") from None
            except (p11.exceptions.SessionClosed, p11.exceptions.SessionHandleInvalid,
                    p11.exceptions.DeviceRemoved, p11.exceptions.TokenNotPresent,
                    p11.exceptions.ObjectHandleInvalid, p11.exceptions.KeyHandleInvalid) as exc:
                self._session = None
                if attempt:
                    log.error("pkcs11 session lost", extra={"op": what, "error": exc.__class__.__name__})
                    raise KekUnreachable(f"PKCS#11 token {self.token_label!r} is unavailable ({what})") from None
            except p11.exceptions.PKCS11Error as exc:
                log.error("pkcs11 call failed", extra={"op": what, "error": exc.__class__.__name__})
                raise KekError(f"the PKCS#11 token failed the {what}") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _versions(self) -> dict[int, object]:
        p11 = self._p11
        attrs = p11.Attribute

        def scan(session) -> dict[int, object]:
            found = {}
            for obj in session.get_objects({attrs.CLASS: p11.ObjectClass.SECRET_KEY, attrs.LABEL: self.label}):
                m = _VER_RE.match(bytes(obj[attrs.ID] or b""))
                if m:
                    found[int(m.group(1))] = obj
            return found

        self._keys = self._run("key lookup", scan)
        self._scanned = time.monotonic()
        return self._keys

    def _generate(self, version: int) -> None:
        p11 = self._p11
        attrs = p11.Attribute
        self._run("key generation", lambda s: s.generate_key(
            p11.KeyType.AES, 256, id=b"v%d" % version, label=self.label, store=True,
            capabilities=p11.MechanismFlag.ENCRYPT | p11.MechanismFlag.DECRYPT,
            template={attrs.EXTRACTABLE: False, attrs.SENSITIVE: True, attrs.PRIVATE: True},
        ))
        self._keys.clear()

    def _key(self, version: int):
        key = self._keys.get(version) or self._versions().get(version)
        if key is None:
            raise KekError(f"KEK {self._kid(version)!r} is not in the token (retired or wrong token)")
        return key

    def _kid(self, version: int) -> str:
        return f"pkcs11-{self.label}-v{version}"

    def _latest(self) -> int:
        fresh = self._keys and time.monotonic() - self._scanned < RESCAN_S
        versions = self._keys if fresh else self._versions()
        if not versions:
            raise KekError(f"no KEK labelled {self.label!r} in the token; run 'hero kek rotate'")
        return max(versions)

    # -- provider -------------------------------------------------------------------------------------
    def current_id(self) -> str:
        with self._lock:
            return self._kid(self._latest())

    def wrap(self, dek: bytes, aad: bytes) -> tuple[str, bytes]:
        nonce = secrets.token_bytes(12)
        with self._lock:
            version = self._latest()
            ct = self._run("encrypt", lambda _s: self._key(version).encrypt(
                dek, mechanism=self._p11.Mechanism.AES_GCM,
                mechanism_param=self._p11.mechanisms.GCMParams(nonce, _AAD_PREFIX + aad, 128)))
        return self._kid(version), nonce + ct

    def unwrap(self, kek_id: str, wrapped: bytes, aad: bytes) -> bytes:
        label, _, version = kek_id.removeprefix("pkcs11-").rpartition("-v")
        if label != self.label or not version.isdigit():
            raise KekError(f"KEK {kek_id!r} is not under HERO_KEK_KEY_LABEL={self.label!r}")
        if len(wrapped) < 12 + 16:
            raise KekError("wrapped data key is truncated")
        with self._lock:
            return self._run("decrypt", lambda _s: self._key(int(version)).decrypt(
                wrapped[12:], mechanism=self._p11.Mechanism.AES_GCM,
                mechanism_param=self._p11.mechanisms.GCMParams(wrapped[:12], _AAD_PREFIX + aad, 128)))

    def rotate(self) -> str:
        with self._lock:
            versions = self._versions()
            self._generate(max(versions, default=0) + 1)
            return self._kid(self._latest())

    def ids(self) -> list[str]:
        with self._lock:
            return [self._kid(v) for v in sorted(self._versions())]

    def retire(self, kek_id: str) -> None:
        """Destroys that key object in the token (after `hero kek rotate` re-wrapped every row off it)."""
        label, _, version = kek_id.removeprefix("pkcs11-").rpartition("-v")
        with self._lock:
            if label != self.label or not version.isdigit() or int(version) == self._latest():
                raise KekError("cannot retire the current KEK (or one under another label)")
            self._run("destroy", lambda _s: self._key(int(version)).destroy())
            self._keys.clear()


def from_settings(settings, *, current: bool = True) -> Pkcs11KekProvider:
    missing = [n for n, v in (("HERO_KEK_PKCS11_MODULE", settings.kek_pkcs11_module),
                              ("HERO_KEK_PKCS11_TOKEN", settings.kek_pkcs11_token),
                              ("HERO_KEK_PKCS11_PIN_FILE", settings.kek_pkcs11_pin_file)) if not v]
    if missing:
        raise KekError(f"HERO_KEK_PROVIDER=pkcs11 needs {', '.join(missing)}")
    return Pkcs11KekProvider(settings.kek_pkcs11_module, settings.kek_pkcs11_token, settings.kek_key_label,
                             settings.kek_pkcs11_pin_file, create=current)
