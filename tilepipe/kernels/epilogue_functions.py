"""The epilogue functions: an epilogue is a @gluon.jit function the sm_90a GEMMs take as the constexpr EPILOGUE.
`epilogue(acc, c, args, first_row, first_col)` gets an fp32 accumulator tile (or sub-tile, or piece), C's matching
part in fp32 (None without C), the kernel's EpilogueArgs and the part's first row and column in the GEMM's output (A's
rows, B's columns), and returns the tile to store. A new fusion is a new function, not a kernel flag: pass it to the
kernel itself (a launch) or as "module:name" (a KernelSpec). Shipped: `bias` and `residual` (matmul's, the default
without and with C), activations over either (`relu`, `gelu`, `gelu_tanh`, `silu`) and gated ones (`swiglu`, `geglu`,
`geglu_tanh`, `reglu`: gate and up columns interleaved in GATE_COLUMNS blocks, api/linear.py pack_gate_up), which
write half the columns they read (COLUMNS_IN = 2); the FP8 quantizers are kernels/quantize_epilogues.py's.
kernels/epilogues.py stores what they return. A function marked READS_BIAS reads the bias only through part_bias, for
its whole part's columns: the kernels may then read a tile's ahead of its main loop and hand each part its own."""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.language.core import _unwrap_if_constexpr

from tilepipe.kernels.activations import gelu_of, gelu_tanh_of, relu_of, silu_of
from tilepipe.pipeline.output import column_join, column_parts

GATE_COLUMNS = gl.constexpr(64)
"""A gated epilogue's interleave: B's columns alternate GATE_COLUMNS gate columns and the matching up columns, so a
tile (or a sub-tile of 2 * 64 * n columns) holds whole pairs; D's column j is act(gate j) * up j."""


@aggregate
class EpilogueArgs:
    """What an epilogue reads besides its tiles: alpha, beta, the bias pointer (read only where HAS_BIAS), the GEMM's
    output columns N (the bias's length), where an epilogue scales rows (row_scaled), the scales' pointer and the
    output's rows M, and the part's bias where the kernel read its tile's ahead of the main loop (else None each)."""
    alpha: gl.tensor
    beta: gl.tensor
    bias_ptr: gl.tensor
    N: gl.tensor
    HAS_BIAS: gl.constexpr
    row_scale: gl.tensor | gl.constexpr
    M: gl.tensor | gl.constexpr
    bias: gl.tensor | gl.constexpr

    @gluon.constexpr_function
    def __init__(self, alpha, beta, bias_ptr, N, HAS_BIAS, row_scale=None, M=None, bias=None):
        self.alpha, self.beta, self.bias_ptr, self.N, self.HAS_BIAS = alpha, beta, bias_ptr, N, gl.constexpr(HAS_BIAS)
        self.row_scale, self.M, self.bias = (gl.constexpr(None) if x is None else x for x in (row_scale, M, bias))


@gluon.constexpr_function
def epilogue_function(epilogue, has_c=False):
    """The @gluon.jit function EPILOGUE names: the function itself (a launch: Triton keys the binary on its source), or
    "module:name" (a KernelSpec, whose constexprs travel as JSON); None is matmul's: residual with C, else bias."""
    if epilogue is None:
        return residual if has_c else bias
    if not isinstance(epilogue, str):
        return epilogue
    module, _, name = epilogue.partition(":")
    return getattr(__import__(module, fromlist=[name]), name)


@gluon.constexpr_function
def columns_in(epilogue):
    """Accumulator columns per column of D that EPILOGUE writes: its COLUMNS_IN (2 for a gated one), else 1."""
    return getattr(epilogue_function(epilogue), "COLUMNS_IN", 1)


@gluon.jit
def part_bias(args: EpilogueArgs, first_col, COLS: gl.constexpr, layout: gl.constexpr):
    """The part's COLS bias values from column first_col (zero past N) in fp32, along the columns of `layout`: the
    kernel's read ahead of its main loop (args.bias) brought into it, else read here."""
    if args.bias is None:
        cols = first_col + gl.arange(0, COLS, layout=gl.SliceLayout(0, layout))
        values = gl.load(args.bias_ptr + cols, mask=cols < args.N, other=0.0)
    else:
        values = gl.convert_layout(args.bias, gl.SliceLayout(0, layout))
    return values.to(gl.float32)


@gluon.jit
def bias(acc, c, args: EpilogueArgs, first_row, first_col):
    """matmul's epilogue without C: alpha * acc, plus beta * bias[col] where the kernel has a bias."""
    if args.HAS_BIAS:
        return args.alpha * acc + args.beta * part_bias(args, first_col, acc.shape[1], acc.type.layout)[None, :]
    return args.alpha * acc


@gluon.jit
def residual(acc, c, args: EpilogueArgs, first_row, first_col):
    """matmul's epilogue with C: alpha * acc + beta * C."""
    return args.alpha * acc + args.beta * c


@gluon.jit
def row_scaled(acc, c, args: EpilogueArgs, first_row, first_col):
    """FP8 per-row scaling: acc * row_scale[row] * bias[col] (rows from M read scale 0; the "bias" a column scale: in
    the grouped GEMM its expert's row of scale_b, api/grouped_fp8.py)."""
    rows = first_row + gl.arange(0, acc.shape[0], gl.SliceLayout(1, acc.type.layout))
    scale = gl.load(args.row_scale + rows, mask=rows < args.M, other=0.0)
    return acc * scale[:, None] * part_bias(args, first_col, acc.shape[1], acc.type.layout)[None, :]


