"""Issue 18's benchmark table without a GPU: which variants each row times."""

from tilepipe.host.configs import MatmulConfig
from tilepipe.tools.bench_clusters import cluster_variants


def test_each_row_times_the_choice_the_tile_alone_and_both_cluster_shapes():
    chosen = MatmulConfig(128, 256, 64, 3, cluster_m=2)
    variants = cluster_variants(chosen)
    assert variants["default"] is None
    assert [(v.cluster_m, v.cluster_n) for k, v in variants.items() if v] == [(1, 1), (1, 2), (2, 1)]
    assert all((v.block_m, v.block_n, v.stages) == (128, 256, 3) for v in variants.values() if v)
