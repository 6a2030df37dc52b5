"""GPU correctness of tilepipe.grouped_mm_fp8 for one case; prints JSON (run by tests/gpu/test_grouped_fp8_gpu.py).

`python -m tests.gpu.grouped_fp8_cases ragged blockwise bf16`: ragged group sizes (empty groups, one-row groups, sizes
not multiples of 8, 64 or 128, offs[-1] < M) of fresh random e4m3 operands and random scales (varying over rows,
columns and K blocks), against a float64 reference per group of the dequantized operands, with the output poisoned
with NaN first: the groups' rows must match and the rows past offs[-1] stay NaN. Scales alternate between the
layouts read in place and ones the op copies first.
`... ragged row bf16 dynamic`: the same under the dynamic schedule, its tile counter read back as 0 after the calls.
`... cudagraph row [dynamic]`: grouped_mm_fp8 captured in a CUDA graph and replayed with new offs, inputs and scales.
`... compile blockwise`: grouped_mm_fp8 under torch.compile(fullgraph=True).
`... uniform grouped`: the bench's first blockwise row (DeepSeek-V3 EP8 gate-up: 32 experts of 1024 rows, N = 4096,
K = 7168), which faulted on the H200 before the scale rows' fix (its fault was the dense call's or the grouped one's);
`... uniform dense`: the dense matmul_fp8 call the bench made next, before any sync.
`... badargs`: invalid CUDA arguments each raise an error naming the argument, the NaN-poisoned out untouched.
`... shifted`: the blockwise kernel's shifted copies of scale_a (host/staging.py shifted_scale_rows) hold each row.
"""

import json
import sys

import torch

import tilepipe
from tilepipe.host.choose import grouped_fp8_config
from tilepipe.host.staging import shifted_scale_rows
from tests.gpu.fp8_cases import expand_blocks, random_scales
from tests.gpu.grouped_cases import check, offsets, tile_counter_left_at_zero
from tests.gpu.guarded import unexpected_errors, warmed_graph

E4M3 = torch.float8_e4m3fn
OUT = {"bf16": torch.bfloat16, "fp32": torch.float32}
TOLERANCE = {"row": 2e-2, "blockwise": 1e-2}  # relative Frobenius error per group (fp8 wgmma's accumulation)
SIZES = {  # (group sizes, rows of A past the last group, N, K); blockwise N and K multiples of 128
    "row": [([0, 1, 0, 7, 130, 64, 0, 300, 1], 5, 264, 528), ([128, 256, 0, 1], 0, 256, 64),
            ([1000, 3, 77, 513], 17, 1024, 1024), ([0, 0, 0], 9, 64, 128),
            ([129, 255, 2049, 0, 9, 333, 1, 127], 100, 520, 144), ([1] * 40, 3, 4096, 256),
            ([300, 0, 1000, 77], 0, 512, 7168)],
    "blockwise": [([0, 1, 0, 7, 130, 64, 0, 300, 1], 5, 256, 512), ([128, 256, 0, 1], 0, 256, 128),
                  ([1000, 3, 77, 513], 17, 1024, 1024), ([0, 0, 0], 9, 128, 128),
                  ([129, 255, 2049, 0, 9, 333, 1, 127], 100, 640, 384), ([1] * 40, 3, 4096, 256),
                  ([300, 0, 1000, 77], 0, 512, 7168)],
}


def problem(sizes: list[int], extra: int, N: int, K: int, scaling: str, in_place: bool):
    """(a, b, scale_a, scale_b, a dequantized (M, K) float64, b dequantized (G, K, N) float64). b is a transposed
    (G, N, K) tensor; the scales in the layouts read in place (`in_place`), else in ones the op copies."""
    G, M = len(sizes), sum(sizes) + extra
    a = (torch.randn(M, K, device="cuda") * 2).to(E4M3)
    w = (torch.randn(G, N, K, device="cuda") * 2).to(E4M3)
    if scaling == "row":
        sa = random_scales(M) if in_place else random_scales(M, 1)
        sb = random_scales(G, N) if in_place else random_scales(N, G).t()
        full_a, full_w = sa.reshape(M, 1).expand(M, K), sb[:, :, None].expand(G, N, K)
    else:  # scale_a (M, K/128) and scale_b (G, K/128, N/128): in place M-major and a transposed (G, N/128, K/128)
        kb, nb = K // 128, N // 128
        sa = random_scales(kb, M).t() if in_place else random_scales(M, kb)
        sb = random_scales(G, nb, kb).transpose(1, 2) if in_place else random_scales(G, kb, nb)
        full_a = expand_blocks(sa, M, K, 1, 128)
        full_w = torch.stack([expand_blocks(sb[g].t(), N, K, 128, 128) for g in range(G)])
    a_ref = a.double() * full_a.double()
    b_ref = (w.double() * full_w.double()).transpose(1, 2)
    return a, w.transpose(1, 2), sa, sb, a_ref, b_ref


