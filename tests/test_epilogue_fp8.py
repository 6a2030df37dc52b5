"""CPU tests of FP8 output (tilepipe.linear_fp8; kernels/quantize_epilogues.py quantize_1x128, quantize_tensor): the
quantizing GEMMs compile for sm_90a without spills, convert with saturation and store their scales; the scales' layout
is one matmul_fp8's blockwise scale_a reads without a copy; the ops' fake shapes, strides and argument errors; a
torch.compile trace."""

from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilepipe
from tilepipe.api.linear_fp8 import LARGEST_TILE_ROWS, group_scales, padded_rows
from tilepipe.host.checks import scaling_of
from tilepipe.host.choose import fp8_output_config
from tilepipe.host.configs import LARGE_SUBTILED_16BIT, MEDIUM, SMALL, modelled_config, with_stages_that_fit
from tilepipe.host.gpus import H100
from tilepipe.host.staging import tma_addressable
from tilepipe.kernels.catalogue import QUANTIZERS
from tilepipe.kernels.matmul import matmul_spec
from tilepipe.verify.compile import compile_kernels

SMALL_FILLED, MEDIUM_FILLED = (with_stages_that_fit(cfg, torch.bfloat16) for cfg in (SMALL, MEDIUM))
"""The 64x128 and 128x128 tiles as fp8_output_config runs them (plain_tile: as many operand stages as fit)."""
SPECS = {"1x128 128x256 in 128-column sub-tiles": matmul_spec(replace(LARGE_SUBTILED_16BIT, epilogue_n=128), "bf16",
                                                              "fp8e4nv", True, bias_dtype="fp32",
                                                              epilogue=f"{QUANTIZERS}:quantize_1x128"),
         "1x128 64x128": matmul_spec(SMALL_FILLED, "fp16", "fp8e4nv", True, bias_dtype="fp32",
                                     epilogue=f"{QUANTIZERS}:quantize_1x128"),
         "1x128 128x128": matmul_spec(MEDIUM_FILLED, "bf16", "fp8e4nv", True, bias_dtype="fp32",
                                      epilogue=f"{QUANTIZERS}:quantize_1x128"),
         "per-tensor 128x128": matmul_spec(MEDIUM_FILLED, "bf16", "fp8e4nv", True, bias_dtype="fp32",
                                           epilogue=f"{QUANTIZERS}:quantize_tensor"),
         "per-tensor 64x128 fp16": matmul_spec(SMALL_FILLED, "fp16", "fp8e4nv", True, bias_dtype="fp32",
                                               epilogue=f"{QUANTIZERS}:quantize_tensor")}
PER_THREAD_PAIRS = 32
"""e4m3 pairs each thread converts per tile: 64x128 over 4 warps and 128x128 over 8 are both 64 elements a thread."""


@pytest.fixture(scope="module")
def reports():
    return dict(zip(SPECS, compile_kernels(list(SPECS.values()))))


@pytest.mark.parametrize("name", SPECS)
def test_quantizing_gemms_compile_without_spills(reports, name):
    """Every element converts with cvt.rn.satfinite (values past 448 saturate, none become NaN); the 1x128 forms store
    their scales (st.global) and reduce each row's group across its quad (shfl)."""
    report = reports[name]
    assert not isinstance(report, Exception), report
    assert report.spill_stores == report.spill_loads == 0 and report.shared <= 227 * 1024
    assert report.count("cvt.rn.satfinite.e4m3x2.f32") >= 32
    assert (report.count("st.global") >= 1 and report.count("shfl") >= 1) == name.startswith("1x128")


@pytest.mark.parametrize("name", [name for name in SPECS if name.startswith("per-tensor")])
def test_per_tensor_converts_fp32_once_with_saturation(reports, name):
    """acc * fp32(1 / s) goes to e4m3 in one rounding: each pair by one cvt.rn.satfinite.e4m3x2.f32 (F2FP.SATFINITE
    in SASS), with no 16-bit step between (no double rounding) and no clamp of its own (the conversion saturates after
    rounding, so |x| / s in (448, 464) rounds to 448 as a clip before it would). The 64x128 fp16 form is what M = 16
    runs (fp8_output_config refuses matmul's swap-AB tile)."""
    report = reports[name]
    assert report.count("cvt.rn.satfinite.e4m3x2.f32") == PER_THREAD_PAIRS
    assert report.count("F2FP.SATFINITE.E4M3.F32.PACK_AB", "sass") == report.count("F2FP", "sass") == PER_THREAD_PAIRS
    assert report.count("div.full.f32") == 1 and report.count("mul.f32") == 2 * PER_THREAD_PAIRS
    for step in ("cvt.rn.f16.f32", "cvt.rn.bf16.f32", "cvt.rn.f16x2.f32", "cvt.rn.bf16x2.f32", "e4m3x2.f16x2",
                 "min.f32", "max.f32", "min.ftz.f32", "max.ftz.f32"):
        assert report.count(step) == 0, step


def test_m16_quantizes_in_the_64_row_tile(monkeypatch):
    """matmul's choice at M = 16 is swap-AB (a transposed D); linear_fp8 runs the 64x128 tile instead."""
    monkeypatch.setattr("tilepipe.host.choose.config_for", lambda M, N, K, dtype, *args: modelled_config(
        M, N, K, dtype, dtype, True, H100, False, "static"))
    assert modelled_config(16, 14336, 4096, torch.float16, torch.float16, True, H100, False, "static").swap_ab
    assert fp8_output_config(16, 14336, 4096, torch.float16, 0) == SMALL_FILLED


