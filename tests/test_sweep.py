"""CPU tests of the randomized GPU sweep (tilepipe/verify/sweep.py): its calls are seeded and cover every op family,
scheduler, scaling, dtype, B layout, view and residual; its inputs and references build for every call; and its
comparison passes a correct op and fails each kind of wrong one (run on CPU through emulated ops)."""

import collections
from dataclasses import replace

import pytest
import torch

from tilepipe.host.configs import SCALE_BLOCK
from tilepipe.schedulers import SCHEDULERS
from tilepipe.verify import sweep
from tilepipe.verify.sweep import (COUNT, MAX_DIM, MAX_ELEMENTS, MAX_MACS, OUT_VIEWS, RESIDUALS, SEED, VIEWS,
                                   batches, records, run_call, sweep_calls)

CALLS = sweep_calls()


def test_calls_are_seeded():
    assert sweep_calls(SEED, 40) == CALLS[:40] != sweep_calls(SEED + 1, 40)


def test_calls_cover_every_family_dtype_layout_view_and_residual():
    seen = collections.defaultdict(set)
    for call in CALLS:
        for field in ("op", "scheduler", "dtype", "b_dtype", "out_dtype", "b_kmajor", "a_view", "b_view", "out_view"):
            seen[(call.op, field)].add(getattr(call, field))
        seen[(call.op, "residual")].add(call.residual)
    assert seen[("matmul", "scheduler")] == {None, *SCHEDULERS}
    assert seen[("matmul_fp8", "residual")] == {"tensor", "row", "blockwise"}
    for op in ("matmul", "addmm"):
        assert seen[(op, "residual")] == set(RESIDUALS[op]), op
        assert seen[(op, "b_kmajor")] == {True, False} and seen[(op, "a_view")] == set(VIEWS), op
        assert seen[(op, "out_view")] == set(OUT_VIEWS) and seen[(op, "dtype")] == {"bf16", "fp16"}, op
    assert seen[("matmul", "out_dtype")] == {"bf16", "fp16", "fp32"} == seen[("matmul_fp8", "out_dtype")]
    assert {(a, b) for a in seen[("matmul_fp8", "dtype")] for b in seen[("matmul_fp8", "b_dtype")]} >= {
        ("e4m3", "e4m3"), ("e4m3", "e5m2"), ("e5m2", "e4m3")}
    assert not any(c.dtype == c.b_dtype == "e5m2" for c in CALLS)
    assert {"in_place"} <= {c.residual for c in CALLS if c.alpha != 1.0 and c.beta not in (0.0, 1.0)}


def test_shapes_range_from_1_to_16k_ragged_within_budget():
    dims = [d for call in CALLS for d in call.shape]
    assert min(dims) == 1 and max(dims) == MAX_DIM
    assert sum(d % 8 != 0 for d in dims) > len(dims) / 3  # ragged: most not on a vector width
    assert sum(max(c.shape) >= 8192 for c in CALLS) >= 20
    for M, N, K in (c.shape for c in CALLS):
        assert M * N * K <= MAX_MACS and max(M * N, M * K, N * K) <= MAX_ELEMENTS


def test_batches_hold_every_call_once():
    groups = batches(CALLS)
    assert sorted(c.index for g in groups for c in g) == list(range(COUNT))
    assert records('noise\n{"index": 3, "ok": true}\n{"index": 4, "ok": fa') == [{"index": 3, "ok": True}]


def small(call: sweep.SweepCall) -> sweep.SweepCall:
    """The call at CPU size, keeping several K blocks of 128 for blockwise scaling."""
    M, N, K = call.shape
    return replace(call, shape=(min(M, 37), min(N, 45), min(K, 300)))


def emulated(bug: str | None = None) -> dict:
    """The three ops on CPU in float64, rounded to the output dtype; `bug` breaks them one way."""
    def finish(result: torch.Tensor, out: torch.Tensor | None, out_dtype: torch.dtype) -> torch.Tensor:
        result = result * (1.05 if bug == "scaled" else 1.0)
        if out is None:
            return result.to(out_dtype)
        rows = out.shape[0] - (bug == "unwritten")
        out[:rows].copy_(result[:rows])
        return out

    def matmul(a, b, *, out=None, out_dtype=None, c=None, alpha=1.0, beta=0.0, scheduler=None):
        result = alpha * (a.double() @ b.double())
        if beta != 0 and bug != "no_residual":
            result = result + beta * c.double()
        return finish(result, out, out_dtype or a.dtype)

    def addmm(input, mat1, mat2, *, beta=1.0, alpha=1.0, out=None):
        c = input.expand(mat1.shape[0], mat2.shape[1])
        return matmul(mat1, mat2, out=out, out_dtype=mat1.dtype, c=c, alpha=alpha, beta=beta)

    def matmul_fp8(a, b, scale_a, scale_b, *, out_dtype=torch.bfloat16, out=None):
        if scale_a.numel() > 1 and scale_a.shape[1] > 1:  # blockwise: one 128-wide K block at a time
            n_scale = scale_b.double().repeat_interleave(SCALE_BLOCK, 1)[:, :b.shape[1]]
            result = sum(a[:, k:k + SCALE_BLOCK].double() @ b[k:k + SCALE_BLOCK].double() *
                         scale_a[:, k // SCALE_BLOCK, None].double() * n_scale[k // SCALE_BLOCK]
                         for k in range(0, a.shape[1], SCALE_BLOCK))
        else:
            result = (a.double() @ b.double()) * scale_a.double() * (1.0 if bug == "no_scale" else scale_b.double())
        return finish(result, out, out_dtype)

    return {"matmul": matmul, "addmm": addmm, "matmul_fp8": matmul_fp8}


def test_a_correct_op_passes_every_call():
    for call in CALLS:
        record = run_call(small(call), "cpu", emulated())
        assert record["ok"], (call, record)


@pytest.mark.parametrize("bug", ["scaled", "no_residual", "unwritten", "no_scale"])
def test_each_kind_of_wrong_result_fails(bug):
    """A result off by 5%, without its residual, with its last row unwritten (the NaN poison left) or missing a
    scale fails every call it changes."""
    changed = {"scaled": lambda c: True,
               "no_residual": lambda c: c.op != "matmul_fp8" and c.beta != 0 and c.residual != "none",
               "unwritten": lambda c: c.out_view != "returned" and small(c).shape[0] > 1,
               "no_scale": lambda c: c.op == "matmul_fp8" and c.residual != "blockwise"}[bug]
    affected = [call for call in CALLS[:96] if changed(call)]
    assert len(affected) >= 8
    for call in affected:
        record = run_call(small(call), "cpu", emulated(bug))
        assert not record["ok"], (call, record)


def test_batches_run_in_child_processes_and_report_every_call():
    """Without a GPU every call fails (no CUDA) but is still reported by its batch's process."""
    summary = sweep.sweep(SEED, 2, size=1, parallel=2, timeout_s=120, budget_s=120)
    assert summary["calls_run"] == 2 and not summary["unrun"]
    assert summary["ok"] == torch.cuda.is_available(), summary["failures"]


def test_batches_past_the_budget_are_reported_not_started():
    summary = sweep.sweep(SEED, 3, size=2, parallel=1, budget_s=5)
    assert summary["calls_run"] == 0 and not summary["ok"]
    assert [u["not_run_after_it"] for u in summary["unrun"]] == [[c.index for c in g[1:]] for g in batches(
        sweep_calls(SEED, 3), 2)]
