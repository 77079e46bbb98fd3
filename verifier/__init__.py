"""HeRo Verifier: selective-disclosure watermarking for LLM text and the service that verifies it."""

__version__ = "0.1.0"
