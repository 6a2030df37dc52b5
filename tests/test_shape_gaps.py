"""tilepipe.tools.shape_gaps: the reasons a shape-table row runs under its baseline, from committed H100 files."""

import json
from pathlib import Path

from tilepipe.tools.shape_gaps import baseline_kernel, config_of, format_gaps, gaps

RESULTS = Path(__file__).parents[1] / "bench/results"


def test_baseline_kernel_reads_tile_cluster_and_split_k_from_cublas_names():
    assert baseline_kernel("nvjet_sm90_tst_144x128_64x6_1x2_h_bz_TNN") == {
        "tile": "144x128", "pow2": False, "cluster": "1x2", "split_k": False}
    assert baseline_kernel("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT")["split_k"]
    cutlass = baseline_kernel("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2>")
    assert cutlass["tile"] == "256x128" and cutlass["pow2"]


def test_gaps_of_the_v8_table_name_the_tile_and_dram_reasons():
    """Every row under 1.0 of shapes-h100-v8.json is listed; the mid-size rows where cuBLAS runs a tile that is not a
    power of two say "tile", the decode rows at the DRAM floor "dram"; rows at or above 1.0 are not listed."""
    record = json.loads((RESULTS / "archive/shapes-h100-v8.json").read_text())
    kernels = json.loads((RESULTS / "cublas-kernels-h100.json").read_text())
    entries = {(e["group"], e["shape"]): e for e in gaps(record, kernels)}
    assert len(entries) == sum(row["ratio"] < 1.0 for row in record["rows"])
    assert "tile" in entries["mid / ragged bf16", "2560x2560x2560"]["reasons"]
    assert "tile" in entries["mid / ragged bf16", "1536x8960x1536"]["reasons"]
    assert "dram" in entries["decode bf16", "1x14336x4096"]["reasons"]
    assert all(e["ceiling"] > 0 for e in entries.values())
    assert format_gaps(list(entries.values())).count("\n") == len(entries) + 1
    assert config_of("64x8x128 s12 w4 swap-AB").swap_ab and not config_of("128x256x64 s3 w8").swap_ab
    assert config_of("128x256x64 s3 w8 2x1").cluster.num_ctas == 2 and config_of("128x256x64 s3 w8").cluster_m == 1
