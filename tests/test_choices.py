"""The cost model's choices on a grid of 2200 calls per GPU model (tilepipe.tools.choices): the code must make the
choices of each committed snapshot, and a failure lists every call that moved. A deliberate change rewrites the
snapshot (`python -m tilepipe.tools.choices --gpu MODEL --write`) and commits it with the moves' A/B measurements
(`--ab`, on that GPU)."""

import json
from dataclasses import replace

import pytest
import torch

from tilepipe.host import configs
from tilepipe.host.configs import (BLOCKWISE, LARGE_16BIT, NARROW_PIECED_16BIT, STREAMK_MIN_GAIN, Candidate,
                                   MatmulConfig, Round, fastest, fp8_configs, fp8_schedule_for, fp8_schedule_round,
                                   modelled_rounds, schedule_for, schedule_round)
from tilepipe.host.gpus import H100, gpu_models
from tilepipe.tools.choices import SNAPSHOTS, explain, grid, main, moves


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



def test_the_schedule_round_weighs_static_waves_against_stream_k_and_stream_k_takes_a_tie(monkeypatch):
    """schedule_for as a round (host/configs.py: schedule_round): stream-K first, handicapped STREAMK_MIN_GAIN, against
    the tile's whole waves, static, both at predict_us; whole waves (132 tiles on 132 SMs) offer static alone;
    --explain shows the round. Where both are predicted alike (its handicap set to 1), stream-K wins the tie, as
    schedule_for's >= did."""
    streamk, static = schedule_round(384, 14336, 4096, LARGE_16BIT, H100).candidates
    assert (streamk.schedule, streamk.handicap, static.schedule, static.handicap) == ("streamk", STREAMK_MIN_GAIN,
                                                                                      "static", 1.0)
    assert streamk.config == static.config == LARGE_16BIT and "fixup" in streamk.why and "waves" in static.why
    assert [c.schedule for c in schedule_round(1536, 2816, 4096, LARGE_16BIT, H100).candidates] == ["static"]
    gpu = replace(H100, sms=4, unit_fill_us=0.0)  # 640x256: 5 tiles of 128x256 on 4 SMs, two waves or 5/4 of a tile
    monkeypatch.setattr(configs, "STREAMK_MIN_GAIN", 1.0)
    monkeypatch.setattr(configs, "predict_us", lambda *args, **kwargs: 100.0)  # both predicted alike
    tied = schedule_round(640, 256, 4096, LARGE_16BIT, gpu).candidates
    assert tied[0].cost_us == tied[1].cost_us == 100.0 and schedule_for(640, 256, 4096, LARGE_16BIT, gpu) == "streamk"
    monkeypatch.undo()
    out = "\n".join(explain(384, 14336, 4096))
    assert "schedule round:\n  * 128x256x64 s3 streamk:" in out and "(whole tiles in waves)" in out


@pytest.mark.parametrize("scheduler", ["static", "dynamic"])
def test_a_scheduler_the_caller_names_is_what_the_tile_round_weighs(scheduler):
    """Under a caller-named scheduler the schedule round is that scheduler alone, so the tile round's incumbent is
    predicted as it will run: at 768x6144x4096 on the H200 the 128x128 tile won on stream-K's predicted time and ran
    static, where 128x160 (now taken) ran 1.10-1.16x faster (archive/scheduler-moves-h200.json)."""
    rounds = modelled_rounds(768, 6144, 4096, torch.bfloat16, torch.bfloat16, True, gpu_models()["h200"],
                             scheduler=scheduler)
    assert [c.schedule for c in rounds[1].candidates] == [scheduler]
    assert {c.schedule for c in rounds[2].candidates} == {"static", scheduler}
    assert (rounds[-1].winner.config.block_m, rounds[-1].winner.config.block_n) == (128, 160)


def test_the_dram_floor_tie_holds_under_a_caller_named_dynamic_scheduler():
    """pieced_candidates' DRAM-floor tie also against a dynamic incumbent: 192x4096x4096 K-major on the H200 keeps
    the 64x96 tile under scheduler="dynamic" (without the tie it ran the 64x128 incumbent, 0.901x:
    archive/scheduler-moves-h200.json)."""
    winner = modelled_rounds(192, 4096, 4096, torch.bfloat16, torch.bfloat16, True, gpu_models()["h200"],
                             scheduler="dynamic")[-1].winner
    assert (winner.config, winner.why) == (NARROW_PIECED_16BIT, "tie at the DRAM floor")


def test_the_fp8_schedule_round_names_its_candidates():
    """fp8_schedule_for as a round (host/configs.py: fp8_schedule_round): the 64-row tile's timed_schedules (split-K
    then stream-K, handicapped STREAMK_MIN_GAIN, static last); the blockwise 128-row tile's stream-K first, handicapped
    gpu.blockwise_streamk_min_gain, against its static waves; the blockwise 64-row tile past
    gpu.blockwise_streamk_max_m static alone; --explain shows the round for a single FP8 tile."""
    rows64, blockwise64 = fp8_configs(False, torch.bfloat16)[-1], fp8_configs(True, torch.bfloat16)[-1]
    split = fp8_schedule_round(64, 2048, 14336, rows64, False, H100)
    assert [(c.schedule, c.handicap) for c in split.candidates] == [("splitk", STREAMK_MIN_GAIN),
                                                                     ("streamk", STREAMK_MIN_GAIN), ("static", 1.0)]
    assert split.winner.schedule == fp8_schedule_for(64, 2048, 14336, rows64, False, H100) == "splitk"
    streamk, static = fp8_schedule_round(1024, 4608, 7168, BLOCKWISE, True, H100).candidates
    assert (streamk.schedule, streamk.handicap, static.schedule) == ("streamk", H100.blockwise_streamk_min_gain,
                                                                     "static")
    past = fp8_schedule_round(512, 4096, 4096, blockwise64, True, H100).candidates
    assert [c.schedule for c in past] == ["static"] and "blockwise_streamk_max_m" in past[0].why
    out = "\n".join(explain(64, 4096, 4096)).split("matmul_fp8 blockwise 64x4096x4096\n")[1]
    assert out.startswith("  schedule round:\n    64x128x128 s8 splitk:")
