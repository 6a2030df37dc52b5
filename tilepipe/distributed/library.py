"""The tensor-parallel ops as torch.library custom ops (api/library.py's `register`): tilepipe::all_gather_matmul and
tilepipe::matmul_reduce_scatter (and their _out forms), taking the group by name, with fake implementations that run
the checks that need neither memory nor the other ranks, so torch.compile traces them as one node each."""

import torch

from tilepipe.api.library import PublicOp, register
from tilepipe.distributed.checks import check_call, resolve_group

OPTIONS = "str group_name, ScalarType? out_dtype=None, bool? overlap=None"


def traced(op: str, out: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor | None,
           scale_b: torch.Tensor | None, group_name: str, out_dtype: torch.dtype | None,
           overlap: bool | None) -> torch.Tensor:
    """A call of tensor-parallel op `op` while torch.compile traces: the custom op (its _out form into `out`), with the
    caller's `overlap`, so the compiled call runs the form the eager one would."""
    options = dict(group_name=group_name, out_dtype=out_dtype, overlap=overlap)
    if out is None:
        return getattr(torch.ops.tilepipe, op)(a, b, scale_a, scale_b, **options)
    getattr(torch.ops.tilepipe, f"{op}_out")(out, a, b, scale_a, scale_b, **options)
    return out


def _register(op: str, a_name: str) -> PublicOp:
    """tilepipe::`op` over tilepipe.distributed's function of that name, whose first argument is `a_name`."""

    def impl(*, group_name: str, **arguments) -> torch.Tensor:
        import tilepipe.distributed

        return getattr(tilepipe.distributed, op)(group=group_name, **arguments)

    def result_like(*, group_name: str, scale_a: torch.Tensor | None = None, scale_b: torch.Tensor | None = None,
                    out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                    overlap: bool | None = None, **tensors: torch.Tensor) -> torch.Tensor:
        a = tensors[a_name]
        call = check_call(op, a_name, a, tensors["b"], resolve_group(group_name), scale_a, scale_b, out, out_dtype)
        return out if out is not None else a.new_empty(call.out_shape, dtype=call.out_dtype)

    return register(op, f"Tensor {a_name}, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None", OPTIONS, impl,
                    result_like)


ALL_GATHER_MATMUL = _register("all_gather_matmul", "a_shard")
MATMUL_REDUCE_SCATTER = _register("matmul_reduce_scatter", "a")