def run_ragged(scaling: str, out_dtype: str, scheduler: str = "static") -> dict:
    """SIZES[scaling] into a NaN-poisoned out and into a new D, under `scheduler` (dynamic: the tile counter must be
    back at 0 after the calls)."""
    torch.manual_seed(0)
    failures = []
    for index, (sizes, extra, N, K) in enumerate(SIZES[scaling]):
        a, b, sa, sb, a_ref, b_ref = problem(sizes, extra, N, K, scaling, in_place=index % 2 == 0)
        out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=OUT[out_dtype])
        got = tilepipe.grouped_mm_fp8(a, b, sa, sb, offsets(sizes), out=out, scheduler=scheduler)
        torch.cuda.synchronize()
        found = check(out, a_ref, b_ref, sizes, TOLERANCE[scaling])
        if got is not out:
            found.append({"returned": "not out"})
        failures += [{"sizes": sizes[:10], "N": N, "K": K, **f} for f in found]
        fresh = tilepipe.grouped_mm_fp8(a, b, sa, sb, offsets(sizes), out_dtype=OUT[out_dtype],
                                        scheduler=scheduler)  # a new D
        torch.cuda.synchronize()
        found = [f for f in check(fresh, a_ref, b_ref, sizes, TOLERANCE[scaling]) if "rows_past_offs_written" not in f]
        failures += [{"sizes": sizes[:10], "N": N, "K": K, "new_out": True, **f} for f in found]
        found = tile_counter_left_at_zero(scheduler, grouped_fp8_config(scaling == "blockwise", OUT[out_dtype]))
        failures += [{"sizes": sizes[:10], **f} for f in found]
    return {"case": f"grouped fp8 {scaling} ->{out_dtype} {scheduler}", "ok": not failures, "failures": failures[:10]}


def run_cudagraph(scaling: str, scheduler: str = "static") -> dict:
    """One capture, three replays with new offs (empty groups, a shorter total), inputs and scales."""
    torch.manual_seed(1)
    sizes, N, K = [100] * 6, 512, 384
    a, b, sa, sb, _, _ = problem(sizes, 100, N, K, scaling, in_place=True)
    offs = offsets(sizes)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    graph = warmed_graph(lambda: tilepipe.grouped_mm_fp8(a, b, sa, sb, offs, out=out, scheduler=scheduler))
    failures = []
    for seed, new_sizes in enumerate(([0, 300, 1, 0, 129, 200], [700, 0, 0, 0, 0, 0], [5, 5, 5, 5, 5, 5])):
        torch.manual_seed(10 + seed)
        new_a, _, new_sa, new_sb, a_ref, _ = problem(sizes, 100, N, K, scaling, in_place=True)
        a.copy_(new_a)
        sa.copy_(new_sa)
        sb.copy_(new_sb)
        b_ref = dequantized_b(b, sb, scaling)  # the captured b with the new scales
        offs.copy_(offsets(new_sizes))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        failures += [{"sizes": new_sizes, **f} for f in check(out, a_ref, b_ref, new_sizes, TOLERANCE[scaling])]
    return {"case": f"grouped fp8 {scaling} cudagraph {scheduler}", "ok": not failures, "failures": failures}


def run_uniform(kernel: str) -> dict:
    """The bench's first blockwise row, equal groups of 1024 rows, against the float64 reference: `kernel` "grouped"
    (grouped_mm_fp8), or "dense" (the bench's next call, matmul_fp8 over every row with expert 0's B and scales: the
    bench launched both before its first sync, so its fault may have been either's)."""
    torch.manual_seed(5)
    sizes, N, K = [1024] * 32, 4096, 7168
    a, b, sa, sb, a_ref, b_ref = problem(sizes, 0, N, K, "blockwise", in_place=True)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    if kernel == "grouped":
        tilepipe.grouped_mm_fp8(a, b, sa, sb, offsets(sizes), out=out)
    else:
        tilepipe.matmul_fp8(a, b[0], sa, sb[0], out=out)
        sizes, b_ref = [sum(sizes)], b_ref[:1]
    torch.cuda.synchronize()
    failures = check(out, a_ref, b_ref, sizes, TOLERANCE["blockwise"])
    return {"case": f"fp8 blockwise uniform {kernel}", "ok": not failures, "failures": failures[:10]}


