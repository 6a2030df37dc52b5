"""What a k-step of wgmma costs by accumulator width, whole or in power-of-two pieces (issue 20: cuBLAS's 144- and
192-wide tiles against what a Gluon accumulator, whose shape must be a power of two, can hold).

Every SM runs one CTA of the GEMM kernel's MMA shape (two warpgroups, 128 rows, BK = 64 of bf16 from shared memory)
issuing `ITERS` k-steps back to back, one k-step in flight as the kernel's MMA role keeps it, with no loads: the rate
the tensor pipe and the operands' shared-memory reads allow. A width given as pieces (e.g. 128+16) issues one wgmma
per piece a k-step, each with its own accumulator and B tile: A is read once per piece. A 192-row shape adds a
64-row tail of A under the 128 (the rows a 192-high tile adds), with an accumulator per piece whose columns the two
warpgroups split (each issues the piece at half its width).

    python -m tilepipe.tools.wgmma_rate [--name NAME]   # H100: writes bench/results/NAME.json
"""

import argparse
import json
import time
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait

from tilepipe._text import format_table
from tilepipe.tools.bench import RESULTS_DIR, run_environment

BM, BK, WARPS, TAIL_ROWS = gl.constexpr(128), gl.constexpr(64), gl.constexpr(8), gl.constexpr(64)
ITERS = 4096
SHAPES = ((128, (256, )), (128, (128, )), (128, (64, )), (128, (16, )), (128, (128, 16)), (128, (128, 32)),
          (128, (128, 64)), (128, (128, 64, 16)), (192, (128, )), (192, (256, )), (192, (128, 64)))
"""(rows, the pieces one k-step issues): 128 rows by whole powers of two, then by 144, 160, 192 and 208 in pieces;
192 rows (a 64-row tail, at most two pieces) by 128, 256 and 192."""


@gluon.jit
def _clock():
    """%globaltimer (ns) of the calling thread."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _piece(width: gl.constexpr):
    """A piece's B tile in shared memory and its zeroed accumulator."""
    layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([width, BK], gl.bfloat16)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                         instr_shape=[16, width, 16])
    return (gl.allocate_shared_memory(gl.bfloat16, [width, BK], layout),
            gl.zeros([BM, width], gl.float32, acc_layout))


