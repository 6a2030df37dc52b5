"""Roles: the partitions of a warp-specialized kernel, traced with the pipeline protocol checks on."""

from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin

from tilepipe.pipeline import _trace
from tilepipe.pipeline.probe import bind_role, role_name


@builtin
def warp_specialize(partitions, worker_num_warps=None, worker_num_regs=None, _semantic=None, _generator=None):
    """`gl.warp_specialize` that names each partition as a role while it is traced, then checks the protocol.

    Partitions are `(role, args)` for the default one, then `(role, args, warps, registers)` for each worker (or
    Gluon's form: `(role, args)` pairs with the worker warps and registers as two lists). A partition given as None
    (`(role, args, 1, 40) if FLAG else None`) is left out, so one call covers a kernel's optional roles.

    After tracing, a stage handle never released, or a pipeline whose declared arrival counts differ from
    the number of roles that signal its barriers, is a compile error naming the source lines. Pipeline probes in
    the partitions' arguments are bound to their partition, so debug and trace records name the role.
    """
    keep = [not (p is None or isinstance(p, gl.constexpr) and p.value is None) for p in partitions]
    if not keep[0]:
        raise ValueError("the default partition (the first) cannot be left out")
    if worker_num_warps is None:  # each worker partition carries its warps and registers
        workers = [p for p, kept in zip(partitions[1:], keep[1:]) if kept]
        if any(len(p) != 4 for p in workers):
            raise ValueError("without worker_num_warps, each worker partition is (role, args, warps, registers)")
        worker_num_warps = [p[2] for p in workers]
        worker_num_regs = [p[3] for p in workers]
        partitions = [partitions[0]] + [(p[0], p[1]) for p in workers]
    else:
        partitions = [p for p, kept in zip(partitions, keep) if kept]
        worker_num_warps = [w for w, kept in zip(worker_num_warps, keep[1:]) if kept]
        worker_num_regs = [r for r, kept in zip(worker_num_regs, keep[1:]) if kept]
    session = _trace.begin_session()
    original = _generator.call_JitFunction

    partition = iter(range(len(partitions)))

    def traced_call(fn, args, kwargs, caller_context=None):
        index = next(partition)
        _trace.set_role(_trace.role_label(fn.__name__, index))
        warps = caller_context.num_warps if caller_context is not None else _semantic.builder.options.num_warps
        args = [bind_role(arg, index, role_name(fn.__name__), warps) for arg in args]
        try:
            return original(fn, args, kwargs, caller_context=caller_context)
        finally:
            _trace.set_role(None)

    _generator.call_JitFunction = traced_call
    try:
        results = gl.warp_specialize(partitions, worker_num_warps, worker_num_regs, _semantic=_semantic,
                                     _generator=_generator)
    except Exception as error:
        cause = _protocol_error(error)
        if cause is None:
            raise
        raise _trace.ProtocolError(str(cause)) from None  # the message, above Triton's per-call wrapping
    finally:
        del _generator.call_JitFunction
        _trace.end_session(session)
    _trace.check_session(session)
    return results


def _protocol_error(error: BaseException | None) -> _trace.ProtocolError | None:
    """The ProtocolError inside a chain of Triton CompilationErrors, if any."""
    while error is not None:
        if isinstance(error, _trace.ProtocolError):
            return error
        error = error.__cause__ or error.__context__
    return None
