"""Tensor math for HeRo: the frozen PRF and Philox expansion, the batched sampler and the decoder's
evidence kernel. Pure torch on any device; no web, no database, no key storage."""
