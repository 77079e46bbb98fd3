"""Tensor math for HeRo: the frozen PRF and Philox expansion, the batched sampler, the fused generation step and
the decoder's evidence kernels, each in C (CPU), Triton (CUDA) and torch (any device: the readable fallback), one
backend picker (`backend.py`); no web, no database, no key storage."""
