"""Append-only, hash-chained audit log of disclosures and key administration."""
