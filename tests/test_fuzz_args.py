"""CPU: the seeded fuzz of invalid arguments (tests/fuzz_args.py) on fake CUDA tensors: every public op raises a
TypeError or ValueError naming the broken argument and leaves `out` untouched; the fuzz covers every parameter
and fails when a check is weakened."""

import inspect
import itertools

import pytest
import torch

from tests import fuzz_args
from tests.fuzz_args import CATALOGUE, COUNT, OPS, SEED, fuzz_cases, names_argument, run_fuzz
from tilepipe.host import checks


def test_every_invalid_input_is_refused_naming_its_argument():
    summary = run_fuzz(SEED, COUNT, "fake")
    assert summary["ok"], summary["failures"][:10]


def test_cases_are_seeded_and_cover_every_parameter_and_mutation():
    assert fuzz_cases(SEED, 200) == fuzz_cases(SEED, 200) != fuzz_cases(SEED + 1, 200)
    assert {(c.op, c.argument, c.mutation) for c in fuzz_cases(SEED, COUNT)} == set(CATALOGUE)
    for op, fn in OPS.items():
        assert set(inspect.signature(fn).parameters) == {arg for o, arg, _ in CATALOGUE if o == op}, op


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("weaken", ["scalar", "self_overlap", "overlap", "addmm_names"])
def test_the_fuzz_fails_when_a_check_is_weakened(monkeypatch, weaken):
    if weaken == "scalar":
        monkeypatch.setattr(checks, "check_scalar", lambda value, name: value)
    elif weaken == "self_overlap":
        monkeypatch.setattr(checks, "self_overlapping", lambda t: False)
    elif weaken == "overlap":
        monkeypatch.setattr(checks, "overlaps", lambda x, y: False)
    else:
        check = checks.check_operands
        monkeypatch.setattr("tilepipe.api.matmul.check_operands", lambda a, b, names=("a", "b"): check(a, b))
    assert not run_fuzz(SEED, 2 * len(CATALOGUE), "fake")["ok"]


def test_names_argument_reads_the_subject_not_a_word_inside_another():
    assert names_argument("a must be 2-D, got shape (3,)", "a")
    assert names_argument("a and b must have the same dtype", "b")
    assert names_argument("beta is nonzero but c is None: pass c", "c")
    assert names_argument("scale_a (2, 1) and scale_b (3, 1) match no scaling", "scale_b")
    assert not names_argument("b must be a torch.Tensor, got list", "a")
    assert not names_argument("out_dtype must be bfloat16, float16 or float32", "out")
    assert not names_argument("mat1 must be 2-D", "a")


def test_self_overlapping_matches_the_elements_addresses():
    """Against the set of element offsets, over every small shape and stride pair."""
    for rows, cols, s0, s1 in itertools.product(range(1, 5), range(1, 5), range(0, 7), range(0, 7)):
        t = torch.empty(64).as_strided((rows, cols), (s0, s1))
        offsets = [i * s0 + j * s1 for i in range(rows) for j in range(cols)]
        assert checks.self_overlapping(t) == (len(set(offsets)) < len(offsets)), (rows, cols, s0, s1)


def test_each_case_starts_from_a_valid_call():
    """The calls the fuzz breaks pass every address-free check, so each case's error is its one broken argument."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tilepipe.host.checks import check_matmul_fp8
    from tilepipe.host.checks import check_block_scaled
    from tilepipe.api.matmul import addmm_residual
    from tilepipe.host.checks import check_matmul

    for case in fuzz_cases(SEED, len(CATALOGUE)):
        with FakeTensorMode():
            call = fuzz_args.valid_call(case, fuzz_args.Maker("cuda", case.choice))
            if case.op == "matmul_block_scaled":
                check_block_scaled(call["a"], call["b"], call["scale_a"], call["scale_b"], call["format"])
            elif case.op == "matmul_fp8":
                check_matmul_fp8(call["a"], call["b"], call["scale_a"], call["scale_b"],
                                 call.get("out_dtype", torch.bfloat16), call["out"])
            elif case.op == "addmm":
                c = addmm_residual(call["input"], call["mat1"], call["mat2"])
                check_matmul(call["mat1"], call["mat2"], call["out"], call["mat1"].dtype, c, call["alpha"],
                             call["beta"])
            else:
                check_matmul(call["a"], call["b"], call["out"], call["out_dtype"], call.get("c"), call["alpha"],
                             call["beta"])
