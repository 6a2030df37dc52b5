"""CPU: matmul's, matmul_fp8's and the linears' launches on a fake H200 (tests/launch_record.py): a repeated call's
cached fast path launches exactly what its first call's full pass (validate, choose, stage, plan, launch) did, and the
FP8 and linear ops run each step of their pass once."""

from tests.launch_record import record


def test_the_fast_path_launches_what_the_full_pass_did():
    calls = record()
    fast = 0
    for (name, _, outcome, first), (_, _, again, second) in zip(calls[::2], calls[1::2]):
        assert outcome == again, name
        replayed = [launch[2:] for launch in second if launch[0] == "fast path"]
        if replayed:
            fast += 1
            assert replayed == [launch[2:] for launch in first if launch[0] == "launch"], name
    assert fast > 250  # most geometries keep a plan


PASSES = {"fp8": ("tilepipe.api.fp8", ("validate_matmul_fp8", "choose_matmul_fp8", "stage_matmul_fp8",
                                       "plan_matmul_fp8", "launch_fp8")),
          "linear": ("tilepipe.api.matmul", ("validate_matmul", "choose_matmul", "stage_matmul", "plan_gemm",
                                             "launch_gemm")),
          "linear_fp8": ("tilepipe.api.linear_fp8", ("check_linear_fp8", "choose_linear_fp8", "plan_gemm",
                                                     "launch_gemm"))}
"""Each op's steps down the host layers, by the module that calls them (gated_linear takes linear's, matmul's pass)."""


def test_fp8_and_linear_calls_take_each_step_once(monkeypatch):
    """matmul_fp8, linear, gated_linear and linear_fp8 on a fake H200: a call runs each step of its pass once (none
    calls back up into another), and a repeated call either all of them again (no plan: a staging copy, or
    linear_fp8's, which keeps none) or none (its fast path)."""
    import importlib
    from collections import Counter

    from tests.launch_record import calls, fake_h200
    from tilepipe.api import fp8, linear, matmul

    ran = Counter()

    def counted(step, name: str):
        def run(*args, **kwargs):
            ran[name] += 1
            return step(*args, **kwargs)
        return run

    for module, steps in PASSES.values():
        module = importlib.import_module(module)
        for step in steps:
            monkeypatch.setattr(module, step, counted(getattr(module, step), step))
    plans = type(matmul._PLANS)()  # no plans from other tests, none left for them (linear's are matmul's)
    monkeypatch.setattr(fp8, "_PLANS", type(fp8._PLANS)())
    monkeypatch.setattr(matmul, "_PLANS", plans)
    monkeypatch.setattr(linear, "_PLANS", plans)
    fast = 0
    with fake_h200():
        for name, call in calls():
            op = {"gated": "linear"}.get(name.split()[0], name.split()[0])
            if op not in PASSES or "bad" in name:
                continue
            once = {step: 1 for step in PASSES[op][1]}
            ran.clear()
            call()
            assert ran == once, name
            ran.clear()
            call()
            assert ran in (once, {}), name
            fast += not ran
    assert fast > 60  # most FP8 and linear geometries keep a plan
