"""Measurement tools: the benchmarks against torch, Nsight Compute counters, the wgmma rate by accumulator width, and
autotune's timing."""