@gluon.jit
def affine(acc, c, args: EpilogueArgs, first_row, first_col):
    """residual with C, else bias: what the activations apply to. (An if-else: Triton still traces the code after a
    constexpr if's return, which would read a None C.)"""
    if c is None:
        d = bias(acc, c, args, first_row, first_col)
    else:
        d = residual(acc, c, args, first_row, first_col)
    return d


@gluon.jit
def relu(acc, c, args: EpilogueArgs, first_row, first_col):
    """relu(affine)."""
    return relu_of(affine(acc, c, args, first_row, first_col))


@gluon.jit
def gelu(acc, c, args: EpilogueArgs, first_row, first_col):
    """gelu(affine), with erf."""
    return gelu_of(affine(acc, c, args, first_row, first_col))


@gluon.jit
def gelu_tanh(acc, c, args: EpilogueArgs, first_row, first_col):
    """gelu(affine), tanh form."""
    return gelu_tanh_of(affine(acc, c, args, first_row, first_col))


@gluon.jit
def silu(acc, c, args: EpilogueArgs, first_row, first_col):
    """silu(affine)."""
    return silu_of(affine(acc, c, args, first_row, first_col))


@builtin
def paired_columns(layout, shape, width, _semantic=None):
    """`layout` of a [rows, cols] tile with every column bit from `width` up in each thread's registers, so its
    blocks of `width` columns split apart in registers (column_parts): `layout` itself where they are (warps splitting
    rows), else each lane or warp bit of those columns exchanged with a register bit below them (swap-AB's transposed
    accumulator, whose two warpgroups hold a gate block and its up block: one exchange through shared memory)."""
    rows, cols = (_unwrap_if_constexpr(n) for n in _unwrap_if_constexpr(shape))
    width, layout = _unwrap_if_constexpr(width), _unwrap_if_constexpr(layout)
    linear = _unwrap_if_constexpr(_semantic.to_linear_layout(layout, [rows, cols]))
    regs, lanes, warps = (list(map(list, bases)) for bases in (linear.reg_bases, linear.lane_bases, linear.warp_bases))
    below = [i for i, (_, col) in enumerate(regs) if col < width]
    moved = False
    for bases in (lanes, warps):
        for i, (_, col) in enumerate(bases):
            if col >= width:
                j = below.pop()
                regs[j], bases[i], moved = bases[i], regs[j], True
    if not moved:
        return gl.constexpr(layout)
    return gl.constexpr(gl.DistributedLinearLayout(regs, lanes, warps, list(map(list, linear.block_bases)),
                                                   [rows, cols]))


@gluon.jit
def gated(d, ACTIVATION: gl.constexpr):
    """act(gate) * up for d's columns in GATE_COLUMNS pairs (gate block, then its up block): half d's columns."""
    PAIRS: gl.constexpr = d.shape[1] // (2 * GATE_COLUMNS)
    gl.static_assert(PAIRS >= 1 and d.shape[1] == PAIRS * 2 * GATE_COLUMNS,
                     "a gated epilogue takes whole gate-up pairs: 128 accumulator columns per 64 of D")
    d = gl.convert_layout(d, paired_columns(d.type.layout, d.shape, GATE_COLUMNS))
    parts = column_parts(d, 2 * PAIRS)
    out = ACTIVATION(parts[0]) * parts[1]
    if PAIRS > 1:
        outs = (out, )
        for p in gl.static_range(1, PAIRS):
            outs = outs + (ACTIVATION(parts[2 * p]) * parts[2 * p + 1], )
        out = column_join(outs)
    return out


@gluon.jit
def swiglu(acc, c, args: EpilogueArgs, first_row, first_col):
    """SwiGLU: silu(gate) * up of affine, over gate-up pairs (GATE_COLUMNS)."""
    return gated(affine(acc, c, args, first_row, first_col), silu_of)


@gluon.jit
def geglu(acc, c, args: EpilogueArgs, first_row, first_col):
    """GeGLU: gelu(gate) * up (erf), over gate-up pairs."""
    return gated(affine(acc, c, args, first_row, first_col), gelu_of)


@gluon.jit
def geglu_tanh(acc, c, args: EpilogueArgs, first_row, first_col):
    """GeGLU with GELU's tanh form, over gate-up pairs."""
    return gated(affine(acc, c, args, first_row, first_col), gelu_tanh_of)


@gluon.jit
def reglu(acc, c, args: EpilogueArgs, first_row, first_col):
    """ReGLU: relu(gate) * up, over gate-up pairs."""
    return gated(affine(acc, c, args, first_row, first_col), relu_of)


swiglu.COLUMNS_IN = geglu.COLUMNS_IN = geglu_tanh.COLUMNS_IN = reglu.COLUMNS_IN = 2
for reader in (bias, row_scaled, affine, relu, gelu, gelu_tanh, silu, swiglu, geglu, geglu_tanh, reglu):
    reader.READS_BIAS = True  # the bias as a vector of the part's columns (part_bias): kernels may read it ahead
