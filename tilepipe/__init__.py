"""tilepipe: warp-specialized GPU kernels as roles joined by producer-consumer tile pipelines (Gluon, triton 3.6.0)."""

__version__ = "0.1.0"
