"""Measurement tools: the benchmarks against torch, Nsight Compute counters, and autotune's timing."""
