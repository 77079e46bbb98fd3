"""A deployment's two local secrets, made once (`hero kek init`) and required at start-up outside dev mode.

The local KEK (HERO_KEK_PROVIDER=local) and the transparency log's signing key are shared by every API and
worker process of a deployment, as the database is. Made on first use, replicas without a shared secret
mount would each mint their own: rows one pod cannot unwrap, checkpoints signed by several keys, and
/v1/audit/public-key answering differently per pod. So outside dev mode a process that finds either missing
refuses to start with one line naming the fix; `hero kek init` (run once, on the shared volume or to fill a
Kubernetes Secret) makes what is missing and never replaces what exists.
"""

from __future__ import annotations

from verifier.base.settings import Settings


class SecretsMissing(RuntimeError):
    """A production process found no KEK or no log signing key (the message is the one line to print)."""


def missing_secrets(settings: Settings, *, log_key: bool = True) -> list[str]:
    out = []
    if settings.kek_provider == "local" and not (settings.kek_path / "current").exists():
        out.append(f"KEK (HERO_KEK_DIR={settings.kek_path})")
    if log_key and not settings.log_key_path.exists():
        out.append(f"log signing key (HERO_LOG_KEY_FILE={settings.log_key_path})")
    return out


def require_secrets(settings: Settings, *, log_key: bool = True) -> None:
    """Outside dev mode: raise SecretsMissing unless the KEK and (with `log_key`) the log key exist."""
    if settings.dev_mode:
        return
    missing = missing_secrets(settings, log_key=log_key)
    if missing:
        raise SecretsMissing(
            f"refusing to start without an existing {' or '.join(missing)}: run `hero kek init` once where every "
            "process reads them (or set HERO_KEK_PROVIDER=openbao|aws-kms|pkcs11 and its HERO_KEK_* settings); "
            "HERO_DEV_MODE=1 creates them"
        )


def init_secrets(settings: Settings) -> dict:
    """Make the local KEK and the log signing key where missing (existing ones are kept); what exists now."""
    from verifier.audit.signer import signer_from_settings
    from verifier.keys.kek import make_kek_provider

    made = missing_secrets(settings)
    kek = make_kek_provider(settings)  # the local provider creates its first KEK; a KMS provider, none
    signer = signer_from_settings(settings, create=True)
    return {"kek_provider": settings.kek_provider, "kek_id": kek.current_id(), "log_vkey": signer.vkey,
            "created": made}
