"""Key material for a job reaches the decoder only through `tables_for` (see verifier.jobs.keys)."""

from verifier.jobs.keys import allowed_level, handed_summary, tables_for

__all__ = ["allowed_level", "handed_summary", "tables_for"]
