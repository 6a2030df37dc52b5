"""The tensor-parallel ops as torch.library custom ops (api/library.py's `register`): tilepipe::all_gather_matmul and
tilepipe::matmul_reduce_scatter (and their _out forms), taking the group by name, with fake implementations that run
the checks that need neither memory nor the other ranks, so torch.compile traces them as one node each."""

import torch

from tilepipe.api.library import register
from tilepipe.distributed.checks import check_operands, check_out, resolve_group


def _all_gather_matmul(a_shard: torch.Tensor, b: torch.Tensor, *, group_name: str,
                       out: torch.Tensor | None = None) -> torch.Tensor:
    from tilepipe.distributed.all_gather import all_gather_matmul

    return all_gather_matmul(a_shard, b, group_name, out=out)


def _all_gather_matmul_like(a_shard: torch.Tensor, b: torch.Tensor, *, group_name: str,
                            out: torch.Tensor | None = None) -> torch.Tensor:
    group = resolve_group(group_name)
    rows, _, N, _ = check_operands("a_shard", a_shard, b, out, group)
    check_out(out, (rows * group.size(), N))
    return out if out is not None else a_shard.new_empty((rows * group.size(), N))


def _matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, *, group_name: str,
                           out: torch.Tensor | None = None) -> torch.Tensor:
    from tilepipe.distributed.reduce_scatter import matmul_reduce_scatter

    return matmul_reduce_scatter(a, b, group_name, out=out)


def _matmul_reduce_scatter_like(a: torch.Tensor, b: torch.Tensor, *, group_name: str,
                                out: torch.Tensor | None = None) -> torch.Tensor:
    group = resolve_group(group_name)
    M, _, N, _ = check_operands("a", a, b, out, group)
    if M % group.size():
        raise ValueError(f"a: its {M} rows must split evenly over the group's {group.size()} ranks")
    check_out(out, (M // group.size(), N))
    return out if out is not None else a.new_empty((M // group.size(), N))


ALL_GATHER_MATMUL = register("all_gather_matmul", "Tensor a_shard, Tensor b", "str group_name", _all_gather_matmul,
                             _all_gather_matmul_like)
MATMUL_REDUCE_SCATTER = register("matmul_reduce_scatter", "Tensor a, Tensor b", "str group_name",
                                 _matmul_reduce_scatter, _matmul_reduce_scatter_like)
