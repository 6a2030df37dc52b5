"""CPU tests of the tile schedulers beyond the GEMM's compile tests (tests/test_matmul.py compiles both for sm_90a)."""

import re

from tests.kernels.clc_probe import offset_of, probe_plan
from tilepipe.kernels.spec import KernelSpec
from tilepipe.verify.compile import CompileError, compile_kernels


def test_clc_try_cancel_compiles_for_sm_100a_at_the_planned_offsets():
    """sm_100a CLC through inline PTX: ptxas accepts try_cancel and the decode, and the addresses the asm computes
    from the storage plan are where Triton put the ring's full barrier and response slot."""
    report = compile_kernels([KernelSpec("tests.kernels.clc_probe:clc_try_cancel_probe", {"out_ptr": "*i32"},
                                         target="sm_100a")])[0]
    assert not isinstance(report, CompileError), report
    assert report.count("clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128") == 1
    assert report.count("clusterlaunchcontrol.query_cancel.get_first_ctaid::x") == 1
    plan = probe_plan.fn()
    base = re.search(r"mov\.b32\s+(%r\d+), global_smem;", report.ptx).group(1)
    first_init = re.search(r"mbarrier\.init\.shared::cta\.b64 \[(%r\d+)\]", report.ptx).group(1)
    assert offset_of.fn(plan, "barriers") == 0 and first_init == base  # slot 0's full barrier at global_smem + 0
    read = re.search(r"ld\.shared\.v4\.b32\s+\{[^}]*\}, \[global_smem\+?(\d*)\]", report.ptx).group(1)
    assert int(read or 0) == offset_of.fn(plan, "response")



def streamk_split(tiles: int, k_tiles: int, programs: int):
    """(data-parallel tiles, first_step) as StreamKTileScheduler.create and first_step compute them (the host's
    mirror of the data-parallel split, host/configs.py)."""
    from tilepipe.host.configs import streamk_split as data_parallel_split

    dp_tiles, _ = data_parallel_split(tiles, programs)
    return dp_tiles, lambda p: p * (tiles - dp_tiles) * k_tiles // programs


def streamk_units(tiles: int, k_tiles: int, programs: int, program: int) -> list[tuple[int, int, int]]:
    """(tile, k_begin, k_end) of `program`'s stream-K units in order, by the arithmetic of StreamKWork.at/next
    (its whole tiles come first: program, program + P, ... < dp_tiles)."""
    dp_tiles, first_step = streamk_split(tiles, k_tiles, programs)
    units = []
    start, cursor = first_step(program), first_step(program + 1)
    while start < cursor:
        tile_first = (cursor - 1) // k_tiles * k_tiles
        units.append((dp_tiles + tile_first // k_tiles, max(start, tile_first) - tile_first, cursor - tile_first))
        cursor = max(start, tile_first)
    return units


def streamk_contributors(tiles: int, k_tiles: int, programs: int, program: int, tile: int) -> list[int]:
    """The slots StreamKWork.add_partials reads when `program` finishes stream-K tile `tile`."""
    dp_tiles, first_step = streamk_split(tiles, k_tiles, programs)
    tile_first, found = (tile - dp_tiles) * k_tiles, []
    p, stop = program - 1, first_step(program)
    while p >= 0 and stop > tile_first:
        if first_step(p) < stop:
            found.append(p)
        p, stop = p - 1, first_step(p)
    return found


def test_streamk_units_cover_every_k_step_once_and_only_first_units_contribute():
    """The stream-K schedule's arithmetic over many (tiles, k-steps, programs): every k-step of every stream-K
    tile in exactly one unit; one finisher per tile (the unit with its last k-step), which reads exactly the tile's
    contributors; every contributor is its program's first stream-K unit, so it never waits (no deadlock) and a
    program publishes at most once (slot = program id)."""
    cases = 0
    for programs in (1, 2, 3, 7, 16, 132):
        for tiles in sorted({1, 2, 5, programs - 1, programs, programs + 1, programs + (programs + 1) // 2,
                             2 * programs - 1, 2 * programs + 5, 3 * programs + 1} - {0}):
            for k_tiles in (1, 2, 3, 16, 64, 65):
                cases += 1
                dp_tiles, _ = streamk_split(tiles, k_tiles, programs)
                seen, finishers, contributors = set(), {}, {}
                for p in range(programs):
                    for i, (t, k_begin, k_end) in enumerate(streamk_units(tiles, k_tiles, programs, p)):
                        assert dp_tiles <= t < tiles and k_begin < k_end
                        steps = {(t, k) for k in range(k_begin, k_end)}
                        assert not steps & seen, (tiles, k_tiles, programs, p, t)
                        seen |= steps
                        if k_end == k_tiles:
                            assert t not in finishers
                            finishers[t] = p
                        else:
                            assert i == 0, (tiles, k_tiles, programs, p, t)
                            contributors.setdefault(t, []).append(p)
                assert len(seen) == (tiles - dp_tiles) * k_tiles and len(finishers) == tiles - dp_tiles
                for t, p in finishers.items():
                    assert streamk_contributors(tiles, k_tiles, programs, p, t) == sorted(contributors.get(t, []),
                                                                                          reverse=True)
    assert cases > 200


def test_streamk_programs_work_at_nearly_the_same_k_offset():
    """With one tile per program and a few over (tiles = P + 1), every program's k offset at each step of the
    stream-K phase is within one step of the others', so concurrent programs share A and B panels in L2."""
    tiles, k_tiles, programs = 133, 64, 132
    offsets = [[k for t, k_begin, k_end in streamk_units(tiles, k_tiles, programs, p) for k in range(k_begin, k_end)]
               for p in range(programs)]
    for step in range(min(map(len, offsets))):
        column = [o[step] for o in offsets]
        assert max(column) - min(column) <= 1, (step, column)


def test_split_k_grid_gives_each_program_one_unit_of_one_tile():
    """Split-K (the stream-K kernel on tiles x splits programs, host/configs.py schedule_programs): every program's
    range lies in one tile (a single unit), each tile's k-steps split over exactly `splits` consecutive programs,
    and its finisher reads the other splits - 1 (no program waits on more than its own tile's contributors)."""
    from tilepipe.host.configs import MatmulConfig, k_splits, schedule_programs, tile_count

    cfg = MatmulConfig(64, 128, 64, stages=8, num_warps=4)
    for M, N, K in ((1, 4096, 4096), (17, 520, 8200), (100, 264, 1000), (96, 2000, 4096), (8, 1000, 4096)):
        tiles, k_tiles = tile_count(M, N, cfg), -(-K // cfg.block_k)
        programs, splits = schedule_programs(M, N, K, cfg, 132, "splitk"), k_splits(M, N, K, cfg, 132)
        assert splits > 1 and programs == tiles * splits
        for p in range(programs):
            (unit, ) = streamk_units(tiles, k_tiles, programs, p)
            assert unit[0] == p // splits
            if unit[2] == k_tiles:
                assert streamk_contributors(tiles, k_tiles, programs, p, unit[0]) == list(range(p - 1, p - splits, -1))
