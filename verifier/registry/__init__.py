"""Provider registry and sealed generation-key bundles (`/v1/providers`, `POST /v1/keys/generation-bundle`)."""
