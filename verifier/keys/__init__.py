"""Watermark keys at rest: envelope-encrypted master secrets in the database (DbKeyStore)."""
