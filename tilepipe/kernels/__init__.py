"""Kernels written with tilepipe: each module is roles + storage + pipelines."""