def run_shifted() -> dict:
    """The blockwise kernel reads the scales of the A rows from `row` (any row: a group's first) in copy row % 4 at
    row - row % 4, a multiple of 4 fp32 words: there host/staging.py's copies must hold scale_a's rows from `row`,
    zeros past M, for scale_a in any layout (M-major, row-major, every other K block of a wider one)."""
    torch.manual_seed(6)
    failures = []
    for M, k_blocks in [(1, 1), (5, 3), (130, 56), (4099, 40), (32768, 56)]:
        for layout in ("m-major", "row-major", "strided"):
            wide = torch.rand(M, 2 * k_blocks, device="cuda") + 0.5
            scale_a = {"m-major": (torch.rand(k_blocks, M, device="cuda") + 0.5).t(),
                       "row-major": wide[:, :k_blocks].contiguous(), "strided": wide[:, ::2]}[layout]
            shifted = shifted_scale_rows(scale_a, scale_a.device.index)
            width = -(-M // 4) * 4
            if not shifted.is_contiguous() or tuple(shifted.shape) != (4 * k_blocks, width):
                failures.append({"M": M, "layout": layout, "shape": list(shifted.shape)})
                continue
            for j in range(4):
                copy = shifted[j * k_blocks:(j + 1) * k_blocks]
                if not torch.equal(copy[:, :max(M - j, 0)], scale_a[j:].t()) or copy[:, max(M - j, 0):].any():
                    failures.append({"M": M, "layout": layout, "copy": j})
    return {"case": "grouped fp8 shifted scale rows", "ok": not failures, "failures": failures}


def dequantized_b(b: torch.Tensor, sb: torch.Tensor, scaling: str) -> torch.Tensor:
    """b (G, K, N) dequantized with scale_b in float64."""
    G, K, N = b.shape
    if scaling == "row":
        return b.double() * sb.double()[:, None, :]
    return b.double() * torch.stack([expand_blocks(sb[g], K, N, 128, 128) for g in range(G)]).double()


def run_compile(scaling: str) -> dict:
    """grouped_mm_fp8 inside a torch.compile(fullgraph=True) function, against the float64 reference."""
    torch.manual_seed(2)
    sizes, N, K = [33, 0, 250, 7], 256, 512
    a, b, sa, sb, a_ref, b_ref = problem(sizes, 0, N, K, scaling, in_place=True)
    fn = torch.compile(lambda a, b, sa, sb, offs: tilepipe.grouped_mm_fp8(a, b, sa, sb, offs) * 1, fullgraph=True)
    out = fn(a, b, sa, sb, offsets(sizes))
    torch.cuda.synchronize()
    failures = check(out, a_ref, b_ref, sizes, TOLERANCE[scaling])
    return {"case": f"grouped fp8 {scaling} compile", "ok": not failures, "failures": failures}


def run_badargs() -> dict:
    """Each bad argument raises an error naming it; out (NaN) is left untouched."""
    torch.manual_seed(3)
    sizes, N, K = [10, 20, 30], 256, 256
    a, b, sa, sb, _, _ = problem(sizes, 4, N, K, "blockwise", in_place=True)
    _, _, ra, rb, _, _ = problem(sizes, 4, N, K, "row", in_place=True)
    offs = offsets(sizes)
    out = torch.full((a.shape[0], N), float("nan"), device="cuda", dtype=torch.bfloat16)
    row_major = b.contiguous()
    wide = torch.empty(a.shape[0], 2 * K, device="cuda", dtype=E4M3)  # out as bf16 over the same bytes as a copy of a
    shared_a = wide[:, :K].copy_(a)
    shared_out = torch.empty(a.shape[0], N, device="cuda", dtype=torch.bfloat16)  # its first rows hold scale_b
    shared_rb = shared_out.view(-1)[:2 * rb.numel()].view(torch.float32).view(rb.shape).copy_(rb)
    calls = [
        ("offs must be int32", lambda: tilepipe.grouped_mm_fp8(a, b, sa, sb, offs.long(), out=out)),
        ("offs must be on a's device", lambda: tilepipe.grouped_mm_fp8(a, b, sa, sb, offs.cpu(), out=out)),
        ("offs has 2 group ends but b has 3", lambda: tilepipe.grouped_mm_fp8(a, b, sa, sb, offs[:2], out=out)),
        ("scale_b has 2 experts", lambda: tilepipe.grouped_mm_fp8(a, b, sa, sb[:2], offs, out=out)),
        ("scale_b has 2 experts", lambda: tilepipe.grouped_mm_fp8(a, b, ra, rb[:2], offs, out=out)),
        ("b must be a transposed (G, N, K) tensor", lambda: tilepipe.grouped_mm_fp8(a, row_major, sa, sb, offs,
                                                                                     out=out)),
        ("a must be float8_e4m3fn", lambda: tilepipe.grouped_mm_fp8(a.view(torch.float8_e5m2), b, sa, sb, offs,
                                                                     out=out)),
        ("scale_a must be float32", lambda: tilepipe.grouped_mm_fp8(a, b, sa.bfloat16(), sb, offs, out=out)),
        ("b: blockwise scales need K a multiple of 128", lambda: tilepipe.grouped_mm_fp8(
            a[:, :144], b[:, :144], sa[:, :2], sb[:, :2], offs, out=out)),
        ("out must not share memory with a", lambda: tilepipe.grouped_mm_fp8(
            shared_a, b, sa, sb, offs, out=wide.view(torch.bfloat16))),
        ("out must not share memory with scale_b", lambda: tilepipe.grouped_mm_fp8(
            a, b, ra, shared_rb, offs, out=shared_out)),
    ]
    failures = unexpected_errors(calls)
    if not torch.isnan(out).all():
        failures.append({"out": "written"})
    return {"case": "grouped fp8 badargs", "ok": not failures, "failures": failures}


if __name__ == "__main__":
    case, *rest = sys.argv[1:]
    result = {"ragged": run_ragged, "cudagraph": run_cudagraph, "compile": run_compile, "uniform": run_uniform,
              "badargs": run_badargs, "shifted": run_shifted}[case](*rest)
    print(json.dumps(result))
    sys.exit(0 if result["ok"] else 1)
