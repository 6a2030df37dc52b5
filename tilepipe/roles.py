"""Roles: the partitions of a warp-specialized kernel, traced with the pipeline protocol checks on."""

from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin

from tilepipe import _trace


@builtin
def warp_specialize(partitions, worker_num_warps, worker_num_regs, _semantic=None, _generator=None):
    """`gl.warp_specialize` that names each partition as a role while it is traced, then checks the protocol.

    After tracing, a stage handle never released, or a pipeline whose declared arrival counts differ from
    the number of roles that signal its barriers, is a compile error naming the source lines.
    """
    session = _trace.begin_session()
    original = _generator.call_JitFunction

    partition = iter(range(len(partitions)))

    def traced_call(fn, args, kwargs, caller_context=None):
        _trace.set_role(f"{fn.__name__} (partition {next(partition)})")
        try:
            return original(fn, args, kwargs, caller_context=caller_context)
        finally:
            _trace.set_role(None)

    _generator.call_JitFunction = traced_call
    try:
        results = gl.warp_specialize(partitions, worker_num_warps, worker_num_regs, _semantic=_semantic,
                                     _generator=_generator)
    finally:
        del _generator.call_JitFunction
        _trace.end_session(session)
    _trace.check_session(session)
    return results
