"""The cost model's choices on a grid of 2200 calls (tilepipe.tools.choices): the code must make the choices of the
committed snapshot, and a failure lists every call that moved. A deliberate change rewrites the snapshot
(`python -m tilepipe.tools.choices --write`) and commits it with the moves' A/B measurements."""

import json

from tilepipe.tools.choices import SNAPSHOT, grid, moves


def test_every_choice_is_the_snapshots():
    listed = moves(json.loads(SNAPSHOT.read_text()), grid())
    assert not listed, f"{len(listed)} calls move:\n" + "\n".join(listed)


def test_moves_name_each_call_and_both_choices():
    assert moves({"a": "x", "b": "y"}, {"a": "x", "b": "z", "c": "w"}) == ["b: y -> z", "c: (none) -> w"]
