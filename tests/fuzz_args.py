"""A seeded fuzz of invalid arguments to every public op: each call makes one argument of an otherwise valid call
wrong (its type, rank, dtype, device, shape, layout, or memory shared with another argument) and must raise a
TypeError or ValueError whose message names that argument, with `out` left untouched.

The same cases run two ways. `"fake"`: CUDA tensors under torch's FakeTensorMode, the address-free path
torch.compile traces (so the checks after the device check run on a CPU machine); the overlap cases need real
addresses, so there they run `check_no_overlap` itself on CPU tensors. `"cuda"`: real CUDA tensors through the
public ops, each overlap case after a valid call of the same geometry has cached a fast-path plan
(tests/gpu/fuzz_cases.py). Run by tests/test_fuzz_args.py and tests/gpu/test_fuzz_gpu.py.
"""

import logging
import random
import re
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import tilepipe
from tilepipe.host.checks import BLOCK_SCALED, check_no_overlap, elements_per_byte
from tilepipe.host.configs import SCALE_BLOCK

OPS: dict[str, Callable[..., torch.Tensor]] = {"matmul": tilepipe.matmul, "addmm": tilepipe.addmm,
                                                "matmul_fp8": tilepipe.matmul_fp8,
                                                "matmul_block_scaled": tilepipe.matmul_block_scaled}
POSITIONAL = {"matmul": ("a", "b"), "addmm": ("input", "mat1", "mat2"),
              "matmul_fp8": ("a", "b", "scale_a", "scale_b"), "matmul_block_scaled": ("a", "b", "scale_a", "scale_b")}
SCALED_OPS = ("matmul_fp8", "matmul_block_scaled")  # fp8-family operands: K-major A and B, scales, out_dtype
"""Each op's positional arguments, in order; the rest are keywords."""

TENSOR_MUTATIONS = ("type", "rank", "dtype", "device", "shape")
CATALOGUE: tuple[tuple[str, str, str], ...] = (
    *(("matmul", arg, how) for arg in ("a", "b") for how in TENSOR_MUTATIONS),
    ("matmul", "b", "mixed_dtype"),
    *(("matmul", "out", how) for how in (*TENSOR_MUTATIONS, "dtype_conflict", "overlap", "self_overlap")),
    ("matmul", "out_dtype", "dtype"), ("matmul", "out_dtype", "type"),
    *(("matmul", "c", how) for how in (*TENSOR_MUTATIONS, "missing")),
    ("matmul", "alpha", "type"), ("matmul", "beta", "type"), ("matmul", "config", "type"),
    ("matmul", "scheduler", "value"), ("matmul", "debug", "type"), ("matmul", "trace", "type"),
    ("matmul", "trace", "with_debug"),
    *(("addmm", arg, how) for arg in ("mat1", "mat2") for how in TENSOR_MUTATIONS),
    *(("addmm", "input", how) for how in TENSOR_MUTATIONS),
    *(("addmm", "out", how) for how in (*TENSOR_MUTATIONS, "overlap", "self_overlap")),
    ("addmm", "alpha", "type"), ("addmm", "beta", "type"),
    *(("matmul_fp8", arg, how) for arg in ("a", "b") for how in (*TENSOR_MUTATIONS, "layout")),
    ("matmul_fp8", "b", "both_e5m2"),
    *(("matmul_fp8", arg, how) for arg in ("scale_a", "scale_b") for how in TENSOR_MUTATIONS),
    ("matmul_fp8", "out_dtype", "dtype"), ("matmul_fp8", "config", "type"), ("matmul_fp8", "scheduler", "value"),
    *(("matmul_fp8", "out", how) for how in (*TENSOR_MUTATIONS, "overlap", "self_overlap")),
    *(("matmul_block_scaled", arg, how) for arg in ("a", "b") for how in (*TENSOR_MUTATIONS, "layout")),
    *(("matmul_block_scaled", arg, how) for arg in ("scale_a", "scale_b") for how in TENSOR_MUTATIONS),
    ("matmul_block_scaled", "format", "value"), ("matmul_block_scaled", "format", "type"),
    ("matmul_block_scaled", "out_dtype", "dtype"),
    *(("matmul_block_scaled", "out", how) for how in (*TENSOR_MUTATIONS, "self_overlap")),
)
"""(op, argument, mutation): every way the fuzz breaks an argument; case i takes entry i mod its length. The
block-scaled GEMM's overlap check is matmul_fp8's (check_no_overlap), and its valid twin cannot launch off sm_100."""

