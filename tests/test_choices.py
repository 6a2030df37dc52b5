"""The cost model's choices on a grid of 2200 calls per GPU model (tilepipe.tools.choices): the code must make the
choices of each committed snapshot, and a failure lists every call that moved. A deliberate change rewrites the
snapshot (`python -m tilepipe.tools.choices --gpu MODEL --write`) and commits it with the moves' A/B measurements
(`--ab`, on that GPU)."""

import json

import pytest

from tilepipe.host.configs import Candidate, MatmulConfig, Round, fastest
from tilepipe.host.gpus import gpu_models
from tilepipe.tools.choices import SNAPSHOTS, grid, main, moves


@pytest.mark.parametrize("model", sorted(SNAPSHOTS))
def test_every_choice_is_the_snapshots(model):
    listed = moves(json.loads(SNAPSHOTS[model].read_text()), grid(gpu_models()[model]))
    assert not listed, f"{model}: {len(listed)} calls move:\n" + "\n".join(listed)


def test_moves_name_each_call_and_both_choices():
    assert moves({"a": "x", "b": "y"}, {"a": "x", "b": "z", "c": "w"}) == ["b: y -> z", "c: (none) -> w"]


def test_explain_lists_each_rounds_candidates_and_marks_the_choice(capsys):
    """`--explain M N K`: at 384x14336x4096 (H100) 128x256 under stream-K is the incumbent; the pieced tiles challenge
    it unhandicapped (against stream-K), 128x192 wins the tie with 192x128 by coming first and then beats the
    handicapped ping-pong tile; with C there is no ping-pong round."""
    assert main(["--explain", "384", "14336", "4096"]) == 0
    out = capsys.readouterr().out
    plain = out.split("matmul 384x14336x4096 -> bf16 B K-major\n")[1].split("\nmatmul ")[0]
    assert "* 128x192x64 s5 D/32 static: 79.93 us x 1.00" in plain and "128x256x64 s3 streamk" in plain
    assert "128x128x64 s6 pp D/64 static: 85.40 us x 1.02 = 87.10 us" in plain
    assert plain.endswith("runs 128x192x64 s5 D/32 static")
    with_c = out.split("matmul 384x14336x4096 -> bf16 +C B K-major\n")[1].split("\nmatmul ")[0]
    assert "ping-pong round" not in with_c
    assert "blockwise stream-K" in out.split("matmul_fp8 blockwise")[1]
    for argv in (["--explain", "0", "1", "1"], ["--explain", "1", "2"]):
        with pytest.raises(SystemExit):
            main(argv)


def test_fastest_takes_the_least_handicapped_time_and_the_first_on_a_tie():
    """The one chooser: a candidate's time times its handicap, the first listed on a tie (host/configs.py)."""
    a, b = MatmulConfig(128, 256, 64, 3), MatmulConfig(128, 128, 64, 4)
    plain, handicapped = Candidate(a, "static", 100.0), Candidate(b, "static", 96.0, handicap=1.05)
    assert handicapped.cost_us == 96.0 * 1.05 and fastest([handicapped, plain]) is plain
    tied = Candidate(b, "static", 100.0)
    assert fastest([tied, plain]) is tied and fastest([plain, tied]) is plain
    assert Round("tile", (handicapped, plain)).winner is plain
