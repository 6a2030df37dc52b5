"""GPU correctness of tilepipe.matmul for one (dtype, out_dtype, B layout), over ragged shapes; prints JSON.

`python -m tests.gpu.matmul_cases bf16 fp32 kmajor`: every shape is compared with a float64 reference on
fresh random inputs, with the output poisoned with NaN first. `... residual bf16 bf16 kmajor`: the fused
residual epilogue (alpha, beta, C aliasing D, addmm with a bias row). `... restaged bf16 bf16 kmajor`: operands
restaged to sector-aligned rows before the GEMM. `... splitk bf16 fp32 kmajor`: small-M (decode) shapes under
split-K, forced and as matmul's own choice. `... swap 64 splitk bf16`: swap-AB tiles forced on ragged shapes.
`... narrow bf16 bf16 kmajor`: the 64x64 tile of M = 65-128, as chosen and forced.
`... pieced bf16 bf16 kmajor static`: tiles with a side of 192 (power-of-two pieces), as chosen and forced.
`... subtiled bf16 bf16 kmajor static`: the 128x256 tile with D written in sub-tiles, as chosen and forced.
`... pingpong bf16 bf16 kmajor`: two MMA warpgroups taking turns at 128x128 tiles, as chosen and forced.
`... edges bf16 bf16 kmajor`: every static tile forced where its last row and column of tiles are moved inside D.
`... cluster 2x1 plain bf16 bf16 kmajor [dynamic|streamk|splitk]`: a two-CTA cluster forced, under a scheduler.
`... pair bf16 bf16 kmajor`: the sm_100a GEMM's two-CTA form forced (sm_100/sm_103 only).
"""

import json
import sys

import torch

import tilepipe

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}  # relative Frobenius error
SHAPES = [(1, 256, 64), (7, 8, 8), (129, 200, 63), (128, 256, 64), (300, 513, 1000), (1000, 1, 64), (64, 1000, 4096),
          (2048, 2048, 256), (1, 1, 1), (133, 131, 7), (4096, 264, 520), (257, 4096, 128)]


