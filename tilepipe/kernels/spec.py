"""What a kernel variant is to the compiler: the @gluon.jit function, its Triton signature and its compile options.
Kernel files describe their variants with it; tilepipe/verify/compile.py builds them without a GPU."""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

TARGETS: dict[str, int] = {"sm_90a": 90, "sm_100a": 100}
"""Supported targets and their CUDA compute capability."""


BUILD_OPTIONS = {"enable_fp_fusion": True}
"""Triton options every tilepipe kernel is built with, at launch and ahead of time: FP fusion on (the kernels are
tuned with it; triton 3.10 turns the default off)."""


@dataclass(frozen=True)
class KernelSpec:
    """One kernel to compile: where it lives, its Triton signature, and the compile options.

    `fn` is "package.module:function" and must be importable in the child interpreter (it gets the parent's sys.path).
    `constexprs` values must be JSON-serializable (ints, bools, floats, strings, lists).
    `divisible_by_16` names the arguments the JIT would specialize as multiples of 16 (pointers 16-byte aligned,
    ints divisible by 16); None means every pointer argument, which is what a launch with torch tensors gets.
    Without this hint the compiled code assumes unaligned pointers and does not vectorize global loads and stores.
    """

    fn: str
    signature: dict[str, str]
    constexprs: dict[str, object] = field(default_factory=dict)
    target: str = "sm_90a"
    num_warps: int = 4
    options: dict[str, object] = field(default_factory=dict)
    divisible_by_16: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        module, _, name = self.fn.partition(":")
        if not module or not name:
            raise ValueError(f"KernelSpec.fn must look like 'package.module:function', got {self.fn!r}")
        if self.target not in TARGETS:
            raise ValueError(f"unknown target {self.target!r}; expected one of {sorted(TARGETS)}")
        unknown = [a for a in (*self.constexprs, *(self.divisible_by_16 or ())) if a not in self.signature]
        if unknown:
            raise ValueError(f"{self.fn}: arguments {unknown} are not in the signature")
        json.dumps([self.constexprs, self.options])  # fail here, not in the child, on values that cannot travel

    def compile_options(self) -> dict[str, object]:
        """Triton's compile options for this spec: its warps, BUILD_OPTIONS, then its own options."""
        return {"num_warps": self.num_warps, **BUILD_OPTIONS, **self.options}

    def function(self):
        """The @gluon.jit function that `fn` names (its module is imported)."""
        import importlib

        module, _, qualname = self.fn.partition(":")
        found = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        return found


def tdesc_signature(dtype: str, block_shape: Sequence[int], layout: object) -> str:
    """Signature string of a host TensorDescriptor argument, identical to what the JIT derives at launch (its
    canonical dtype name: "u8" for "uint8")."""
    from triton.runtime.jit import type_canonicalisation_dict

    dtype = type_canonicalisation_dict.get(dtype, dtype)
    return f"tensordesc<{dtype}[{', '.join(str(d) for d in block_shape)}],{layout!r}>"


def tile_layout(dtype: str, block: Sequence[int], cga: tuple = (), kind: str = "tile"):
    """The NVMMA shared layout the kernels' storage gives a `block` tile of `kind` ("tile", or "scales": a block-scale
    box) (the one layout rule, pipeline/storage.py's Part), split or shared over a cluster's CTAs as `cga` says: TMA
    descriptors, ahead of time and on the host, use it too."""
    from tilepipe.pipeline.storage import Part

    return Part("tile", dtype, tuple(block), 1, kind, cga=tuple(cga)).layout


def tile_desc(dtype: str, block: Sequence[int], cga: tuple = (), kind: str = "tile") -> str:
    """Signature of a TMA descriptor of `block` tiles in the storage's layout (tile_layout)."""
    return tdesc_signature(dtype, list(block), tile_layout(dtype, block, cga, kind))


