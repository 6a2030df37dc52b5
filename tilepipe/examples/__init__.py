"""Kernels written with the pipelines to show and stress the API (the demo's self-checks run them)."""
