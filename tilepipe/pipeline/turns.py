"""Turn order: two roles that take turns at one resource, one after the other (the ping-pong GEMM's two MMA
warpgroups at the tensor core: one runs its main loop while the other runs its epilogue).

CUTLASS's ordered sequence barrier of two groups, built as a one-stage ring: the role of turn 0 is its producer,
whose first wait passes at once; the role of turn 1 its consumer. Each role's pass signals its side of the ring, which
opens the other role's next turn, so the turns alternate 0, 1, 0, 1, ... for as long as both roles have work:

    order = TurnOrder(smem.turns, TURN)
    with order.take(passing):          # waits until the other role passed its last turn
        ...                            # issue this turn's main loop
    # here `order` has passed the turn on, where `passing` (the other role has a turn to come)

Roles that take turns at an input ring (`taking_turns`, ring.py) pass over each other's stages only after the
other role's turn, when its stages were all acquired: that keeps every cursor within one phase of the ring's.
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import mbarrier

from tilepipe.pipeline import _trace
from tilepipe.pipeline.ring import ProducerConsumerPipeline

TURNS = gl.constexpr(2)
"""Roles a turn order alternates between."""


@aggregate
class TurnOrder:
    """One role's place in a two-role turn order: `turn` 0 (goes first) or 1."""
    pipeline: ProducerConsumerPipeline
    turn: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, pipeline, turn):
        if gl.constexpr(turn).value not in range(TURNS.value):
            raise _trace.ProtocolError(f"a turn order's turn is 0 or 1, got {turn!r}")
        self.pipeline = pipeline
        self.turn = gl.constexpr(turn)

    @builtin
    def take(self, passing, _semantic=None):
        """`with order.take(passing):` waits for this role's turn; on exit the turn passes to the other role where
        `passing` is true: only where that role has a turn to come, so no pass is left that no one takes."""
        if self.turn.value == 0:
            acquire = lambda: self.pipeline.acquire_producer(_semantic=_semantic)  # noqa: E731
        else:
            acquire = lambda: self.pipeline.acquire_consumer(_semantic=_semantic)  # noqa: E731
        return _trace.StageContext("take", acquire, lambda stage: _passed(stage, passing, self.turn, _semantic),
                                   _semantic)


def _passed(stage, passing, turn, semantic):
    """A pass: the role's signal on its side of the ring (turn 0 fills it, turn 1 frees it), made where `passing`,
    then its advance."""
    mbarrier.arrive(stage.mbar(_semantic=semantic), pred=passing, _semantic=semantic)
    pipe = stage.release(_semantic=semantic) if turn.value == 0 else stage.release_without_signal(_semantic=semantic)
    return TurnOrder(pipe, turn)