def run(dtype: str, out_dtype: str, layout: str, shapes: list[tuple[int, int, int]] = SHAPES,
        a_offset: int = 0, scheduler: str | None = None, config: tilepipe.MatmulConfig | None = None) -> dict:
    """`a_offset` > 0: A is a column slice starting that many elements into each row of a wider tensor;
    `scheduler`: matmul's scheduler= (None: its own choice); `config` forces a configuration."""
    torch.manual_seed(0)
    failures = []
    worst = 0.0
    for M, N, K in shapes:
        a = torch.randn(M, K + a_offset, device="cuda", dtype=DTYPES[dtype])[:, a_offset:]
        b = (torch.randn(N, K, device="cuda", dtype=DTYPES[dtype]).t() if layout == "kmajor"
             else torch.randn(K, N, device="cuda", dtype=DTYPES[dtype]))
        out = torch.full((M, N), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
        got = tilepipe.matmul(a, b, out=out, scheduler=scheduler, config=config)
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        err = float((got.double() - ref).norm() / ref.norm()) if ref.norm() > 0 else float(got.double().norm())
        worst = max(worst, err)
        if not (got is out and torch.isfinite(got).all() and err < TOLERANCE[DTYPES[out_dtype]]):
            failures.append({"shape": [M, N, K], "rel_err": err})
    return {"case": f"matmul {dtype}->{out_dtype} b={layout} scheduler={scheduler} {config or ''}", "ok": not failures,
            "worst_rel_err": worst, "failures": failures}


SPLITK_SHAPES = [(1, 4096, 4096), (8, 1000, 4096), (33, 4000, 3000), (64, 1000, 4096), (96, 2000, 4096),
                 (17, 520, 8200), (100, 264, 1000), (128, 130, 2000)]
"""Small M with ragged N and K: split 2 to 16 ways over tiles of 64 rows (one or two rows of tiles)."""
CHOSEN_SPLITK_SHAPES = [(40, 1000, 14352), (33, 2000, 12000), (96, 1000, 16000)]
"""Small M with long K, where matmul's own choice is split-K (predict_us: one program a tile would stream its
k-steps for longer than the split's DRAM time and fixup; SPLITK_SHAPES are too short for that). Above swap-AB's
M <= 32 with B K-major, whose 64x8 tile runs static at M = 8."""


def run_splitk(dtype: str, out_dtype: str, layout: str) -> dict:
    """SPLITK_SHAPES under scheduler="splitk", and with CHOSEN_SPLITK_SHAPES under matmul's own choice, which must
    pick split-K for the latter (else this would test the static schedule twice)."""
    from tilepipe.host.configs import config_for, schedule_for, schedule_programs, tile_count
    from tilepipe.host.gpus import device_model

    device = torch.cuda.current_device()
    gpu = device_model(device)
    chosen, split = [], 0
    for M, N, K in SPLITK_SHAPES + CHOSEN_SPLITK_SHAPES:
        cfg = config_for(M, N, K, DTYPES[dtype], DTYPES[out_dtype], layout == "kmajor", device)
        chosen.append(schedule_for(M, N, K, cfg, gpu))
        split += schedule_programs(M, N, K, cfg, gpu.sms, "splitk") > tile_count(M, N, cfg)
    results = [run(dtype, out_dtype, layout, SPLITK_SHAPES, scheduler="splitk"),
               run(dtype, out_dtype, layout, SPLITK_SHAPES + CHOSEN_SPLITK_SHAPES)]
    ok = (all(r["ok"] for r in results) and chosen[len(SPLITK_SHAPES):] == ["splitk"] * len(CHOSEN_SPLITK_SHAPES)
          and split == len(chosen))
    return {"case": f"splitk {dtype}->{out_dtype} b={layout}", "ok": ok, "chosen": chosen, "split": split,
            "worst_rel_err": max(r["worst_rel_err"] for r in results),
            "failures": [f for r in results for f in r["failures"]]}


RESIDUAL_SHAPES = [(1, 256, 64), (129, 200, 63), (300, 513, 1000), (1000, 1, 64), (2048, 2048, 256), (133, 131, 7)]
SCALARS = [(1.0, 1.0), (0.5, -2.0), (0.0, 1.5), (1.25, 0.0)]
RESIDUAL_MODES = ("separate", "fp32_c", "in_place", "addmm_bias", "bias_row", "addmm_column")


def run_residual(dtype: str, out_dtype: str, layout: str, config: tilepipe.MatmulConfig | None = None,
                 scheduler: str | None = None, modes: tuple[str, ...] = RESIDUAL_MODES,
                 shapes: list[tuple[int, int, int]] = RESIDUAL_SHAPES) -> dict:
    """D = alpha * a @ b + beta * C: C of D's dtype, fp32 C with a 16-bit D, C aliasing D (in place), a bias row
    through addmm and through matmul (C = bias.expand), and addmm with a bias column (staged copy), or the `modes`
    given; `config` and `scheduler` forced where the call takes them (not addmm's, not fp32 C's)."""
    torch.manual_seed(1)
    failures, worst = [], 0.0
    tol = TOLERANCE[DTYPES[out_dtype]]
    for M, N, K in shapes:
        for alpha, beta in SCALARS:
            for mode in modes:
                if mode == "fp32_c" and out_dtype == "fp32" or mode.startswith("addmm") and out_dtype != dtype:
                    continue  # fp32 C is the separate case for an fp32 D; addmm keeps mat1's dtype
                a = torch.randn(M, K, device="cuda", dtype=DTYPES[dtype])
                b = (torch.randn(N, K, device="cuda", dtype=DTYPES[dtype]).t() if layout == "kmajor"
                     else torch.randn(K, N, device="cuda", dtype=DTYPES[dtype]))
                c_shape = {"addmm_bias": (N, ), "bias_row": (N, ), "addmm_column": (M, 1)}.get(mode, (M, N))
                c = torch.randn(c_shape, device="cuda", dtype=torch.float32 if mode == "fp32_c" else DTYPES[out_dtype])
                ref = alpha * (a.double() @ b.double()) + beta * c.double()
                out = torch.full((M, N), float("nan"), device="cuda", dtype=DTYPES[out_dtype])
                forced = dict(config=config, scheduler=scheduler)
                if mode in ("separate", "fp32_c"):
                    got = tilepipe.matmul(a, b, out=out, c=c if beta else None, alpha=alpha, beta=beta,
                                          **({} if mode == "fp32_c" else forced))
                elif mode == "in_place":
                    got = tilepipe.matmul(a, b, out=c, c=c, alpha=alpha, beta=beta, **forced)
                elif mode == "bias_row":
                    got = tilepipe.matmul(a, b, out=out, c=c.expand(M, N), alpha=alpha, beta=beta, **forced)
                elif config is not None:
                    continue  # addmm takes no config
                else:
                    got = tilepipe.addmm(c, a, b, alpha=alpha, beta=beta, out=out)
                torch.cuda.synchronize()
                err = float((got.double() - ref).norm() / ref.norm())
                worst = max(worst, err)
                if not (torch.isfinite(got).all() and err < tol):
                    failures.append({"shape": [M, N, K], "alpha": alpha, "beta": beta, "mode": mode, "rel_err": err})
    return {"case": f"residual {dtype}->{out_dtype} b={layout} {config or ''} scheduler={scheduler}",
            "ok": not failures,
            "worst_rel_err": worst,
            "failures": failures[:5]}


RESTAGED_SHAPES = [(300, 520, 1000), (129, 264, 264), (1000, 776, 2056), (64, 1000, 4104)]
"""K (and N, for a row-major B) = 8 mod 16: rows 16 bytes off 32-byte sectors; K = 264 leaves a last column block
that overlaps the one before it."""


def run_restaged(dtype: str, out_dtype: str, layout: str) -> dict:
    """Operands whose rows start off 32-byte sectors, always restaged through the copy kernel (the device model's
    restage_gain raised so the cost model says yes), with A also at a base 16 bytes into its rows; counts the
    restaged operands."""
    from dataclasses import replace

    from tilepipe.host import staging

    model = staging.device_model
    staging.device_model = lambda device: replace(model(device), restage_gain=1e9)
    restaged, restage = [], staging.restaged
    staging.restaged = lambda t, device: restaged.append(tuple(t.shape)) or restage(t, device)
    results = [run(dtype, out_dtype, layout, RESTAGED_SHAPES), run(dtype, out_dtype, layout, RESTAGED_SHAPES, 8)]
    expected = 2 * len(RESTAGED_SHAPES) * 2  # A and B in both runs (B's rows: K or N elements, both 8 mod 16)
    ok = all(r["ok"] for r in results) and len(restaged) == expected
    return {"case": f"restaged {dtype}->{out_dtype} b={layout}", "ok": ok, "restaged": len(restaged),
            "expected": expected, "worst_rel_err": max(r["worst_rel_err"] for r in results),
            "failures": [f for r in results for f in r["failures"]]}


SWAP_SHAPES = SHAPES + SPLITK_SHAPES + [(96, 14336, 4096), (128, 1000, 520)]


def run_swap(tile: str, schedule: str, out_dtype: str) -> dict:
    """Swap-AB (D^T = B^T A^T, B K-major) forced with the `tile` ("64" or "128" rows of N) on ragged shapes under
    `schedule`. Static: the widths swap_config gives M = 8, 32, 64 and 128, each through the residual epilogues (C,
    C aliasing D, a bias row) too, and its shapes twice (the second pass launches through the call plans the first
    cached: the swapped operand slots filled with new tensors' addresses); other schedules: widths 8 and 64."""
    from tilepipe.host.configs import swap_config

    static = schedule == "static"
    results = []
    for width in (8, 32, 64, 128) if static else (8, 64):
        config = swap_config(width, DTYPES[out_dtype], int(tile))
        results += [run("bf16", out_dtype, "kmajor", SWAP_SHAPES, scheduler=schedule, config=config)
                    for _ in range(2 if static else 1)]
        if static:
            results.append(run_residual("bf16", out_dtype, "kmajor", config))
    return {"case": f"swap {tile} {schedule} bf16->{out_dtype}", "ok": all(r["ok"] for r in results),
            "worst_rel_err": max(r["worst_rel_err"] for r in results),
            "failures": [f for r in results for f in r["failures"]][:8]}


NARROW_SHAPES = [(96, 4096, 4096), (100, 264, 1000), (65, 1000, 520), (127, 4095, 4104), (128, 130, 2000)]
"""Two rows of 64-row tiles whose 64x64 tiles fit one wave: matmul's own choice is the narrow tile there."""


def run_narrow(dtype: str, out_dtype: str, layout: str) -> dict:
    """NARROW_SHAPES as matmul chooses them (which must be the narrow tile: else this tests another one), then the
    narrow tile forced through the residual epilogues."""
    from tilepipe.host.configs import NARROW, config_for

    device = torch.cuda.current_device()
    chosen = [config_for(M, N, K, DTYPES[dtype], DTYPES[out_dtype], layout == "kmajor", device)
              for M, N, K in NARROW_SHAPES]
    results = [run(dtype, out_dtype, layout, NARROW_SHAPES), run_residual(dtype, out_dtype, layout, NARROW)]
    ok = all(r["ok"] for r in results) and all(cfg == NARROW for cfg in chosen)
    return {"case": f"narrow {dtype}->{out_dtype} b={layout}", "ok": ok, "chosen": [str(cfg) for cfg in chosen],
            "worst_rel_err": max(r["worst_rel_err"] for r in results),
            "failures": [f for r in results for f in r["failures"]][:8]}


CLUSTER_STREAMK_SHAPES = {"2x1": [(1792, 2432, 4096), (1790, 2430, 1000), (17150, 128, 520)],
                          "1x2": [(896, 4864, 4096), (890, 4860, 1000), (128, 17150, 520)]}
"""133 cluster tiles (and 67) of 128 x 128 CTA blocks on an H100's 66 two-SM clusters: one wave whole, the rest split
over the programs mid-tile (stream-K's fixup), ragged and not."""


def run_cluster(cluster: str, epilogue: str, dtype: str, out_dtype: str, layout: str,
                scheduler: str = "static") -> dict:
    """A `cluster` ("2x1" or "1x2") configuration forced on every shape under `scheduler`: the plain GEMM or the
    residual epilogues; stream-K (and the dynamic scheduler: more cluster tiles than clusters, handed out by ticket)
    also on CLUSTER_STREAMK_SHAPES, split-K on the small-M SPLITK_SHAPES."""
    cm, cn = map(int, cluster.split("x"))
    config = tilepipe.MatmulConfig(128, 128, 64, stages=4, cluster_m=cm, cluster_n=cn)
    if epilogue == "residual":
        return run_residual(dtype, out_dtype, layout, config, scheduler)
    extra = {"static": [], "dynamic": CLUSTER_STREAMK_SHAPES[cluster], "streamk": CLUSTER_STREAMK_SHAPES[cluster],
             "splitk": SPLITK_SHAPES}[scheduler]
    return run(dtype, out_dtype, layout, SHAPES + [(1024, 8192, 1024), (8192, 1024, 1024)] + extra,
               scheduler=scheduler, config=config)


PIECED_SHAPES = [(1536, 8960, 1536), (333, 517, 200), (1000, 1000, 64), (200, 3000, 777), (193, 193, 65),
                 (4096, 264, 520), (2048, 2048, 256), (129, 200, 63), (1, 256, 64)]
"""Ragged and whole tiles of 192 rows or columns; 1536x8960x1536 is where matmul's own choice is pieced."""


def run_pieced(dtype: str, out_dtype: str, layout: str, scheduler: str) -> dict:
    """Every pieced tile (host/configs.py PIECED_16BIT, NARROW_PIECED_16BIT on one warpgroup, and 192x192) forced under
    `scheduler` on PIECED_SHAPES and through the residual epilogues (C of D's dtype, C aliasing D, a bias row);
    matmul's own choice at 2304x2816x8192 with C, which must be pieced; and an fp32 C, which a pieced config must
    refuse with ValueError."""
    from tilepipe.host.configs import NARROW_PIECED_16BIT, PIECED_16BIT, config_for

    configs = PIECED_16BIT + (tilepipe.MatmulConfig(192, 192, 64, stages=3), NARROW_PIECED_16BIT)
    results = [run(dtype, out_dtype, layout, PIECED_SHAPES, scheduler=scheduler, config=cfg) for cfg in configs]
    results += [run_residual(dtype, out_dtype, layout, cfg, scheduler) for cfg in configs]
    chosen = config_for(2304, 2816, 8192, DTYPES[dtype], DTYPES[out_dtype], layout == "kmajor",
                        torch.cuda.current_device(), has_c=True)  # with C: the ping-pong tile takes none
    results.append(run_residual(dtype, out_dtype, layout, modes=("separate", ), shapes=PIECED_SHAPES[:1]))
    a = torch.randn(256, 256, device="cuda", dtype=DTYPES[dtype])
    try:
        tilepipe.matmul(a, a, c=a.float(), beta=1.0, config=configs[0])
        refused = False
    except ValueError as exc:
        refused = "c:" in str(exc)
    ok = all(r["ok"] for r in results) and chosen in PIECED_16BIT and refused
    return {"case": f"pieced {dtype}->{out_dtype} b={layout} scheduler={scheduler}", "ok": ok, "chosen": str(chosen),
            "refused_fp32_c": refused, "worst_rel_err": max(r["worst_rel_err"] for r in results),
            "failures": [f for r in results for f in r["failures"]][:8]}


SUBTILED_SHAPES = [(2560, 2560, 2560), (333, 517, 200), (1000, 3000, 555), (129, 200, 63), (4096, 264, 520),
                   (257, 4096, 128), (1, 256, 64), (2304, 2304, 1152)]
"""Ragged and whole 128x256 tiles (a last column tile of one to three 64-column sub-tiles: N = 200, 264, 517, 3000),
and 2560^3 (matmul's own choice there too: since the stream-K round, the 128x128 tile under stream-K)."""


def run_subtiled(dtype: str, out_dtype: str, layout: str, scheduler: str) -> dict:
    """The 128x256 tile with D in sub-tiles (LARGE_SUBTILED_16BIT, or LARGE_SUBTILED_FP32 for an fp32 D) forced under
    `scheduler` on SUBTILED_SHAPES and through the residual epilogues (C of D's dtype, C aliasing D, a bias row);
    matmul's own choice at 4096^3, which must be it."""
    from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32, config_for

    tile = LARGE_SUBTILED_FP32 if out_dtype == "fp32" else LARGE_SUBTILED_16BIT
    results = [run(dtype, out_dtype, layout, SUBTILED_SHAPES, scheduler=scheduler, config=tile),
               run_residual(dtype, out_dtype, layout, tile, scheduler), run(dtype, out_dtype, layout,
                                                                             SUBTILED_SHAPES[:1])]
    chosen = config_for(4096, 4096, 4096, DTYPES[dtype], DTYPES[out_dtype], layout == "kmajor",
                        torch.cuda.current_device())
    ok = all(r["ok"] for r in results) and chosen == tile
    return {"case": f"subtiled {dtype}->{out_dtype} b={layout} scheduler={scheduler}", "ok": ok, "chosen": str(chosen),
            "worst_rel_err": max(r["worst_rel_err"] for r in results),
            "failures": [f for r in results for f in r["failures"]][:8]}


PINGPONG_SHAPES = [(1536, 8960, 1536), (333, 517, 200), (129, 200, 63), (1, 256, 64), (4096, 264, 520),
                   (257, 4096, 128), (2048, 2048, 256), (128, 128, 4096), (7, 8, 8), (1000, 3000, 555)]
"""Ragged and whole 128x128 tiles: programs with one tile (turn 1 idle), with odd and even tile counts (the turns
end one tile apart), a long K; 1536x8960x1536 is where matmul's own choice is the ping-pong tile."""


def run_pingpong(dtype: str, out_dtype: str, layout: str) -> dict:
    """PINGPONG_16BIT (D in 128x64 sub-tiles) and its whole-stage form forced on PINGPONG_SHAPES, plain and with a bias
    row under every alpha/beta pair; matmul's own choice at 1536x8960x1536, which must be it, and there with a C tile,
    which must not (and is checked); a forced ping-pong config with C must raise ValueError naming `c`."""
    from tilepipe.host.configs import PINGPONG_16BIT, config_for

    configs = (PINGPONG_16BIT, tilepipe.MatmulConfig(128, 128, 64, stages=5, num_warps=4, pingpong=True))
    results = [run(dtype, out_dtype, layout, PINGPONG_SHAPES, scheduler="static", config=cfg) for cfg in configs]
    results += [run_residual(dtype, out_dtype, layout, cfg, "static", ("bias_row", ), PINGPONG_SHAPES[1:3])
                for cfg in configs]
    device = torch.cuda.current_device()
    chosen = config_for(1536, 8960, 1536, DTYPES[dtype], DTYPES[out_dtype], layout == "kmajor", device)
    with_c = config_for(1536, 8960, 1536, DTYPES[dtype], DTYPES[out_dtype], layout == "kmajor", device, has_c=True)
    results += [run(dtype, out_dtype, layout, PINGPONG_SHAPES[:1]),
                run_residual(dtype, out_dtype, layout, modes=("separate", ), shapes=PINGPONG_SHAPES[:1])]
    a = torch.randn(256, 256, device="cuda", dtype=DTYPES[dtype])
    try:
        tilepipe.matmul(a, a, c=a, beta=1.0, config=PINGPONG_16BIT)
        refused = False
    except ValueError as exc:
        refused = str(exc).startswith("c:")
    ok = all(r["ok"] for r in results) and chosen == PINGPONG_16BIT and not with_c.pingpong and refused
    return {"case": f"pingpong {dtype}->{out_dtype} b={layout}", "ok": ok, "chosen": str(chosen),
            "chosen_with_c": str(with_c), "refused_c": refused,
            "worst_rel_err": max(r["worst_rel_err"] for r in results),
            "failures": [f for r in results for f in r["failures"]][:8]}


EDGE_SHAPES = [(200, 777, 64), (129, 3000, 520), (333, 4000, 1000), (416, 200, 3500), (1000, 3000, 520),
               (100, 300, 200), (257, 4100, 64), (4000, 1000, 128), (640, 1544, 4096)]
"""Last rows and columns of tiles mostly or barely out of bounds, N off 16 elements (777, 4100, 1544: a moved column
rounds up to them), one row or column of tiles shorter than the tile (100 x 300 on 128 rows and 192 columns)."""


def run_edges(dtype: str, out_dtype: str, layout: str) -> dict:
    """Every tile the static schedule runs with its edge tiles moved inside D (schedulers/grid.py TileGrid INWARD: no
    C, one CTA, no swap-AB) forced on EDGE_SHAPES, plain and with a bias row; and matmul's own choice there."""
    from tilepipe.host.configs import LARGE_SUBTILED_16BIT, PIECED_16BIT, PINGPONG_16BIT, default_configs

    configs = default_configs(DTYPES[out_dtype])
    if DTYPES[out_dtype] != torch.float32:
        configs += (LARGE_SUBTILED_16BIT, PINGPONG_16BIT) + PIECED_16BIT
    results = [run(dtype, out_dtype, layout, EDGE_SHAPES, scheduler="static", config=cfg) for cfg in configs]
    results += [run_residual(dtype, out_dtype, layout, cfg, "static", ("bias_row", ), EDGE_SHAPES[:4])
                for cfg in configs]
    results.append(run(dtype, out_dtype, layout, EDGE_SHAPES))
    return {"case": f"edges {dtype}->{out_dtype} b={layout}", "ok": all(r["ok"] for r in results),
            "configs": len(configs), "worst_rel_err": max(r["worst_rel_err"] for r in results),
            "failures": [f for r in results for f in r["failures"]][:8]}


def run_pair(dtype: str, out_dtype: str, layout: str) -> dict:
    """The sm_100a GEMM's two-CTA form (host/configs.py SM100_PAIR_CONFIGS: a 2x1 cluster, cta_group::2 MMAs) forced
    on every shape, ragged ones included."""
    from tilepipe.host.configs import SM100_PAIR_CONFIGS

    return run(dtype, out_dtype, layout, SHAPES + [(1024, 8192, 1024), (8192, 1024, 1024)],
               config=SM100_PAIR_CONFIGS[0])


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    runners = {"residual": run_residual, "restaged": run_restaged, "splitk": run_splitk, "cluster": run_cluster,
               "swap": run_swap, "pair": run_pair, "narrow": run_narrow, "pieced": run_pieced,
               "subtiled": run_subtiled, "pingpong": run_pingpong, "edges": run_edges}
    result = runners[kind](*args) if kind in runners else run(kind, *args)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