@gluon.jit
def _tail(width: gl.constexpr):
    """A zeroed accumulator of the 64-row tail for a piece `width` wide, its columns split over the warpgroups."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS // 2, 2],
                                                     instr_shape=[16, width // 2, 16])
    return gl.zeros([TAIL_ROWS, width], gl.float32, layout)


@gluon.jit
def wgmma_rate_kernel(times_ptr, sums_ptr, ITERS: gl.constexpr, N0: gl.constexpr, N1: gl.constexpr,
                      N2: gl.constexpr, TAIL: gl.constexpr = False):
    """ITERS k-steps of one to three pieces (N1, N2 = 0: absent), with TAIL a 64-row tail too (at most two
    pieces); writes the program's start and end times (ns) and the sum of its accumulators (so no wgmma is dead
    code)."""
    a_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BK], gl.bfloat16)
    a = gl.allocate_shared_memory(gl.bfloat16, [BM, BK], a_layout)
    b0, acc0 = _piece(N0)
    if N1 > 0:
        b1, acc1 = _piece(N1)
    if N2 > 0:
        b2, acc2 = _piece(N2)
    if TAIL:
        a_tail = gl.allocate_shared_memory(gl.bfloat16, [TAIL_ROWS, BK],
                                           gl.NVMMASharedLayout.get_default_for([TAIL_ROWS, BK], gl.bfloat16))
        tail0 = _tail(N0)
        if N1 > 0:
            tail1 = _tail(N1)
    start = _clock()
    for _ in range(ITERS):
        acc0 = warpgroup_mma(a, b0.permute((1, 0)), acc0, is_async=True)
        if TAIL:
            tail0 = warpgroup_mma(a_tail, b0.permute((1, 0)), tail0, is_async=True)
            if N1 > 0:
                acc1 = warpgroup_mma(a, b1.permute((1, 0)), acc1, is_async=True)
                tail1 = warpgroup_mma(a_tail, b1.permute((1, 0)), tail1, is_async=True)
                acc0, tail0, acc1, tail1 = warpgroup_mma_wait(4, deps=[acc0, tail0, acc1, tail1])
            else:
                acc0, tail0 = warpgroup_mma_wait(2, deps=[acc0, tail0])
        elif N2 > 0:
            acc1 = warpgroup_mma(a, b1.permute((1, 0)), acc1, is_async=True)
            acc2 = warpgroup_mma(a, b2.permute((1, 0)), acc2, is_async=True)
            acc0, acc1, acc2 = warpgroup_mma_wait(3, deps=[acc0, acc1, acc2])
        elif N1 > 0:
            acc1 = warpgroup_mma(a, b1.permute((1, 0)), acc1, is_async=True)
            acc0, acc1 = warpgroup_mma_wait(2, deps=[acc0, acc1])
        else:
            acc0 = warpgroup_mma_wait(1, deps=[acc0])
    acc0 = warpgroup_mma_wait(0, deps=[acc0])
    total = gl.sum(gl.sum(acc0, axis=1), axis=0)
    if N1 > 0:
        acc1 = warpgroup_mma_wait(0, deps=[acc1])
        total += gl.sum(gl.sum(acc1, axis=1), axis=0)
    if N2 > 0:
        acc2 = warpgroup_mma_wait(0, deps=[acc2])
        total += gl.sum(gl.sum(acc2, axis=1), axis=0)
    if TAIL:
        tail0 = warpgroup_mma_wait(0, deps=[tail0])
        total += gl.sum(gl.sum(tail0, axis=1), axis=0)
        if N1 > 0:
            tail1 = warpgroup_mma_wait(0, deps=[tail1])
            total += gl.sum(gl.sum(tail1, axis=1), axis=0)
    end = _clock()
    program = gl.program_id(0)
    gl.store(times_ptr + 2 * program, start)
    gl.store(times_ptr + 2 * program + 1, end)
    gl.store(sums_ptr + program, total)


def _widths(pieces: tuple[int, ...]) -> tuple[int, int, int]:
    """N0, N1, N2 of wgmma_rate_kernel for one to three pieces (0: absent)."""
    return (tuple(pieces) + (0, 0))[:3]


def rate_spec(rows: int, pieces: tuple[int, ...]):
    """wgmma_rate_kernel for `rows` by `pieces` as a KernelSpec (sm_90a), to compile and inspect without a GPU."""
    from tilepipe.kernels.spec import KernelSpec

    constexprs = dict(zip(("ITERS", "N0", "N1", "N2", "TAIL"), (ITERS, *_widths(pieces), rows > BM.value)))
    signature = {"times_ptr": "*i64", "sums_ptr": "*fp32", **{name: "constexpr" for name in constexprs}}
    return KernelSpec(f"{__name__}:wgmma_rate_kernel", signature, constexprs, num_warps=WARPS.value)


def measure(rows: int, pieces: tuple[int, ...], programs: int) -> dict:
    """One launch of `programs` CTAs (after a warm-up launch): the median ns per k-step over the programs, and the
    TFLOP/s of one SM at that pace."""
    times = torch.zeros(2 * programs, dtype=torch.int64, device="cuda")
    sums = torch.empty(programs, dtype=torch.float32, device="cuda")
    for _ in range(2):
        wgmma_rate_kernel[(programs, )](times, sums, ITERS, *_widths(pieces), rows > BM.value, num_warps=WARPS.value)
    torch.cuda.synchronize()
    spans = (times[1::2] - times[0::2]).double() / ITERS
    ns = float(spans.median())
    width = sum(pieces)
    return {"rows": rows, "pieces": list(pieces), "width": width, "ns_per_kstep": round(ns, 2),
            "tflops_per_sm": round(2.0 * rows * width * BK.value / ns * 1e-3, 3)}


def run(name: str, out_dir: Path = RESULTS_DIR) -> Path:
    """Every SHAPES entry on all SMs; each one's rate per multiply-add against the 128 x 256 accumulator's."""
    environment = run_environment(name)
    programs = torch.cuda.get_device_properties(0).multi_processor_count
    start = time.time()
    rows = [measure(height, pieces, programs) for height, pieces in SHAPES]
    full = rows[0]["tflops_per_sm"]
    for row in rows:
        row["rate_vs_256"] = round(row["tflops_per_sm"] / full, 3)
    record = {**environment, "method": __doc__.strip(), "iters": ITERS, "programs": programs,
              "seconds": round(time.time() - start, 1), "rows": rows}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    table = [("rows", "pieces", "width", "ns / k-step", "TFLOP/s per SM", "rate vs 256")]
    table += [(str(r["rows"]), "+".join(map(str, r["pieces"])), *(str(r[key]) for key in ("width", "ns_per_kstep", "tflops_per_sm",
                                                                         "rate_vs_256"))) for r in rows]
    print(format_table(table))
    print(f"\n{environment['gpu']}, torch {environment['torch']}, triton {environment['triton']}: wrote {path}")
    return path


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="wgmma-pieces-h100")
    run(parser.parse_args().name)
