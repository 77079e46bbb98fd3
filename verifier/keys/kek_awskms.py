"""KEK in AWS KMS: a symmetric KMS key wraps each data key (Encrypt/Decrypt), bound to the envelope's
associated data through the EncryptionContext (`{"hero-aad": base64(aad)}`, logged by CloudTrail).

Settings: `HERO_KEK_KEY_ID` (key id, ARN or alias) plus the SDK's usual environment (`AWS_REGION`,
credentials, `AWS_ENDPOINT_URL` for a test server). KEK id = `awskms-<key uuid>`. KMS rotates a key's material
itself (automatic or `aws kms rotate-key-on-demand`, old material kept for Decrypt), so `rotate` changes
nothing here; moving to another KMS key is: set `HERO_KEK_KEY_ID` to it, then `hero kek rotate`.
"""

from __future__ import annotations

import base64
import logging
import re

from verifier.keys.kek_errors import KekError, KekUnreachable

log = logging.getLogger("hero.kek")

_UUID_RE = re.compile(r"^(mrk-)?[0-9a-f-]{32,36}$")


class AwsKmsKekProvider:
    def __init__(self, key_id: str, *, timeout: float = 5.0) -> None:
        try:
            import boto3
            import botocore.config
            import botocore.exceptions
        except ImportError:
            raise KekError("HERO_KEK_PROVIDER=aws-kms needs the 'kms' extra (pip install 'hero-verifier[kms]')"
                           ) from None
        self._botocore = botocore
        for name in ("botocore", "boto3"):  # their DEBUG lines print request and response bodies: data keys
            logging.getLogger(name).setLevel(max(logging.INFO, logging.getLogger(name).getEffectiveLevel()))
        cfg = botocore.config.Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 2})
        self._kms = boto3.client("kms", config=cfg)
        self.key_ref = key_id
        self._uuid: str | None = None

    def __repr__(self) -> str:
        return f"AwsKmsKekProvider({self.key_ref!r})"  # credentials stay in the SDK

    __str__ = __repr__

    def _call(self, what: str, fn, **kwargs):
        exc_mod = self._botocore.exceptions
        try:
            return fn(**kwargs)
        except exc_mod.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("InvalidCiphertextException", "IncorrectKeyException"):
                raise KekError("data key failed authentication (wrong KEK, context or tampered row)") from None
            if code in ("NotFoundException", "InvalidKeyUsageException"):
                raise KekError(f"KMS key {self.key_ref!r} cannot {what} (not found or wrong key usage)") from None
            log.error("aws kms refused a call", extra={"op": what, "error": code or exc.__class__.__name__})
            raise KekUnreachable(f"AWS KMS refused the {what} ({code or 'error'})") from None
        except exc_mod.NoCredentialsError:
            raise KekError("AWS KMS: no credentials in the SDK's environment") from None
        except Exception as exc:  # endpoint down, timeouts
            log.error("aws kms unreachable", extra={"op": what, "error": exc.__class__.__name__})
            raise KekUnreachable(f"AWS KMS is unreachable ({what})") from None

    @staticmethod
    def _context(aad: bytes) -> dict[str, str]:
        return {"hero-aad": base64.b64encode(aad).decode()}

    def current_id(self) -> str:
        if self._uuid is None:
            meta = self._call("describe", self._kms.describe_key, KeyId=self.key_ref)["KeyMetadata"]
            if not _UUID_RE.match(meta["KeyId"]):
                raise KekError("AWS KMS returned an unexpected key id")
            self._uuid = meta["KeyId"]
        return f"awskms-{self._uuid}"

    def wrap(self, dek: bytes, aad: bytes) -> tuple[str, bytes]:
        kid = self.current_id()
        resp = self._call("encrypt", self._kms.encrypt, KeyId=kid.removeprefix("awskms-"), Plaintext=dek,
                          EncryptionContext=self._context(aad))
        return kid, resp["CiphertextBlob"]

    def unwrap(self, kek_id: str, wrapped: bytes, aad: bytes) -> bytes:
        uuid = kek_id.removeprefix("awskms-")
        if not _UUID_RE.match(uuid):
            raise KekError("malformed KEK id")
        resp = self._call("decrypt", self._kms.decrypt, KeyId=uuid, CiphertextBlob=wrapped,
                          EncryptionContext=self._context(aad))
        return resp["Plaintext"]

    def rotate(self) -> str:
        return self.current_id()

    def ids(self) -> list[str]:
        return []

    def retire(self, kek_id: str) -> None:
        raise KekError("retire KMS keys in AWS (schedule-key-deletion) once nothing uses them")


def from_settings(settings, *, current: bool = True) -> AwsKmsKekProvider:
    if not settings.kek_key_id:
        raise KekError("HERO_KEK_PROVIDER=aws-kms needs HERO_KEK_KEY_ID")
    return AwsKmsKekProvider(settings.kek_key_id, timeout=settings.kek_timeout_seconds)
