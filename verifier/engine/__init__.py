"""The watermark domain: profiles, payloads, key tables, generation and decoding (spec in docs/spec.md)."""
