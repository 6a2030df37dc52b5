"""CPU tests of tilepipe.grouped_mm_fp8: argument checks (on fake CUDA tensors, the path torch.compile traces), the tile
choice, both kernels compiled for sm_90a, and their protocols model-checked (and a seeded wrong count caught)."""

import re
from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilepipe
from tests.test_checker import with_pipeline
from tilepipe.host.choose import grouped_fp8_config
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, LARGE_SUBTILED_FP32, fp8_configs
from tilepipe.kernels.grouped_fp8 import grouped_fp8_spec
from tilepipe.verify.checker import check
from tilepipe.verify.compile import compile_kernels
from tilepipe.verify.protocols import grouped_fp8_protocols

E4M3 = torch.float8_e4m3fn


def empty(*shape, dtype=torch.float32, device="cuda", strides=None) -> torch.Tensor:
    if strides is not None:
        return torch.empty_strided(shape, strides, dtype=dtype, device=device)
    return torch.empty(*shape, dtype=dtype, device=device)


def operands(M: int = 100, K: int = 256, N: int = 256, G: int = 4) -> dict:
    """a, b (K-major: a transposed (G, N, K)) and offs of a valid call (made in FakeTensorMode)."""
    return dict(a=empty(M, K, dtype=E4M3), b=empty(G, N, K, dtype=E4M3).transpose(1, 2),
                offs=empty(G, dtype=torch.int32))


def per_row(M: int = 100, N: int = 256, G: int = 4) -> dict:
    return dict(scale_a=empty(M), scale_b=empty(G, N))