def fake_cuda():
    return FakeTensorMode(allow_non_fake_inputs=True)


def cuda(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, device="cuda", dtype=dtype)


def test_fake_results_have_matmul_fp8s_layout():
    with fake_cuda():
        d, scales = torch.ops.tilepipe.linear_fp8(cuda(3, 5, 256), cuda(384, 256))
        assert d.shape == (3, 5, 384) and d.dtype == torch.float8_e4m3fn
        assert scales.shape == (15, 3) and scales.stride() == (1, LARGEST_TILE_ROWS) and scales.dtype == torch.float32
        d = torch.ops.tilepipe.linear_fp8_tensor(cuda(7, 64), cuda(48, 64), cuda(1, dtype=torch.float32))
        assert d.shape == (7, 48) and d.dtype == torch.float8_e4m3fn


@pytest.mark.parametrize("M", [1, 5, 127, 300, 4096])
def test_scales_are_read_by_blockwise_matmul_fp8_without_a_copy(M):
    """The scales of D [M, N] are [M, N / 128] over a group-major storage whose rows are padded to 16 bytes and one
    tile: scale_a^T is TMA-addressable (tma_ready passes it through) and scaling_of reads it as blockwise."""
    N = 512
    storage = torch.empty(N // 128, padded_rows(M))
    scales = group_scales(storage, M)
    assert scales.shape == (M, N // 128) and tma_addressable(scales.t()) and padded_rows(M) >= max(M, 128)
    assert scaling_of(scales, torch.empty(N // 128, 3), M, 300, N) == "blockwise"


BAD = [  # (call, error, message naming the argument)
    (lambda: tilepipe.linear_fp8(cuda(8, 64), cuda(200, 64)), ValueError, "^w must have a multiple of 128 rows"),
    (lambda: tilepipe.linear_fp8(cuda(8, 64), cuda(200, 64), scale=cuda(1, dtype=torch.float32)), ValueError,
     "^w must have a multiple of 16 rows"),
    (lambda: tilepipe.linear_fp8(cuda(8, 64), cuda(256, 64), scale=cuda(2, dtype=torch.float32)), ValueError,
     "^scale must be a one-element float32"),
    (lambda: tilepipe.linear_fp8(cuda(8, 64), cuda(256, 64), scale=cuda(1)), ValueError,
     "^scale must be a one-element float32"),
    (lambda: tilepipe.linear_fp8(cuda(8, 64), cuda(256, 64), scale=2.0), TypeError, "^scale must be a torch.Tensor"),
    (lambda: tilepipe.linear_fp8(cuda(8, 64), cuda(256, 32)), ValueError, r"^w must be \[N, K\]"),
    (lambda: tilepipe.linear_fp8(cuda(8, 64, dtype=torch.float32), cuda(256, 64)), TypeError, "^x must be bfloat16"),
]


@pytest.mark.parametrize("call, error, message", BAD, ids=[entry[2].strip("^")[:40] for entry in BAD])
def test_bad_input_names_the_argument(call, error, message):
    with fake_cuda():
        with pytest.raises(error, match=message):
            call()


def test_scale_on_another_device_is_refused():
    with pytest.raises(ValueError, match="^scale must be on x's device"):
        with fake_cuda():
            tilepipe.linear_fp8(cuda(8, 64), cuda(256, 64), scale=torch.ones(1))


def test_compile_fullgraph_traces_both_forms():
    from torch._dynamo.testing import CompileCounterWithBackend

    def layers(x, w, scale):
        d, scales = tilepipe.linear_fp8(x, w)
        d2, returned = tilepipe.linear_fp8(x, w, scale=scale)
        return d, scales, d2, returned

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    with fake_cuda():
        d, scales, d2, returned = torch.compile(layers, fullgraph=True, backend=counter)(
            cuda(100, 256), cuda(512, 256), cuda(1, dtype=torch.float32))
    assert d.shape == d2.shape == (100, 512) and scales.shape == (100, 4) and returned.shape == (1, )
    code = counter.graphs[0].code
    assert counter.frame_count == 1 and "tilepipe.linear_fp8(" in code and "tilepipe.linear_fp8_tensor" in code, code


@pytest.mark.parametrize("M, N, K", [(16, 4096, 4096), (512, 14336, 4096), (8192, 28672, 4096), (300, 384, 328)])
def test_fp8_output_config_parts_hold_whole_groups(M, N, K, monkeypatch):
    """Each epilogue part is a whole tile of 128 columns or a 128-column sub-tile of a 256-column one."""
    monkeypatch.setattr("tilepipe.host.choose.config_for", lambda M, N, K, dtype, *args: modelled_config(
        M, N, K, dtype, dtype, True, H100, False, "static"))
    cfg = fp8_output_config(M, N, K, torch.bfloat16, 0)
    assert cfg.epilogue_cols == 128 and not (cfg.swap_ab or cfg.pieced or cfg.pingpong or cfg.cluster.num_ctas > 1)
    assert cfg.tile_m <= LARGEST_TILE_ROWS
