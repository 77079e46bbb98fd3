"""Key-store errors: the request cannot be met in the store's current state (message is user-facing)."""

from __future__ import annotations

from verifier.base.errors import Conflict, InvalidInput, NotFound, TokenizerMismatch


class KeyStoreError(Conflict):
    """No keys yet, a version without key material, a rule of the version lifecycle broken (409)."""


class KeyNotFound(KeyStoreError, NotFound):
    status = 404


class KeyConflict(KeyStoreError):
    pass


class KeyConfirmationMissing(KeyStoreError, InvalidInput):
    status = 422


class KeyTokenizerMismatch(TokenizerMismatch, KeyConflict):
    """The profile's tokenizer is not the one the key store recorded when the profile's keys were made."""
