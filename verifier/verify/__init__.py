"""The one decode path (runner, decode body), what a caller may see (release), and /v1/verify's audit-then-release."""
