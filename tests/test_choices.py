"""The cost model's choices on a grid of 2200 calls per GPU model (tilepipe.tools.choices): the code must make the
choices of each committed snapshot, and a failure lists every call that moved. A deliberate change rewrites the
snapshot (`python -m tilepipe.tools.choices --gpu MODEL --write`) and commits it with the moves' A/B measurements
(`--ab`, on that GPU)."""

import json

import pytest

from tilepipe.host.gpus import gpu_models
from tilepipe.tools.choices import SNAPSHOTS, grid, moves


@pytest.mark.parametrize("model", sorted(SNAPSHOTS))
def test_every_choice_is_the_snapshots(model):
    listed = moves(json.loads(SNAPSHOTS[model].read_text()), grid(gpu_models()[model]))
    assert not listed, f"{model}: {len(listed)} calls move:\n" + "\n".join(listed)


def test_moves_name_each_call_and_both_choices():
    assert moves({"a": "x", "b": "y"}, {"a": "x", "b": "z", "c": "w"}) == ["b: y -> z", "c: (none) -> w"]