def blockwise(M: int = 100, K: int = 256, N: int = 256, G: int = 4) -> dict:
    """matmul_fp8's layouts read in place: scale_a M-major (M, K/128), scale_b per expert (K/128, N/128), a transposed
    (G, N/128, K/128)."""
    return dict(scale_a=empty(K // 128, M).t(), scale_b=empty(G, N // 128, K // 128).transpose(1, 2))


def call(arguments: dict):
    arguments = dict(arguments)
    tensors = [arguments.pop(name) for name in ("a", "b", "scale_a", "scale_b", "offs")]
    if "out" in arguments:
        return torch.ops.tilepipe.grouped_mm_fp8_out(arguments.pop("out"), *tensors, **arguments)
    return torch.ops.tilepipe.grouped_mm_fp8(*tensors, **arguments)


BAD = [  # (scales, argument changes, error, message naming the argument)
    (per_row, lambda: dict(a=empty(100, 256, dtype=torch.bfloat16)), TypeError, "^a must be float8_e4m3fn"),
    (per_row, lambda: dict(b=empty(4, 256, 256, dtype=torch.float8_e5m2).transpose(1, 2)), TypeError,
     "^b must be float8_e4m3fn"),
    (per_row, lambda: dict(b=empty(4, 256, 256, dtype=E4M3)), ValueError, r"^b must be a transposed \(G, N, K\)"),
    (per_row, lambda: dict(b=empty(4, 256, 256, dtype=E4M3, strides=(256 * 272 + 16, 1, 272))), ValueError,
     "^b must be a transposed"),  # experts not packed
    (per_row, lambda: dict(b=empty(256, 256, dtype=E4M3)), ValueError, "^b must be 3-D"),
    (per_row, lambda: dict(b=empty(4, 256, 128, dtype=E4M3).transpose(1, 2)), ValueError,
     r"^a is \(100, 256\) and b is \(4, 128, 256\)"),
    (per_row, lambda: dict(a=empty(100, 200, dtype=E4M3), b=empty(4, 256, 200, dtype=E4M3).transpose(1, 2)),
     ValueError, "^a must be row-major with rows on 16 bytes"),  # K = 200 is no multiple of 16
    (per_row, lambda: dict(offs=empty(4, dtype=torch.int64)), TypeError, r"^offs must be int32 \(cumulative row"),
    (per_row, lambda: dict(offs=empty(4, dtype=torch.int32, device="cpu")), ValueError, "^offs must be on a's device"),
    (per_row, lambda: dict(offs=empty(3, dtype=torch.int32)), ValueError, "^offs has 3 group ends but b has 4"),
    (per_row, lambda: dict(scale_a=empty(100, dtype=torch.bfloat16)), TypeError, "^scale_a must be float32"),
    (per_row, lambda: dict(scale_b=empty(4, 256, device="cpu")), ValueError, "^scale_b must be on a's device"),
    (per_row, lambda: dict(scale_b=empty(3, 256)), ValueError, r"^scale_b has 3 experts \(scale_b.shape\[0\]\) but b "),
    (per_row, lambda: dict(scale_a=empty(99)), ValueError, r"^scale_a \(99,\) and scale_b \(4, 256\) match no"),
    (per_row, lambda: dict(scale_b=empty(4, 1, 256)), ValueError, r"^blockwise scale_a must be \(100, 2\)"),  # 3-D
    (blockwise, lambda: dict(scale_b=empty(4, 2, 2, device="cpu")), ValueError, "^scale_b must be on a's device"),
    (blockwise, lambda: dict(scale_b=empty(2, 2, 2)), ValueError, r"^scale_b has 2 experts"),
    (blockwise, lambda: dict(scale_b=empty(4, 2, 3)), ValueError, r"^blockwise scale_a must be \(100, 2\) and scale_b"),
    (blockwise, lambda: dict(scale_a=empty(100, 3)), ValueError, r"^blockwise scale_a must be \(100, 2\)"),
    (blockwise, lambda: dict(a=empty(100, 272, dtype=E4M3), b=empty(4, 256, 272, dtype=E4M3).transpose(1, 2)),
     ValueError, "^b: blockwise scales need K a multiple of 128, got K = 272"),
    (blockwise, lambda: dict(b=empty(4, 200, 256, dtype=E4M3).transpose(1, 2)), ValueError,
     "^b: blockwise scales need N a multiple of 128, got N = 200"),
    (blockwise, lambda: dict(out=empty(100, 255, dtype=torch.bfloat16)), ValueError, r"^out must have shape \(100,"),
    (blockwise, lambda: dict(out=empty(256, 100, dtype=torch.bfloat16).t()), ValueError, "^out must be row-major"),
    (blockwise, lambda: dict(out=empty(100, 256, dtype=torch.int32)), TypeError, "^out must be bfloat16, float16"),
    (blockwise, lambda: dict(out_dtype=torch.int8), TypeError, "^out_dtype must be"),
    (blockwise, lambda: dict(scheduler="streamk"), ValueError, "^scheduler must be one of"),
    (blockwise, lambda: dict(a=empty(100, 256, dtype=E4M3, device="cpu"), b=empty(4, 256, 256, dtype=E4M3,
                                                                                   device="cpu").transpose(1, 2)),
     ValueError, "^a must be on a CUDA device"),
]


@pytest.mark.parametrize("scales, changes, error, message", BAD, ids=[entry[3].strip("^")[:40] for entry in BAD])
def test_bad_input_names_the_argument(scales, changes, error, message):
    """The fake implementation (what torch.compile traces) runs every check the eager op runs before its launch."""
    with FakeTensorMode():
        with pytest.raises(error, match=message):
            call({**operands(), **scales(), **changes()})


@pytest.mark.parametrize("scales", [per_row, blockwise])
def test_fake_result_has_the_rows_of_a_and_the_columns_of_b(scales):
    with FakeTensorMode():
        arguments = {**operands(), **scales()}
        assert call(arguments).shape == (100, 256) and call(arguments).dtype == torch.bfloat16
        assert call({**arguments, "out_dtype": torch.float32}).dtype == torch.float32
        assert call({**arguments, "out": empty(100, 256, dtype=torch.float16)}) is None
    with FakeTensorMode():  # per-row's scale_a may be (M, 1) too; blockwise K = 128 gives scale_a (M, 1) as well
        assert call({**operands(), "scale_a": empty(100, 1), "scale_b": empty(4, 256)}).shape == (100, 256)
        assert call({**operands(K=128), **blockwise(K=128)}).shape == (100, 256)


def test_cpu_tensors_are_refused_before_anything_is_written():
    a, b = torch.zeros(8, 128, dtype=E4M3), torch.zeros(2, 128, 128, dtype=E4M3).transpose(1, 2)
    offs = torch.tensor([3, 8], dtype=torch.int32)
    out = torch.full((8, 128), float("nan"), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="^a must be on a CUDA device"):
        tilepipe.grouped_mm_fp8(a, b, torch.ones(8), torch.ones(2, 128), offs, out=out)
    assert torch.isnan(out).all()
    with pytest.raises(TypeError, match="^scale_a must be a torch.Tensor"):
        tilepipe.grouped_mm_fp8(a, b, [1.0], torch.ones(2, 128), offs)


def test_traces_under_compile():
    """grouped_mm_fp8 is one custom op in a fullgraph torch.compile graph."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    with FakeTensorMode():
        arguments = {**operands(), **blockwise()}
        fn = torch.compile(lambda a, b, sa, sb, offs: tilepipe.grouped_mm_fp8(a, b, sa, sb, offs), fullgraph=True,
                           backend=counter)
        y = fn(*(arguments[name] for name in ("a", "b", "scale_a", "scale_b", "offs")))
    assert y.shape == (100, 256) and counter.frame_count == 1
    assert "tilepipe.grouped_mm_fp8" in counter.graphs[0].code


def test_configs():
    """Blockwise: matmul_fp8's blockwise tile (BN = BK = 128); per-row: grouped_mm's 128x256 tile at BK = 128."""
    assert grouped_fp8_config(True, torch.bfloat16) == fp8_configs(True, torch.bfloat16)[0]
    assert grouped_fp8_config(True, torch.float32).block_n == 128
    assert grouped_fp8_config(False, torch.bfloat16) == replace(LARGE_SUBTILED_16BIT, block_k=128)
    assert grouped_fp8_config(False, torch.float32) == replace(LARGE_SUBTILED_FP32, block_k=128)


SPECS = {f"{'blockwise' if bw else 'per-row'} {c}": grouped_fp8_spec(
    grouped_fp8_config(bw, torch.float32 if c == "fp32" else torch.bfloat16), c, bw)
    for bw in (False, True) for c in ("bf16", "fp32")}
SPECS.update({f"{'blockwise' if bw else 'per-row'} bf16 dynamic": grouped_fp8_spec(
    grouped_fp8_config(bw, torch.bfloat16), "bf16", bw, "dynamic") for bw in (False, True)})


@pytest.fixture(scope="module")
def reports():
    return dict(zip(SPECS, compile_kernels(list(SPECS.values()))))


@pytest.mark.parametrize("name", SPECS)
def test_kernel_compiles_for_sm90_without_spills(reports, name):
    """fp8 wgmma main loop, TMA loads (blockwise: the scales' too) and stores, the masked register store of a
    spilling tile, no spills, shared memory within the 227 KB a block may take, and no serialized wgmma (C7514)."""
    report = reports[name]
    assert not isinstance(report, Exception), report
    assert report.target == "sm_90a" and report.spill_stores == report.spill_loads == 0
    assert report.count("wgmma.mma_async.sync.aligned") >= 1 and report.count(".e4m3.e4m3") >= 1
    assert report.count("cp.async.bulk.tensor.2d.shared::cta.global") >= (4 if "blockwise" in name else 2)
    assert report.count("cp.async.bulk.tensor.2d.global.shared") >= 1  # D's TMA store
    assert report.count("st.global") >= 1  # a spilling tile's masked rows
    assert report.shared <= 227 * 1024
    assert "C7514" not in report.ptxas_log and "serialized" not in report.ptxas_log, report.ptxas_log


def test_per_row_reads_the_scales_in_its_epilogue(reports):
    """Per-row: the row_scaled epilogue loads scale_a's rows and the expert's scale_b columns (ld.global beyond
    offs'); blockwise reads its scales from shared memory (no ld.global of them)."""
    assert reports["per-row bf16"].count("ld.global") > reports["blockwise bf16"].count("ld.global")


@pytest.mark.parametrize("kind", ["per-row", "blockwise"])
def test_only_the_dynamic_schedule_draws_tiles_from_its_counter(reports, kind):
    """As grouped_mm's: the dynamic kernel's scheduler role draws tickets and resets the counter; static has none."""
    dynamic, static = reports[f"{kind} bf16 dynamic"], reports[f"{kind} bf16"]
    assert dynamic.count("atom.global.gpu.acq_rel.add") >= 1 and dynamic.count("atom.global.gpu.acq_rel.exch") >= 1
    assert static.count("atom.global") == 0


@pytest.fixture(scope="module")
def protocols():
    return grouped_fp8_protocols()


def test_protocol_passes_and_matches_the_traced_kernel(protocols):
    assert [p.config.split(" stages")[0] for p in protocols] == [
        "grouped_mm_fp8 per-row static", "grouped_mm_fp8 per-row dynamic", "grouped_mm_fp8 blockwise static",
        "grouped_mm_fp8 blockwise dynamic"]
    for protocol in protocols:
        result = check(protocol, trace=True)
        assert result.ok and result.traced and result.cases >= 2 and result.states > 0, result


@pytest.mark.parametrize("index", [0, 2])  # per-row, blockwise
def test_seeded_wrong_arrive_count_deadlocks_the_load_role(protocols, index):
    """The input ring declared with two consumer arrivals (only the mma role releases): the load role is stuck."""
    result = check(replace(with_pipeline(protocols[index], "input", consumer_arrivals=2), trace=None))
    assert not result.ok
    assert any(f.kind == "deadlock" and (f.role, f.pipeline) == ("load", "input") for f in result.findings)


def tma_loads(ptx: str, descriptor: int) -> list[tuple[str, ...]]:
    """The coordinate registers (innermost first) of every TMA load through the kernel's `descriptor`-th descriptor
    parameter, as the PTX names them."""
    param = re.findall(r"\.param \.align 64 \.b8 (\w+)\[128\]", ptx)[descriptor]
    copies = {param}
    for dst, src in re.findall(r"(?:mov\.b32|cvt\.u64\.u32|cvta\.param\.u64)\s+(%\w+), (\w+|%\w+);", ptx):
        if src in copies:
            copies.add(dst)
    return [tuple(c.split(", ")) for d, c in
            re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\S* \[%\w+\], \[(%\w+), \{([^}]*)\}\]", ptx)
            if d in copies]


@pytest.mark.parametrize("name", ["blockwise bf16", "blockwise fp32"])
def test_scale_boxes_start_on_16_bytes(reports, name):
    """TMA reads a row from a 16-byte start only (an fp32 box at another word is an illegal instruction: the H200
    fault of every blockwise case): both scale boxes' innermost coordinates are masked to a multiple of 4 words. A's
    was its tile's first row, a group's first row plus a multiple of 128, before the shifted copies."""
    ptx = reports[name].ptx
    for descriptor in (2, 3):  # sa_desc, sb_desc
        loads = tma_loads(ptx, descriptor)
        assert loads, descriptor
        for innermost, _ in loads:
            writes = re.findall(rf"\n\s*([\w.]+)\s+{innermost}, ([^;]*);", ptx)
            assert writes and all(op == "and.b32" and int(args.split(", ")[-1]) % 4 == 0 for op, args in writes), (
                descriptor, writes)
