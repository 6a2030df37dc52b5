"""Pipeline misuse that tilepipe turns into compile errors. Each `# BUG:<name>` marks the line the error names."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tilepipe.pipeline.ring import ProducerConsumerPipeline
from tilepipe.pipeline.roles import warp_specialize

BUGS = ["never_released", "released_twice", "released_in_branch", "no_signal", "dropped_release",
        "arrival_count", "lag_too_deep", "with_on_expression", "turn_alone", "pass_over_untaken"]


@gluon.jit
def misuse_producer(pipe: ProducerConsumerPipeline, n, BUG: gl.constexpr):
    for i in range(n):
        if BUG == "never_released":
            stage = pipe.acquire_producer()  # BUG:never_released
            stage.arrive()
        elif BUG == "released_twice":
            stage = pipe.acquire_producer()
            stage.arrive()
            pipe = stage.release()
            pipe = stage.release()  # BUG:released_twice
        elif BUG == "released_in_branch":
            stage = pipe.acquire_producer()
            stage.arrive()
            if i > 0:
                pipe = stage.release()  # BUG:released_in_branch
        elif BUG == "no_signal":
            stage = pipe.acquire_producer()
            pipe = stage.release()  # BUG:no_signal
        elif BUG == "dropped_release":
            stage = pipe.acquire_producer()
            stage.arrive()
            stage.release()  # BUG:dropped_release
        else:
            with pipe.produce() as stage:
                stage.arrive()
    pipe.drain()


@gluon.jit
def misuse_consumer(pipe: ProducerConsumerPipeline, n, BUG: gl.constexpr, TAKES_TURNS: gl.constexpr = False):
    if BUG == "lag_too_deep":
        pipe = pipe.with_release_lag(1)  # BUG:lag_too_deep
    if BUG == "turn_alone" and TAKES_TURNS:  # the other consumer role does not say it takes turns
        pipe = pipe.taking_turns(2)
    if BUG == "pass_over_untaken":
        pipe = pipe.pass_over(n)  # BUG:pass_over_untaken
    for i in range(n):
        if BUG == "with_on_expression":
            with pipe.with_release_lag(0).consume() as stage:  # BUG:with_on_expression
                pass
        else:
            with pipe.consume() as stage:  # BUG:arrival_count BUG:turn_alone
                pass


@gluon.jit
def misuse_kernel(n, BUG: gl.constexpr):
    """One producer and two consumer roles over a 1-stage pipeline that declares one consumer arrival."""
    pipe = ProducerConsumerPipeline.create(1, consumer_arrivals=1, name="misuse", producer_proxy="generic",
                                           consumer_proxy="generic")
    consumers: gl.constexpr = 2 if BUG == "arrival_count" or BUG == "turn_alone" else 1
    if consumers == 2:
        warp_specialize([(misuse_consumer, (pipe, n, BUG)), (misuse_producer, (pipe, n, BUG)),
                         (misuse_consumer, (pipe, n, BUG, True))], [1, 4], [48, 48])
    else:
        warp_specialize([(misuse_consumer, (pipe, n, BUG)), (misuse_producer, (pipe, n, BUG))], [1], [48])
