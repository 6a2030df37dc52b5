"""tilepipe.autotune: time candidate GEMM configurations for one problem and cache the fastest on disk.

The cache is one JSON file, $TILEPIPE_CACHE_DIR/autotune.json (default ~/.cache/tilepipe), keyed by GPU name,
CUDA, torch, triton and tilepipe versions, shape, dtypes and B layout, so a new driver stack or library version
never reuses stale winners. matmul reads it (host/configs.py, once per process) when it first sees a problem, so a
second process gets the tuned configuration without timing anything.
"""

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from functools import cache
from typing import TextIO

import torch

from tilepipe.api.matmul import forget_plans, matmul
from tilepipe.host.configs import (DECODE_M, LARGE_SUBTILED_16BIT, NARROW, PIECED_16BIT, PINGPONG_16BIT, MatmulConfig,
                                   autotune_entries, default_configs, problem_key, small_m_configs, store_config,
                                   swap_config)

STATS = {"timed": 0, "cache_hits": 0}
"""What this process's autotune calls did: candidate timings run, and problems answered from the cache."""


def autotune(M: int, N: int, K: int, dtype: torch.dtype = torch.bfloat16, out_dtype: torch.dtype | None = None,
             b_kmajor: bool = True, *, device: int | None = None, candidates: Sequence[MatmulConfig] | None = None,
             force: bool = False, progress: bool = True) -> MatmulConfig:
    """The fastest configuration for tilepipe.matmul on an (M, K) x (K, N) problem on this GPU.

    Answered from the on-disk cache when it holds this problem (unless `force`); otherwise every candidate is
    timed on random inputs (with a progress bar on stderr) and the winner is stored. Later matmul calls on this
    problem use it, in this process and in any other that finds the cache.
    """
    device = torch.cuda.current_device() if device is None else device
    out_dtype = out_dtype or dtype
    key = problem_key(M, N, K, dtype, out_dtype, b_kmajor, device)
    cands = list(candidates or default_candidates(out_dtype, M, b_kmajor))
    cfg = tune(key, cands, _gpu_timer(M, N, K, dtype, out_dtype, b_kmajor, device), force=force,
               progress=sys.stderr if progress else None, label=f"autotune {M}x{N}x{K}")
    forget_plans()  # calls already planned for this problem take the new configuration
    return cfg


def tune(key: str, candidates: Sequence[MatmulConfig], time_ms: Callable[[MatmulConfig], float], *,
         force: bool = False, progress: TextIO | None = None, label: str = "autotune") -> MatmulConfig:
    """The cached winner for `key`, or the candidate with the lowest time_ms (then cached). A candidate that
    raises is skipped; if every one does, the last error is raised."""
    entries = autotune_entries()
    if not force and key in entries:
        STATS["cache_hits"] += 1
        return MatmulConfig(**entries[key]["config"])
    bar = ProgressBar(len(candidates), label, progress)
    times: dict[MatmulConfig, float] = {}
    error: Exception | None = None
    for cfg in candidates:
        try:
            times[cfg] = time_ms(cfg)
        except Exception as exc:  # a configuration that fails to compile or launch is not a winner
            error = exc
        STATS["timed"] += 1
        bar.step(describe(cfg) + (f" {times[cfg]:.3f} ms" if cfg in times else " failed"))
    if not times:
        raise RuntimeError(f"{label}: every candidate failed") from error
    best = min(times, key=times.get)
    entries[key] = {"config": asdict(best), "ms": {describe(cfg): round(ms, 5) for cfg, ms in times.items()},
                    "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    store_config(key, entries[key])
    return best


def default_candidates(out_dtype: torch.dtype, M: int | None = None, b_kmajor: bool = True) -> list[MatmulConfig]:
    """The heuristic's tiles, each with the default and a wider grouped raster, and in a 2x1 cluster (B multicast:
    bench/results/archive/cluster-h100-v1.json measured it 0.99-1.05x of the same tile alone, by shape); for a 16-bit D the
    largest tile with D in sub-tiles (LARGE_SUBTILED_16BIT), the tiles with a side of 192 (PIECED_16BIT) and the
    ping-pong tile (PINGPONG_16BIT: a cached one is not taken by a call with C); for small M
    (M <= DECODE_M) also its 64-row tiles (64x128 with all the stages that fit, and the narrow 64x64) and, with B
    K-major, swap-AB's tiles of 64 and 128 rows of N."""
    tiles = default_configs(out_dtype)
    sixteen_bit = out_dtype != torch.float32
    candidates = [replace(cfg, group_m=group) for cfg in tiles + (LARGE_SUBTILED_16BIT, ) * sixteen_bit
                  for group in (8, 16)]
    candidates += [replace(cfg, cluster_m=2) for cfg in tiles]
    candidates += list(PIECED_16BIT) + [PINGPONG_16BIT] if sixteen_bit else []
    if M is not None and M <= DECODE_M:
        candidates += [small_m_configs(out_dtype)[0], NARROW]
        candidates += [swap_config(M, out_dtype, rows) for rows in (64, 128)] if b_kmajor else []
    return candidates


def describe(cfg: MatmulConfig) -> str:
    cluster = f" cluster {cfg.cluster_m}x{cfg.cluster_n}" if cfg.cluster.num_ctas > 1 else ""
    return (f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} s{cfg.stages} c{cfg.c_stages} g{cfg.group_m} "
            f"w{cfg.num_warps}{cluster}" + " swap-AB" * cfg.swap_ab + (f" d{cfg.epilogue_n}" if cfg.epilogue_n else "")
            + " ping-pong" * cfg.pingpong)


class ProgressBar:
    """A one-line text progress bar, redrawn in place on a terminal stream (None: silent)."""

    def __init__(self, total: int, label: str, stream: TextIO | None, width: int = 20) -> None:
        self.total, self.label, self.stream, self.width, self.done = total, label, stream, width, 0

    def step(self, note: str = "") -> None:
        self.done += 1
        if self.stream is None:
            return
        filled = self.width * self.done // max(self.total, 1)
        end = "\n" if self.done >= self.total else ""
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{self.done}/{self.total} {note}\033[K{end}")
        self.stream.flush()


def _gpu_timer(M: int, N: int, K: int, dtype: torch.dtype, out_dtype: torch.dtype, b_kmajor: bool,
               device: int) -> Callable[[MatmulConfig], float]:
    """time_ms(cfg): the median of triton's do_bench for tilepipe.matmul with cfg, on fixed random inputs."""
    from triton.testing import do_bench

    @cache
    def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # made on the first timing: none on a cache hit
        with torch.cuda.device(device):
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(N, K, device="cuda", dtype=dtype).t() if b_kmajor else torch.randn(K, N, device="cuda",
                                                                                               dtype=dtype)
            return a, b, torch.empty(M, N, device="cuda", dtype=out_dtype)

    def time_ms(cfg: MatmulConfig) -> float:
        a, b, out = inputs()
        ms = do_bench(lambda: matmul(a, b, out=out, config=cfg), warmup=10, rep=50, return_mode="median")
        if not math.isfinite(ms):
            raise RuntimeError(f"{describe(cfg)} timed as {ms}")
        return ms

    return time_ms