def partial_signature(cfg, c_dtype: str, schedule: str) -> str:
    """The `partial_desc` argument of a GEMM with D of `c_dtype` under `schedule`: stream-K's descriptor over the
    workspace's fp32 partial tiles, in one output stage's bytes (pipeline/partials.py: partial_box), split over a
    cluster's CTAs as D's tile is; else None."""
    from tilepipe.pipeline.partials import partial_box
    from tilepipe.pipeline.storage import dtype_of

    if schedule != "streamk":
        return "constexpr"
    return tile_desc("fp32", partial_box(cfg.tile_m, cfg.epilogue_cols, dtype_of(c_dtype).primitive_bitwidth),
                     cfg.cluster.c)


def ticket_signature(cfg, schedule: str) -> str:
    """The `ticket_desc` argument of a GEMM under `schedule`: the dynamic scheduler's descriptor over the workspace's
    ticket rows in a cluster (schedulers/dynamic.py: a 16-byte row replicated in both CTAs); else None."""
    from tilepipe.schedulers.dynamic import TICKET_WORDS

    if schedule != "dynamic" or cfg.cluster.num_ctas == 1:
        return "constexpr"
    return tile_desc("int32", (1, TICKET_WORDS.value), ((0, 0), ))


def gemm_spec(fn: str, cfg, dtype: str, c_dtype: str, b_kmajor: bool, blocks: dict, target: str,
              has_c: bool = False, source_dtype: str | None = None, bias_dtype: str | None = None, probe: int = 0,
              schedule: str = "static") -> KernelSpec:
    """The GEMM kernels' spec (matmul_kernel and sm100_matmul_kernel share one signature): `fn` in configuration `cfg`
    (a MatmulConfig: its cluster is CLUSTER_M x CLUSTER_N and the launch's num_ctas, its swap_ab SWAP_AB) for `target`, with the TMA
    `blocks` of A, B and C/D ({"a"/"b"/"c": (block, cga bases)}, kernels/matmul.py: operand_blocks); D of `c_dtype`,
    C (of `source_dtype`, default D's) in D's blocks when `has_c`, a per-column bias of `bias_dtype` when given;
    `probe` is PROBE, `schedule` SCHEDULE (stream-K: with the partial tiles' descriptor, partial_signature)."""
    from tilepipe.pipeline.probe import buffer_signature

    return KernelSpec(fn,
                      {"a_desc": tile_desc(dtype, *blocks["a"]), "b_desc": tile_desc(dtype, *blocks["b"]),
                       "d_desc": tile_desc(c_dtype, *blocks["c"]),
                       "c_desc": tile_desc(source_dtype or c_dtype, *blocks["c"]),
                       "bias_ptr": f"*{bias_dtype or c_dtype}", "workspace": "*i32", "M": "i32", "N": "i32",
                       "K": "i32", "alpha": "fp32", "beta": "fp32", "STAGES": "constexpr", "C_STAGES": "constexpr",
                       "GROUP_M": "constexpr", "B_KMAJOR": "constexpr", "HAS_C": "constexpr",
                       "HAS_BIAS": "constexpr", "SCHEDULE": "constexpr", "CLUSTER_M": "constexpr",
                       "CLUSTER_N": "constexpr", "SWAP_AB": "constexpr", "probe_buf": buffer_signature(probe),
                       "PROBE": "constexpr", "partial_desc": partial_signature(cfg, c_dtype, schedule),
                       "ticket_desc": ticket_signature(cfg, schedule)},
                      {"STAGES": cfg.stages, "C_STAGES": cfg.c_stages, "GROUP_M": cfg.group_m, "B_KMAJOR": b_kmajor,
                       "HAS_C": has_c, "HAS_BIAS": bias_dtype is not None, "SCHEDULE": schedule,
                       "CLUSTER_M": cfg.cluster_m, "CLUSTER_N": cfg.cluster_n, "SWAP_AB": cfg.swap_ab, "PROBE": probe,
                       **({} if probe else {"probe_buf": None}),
                       **({} if schedule == "streamk" else {"partial_desc": None}),
                       **({"ticket_desc": None} if ticket_signature(cfg, schedule) == "constexpr" else {})},
                      target=target, num_warps=cfg.num_warps, options={"num_ctas": cfg.cluster.num_ctas})