WRONG_TYPES: tuple[Callable[[], Any], ...] = (lambda: [[1.0, 2.0]], lambda: 1.5, lambda: "tensor",
                                              lambda: np.ones((2, 2), dtype=np.float32), lambda: {"a": 1})
WRONG_SCALARS: tuple[Callable[[], Any], ...] = (lambda: "2", lambda: None, lambda: 1 + 2j, lambda: [1.0],
                                                lambda: True, lambda: torch.tensor(1.0))
WRONG_DTYPES = {"16-bit": (torch.float32, torch.float64, torch.int32, torch.int8, torch.bool, torch.float8_e4m3fn),
                "fp8": (torch.bfloat16, torch.float16, torch.float32, torch.int8, torch.uint8),
                "scale": (torch.float64, torch.bfloat16, torch.float16, torch.int32),
                "out": (torch.int32, torch.float64, torch.int64, torch.float8_e4m3fn, torch.complex64)}
SEED, COUNT = 21, 600
"""The fuzz CI runs (tests/test_fuzz_args.py) and gpu_check.sh's sweep part runs on CUDA tensors."""
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "e4m3": torch.float8_e4m3fn,
          "e5m2": torch.float8_e5m2, "e2m1": torch.float4_e2m1fn_x2}


@dataclass(frozen=True)
class Case:
    """One invalid call: the op, the argument made invalid, how, and the valid call it started from."""
    index: int
    op: str
    argument: str
    mutation: str
    shape: tuple[int, int, int]  # M, N, K of the valid call
    dtype: str  # the operands' dtype ("bf16"/"fp16"; FP8: A's, "e4m3"/"e5m2"; block-scaled also "e2m1": MXFP4, NVFP4)
    out_dtype: str
    b_kmajor: bool
    with_out: bool  # the valid call passes out=
    residual: str  # matmul: "none", "full", "fp32", "bias" or "in_place"; addmm: input's shape kind; FP8: scaling
    choice: int  # picks among the mutation's variants (which wrong type, rank, dtype, ...)


def fuzz_cases(seed: int, count: int) -> list[Case]:
    """`count` cases from `seed`, the catalogue in turn (so `count` >= its length covers every entry)."""
    cases = []
    for index in range(count):
        rng = random.Random(seed * 1_000_003 + index)
        op, argument, mutation = CATALOGUE[index % len(CATALOGUE)]
        M, N, K = (rng.choice((1, rng.randint(2, 40), rng.randint(41, 300))) for _ in range(3))
        if op in SCALED_OPS:
            dtype = rng.choice(("e4m3", "e5m2") + (("e2m1", ) if op == "matmul_block_scaled" else ()))
            out_dtype, b_kmajor = rng.choice(("bf16", "fp16", "fp32")), True
            residual = rng.choice(("tensor", "row", "blockwise")) if op == "matmul_fp8" else "none"
        else:
            dtype = rng.choice(("bf16", "fp16"))
            out_dtype = dtype if op == "addmm" else rng.choice((dtype, "fp32", "bf16", "fp16"))
            b_kmajor = rng.random() < 0.5
            residual = (rng.choice(("row", "bias", "full", "column")) if op == "addmm" else
                        "full" if argument == "c" else rng.choice(("none", "full", "fp32", "bias", "in_place")))
            if residual == "fp32" and out_dtype == "fp32":
                residual = "full"
        if mutation == "overlap":  # on a GPU its valid twin launches first: few dtypes keep the binaries to compile few
            dtype, out_dtype = ("e4m3", "bf16") if op == "matmul_fp8" else ("bf16", "bf16")
            residual = {"matmul_fp8": "tensor", "addmm": "row"}.get(op, rng.choice(("none", "full", "in_place")))
        with_out = argument == "out" or mutation == "dtype_conflict" or residual == "in_place" or (
            rng.random() < 0.5 and not (op in SCALED_OPS and argument == "out_dtype"))
        cases.append(Case(index, op, argument, mutation, (M, N, K), dtype, out_dtype, b_kmajor, with_out, residual,
                          rng.randrange(1 << 30)))
    return cases


