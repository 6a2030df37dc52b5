"""CPU: matmul's, matmul_fp8's and the linears' launches on a fake H200 (tests/launch_record.py): a repeated call's
cached fast path launches exactly what its first call's full pass (validate, choose, stage, plan, launch) did."""

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
