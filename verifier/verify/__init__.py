"""POST /v1/verify and the synchronous decode path: runner, decode body, and what a caller may see (release)."""