class Maker:
    """Random tensors on one device (fake or real), in the layouts a case asks for."""

    def __init__(self, device: str, choice: int) -> None:
        self.device, self.rng = device, random.Random(choice)

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype, device: str | None = None) -> torch.Tensor:
        device = device or self.device
        if dtype == torch.float4_e2m1fn_x2:  # two e2m1 a byte: any byte is valid
            return torch.randint(0, 256, shape, device=device).to(torch.uint8).view(dtype)
        if dtype.is_floating_point or dtype.is_complex:
            return torch.randn(shape, device=device).to(dtype)
        if dtype == torch.bool:
            return torch.rand(shape, device=device) < 0.5
        return torch.randint(0, 7, shape, device=device).to(dtype)

    def operand(self, rows: int, cols: int, dtype: torch.dtype, transposed: bool = False) -> torch.Tensor:
        """A (rows, cols) operand, sometimes a column slice of a wider tensor; `transposed`: a (cols, rows) one's .t()."""
        if transposed:
            return self.operand(cols, rows, dtype).t()
        pad = self.rng.choice((0, 0, 3))
        return self.tensor((rows, cols + pad), dtype).narrow(1, pad, cols)

    def pick(self, options: tuple) -> Any:
        return self.rng.choice(options)


def valid_call(case: Case, make: Maker) -> dict[str, Any]:
    """The valid call the case starts from, as arguments by name."""
    M, N, K = case.shape
    dtype, out_dtype = DTYPES[case.dtype], DTYPES[case.out_dtype]
    out = make.tensor((M, N), out_dtype) if case.with_out else None
    if case.op == "matmul_fp8":
        b_dtype = torch.float8_e4m3fn if dtype == torch.float8_e5m2 else make.pick((torch.float8_e4m3fn,
                                                                                     torch.float8_e5m2))
        a, b = make.tensor((M, K), dtype), make.tensor((N, K), b_dtype).t()
        k_blocks, n_blocks = -(-K // SCALE_BLOCK), -(-N // SCALE_BLOCK)
        scales = {"tensor": ((), ()), "row": ((M, 1), (1, N)), "blockwise": ((M, k_blocks), (k_blocks, n_blocks))}
        sa, sb = (make.tensor(shape, torch.float32).abs() for shape in scales[case.residual])
        call = dict(a=a, b=b, scale_a=sa, scale_b=sb, out=out)
        return call | ({"out_dtype": out_dtype} if out is None else {})
    if case.op == "matmul_block_scaled":  # K counts stored elements (MXFP4, NVFP4: bytes of two)
        fmt = make.pick(("mxfp4", "nvfp4")) if case.dtype == "e2m1" else "mxfp8"
        b_dtype = dtype if fmt != "mxfp8" else make.pick((torch.float8_e4m3fn, torch.float8_e5m2))
        a, b = make.operand(M, K, dtype), make.tensor((N, K), b_dtype).t()
        data, scale_dtype, vec = BLOCK_SCALED[fmt]
        groups = -(-K * elements_per_byte(dtype) // (4 * vec)) * 4
        sa, sb = (make.tensor((-(-rows // 128) * 128 * groups, ), scale_dtype) for rows in (M, N))
        call = dict(a=a, b=b, scale_a=sa, scale_b=sb, format=fmt, out=out)
        return call | ({"out_dtype": out_dtype} if out is None else {})
    a, b = make.operand(M, K, dtype), make.operand(K, N, dtype, transposed=case.b_kmajor)
    alpha, beta = make.pick((1.0, 0.5, -2.0, 3)), make.pick((1.0, -0.5, 2))
    if case.op == "addmm":
        shapes = {"row": (N, ), "bias": (1, N), "full": (M, N), "column": (M, 1)}
        return dict(input=make.tensor(shapes[case.residual], dtype), mat1=a, mat2=b, alpha=alpha, beta=beta, out=out)
    call = dict(a=a, b=b, out=out, out_dtype=None if out is not None and make.pick((0, 1)) else out_dtype,
                alpha=alpha, beta=beta)
    c_dtype = {"fp32": torch.float32}.get(case.residual, out_dtype)
    c = {"none": None, "in_place": out, "bias": make.tensor((N, ), c_dtype).expand(M, N)}.get(
        case.residual, make.tensor((M, N), c_dtype) if case.residual != "none" else None)
    return call | (dict(c=c) if c is not None else dict(beta=0.0))


def wrong_rank(make: Maker, shape: tuple[int, ...], dtype: torch.dtype, argument: str) -> torch.Tensor:
    """The tensor with another number of dimensions: 0, 1 or 3 (3 only for addmm's input, which may have 0 to 2,
    and for a scale, where one element is per-tensor scaling)."""
    rank = 3 if argument == "input" or argument.startswith("scale") else make.pick((0, 1, 3))
    return make.tensor({0: (), 1: tuple(shape[:1]) or (2, ), 3: (2, *(shape or (1, 1))[-2:])}[rank], dtype)


def wrong_shape(case: Case, make: Maker, call: dict[str, Any]) -> torch.Tensor:
    """The argument with a shape its op refuses (dtype and device kept)."""
    M, N, K = case.shape
    arg, value = case.argument, call[case.argument]
    if arg in ("a", "mat1"):
        return make.operand(M, K + make.pick((1, 2, 17)), value.dtype)
    if arg in ("b", "mat2"):  # a K that is not A's
        k = K + make.pick((1, 5)) if K == 1 or make.pick((0, 1)) else K - 1
        return make.operand(k, N, value.dtype, transposed=case.op in SCALED_OPS or case.b_kmajor)
    if arg == "input":
        return make.tensor(make.pick(((N + 1, ), (M + 1, N), (M, N + 2), (M + 1, 1))), value.dtype)
    if arg in ("scale_a", "scale_b"):
        rows, cols = value.shape if value.dim() == 2 else (1, 1)
        return make.tensor((rows + 1, cols) if make.pick((0, 1)) else (rows, cols + 2), value.dtype)
    return make.tensor(make.pick(((M + 1, N), (M, N + 3), (N + 1, M), (M * N + 1, 1))), value.dtype)  # out, c


def wrong_dtype(case: Case, make: Maker, value: torch.Tensor) -> torch.dtype:
    arg = case.argument
    if case.op in SCALED_OPS:
        return make.pick(WRONG_DTYPES["out" if arg == "out" else "scale" if arg.startswith("scale") else "fp8"])
    if arg == "input":
        return make.pick(tuple(d for d in (torch.float32, torch.float16, torch.bfloat16, torch.int32)
                               if d != value.dtype))
    if arg == "c":  # neither D's dtype nor fp32
        return make.pick(tuple(d for d in (torch.bfloat16, torch.float16, torch.float64, torch.int32)
                               if d not in (DTYPES[case.out_dtype], torch.float32)))
    return make.pick(WRONG_DTYPES["out" if arg == "out" else "16-bit"])


def overlapping(case: Case, make: Maker, call: dict[str, Any], overlap: bool) -> dict[str, Any]:
    """`out` and one input carved from one byte buffer, overlapping when `overlap` (else side by side, for the
    valid call that caches the geometry's plan first)."""
    M, N, K = case.shape
    names = [n for n in ("a", "b", "mat1", "mat2", "c") if isinstance(call.get(n), torch.Tensor)]
    shared = names[case.choice % len(names)]
    if shared == "c" and call["c"] is call["out"]:
        shared = "a"
    source, out = call[shared], call["out"]
    rows, cols = (source.shape[1], source.shape[0]) if source.stride(0) == 1 and source.shape[0] > 1 else source.shape
    src_bytes, out_bytes = rows * cols * source.element_size(), M * N * out.element_size()
    start = (src_bytes // 2 // 16 * 16 if overlap else -(-src_bytes // 128) * 128)
    arena = make.tensor((start + out_bytes + src_bytes,), torch.uint8)
    carved = arena[:src_bytes].view(source.dtype).view(rows, cols)
    call = dict(call, **{shared: carved.t() if (rows, cols) != tuple(source.shape) else carved})
    call["out"] = arena[start:start + out_bytes].view(out.dtype).view(M, N)
    if case.residual == "in_place" and case.op == "matmul":
        call["c"] = call["out"]
    return call


def invalid_call(case: Case, make: Maker) -> dict[str, Any]:
    """The case's call: its valid call with one argument broken."""
    call = valid_call(case, make)
    arg, how, value = case.argument, case.mutation, call.get(case.argument)
    if how == "type":
        wrong = WRONG_SCALARS if arg in ("alpha", "beta") else WRONG_TYPES
        if arg == "out_dtype":
            wrong = (lambda: "bf16", lambda: 16, lambda: torch.bfloat16.itemsize)
        elif arg == "debug":
            wrong = (lambda: "yes", lambda: 1, lambda: [True])
        elif arg == "trace":
            wrong = (lambda: 3, lambda: ["t.json"], lambda: b"t.json")
        elif arg == "config":
            wrong = (lambda: {"block_m": 128}, lambda: "LARGE", lambda: (128, 256, 64))
        elif arg == "format":
            wrong = (lambda: 8, lambda: ["mxfp8"], lambda: torch.float8_e4m3fn)
        call[arg] = make.pick(wrong)()
    elif how == "rank":
        call[arg] = wrong_rank(make, tuple(value.shape), value.dtype, arg)
    elif how == "dtype" and arg == "out_dtype":
        call[arg] = make.pick(WRONG_DTYPES["out"])
    elif how == "dtype":
        call[arg] = make.tensor(tuple(value.shape), wrong_dtype(case, make, value))
    elif how == "device":
        call[arg] = make.tensor(tuple(value.shape), value.dtype, device="cpu")
    elif how == "shape":
        call[arg] = wrong_shape(case, make, call)
    elif how == "mixed_dtype":
        call["b"] = make.tensor(tuple(value.shape), torch.float16 if value.dtype == torch.bfloat16 else torch.bfloat16)
    elif how == "dtype_conflict":
        call["out_dtype"] = make.pick(tuple(d for d in (torch.bfloat16, torch.float16, torch.float32)
                                            if d != call["out"].dtype))
    elif how == "self_overlap":  # rows (or columns) that share memory: the kernel would race on them
        M, N, _ = case.shape
        rows = make.tensor((1, N), call["out"].dtype).expand(M + 1, N)
        call["out"] = rows.narrow(0, 0, M)
        if M == 1:  # one row cannot overlap itself: broadcast a column instead
            call["out"] = make.tensor((1, 1), call["out"].dtype).expand(1, N + 1)
        call = dict(call, **resized(case, make, call, n=N + (M == 1)))
    elif how == "missing":
        call["c"] = None
    elif how == "value":
        call[arg] = make.pick(("fast", "Static", 1, "") if arg == "scheduler" else ("MXFP8", "mxfp6", "nvfp8", ""))
    elif how == "with_debug":
        call.update(trace="trace.json", debug=True)
    elif how == "layout":  # fp8 wgmma and tcgen05 read both K-major: A column-major, B row-major
        M, N, K = (max(n, 2) for n in case.shape)  # a single row, column or k-step is both layouts at once
        call = dict(call, **resized(case, make, call, m=M, n=N, k=K))
        call[arg] = (make.tensor((K, M), value.dtype).t() if arg == "a" else make.tensor((K, N), value.dtype))
    elif how == "both_e5m2":
        call["a"] = make.tensor(tuple(call["a"].shape), torch.float8_e5m2)
        call["b"] = make.tensor((call["b"].shape[1], call["b"].shape[0]), torch.float8_e5m2).t()
    else:
        raise AssertionError(f"unknown mutation {how}")
    return call


def resized(case: Case, make: Maker, call: dict[str, Any], **dims: int) -> dict[str, Any]:
    """The case's valid call rebuilt at other dimensions (m=, n=, k=: when a mutation needs more than one row,
    column or k-step), but for the broken argument and `out`; an in-place C follows `out`."""
    M, N, K = case.shape
    bigger = Case(**{**case.__dict__, "shape": (dims.get("m", M), dims.get("n", N), dims.get("k", K))})
    rebuilt = valid_call(bigger, make)
    rebuilt = {name: rebuilt[name] for name in call if name not in (case.argument, "out")}
    return rebuilt | ({"c": call["out"]} if case.residual == "in_place" and case.op == "matmul" else {})


Outcome = str | None
"""None when the case behaved (raised TypeError/ValueError naming its argument, `out` untouched), else why not."""


def names_argument(message: str, argument: str) -> bool:
    """The message names the argument as the subject of a clause ("b must be ...", "a and b ...", "c is None",
    "input of shape", "out has dtype"), not as a word inside another ("a torch.Tensor", "out_dtype")."""
    return re.search(rf"(?:^|[\s(]){re.escape(argument)}(?= must| is | and | are | has | of | cannot|\.shape| \(|:|$)",
                     message) is not None


def judge(case: Case, call: dict[str, Any], run: Callable[[], object], out: Any, fake: bool = False) -> Outcome:
    """Run the invalid call and say whether it behaved. `fake`: the call's tensors have no addresses, so an error
    raised by the address check (`check_no_overlap`, which would read fake addresses) does not count."""
    before = (out._version, out.clone()) if isinstance(out, torch.Tensor) else None
    try:
        run()
    except (TypeError, ValueError) as error:
        if fake and any(frame.f_code is check_no_overlap.__code__ for frame, _ in traceback.walk_tb(error.__traceback__)):
            return f"reached the address check with fake tensors: {error}"
        if not names_argument(str(error), case.argument):
            return f"{type(error).__name__} does not name {case.argument}: {error}"
    except Exception as error:  # noqa: BLE001 (any other error is the finding)
        return f"{type(error).__name__} instead of TypeError/ValueError: {str(error)[:300]}"
    else:
        return "no error raised"
    if before is not None:
        version, data = before
        if out._version != version:
            return "out was written"
        if not isinstance(out, FakeTensor) and not torch.equal(bytes_of(out), bytes_of(data)):
            return "out's contents changed"
    return None


def bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as bytes (so NaNs and any dtype compare exactly)."""
    return t.reshape(-1).contiguous().view(torch.uint8)


def call_op(case: Case, call: dict[str, Any]) -> torch.Tensor:
    positional = [call[name] for name in POSITIONAL[case.op]]
    return OPS[case.op](*positional, **{k: v for k, v in call.items() if k not in POSITIONAL[case.op]})


def run_case(case: Case, device: str) -> Outcome:
    """The case on `device`: "fake" (FakeTensorMode CUDA tensors; overlap cases through check_no_overlap on CPU
    tensors) or "cuda" (real tensors; an overlap case after the valid call of its geometry)."""
    make = Maker("cpu" if device == "fake" else device, case.choice)
    if case.mutation == "overlap":
        call = overlapping(case, make, valid_call(case, make), overlap=True)
        if device == "fake":
            c = (call.get("c") if case.op == "matmul" else call["input"].expand(*call["out"].shape)
                 ) if call.get("beta") else None  # as _matmul passes them
            operands = [call[name] for name in ("a", "b", "mat1", "mat2") if name in call]
            return judge(case, call, lambda: check_no_overlap(call["out"], *operands, c), call["out"])
        warm = overlapping(case, Maker(device, case.choice), valid_call(case, Maker(device, case.choice)), False)
        try:
            call_op(case, warm)  # the same geometry, disjoint: caches the fast path's plan
        except Exception as error:  # noqa: BLE001 (a valid call must not fail)
            return f"the valid call of this geometry failed: {type(error).__name__}: {str(error)[:300]}"
        return judge(case, call, lambda: call_op(case, call), call["out"])
    if device != "fake":
        call = invalid_call(case, make)
        return judge(case, call, lambda: call_op(case, call), call.get("out"))
    with FakeTensorMode(allow_non_fake_inputs=True):
        make.device = "cuda"
        call = invalid_call(case, make)
        return judge(case, call, lambda: call_op(case, call), call.get("out"), fake=True)


def run_fuzz(seed: int, count: int, device: str) -> dict[str, Any]:
    """Every case of fuzz_cases(seed, count) on `device`: how many ran and the ones that misbehaved."""
    failures = []
    quiet = logging.getLogger("torch._subclasses.fake_tensor")  # it logs each refused fake op (addmm's expand)
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        outcomes = [(case, run_case(case, device)) for case in fuzz_cases(seed, count)]
    finally:
        quiet.setLevel(level)
    for case, outcome in outcomes:
        if outcome is not None:
            failures.append({"case": case.__dict__, "why": outcome})
    return {"seed": seed, "inputs": count, "device": device, "ok": not failures, "failures": failures}


if __name__ == "__main__":  # python -m tests.fuzz_args [--seed S] [--count N] [--device cuda|fake] [--json PATH]
    import argparse
    import json
    import sys
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m tests.fuzz_args", description="the invalid-argument fuzz")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path, help="write the summary here")
    args = parser.parse_args()
    summary = run_fuzz(args.seed, args.count, args.device)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    print(f"fuzz on {args.device} tensors: {summary['inputs']} invalid calls (seed {args.seed}), "
          f"{len(summary['failures'])} misbehaved")
    for failure in summary["failures"][:20]:
        print("  ", json.dumps(failure))
    sys.exit(0 if summary["ok"] else 1)
