"""Verification without a GPU: the ahead-of-time compile harness, and the protocol checker with the shipped
kernels' protocols."""
