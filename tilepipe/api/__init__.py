"""Torch-facing ops, one file per family (matmul + addmm, fp8), and their torch.library registration."""
