"""The shipped kernels' protocols, declared for tilepipe.verify.checker: each role's program over the pipelines its storage
declares, in warp_specialize partition order.

The pipelines (stages, arrival counts, producer and consumer role names) come from each kernel's own storage
declaration (`matmul_plan`, `wgmma_plan`); the stress kernel creates its pipeline with
`ProducerConsumerPipeline.create`, mirrored here as the equivalent `BarrierPair`. `check(..., trace=True)` compares
every declaration with what tracing the kernel records, so a role's pipelines and sides cannot drift silently.
"""

from dataclasses import replace
from itertools import product

import torch

from tilepipe.examples import pipeline_demo
from tilepipe.host import configs
from tilepipe.host.configs import FP8_TILES, MatmulConfig, fp8_configs, sm100_fitted
from tilepipe.kernels.catalogue import (ACTIVATION_SCHEDULES, FP8_SPLIT, GATED_SCHEDULES, GROUPED_WGRAD,
                                       MATMUL_ACTIVATIONS, MATMUL_CLUSTERS, MATMUL_EPILOGUES, MATMUL_GATED,
                                       MATMUL_PIECED, MATMUL_PINGPONG, MATMUL_QUANTIZING, MATMUL_SPLIT, MATMUL_SWAP,
                                       PIECED_SCHEDULES, SPLIT_SCHEDULES, STRESS_STAGES, TENSOR_PARALLEL, WGMMA_STAGES,
                                       Variant, shipped_variants)
from tilepipe.kernels.epilogue_functions import columns_in
from tilepipe.kernels.matmul import matmul_plan, matmul_spec
from tilepipe.kernels.matmul_pingpong import pingpong_plan
from tilepipe.pipeline.storage import BarrierPair, SmemPlan, Storage
from tilepipe.schedulers import SCHEDULERS
from tilepipe.verify.checker import (CheckResult, Commit, Drain, Flush, Loop, PassOver, Protocol, Role, Signal, Step,
                                     Wait, check_all, consume, loop, produce, trip_cases, wait_filled)


def tile_cases(stages: int):
    """1 to 3 tiles of 1, `stages` and `stages + 1` k-steps: first laps, wrap-around and tile boundaries."""
    return trip_cases(tiles=(1, 2, 3), k=(1, stages, stages + 1))


def plan_storages(plan: SmemPlan) -> tuple[Storage, ...]:
    return tuple(storage for _, storage in plan.storages)


def matmul_roles(has_c: bool, mma_fn: str = "mma_role", load_fn: str = "load_role",
                 subtiles: int = 1) -> tuple[Role, ...]:
    """tilepipe/kernels/matmul.py: mma, load, store (and epilogue_load with C), one tile loop each; with `subtiles`
    the epilogue's stage uses repeat for each of D's sub-tiles. The FP8 kernels have the same protocol with their
    own mma (and, blockwise, load) role functions."""
    with_c = (lambda *body: body) if has_c else (lambda *body: ())
    each = subtile_uses(subtiles)
    mma = Role("mma", mma_fn, (
        loop("tile", "tiles", loop("k", "k", *consume("input")), Flush("input"),
             *each(*produce("output", *with_c(*wait_filled("epi_load"))))),
        Drain("output")), release_lag=(("input", 1), ))
    load = Role("load", load_fn, (
        loop("tile", "tiles", loop("k", "k", *produce("input")), *with_c(*produce("load_order"))),
        Drain("input"), *with_c(Drain("load_order"))))
    store = Role("store", "store_role", (
        loop("tile", "tiles", *each(*consume("output", *with_c(*consume("epi_load"))))), ))
    epilogue_load = Role("epilogue_load", "epilogue_load_role", (
        loop("tile", "tiles", *consume("load_order"), *each(*produce("epi_load"))), Drain("epi_load")))
    return (mma, load, store) + ((epilogue_load, ) if has_c else ())


def subtile_uses(subtiles: int):
    """A tile epilogue's stage uses, as a body maker: once, or once for each of D's `subtiles` sub-tiles."""
    return (lambda *body: body) if subtiles == 1 else (lambda *body: (loop("sub", subtiles, *body), ))


def dynamic_roles(has_c: bool, cluster: bool = False, subtiles: int = 1) -> tuple[Role, ...]:
    """matmul_roles under the dynamic scheduler (tilepipe/schedulers/dynamic.py): every role takes each tile id from
    the scheduler's ring ('clc') before its tile, and once more for the sentinel that ends its loop; the load role,
    which paces the scheduler, hands it one throttle item ('clc_throttle') per tile it starts. The scheduler role
    (the last partition) publishes its first tile, then one ring item per throttle item (the last one the
    sentinel), and drains the ring. In a `cluster` the ring is a multicast ring (the first CTA's ticket lands in
    both CTAs' slots) and each scheduler, after arming its slot, waits for the fill, reads it back and frees the slot
    as one of its consumers (its wait is the direct API: no consumer stage handle)."""
    return ring_fed(matmul_roles(has_c, subtiles=subtiles), cluster)


def ring_fed(roles: tuple[Role, ...], cluster: bool = False) -> tuple[Role, ...]:
    """`roles` (a tile loop each, first in its program) under the dynamic scheduler, as dynamic_roles describes."""
    fed = []
    for role in roles:
        tiles, *tail = role.program
        pace = produce("clc_throttle") if role.name == "load" else ()
        program = (*consume("clc"), loop(tiles.var, tiles.count, *pace, *tiles.body, *consume("clc")), *tail)
        fed.append(Role(role.name, role.function, program, role.release_lag))
    publish = produce("clc")
    if cluster:
        publish = (Wait("clc", "producer"), Signal("clc", "producer"), Wait("clc", "consumer", traced=False),
                   Signal("clc", "consumer"), Step("clc"))
    scheduler = Role("scheduler", "scheduler_role", (
        *publish, loop("tile", "tiles", *consume("clc_throttle"), *publish), Drain("clc")))
    return (*fed, scheduler)


def shipped_forms(kernel: str) -> list[tuple[str, dict]]:
    """The catalogue's variants of `kernel` (kernels/catalogue.py) as (name, options), each with its schedule."""
    return [(variant.name, variant.options) for variant in shipped_variants() if variant.kernel == kernel]


def streamk_roles(has_c: bool, mma_fn: str = "mma_role", load_fn: str = "load_role",
                  subtiles: int = 1) -> tuple[Role, ...]:
    """matmul_roles under stream-K, within one program (tilepipe/schedulers/streamk.py): whole tiles (`tiles`), then
    at most one unit that ends inside a tile (`partial`, over `k_part` k-steps), then units that end their tiles
    (`after`). Partial sums travel through the output stages (pipeline/partials.py): the contributing unit's mma
    role writes `subs` sub-tiles into output stages, which the store role TMA-stores; before each finishing unit's
    epilogue the epilogue-load role fills `sums` stages with the contributors' sub-tiles, which the mma role adds
    and the store role passes on. Every stage use passes epilogue_load (a fill or an empty arrival), mma and store,
    so the epi_load ring exists with or without C. The slots' flags are global memory (not modelled); the load role
    signals no load order for the contributing unit. With `subtiles` a tile's epilogue uses a stage for each of D's
    sub-tiles."""
    with_c = (lambda *body: body) if has_c else (lambda *body: ())
    each = subtile_uses(subtiles)
    mma_use = produce("output", *wait_filled("epi_load"))
    store_use = consume("output", *consume("epi_load"))
    fill = produce("epi_load")
    mma = Role("mma", mma_fn, (
        loop("tile", "tiles", loop("k", "k", *consume("input")), Flush("input"), *each(*mma_use)),
        loop("part", "partial", loop("k", "k_part", *consume("input")), Flush("input"), loop("sub", "subs", *mma_use)),
        loop("after", "after", loop("k", "k", *consume("input")), Flush("input"), loop("sum", "sums", *mma_use),
             *each(*mma_use)),
        Drain("output")), release_lag=(("input", 1), ))
    load = Role("load", load_fn, (
        loop("tile", "tiles", loop("k", "k", *produce("input")), *with_c(*produce("load_order"))),
        loop("part", "partial", loop("k", "k_part", *produce("input"))),
        loop("after", "after", loop("k", "k", *produce("input")), *with_c(*produce("load_order"))),
        Drain("input"), *with_c(Drain("load_order"))))
    store = Role("store", "store_role", (
        loop("tile", "tiles", *each(*store_use)), loop("part", "partial", loop("sub", "subs", *store_use)),
        loop("after", "after", loop("sum", "sums", *store_use), *each(*store_use))))
    epilogue_load = Role("epilogue_load", "epilogue_load_role", (
        loop("tile", "tiles", *with_c(*consume("load_order")), *each(*fill)),
        loop("part", "partial", loop("sub", "subs", *fill)),
        loop("after", "after", loop("sum", "sums", *fill), *with_c(*consume("load_order")), *each(*fill)),
        Drain("epi_load")))
    return (mma, load, store, epilogue_load)


def streamk_cases(stages: int, subs: int) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Stream-K programs: a contributing unit alone, after whole tiles, before finishing units, between both, and
    finishing units only; 1 and `stages` + 1 k-steps a unit, 1 and `stages` in the contributing one; `subs` stages
    a partial sum, and finishing units that add none, one or two of them."""
    return tuple((("tiles", tiles), ("partial", partial), ("after", after), ("k", k), ("k_part", k_part),
                  ("subs", subs), ("sums", sums * subs))
                 for tiles, partial, after in ((0, 1, 0), (1, 1, 0), (0, 1, 1), (1, 1, 1), (2, 0, 1))
                 for k in (1, stages + 1) for k_part in (1, stages) for sums in ((0, 1, 2) if after else (0, )))


def cluster_streamk_cases(stages: int, subs: int) -> tuple[tuple[tuple[str, int], ...], ...]:
    """Stream-K programs of a two-CTA cluster (both CTAs run the same units): a contributing unit alone (`stages`
    k-steps: a lap of the multicast ring), after a whole tile (a wrap-around), before a finishing unit that adds one
    partial sum, and a finishing unit that adds two after a whole tile; streamk_cases' full set takes eight roles
    past a minute."""
    units = ((0, 1, 0, 1, stages, 0), (1, 1, 0, stages + 1, 1, 0), (0, 1, 1, 1, 1, 1), (1, 0, 1, 1, 1, 2))
    return tuple((("tiles", tiles), ("partial", partial), ("after", after), ("k", k), ("k_part", k_part),
                  ("subs", subs), ("sums", sums * subs)) for tiles, partial, after, k, k_part, sums in units)


def partial_subtiles(c_dtype: str, subtiles: int = 1) -> int:
    """Output stages one partial sum takes: an fp32 tile in stages of `c_dtype` D, each D's tile or one of its
    `subtiles` sub-tiles (pipeline/partials.py)."""
    from tilepipe.pipeline.storage import dtype_of

    return subtiles * 32 // dtype_of(c_dtype).primitive_bitwidth


def matmul_configs() -> dict[str, MatmulConfig]:
    """Every configuration of matmul_kernel tilepipe.host.configs declares, once each (aliases joined in the name; the
    ping-pong kernel's are pingpong_protocols', the pieced tiles' pieced_protocols')."""
    names: dict[MatmulConfig, list[str]] = {}
    for name, value in vars(configs).items():
        if isinstance(value, MatmulConfig) and value not in FP8_TILES and not (value.pingpong or value.pieced):
            names.setdefault(value, []).append(name)
    return {"/".join(found): cfg for cfg, found in names.items()}




def d_subtiles(cfg: MatmulConfig, epilogue: object = None) -> int:
    """The sub-tiles a tile's epilogue writes D in: D's tile's columns (swap-AB: the transposed tile's) per output
    stage, over the epilogue's COLUMNS_IN (a gated one writes half)."""
    d_cols = cfg.tile_m if cfg.swap_ab else cfg.tile_n
    return d_cols // (cfg.epilogue_n or d_cols) // columns_in(epilogue)


def matmul_protocol(name: str, cfg: MatmulConfig, variant: str = "matmul", schedule: str = "static") -> Protocol:
    """matmul_kernel in one configuration, variant and schedule, its pipelines from `matmul_plan`. A variant is an
    epilogue (under "static", "dynamic" or "streamk": the Protocol.kernel of the latter two is the catalogue's
    variant name), a two-CTA cluster (static, up to two tiles, or stream-K, cluster_streamk_cases; both CTAs' roles
    over their multicast input ring), swap-AB (the plain pipelines, D's tile transposed in the output stages) or a
    pieced tile (the plain pipelines, each stage an array per piece: its `tile`, and D's sub-tiles if it names them,
    in the stages host/configs.py variant_config gives them, replace cfg) or a fused epilogue (the pipelines of
    its tile; a gated one's tile writes half its accumulator's columns, so half the sub-tiles)."""
    args = {**MATMUL_EPILOGUES, **MATMUL_CLUSTERS, **MATMUL_SPLIT, **MATMUL_SWAP, **MATMUL_PIECED,
            **MATMUL_ACTIVATIONS, **MATMUL_GATED, **MATMUL_QUANTIZING}[variant]
    cfg = configs.variant_config(args, torch.bfloat16, cfg) if "tile" in args or "epilogue" in args else cfg
    has_c, dynamic = args.get("has_c", False), schedule == "dynamic"
    cm, cn = args.get("cluster", (1, 1))
    subtiles = d_subtiles(cfg, args.get("epilogue"))
    plan = matmul_plan.fn(cfg.block_m * cm, cfg.block_n * cn, cfg.block_k, cfg.stages, cfg.c_stages, args["dtype"],
                          args["c_dtype"], True, has_c, args.get("source_dtype"), dynamic=dynamic, cluster_m=cm,
                          cluster_n=cn, swap_ab=args.get("swap_ab", False), streamk=schedule == "streamk",
                          epilogue_n=cfg.epilogue_n, split=args.get("split_multicast", False))
    roles, cases = {"static": (matmul_roles(has_c, subtiles=subtiles), tile_cases(cfg.stages)),
                    "dynamic": (dynamic_roles(has_c, cm * cn > 1, subtiles), tile_cases(cfg.stages)),
                    "streamk": (streamk_roles(has_c, subtiles=subtiles),
                                streamk_cases(cfg.stages, partial_subtiles(args["c_dtype"], subtiles)))}[schedule]
    if cm * cn > 1:
        cases = (cluster_streamk_cases(cfg.stages, partial_subtiles(args["c_dtype"])) if schedule == "streamk" else
                 trip_cases(tiles=(1, 2), k=(1, cfg.stages + 1)))
    config = f"{name} stages={cfg.stages} c_stages={cfg.c_stages}" + (" (one program)" if schedule == "streamk" else "")
    return Protocol(variant if schedule == "static" else f"{variant} {schedule}", config, plan_storages(plan), roles,
                    cases, lambda: matmul_spec(cfg, b_kmajor=True, schedule=schedule, **args), ctas=cm * cn)


def cluster_protocols() -> list[Protocol]:
    """The two-CTA GEMMs in every configuration of up to 4 stages (more would take minutes to explore); with C
    (four roles per CTA) in the largest tile only."""
    configs = {name: cfg for name, cfg in matmul_configs().items() if cfg.stages <= 4 and cfg.epilogue_n is None}
    largest = max(configs.values(), key=lambda cfg: cfg.block_m * cfg.block_n)
    return [matmul_protocol(name, cfg, variant) for variant, options in MATMUL_CLUSTERS.items()
            for name, cfg in configs.items() if not options.get("has_c") or cfg == largest]


SCHEDULER_RING = ("clc", "clc_throttle")
"""The dynamic scheduler's pipelines: its tile-id ring and the load role's throttle."""


def scoped_roles(roles: tuple[Role, ...], pipelines: tuple[str, ...]) -> tuple[Role, ...]:
    """Each role's program over `pipelines` only (its other steps dropped, loops kept with their trip counts)."""
    def keep(program):
        return tuple(replace(op, body=keep(op.body)) if isinstance(op, Loop) else op for op in program
                     if isinstance(op, Loop) or op.pipeline in pipelines)
    return tuple(replace(role, program=keep(role.program),
                         release_lag=tuple(lag for lag in role.release_lag if lag[0] in pipelines)) for role in roles)


def cluster_dynamic_protocols() -> list[Protocol]:
    """The two-CTA GEMMs under the dynamic scheduler in the largest tile, over the scheduler ring: every role of both
    CTAs takes each tile id from its CTA's slot of the multicast ring, the first CTA's ticket lands in both, each
    scheduler reads it back and frees it as a consumer; up to three tiles (the two-stage ring's second lap). Their
    other pipelines are the static cluster protocol's (cluster_protocols), and exploring all of them with both CTAs'
    ten roles passes the state budget beyond one tile of one k-step (tests/test_cluster.py explores that case whole).
    With C the ring has one more consumer role (epilogue_load, taking ids as the store role does), which takes even
    the ring alone past the budget at one tile: the plain variant's protocol covers it (covering_kernel). The ticket
    row and the counter are global memory (not modelled)."""
    protocols = []
    for variant in (name for name, options in MATMUL_CLUSTERS.items() if not options.get("has_c")):
        full = matmul_protocol("LARGE_16BIT", configs.LARGE_16BIT, variant, "dynamic")
        protocols.append(replace(full, roles=scoped_roles(full.roles, SCHEDULER_RING),
                                 cases=trip_cases(tiles=(1, 2, 3), k=(1, )), scope=SCHEDULER_RING,
                                 config=full.config + " (scheduler ring)"))
    return protocols


def cluster_streamk_protocols() -> list[Protocol]:
    """The two-CTA GEMMs under stream-K (split-K runs the same kernel) in the largest tile: each CTA's roles over
    its own output and epi_load rings and the multicast input ring. Each CTA's partial slot and flag are global memory
    (pipeline/partials.py), not modelled, as with one CTA."""
    return [matmul_protocol("LARGE_16BIT", configs.LARGE_16BIT, variant, "streamk") for variant in MATMUL_CLUSTERS]


def split_protocols() -> list[Protocol]:
    """The split multicast GEMMs (pipeline/multicast.py: both CTAs' producers fill both CTAs' slots, each consumer
    releases both CTAs' empty barriers) in the largest tile under their schedules; under the dynamic scheduler the
    input ring only (its scheduler ring is the leader-issued one cluster_dynamic_protocols checks); and the FP8
    kernels' split forms."""
    protocols = []
    for variant, schedules in SPLIT_SCHEDULES.items():
        for schedule in schedules:
            full = matmul_protocol("LARGE_16BIT", configs.LARGE_16BIT, variant, schedule)
            if schedule == "dynamic":
                full = replace(full, roles=scoped_roles(full.roles, ("input", )), scope=("input", ),
                               config=full.config + " (input ring)")
            protocols.append(full)
    return protocols + [fp8_cluster_protocol(kernel.endswith("blockwise"), m, n, split=True)
                        for kernel, (m, n) in FP8_SPLIT]


def swap_protocols() -> list[Protocol]:
    """Swap-AB (its pipelines are the plain GEMM's; the output stages hold D's transposed tile) in the tiles small M
    takes, M = 1 and 32 (host/configs.py: swap_config), under every scheduler."""
    import torch

    return [matmul_protocol(f"swap_config(M={M})", configs.swap_config(M, torch.bfloat16), variant, schedule)
            for M in (1, 32) for variant in MATMUL_SWAP for schedule in SCHEDULERS]


def pieced_protocols() -> list[Protocol]:
    """The pieced tiles (each variant's tile in its stages: host/configs.py variant_config) under PIECED_SCHEDULES."""
    return [matmul_protocol("PIECED_16BIT", configs.PIECED_WHOLE_16BIT, variant, schedule) for variant in MATMUL_PIECED
            for schedule in PIECED_SCHEDULES]


def pingpong_roles(subtiles: int) -> tuple[Role, ...]:
    """tilepipe/kernels/matmul_pingpong.py: the two MMA roles take the program's tiles in turns (`tiles0`, `tiles1`):
    each runs a tile's k-steps in its turn (the turn order a one-stage ring, turn 0 its producer), passing the turn on
    where the other role has a tile to come (`passes0`, `passes1` tiles first, then `last0`, `last1` without a pass),
    retires them, passes over the other turn's k-steps of the input ring, then writes its own output stages; the load
    role fills every tile's k-steps; a store role per turn."""
    each = subtile_uses(subtiles)

    def mma(turn: int) -> Role:
        side = "producer" if turn == 0 else "consumer"

        def tile(passes: bool) -> tuple:
            signal = (Signal("turns", side), ) if passes else ()
            return (Wait("turns", side, hold=passes), loop("k", "k", *consume("input")), *signal, Step("turns"),
                    Flush("input"), loop("pass", "k", PassOver("input")), *each(*produce(f"output{turn}")))

        first = (loop("pass", "k", PassOver("input")), ) if turn == 1 else ()  # the program's first tile is turn 0's
        return Role(f"mma (turn {turn})", "mma_turn_role", (
            *first, loop("tile", f"passes{turn}", *tile(True)), loop("tile", f"last{turn}", *tile(False)),
            Drain(f"output{turn}")), release_lag=(("input", 1), ))

    load = Role("load", "load_role", (loop("tile", "tiles", loop("k", "k", *produce("input"))), Drain("input")))
    stores = tuple(Role(f"store (turn {turn})", "store_role", (
        loop("tile", f"tiles{turn}", *each(*consume(f"output{turn}"))), )) for turn in (0, 1))
    return (mma(0), mma(1), load) + stores


def pingpong_cases(tiles: tuple[int, ...], ks: tuple[int, ...]) -> tuple[tuple[tuple[str, int], ...], ...]:
    """A program's `tiles` dealt to the turns (turn 0 the odd one out), each turn passing on all but its last tile
    where the other has none to come."""
    cases = []
    for t, k in product(tiles, ks):
        t0, t1 = -(-t // 2), t // 2
        cases.append((("tiles", t), ("tiles0", t0), ("tiles1", t1), ("passes0", t1), ("last0", t0 - t1),
                      ("passes1", t0 - 1 if t0 == t1 else t1), ("last1", 1 if t0 == t1 else 0), ("k", k)))
    return tuple(cases)


def pingpong_protocols() -> list[Protocol]:
    """The ping-pong GEMM (host/configs.py PINGPONG_16BIT and its whole-stage form, 5 stages) in each epilogue, on 1
    to 4 tiles of a program (the turns' counts one apart) of 1 and stages + 1 k-steps."""
    protocols = []
    for cfg in (configs.PINGPONG_16BIT, replace(configs.PINGPONG_16BIT, stages=5, epilogue_n=None)):
        plan = pingpong_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "bf16", "bf16", True,
                                cfg.epilogue_n)
        config = f"PINGPONG_16BIT stages={cfg.stages} epilogue_n={cfg.epilogue_n}"
        for variant, args in MATMUL_PINGPONG.items():
            gated = columns_in(args.get("epilogue"))  # a gated epilogue writes half the sub-tiles, D in sub-tiles only
            if gated > 1 and cfg.epilogue_n is None:
                continue
            protocols.append(Protocol(variant, config, plan_storages(plan),
                                      pingpong_roles(d_subtiles(cfg, args.get("epilogue"))),
                                      pingpong_cases((1, 2, 3, 4), (1, cfg.stages + 1)),
                                      lambda cfg=cfg, args=args: matmul_spec(cfg, b_kmajor=True, **args)))
    return protocols


def fused_protocols() -> list[Protocol]:
    """The fused epilogues' variants (kernels/catalogue.py: the activations under ACTIVATION_SCHEDULES, the gated
    ones under GATED_SCHEDULES, the quantizing ones static) in the tile their options give (D in sub-tiles of
    LARGE_SUBTILED_16BIT's tile)."""
    return [matmul_protocol("LARGE_SUBTILED_16BIT", configs.LARGE_SUBTILED_16BIT, variant, schedule)
            for variants, schedules in ((MATMUL_ACTIVATIONS, ACTIVATION_SCHEDULES), (MATMUL_GATED, GATED_SCHEDULES),
                                        (MATMUL_QUANTIZING, ("static", )))
            for variant in variants for schedule in schedules]


def fp8_protocols() -> list[Protocol]:
    """tilepipe/kernels/matmul_fp8.py in every configuration tilepipe.api.fp8 may choose (bf16 and fp32 output),
    under the static and the stream-K schedule (which adds the epilogue-load role: streamk_roles)."""
    import torch

    from tilepipe.kernels.matmul_fp8 import fp8_plan, scaled_spec
    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec

    protocols = []
    for blockwise in (False, True):
        for out_dtype, c_dtype in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
            for cfg, schedule in product(fp8_configs(blockwise, out_dtype), ("static", "streamk")):
                streamk = schedule == "streamk"
                plan = fp8_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "fp8e4nv",
                                   "fp8e4nv", c_dtype, blockwise, streamk=streamk)
                fns = ("blockwise_mma_role", "blockwise_load_role") if blockwise else ("scaled_mma_role", )
                roles, cases = ((streamk_roles(False, *fns), streamk_cases(cfg.stages, partial_subtiles(c_dtype)))
                                if streamk else (matmul_roles(False, *fns), tile_cases(cfg.stages)))
                spec = ((lambda cfg=cfg, c=c_dtype, s=schedule: blockwise_spec(cfg, "fp8e4nv", "fp8e4nv", c, s))
                        if blockwise else
                        (lambda cfg=cfg, c=c_dtype, s=schedule: scaled_spec(cfg, "fp8e4nv", "fp8e4nv", c, True, s)))
                name = f"{cfg.block_m}x{cfg.block_n} stages={cfg.stages} -> {c_dtype}"
                kernel = "matmul_fp8 " + ("blockwise" if blockwise else "scaled") + (" streamk" if streamk else "")
                protocols.append(Protocol(kernel, name, plan_storages(plan), roles, cases, spec))
    protocols += [fp8_cluster_protocol(blockwise, m, n) for blockwise in (False, True) for m, n in ((2, 1), (1, 2))]
    swap = configs.swap_config(32, torch.bfloat16, kernel="scaled")  # swap-AB: D's tile transposed in the outputs
    for schedule in ("static", "streamk"):
        streamk = schedule == "streamk"
        plan = fp8_plan.fn(swap.block_m, swap.block_n, swap.block_k, swap.stages, swap.c_stages, "fp8e4nv", "fp8e4nv",
                           "bf16", swap_ab=True, streamk=streamk)
        roles, cases = ((streamk_roles(False, "scaled_mma_role"), streamk_cases(swap.stages, partial_subtiles("bf16")))
                        if streamk else (matmul_roles(False, "scaled_mma_role"), tile_cases(swap.stages)))
        protocols.append(Protocol("matmul_fp8 scaled swap-AB" + (" streamk" if streamk else ""),
                                  f"swap_config(M=32) stages={swap.stages} -> bf16", plan_storages(plan), roles, cases,
                                  lambda s=schedule: scaled_spec(swap, "fp8e4nv", "fp8e4nv", "bf16", True, s)))
    return protocols


def fp8_cluster_protocol(blockwise: bool, m: int, n: int, split: bool = False) -> Protocol:
    """An FP8 kernel (per-tensor/per-row scales, or blockwise) in an `m` x `n` cluster at its largest bf16 tile:
    both CTAs' roles over the multicast input ring (`split`: the split ring), blockwise with the scales in its
    stages, up to two tiles."""
    import torch

    from tilepipe.kernels.matmul_fp8 import fp8_plan, scaled_spec
    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec

    cfg = fp8_configs(blockwise, torch.bfloat16)[0]
    plan = fp8_plan.fn(cfg.block_m * m, cfg.block_n * n, cfg.block_k, cfg.stages, cfg.c_stages, "fp8e4nv", "fp8e4nv",
                       "bf16", blockwise, m, n, split=split)
    pair = replace(cfg, cluster_m=m, cluster_n=n, split_multicast=split)
    fns = ("blockwise_mma_role", "blockwise_load_role") if blockwise else ("scaled_mma_role", )
    spec = ((lambda: blockwise_spec(pair, "fp8e4nv", "fp8e4nv", "bf16")) if blockwise else
            (lambda: scaled_spec(pair, "fp8e4nv", "fp8e4nv", "bf16", True)))
    return Protocol(f"matmul_fp8 {'blockwise' if blockwise else 'scaled'} cluster",
                    f"{m}x{n}{' split' if split else ''} {cfg.block_m}x{cfg.block_n} stages={cfg.stages} -> bf16",
                    plan_storages(plan),
                    matmul_roles(False, *fns), trip_cases(tiles=(1, 2), k=(1, cfg.stages + 1)), spec, ctas=2)


def sm100_roles(has_c: bool, subtiles: int, clc: bool = False) -> tuple[Role, ...]:
    """tilepipe/kernels/sm100_matmul.py: epilogue, load, mma (and epilogue_load with C, the scheduler with CLC). The
    epilogue frees a tile's accumulator after its last TMEM load, before it consumes the last C sub-tile. A tcgen05
    commit (the input release, the accumulator signal) is a Commit: it lands at any time after it is issued, in issue
    order, as the hardware makes it once the MMAs before it completed. A CLC response lands where it is asked for. Under
    CLC every role takes its next tile from the ring after each tile (the last take is the "nothing cancelled" one),
    the load role pacing the scheduler through the throttle pair once per tile it starts."""
    with_c = (lambda *body: body) if has_c else (lambda *body: ())
    with_clc = (lambda *body: body) if clc else (lambda *body: ())
    take = with_clc(*consume("clc"))
    drain = Wait("output", "consumer"), *with_c(loop("sub", subtiles - 1, *consume("epi_load"))), Signal(
        "output", "consumer"), *with_c(*consume("epi_load")), Step("output")
    epilogue = Role("epilogue", "epilogue_role", (loop("tile", "tiles", *drain, *take), ))
    load = Role("load", "load_role", (
        loop("tile", "tiles", *with_clc(*produce("clc_throttle")), loop("k", "k", *produce("input")),
             *with_c(*produce("load_order")), *take), Drain("input"), *with_c(Drain("load_order"))))
    committed = Wait("input", "consumer"), Commit("input", "consumer"), Step("input")  # each MMA's commit frees it
    mma = Role("mma", "mma_role", (
        loop("tile", "tiles", Wait("output", "producer"), loop("k", "k", *committed), Commit("output", "producer"),
             Step("output"), *take), Drain("output")))
    epilogue_load = Role("epilogue_load", "epilogue_load_role", (
        loop("tile", "tiles", *consume("load_order"), loop("sub", subtiles, *produce("epi_load")), *take),
        Drain("epi_load")))
    scheduler = Role("scheduler", "clc_scheduler_role", (
        loop("tile", "tiles", *consume("clc_throttle"), *produce("clc")), Drain("clc")))
    return (epilogue, load, mma) + ((epilogue_load, ) if has_c else ()) + ((scheduler, ) if clc else ())


def sm100_protocols() -> list[Protocol]:
    """tilepipe/kernels/sm100_matmul.py (compiled for sm_100a, never run) over its plan's pipelines (sm100_roles):
    each SM100 configuration and epilogue under the static scheduler, and the large tile's under CLC too. The bias
    epilogue has the plain one's roles and pipelines and is left out; so is fp32 C under CLC (C's roles, fewer
    stages), whose ~1M states per configuration would double the checker's time. The FP8 kernel
    (sm100_scaled_matmul_kernel) runs the plain epilogue's roles over its own plan, at each FP8 tile; so does the
    block-scaled one (sm100_block_scaled_protocols); the blockwise one has roles of its own
    (sm100_blockwise_protocols)."""
    from tilepipe.kernels.catalogue import SM100_EPILOGUES
    from tilepipe.kernels.matmul_fp8 import scaled_spec
    from tilepipe.kernels.sm100_matmul import EPILOGUE_N, sm100_matmul_spec, sm100_plan
    from tilepipe.schedulers import SM100_SCHEDULERS

    protocols = []
    for cfg, (variant, args), schedule in product(configs.SM100_CONFIGS, SM100_EPILOGUES.items(), SM100_SCHEDULERS):
        if "bias_dtype" in args or schedule == "clc" and (cfg != configs.SM100_CONFIGS[0] or "source_dtype" in args):
            continue
        has_c, clc = args.get("has_c", False), schedule == "clc"
        fitted = sm100_fitted(cfg, args["dtype"], args["c_dtype"], has_c, args.get("source_dtype"), clc)
        plan = sm100_plan.fn(fitted.block_m, fitted.block_n, fitted.block_k, fitted.stages, fitted.c_stages,
                             args["dtype"], args["c_dtype"], True,
                             src_dtype=args.get("source_dtype", args["c_dtype"]) if has_c else None, clc=clc)
        protocols.append(Protocol(
            "sm100_matmul_kernel", f"{cfg.block_m}x{cfg.block_n} stages={fitted.stages} {variant} {schedule}",
            plan_storages(plan), sm100_roles(has_c, cfg.block_n // EPILOGUE_N, clc), tile_cases(fitted.stages),
            lambda cfg=fitted, args=args, schedule=schedule: sm100_matmul_spec(cfg, b_kmajor=True,
                                                                               schedule=schedule, **args)))
    for cfg in configs.SM100_FP8_CONFIGS:  # the FP8 kernel: the plain epilogue's roles, its scales read in place
        fitted = sm100_fitted(cfg, "fp8e4nv", "bf16")
        plan = sm100_plan.fn(fitted.block_m, fitted.block_n, fitted.block_k, fitted.stages, fitted.c_stages,
                             "fp8e4nv", "bf16", True)
        protocols.append(Protocol(
            "sm100_scaled_matmul_kernel", f"{cfg.block_m}x{cfg.block_n} stages={fitted.stages} per-row static",
            plan_storages(plan), sm100_roles(False, cfg.block_n // EPILOGUE_N), tile_cases(fitted.stages),
            lambda cfg=fitted: scaled_spec(cfg, "fp8e4nv", "fp8e4nv", "bf16", True, target="sm_100a")))
    return protocols + sm100_pair_protocols() + sm100_blockwise_protocols() + sm100_block_scaled_protocols()


def sm100_blockwise_roles() -> tuple[Role, ...]:
    """tilepipe/kernels/sm100_blockwise.py: per K tile the epilogue consumes a TMEM partial buffer ('output') and a
    scale stage ('scales'); the load role fills a scale stage, then an input stage; the MMA role takes a free partial
    buffer and an input stage, and its two commits (the MMAs' frees the input stage, the next hands the partial on)
    land later, in that order."""
    epilogue = Role("epilogue", "promote_role", (loop("tile", "tiles", loop("k", "k", *consume("output"),
                                                                              *consume("scales"))), ))
    load = Role("load", "scale_ring_load_role", (
        loop("tile", "tiles", loop("k", "k", *produce("scales"), *produce("input"))), Drain("input"),
        Drain("scales")))
    mma = Role("mma", "partial_mma_role", (
        loop("tile", "tiles", loop("k", "k", Wait("output", "producer"), Wait("input", "consumer"),
                                   Commit("input", "consumer"), Step("input"), Commit("output", "producer"),
                                   Step("output"))), Drain("output")))
    return epilogue, load, mma


def sm100_blockwise_protocols() -> list[Protocol]:
    """tilepipe/kernels/sm100_blockwise.py (compiled for sm_100a, never run) over its plan, in the configuration
    matmul_fp8 takes for each output dtype (bf16 and fp32: the stage counts differ)."""
    import torch

    from tilepipe.kernels.matmul_fp8_blockwise import blockwise_spec
    from tilepipe.kernels.sm100_blockwise import sm100_blockwise_plan

    protocols = []
    for out_dtype, c_dtype in ((torch.bfloat16, "bf16"), (torch.float32, "fp32")):
        cfg = configs.sm100_blockwise_config(out_dtype)
        plan = sm100_blockwise_plan.fn(cfg.block_m, cfg.block_n, cfg.stages, "fp8e4nv", "fp8e4nv", c_dtype)
        protocols.append(Protocol(
            "sm100_blockwise_matmul_kernel", f"{cfg.block_m}x{cfg.block_n} stages={cfg.stages} -> {c_dtype} static",
            plan_storages(plan), sm100_blockwise_roles(), tile_cases(cfg.stages),
            lambda cfg=cfg, c=c_dtype: blockwise_spec(cfg, "fp8e4nv", "fp8e4nv", c, target="sm_100a")))
    return protocols


def sm100_pair_protocols() -> list[Protocol]:
    """sm100_matmul_kernel's two-CTA form (compiled for sm_100a, never run): the plain roles in both CTAs of the pair
    over its plan's two-CTA MMA rings (the lead CTA's MMA role waits, issues and commits for the pair: checker.py), up
    to two tiles, each epilogue of the catalogue's SM100_PAIR (the bias one has the plain one's pipelines)."""
    from tilepipe.kernels.catalogue import SM100_PAIR
    from tilepipe.kernels.sm100_matmul import EPILOGUE_N, sm100_matmul_spec, sm100_plan

    protocols = []
    for variant, args in SM100_PAIR.items():
        has_c, cfg = args.get("has_c", False), configs.SM100_PAIR_CONFIGS[0]
        fitted = sm100_fitted(cfg, args["dtype"], args["c_dtype"], has_c)
        plan = sm100_plan.fn(fitted.tile_m, fitted.block_n, fitted.block_k, fitted.stages, fitted.c_stages,
                             args["dtype"], args["c_dtype"], True, src_dtype=args["c_dtype"] if has_c else None,
                             cluster_m=fitted.cluster_m)
        protocols.append(Protocol(
            "sm100_matmul_kernel 2-CTA", f"{fitted.tile_m}x{fitted.block_n} stages={fitted.stages} {variant} static",
            plan_storages(plan), sm100_roles(has_c, cfg.block_n // EPILOGUE_N),
            trip_cases(tiles=(1, 2), k=(1, fitted.stages + 1)),
            lambda cfg=fitted, args=args: sm100_matmul_spec(cfg, b_kmajor=True, **args), ctas=2))
    return protocols


def sm100_block_scaled_protocols() -> list[Protocol]:
    """tilepipe/kernels/sm100_block_scaled.py (compiled for sm_100a, never run): the plain sm_100a roles (scales travel
    in the input stages, their TMEM copies are the MMA role's own) over its plan, each format at each tile."""
    from tilepipe.kernels.catalogue import SM100_BLOCK_SCALED
    from tilepipe.kernels.sm100_block_scaled import FORMATS, block_scaled_spec
    from tilepipe.kernels.sm100_matmul import EPILOGUE_N, sm100_plan

    protocols = []
    for cfg, fmt in product(configs.SM100_BLOCK_SCALED_CONFIGS, (v["fmt"] for v in SM100_BLOCK_SCALED.values())):
        data = FORMATS[fmt].dtype
        fitted = configs.sm100_block_scaled_fitted(cfg, fmt, data, "bf16")
        plan = sm100_plan.fn(fitted.block_m, fitted.block_n, fitted.block_k, fitted.stages, fitted.c_stages, data,
                             "bf16", True, scales=FORMATS[fmt].scales(fitted.block_k))
        protocols.append(Protocol(
            "sm100_block_scaled_kernel", f"{fmt} {cfg.block_m}x{cfg.block_n} stages={fitted.stages} static",
            plan_storages(plan), sm100_roles(False, cfg.block_n // EPILOGUE_N), tile_cases(fitted.stages),
            lambda cfg=fitted, fmt=fmt, data=data: block_scaled_spec(cfg, fmt, data, data, "bf16")))
    return protocols


def stress_protocol(stages: int, consumers: int) -> Protocol:
    """pipeline_demo.stress_kernel: one producer, `consumers` consumer roles, one item per loop trip."""
    names = [f"consumer{i}" for i in range(consumers)]
    ring = BarrierPair(stages, "stress", "producer", "+".join(names), 1, consumers, "generic", "generic")
    items = lambda *body: loop("item", "items", *body)
    roles = [Role("consumer0", "stress_default_one", (items(*consume("stress")), )),
             Role("producer", "stress_producer", (items(*produce("stress")), Drain("stress")))]
    roles += [Role(name, "stress_consumer", (items(*consume("stress")), )) for name in names[1:]]
    return Protocol("pipeline_demo stress", f"stages={stages} consumers={consumers}", (ring, ), tuple(roles),
                    trip_cases(items=(1, stages + 1, 2 * stages + 1)),
                    lambda: pipeline_demo.stress_spec("handles", stages, consumers))


def wgmma_protocol(stages: int) -> Protocol:
    """pipeline_demo.wgmma_kernel: TMA loader -> async wgmma consumer with a release lag of 1."""
    plan = pipeline_demo.wgmma_plan.fn(stages, [128, 64], [64, 64], "fp16")
    mma = Role("mma", "wgmma_consumer", (loop("tile", "tiles", loop("k", "k", *consume("operands")),
                                              Flush("operands")), ), release_lag=(("operands", 1), ))
    load = Role("load", "wgmma_loader", (loop("tile", "tiles", loop("k", "k", *produce("operands"))),
                                         Drain("operands")))
    return Protocol("pipeline_demo wgmma", f"stages={stages}", plan_storages(plan), (mma, load), tile_cases(stages),
                    lambda: pipeline_demo.wgmma_spec(stages))


def grouped_protocols() -> list[Protocol]:
    """grouped_matmul_kernel in each catalogue form (kernels/grouped_matmul.py): matmul's roles without C over
    matmul_plan's pipelines, D's sub-tiles a stage each (a gated epilogue's half as many), its own mma and store
    roles (a tile that spills past its group passes its stages through unwritten: the same pipeline steps), under the
    dynamic schedule fed by the scheduler ring (ring_fed); its tiles' number comes from the device
    (schedulers/grouped.py), which the tile cases cover as any tile count does."""
    from tilepipe.api.grouped import variant_spec

    protocols = []
    for name, options in shipped_forms("grouped_matmul_kernel"):
        cfg, _ = variant_spec(options)
        dynamic = options["schedule"] == "dynamic"
        plan = matmul_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, options["dtype"],
                              options["c_dtype"], True, dynamic=dynamic, epilogue_n=cfg.epilogue_n)
        subtiles = d_subtiles(cfg, options.get("epilogue"))
        mma, load, store = matmul_roles(False, "grouped_mma_role", subtiles=subtiles)
        roles = (mma, load, replace(store, function="grouped_store_role"))
        roles = ring_fed(roles) if dynamic else roles
        protocols.append(Protocol("grouped_matmul_kernel", f"{name} stages={cfg.stages} c_stages={cfg.c_stages}",
                                  plan_storages(plan), roles, tile_cases(cfg.stages),
                                  lambda options=options: variant_spec(options)[1]))
    return protocols


def wgrad_protocols() -> list[Protocol]:
    """grouped_wgrad_kernel in its catalogue form (kernels/grouped_wgrad.py): the grouped GEMM's protocol (matmul's
    roles without C, D's sub-tiles a stage each, a tile that spills past its group's rows passing its stages through
    unwritten) over wgrad_plan's pipelines. Each tile's k-steps are its group's, from the device: an empty group's
    tile has none, so the cases include tiles of no k-steps."""
    from tilepipe.api.grouped_wgrad import wgrad_variant_spec
    from tilepipe.kernels.grouped_wgrad import wgrad_plan

    protocols = []
    for name, options in GROUPED_WGRAD.items():
        cfg, _ = wgrad_variant_spec(options)
        plan = wgrad_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, options["dtype"],
                             options["c_dtype"], options["a_kmajor"], options["b_kmajor"], cfg.epilogue_n)
        mma, load, store = matmul_roles(False, "wgrad_mma_role", subtiles=d_subtiles(cfg))
        protocols.append(Protocol("grouped_wgrad_kernel", f"{name} stages={cfg.stages} c_stages={cfg.c_stages}",
                                  plan_storages(plan), (mma, load, replace(store, function="grouped_store_role")),
                                  trip_cases(tiles=(1, 2, 3), k=(0, 1, cfg.stages, cfg.stages + 1)),
                                  lambda options=options: wgrad_variant_spec(options)[1]))
    return protocols


def grouped_fp8_protocols() -> list[Protocol]:
    """kernels/grouped_fp8.py in its catalogue forms: the grouped GEMM's protocol (matmul's roles without C, a tile
    that spills past its group passing its stages through unwritten) with FP8's pipelines: per-row over matmul_plan's
    (D's sub-tiles a stage each), blockwise over fp8_plan's with matmul_fp8_blockwise's load role (the scales in the
    operands' stage, the consumer side generic) and D's whole tile a stage; under the dynamic schedule fed by the
    scheduler ring (ring_fed)."""
    from tilepipe.api.grouped_fp8 import fp8_variant_spec
    from tilepipe.kernels.matmul_fp8 import fp8_plan

    protocols = []
    for name, options in shipped_forms("grouped_mm_fp8"):
        cfg, _ = fp8_variant_spec(options)
        dynamic = options["schedule"] == "dynamic"
        if options["blockwise"]:
            plan = fp8_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "fp8e4nv", "fp8e4nv",
                               options["c_dtype"], True, dynamic=dynamic)
            roles = matmul_roles(False, "grouped_mma_role", "blockwise_load_role")
        else:
            plan = matmul_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "fp8e4nv",
                                  options["c_dtype"], True, dynamic=dynamic, epilogue_n=cfg.epilogue_n)
            roles = matmul_roles(False, "grouped_mma_role", subtiles=d_subtiles(cfg))
        mma, load, store = roles
        roles = (mma, load, replace(store, function="grouped_store_role"))
        protocols.append(Protocol("grouped_mm_fp8", f"{name} stages={cfg.stages} c_stages={cfg.c_stages}",
                                  plan_storages(plan), ring_fed(roles) if dynamic else roles, tile_cases(cfg.stages),
                                  lambda options=options: fp8_variant_spec(options)[1]))
    return protocols


def tp_protocols() -> list[Protocol]:
    """tilepipe.distributed's kernels in their catalogue form (distributed/plan.py catalogue_spec): matmul's roles over matmul_plan's
    pipelines, the all-gather's without C, the reduce-scatter ring's with C (its epilogue-load role brings another
    rank's partial sums). Their flag waits on other GPUs are verify/tp_protocol.py's model, not a pipeline here."""
    from tilepipe.distributed.plan import catalogue_spec

    protocols = []
    for kernel in TENSOR_PARALLEL:
        cfg, _ = catalogue_spec(kernel)
        has_c = kernel == "rs_matmul_kernel"
        plan = matmul_plan.fn(cfg.block_m, cfg.block_n, cfg.block_k, cfg.stages, cfg.c_stages, "bf16", "bf16", False,
                              has_c, epilogue_n=cfg.epilogue_n)
        protocols.append(Protocol(kernel, f"LARGE_SUBTILED_16BIT stages={cfg.stages} c_stages={cfg.c_stages}",
                                  plan_storages(plan), matmul_roles(has_c, subtiles=d_subtiles(cfg)),
                                  tile_cases(cfg.stages), lambda kernel=kernel: catalogue_spec(kernel)[1]))
    return protocols


def shipped_protocols() -> list[Protocol]:
    """Every matmul variant in every tilepipe.host.configs configuration under every scheduler (stream-K within one
    program), the two-CTA cluster GEMMs (static, dynamic over its scheduler ring, and stream-K; split multicast:
    split_protocols), swap-AB, the pieced tiles, the ping-pong GEMM, the grouped GEMM (FP8 too), the fused epilogues, the
    tensor-parallel kernels, the FP8 kernels, the sm_100a GEMM (its two-CTA form too), the stress kernel and the
    wgmma kernel."""
    protocols = [matmul_protocol(name, cfg, variant, schedule) for name, cfg in matmul_configs().items()
                 for variant in MATMUL_EPILOGUES for schedule in SCHEDULERS]
    protocols += cluster_protocols() + cluster_dynamic_protocols() + cluster_streamk_protocols() + swap_protocols()
    protocols += split_protocols()
    protocols += pieced_protocols() + pingpong_protocols() + grouped_protocols() + wgrad_protocols() + fused_protocols()
    protocols += grouped_fp8_protocols()
    protocols += tp_protocols()
    protocols += fp8_protocols()
    protocols += sm100_protocols()
    protocols += [stress_protocol(stages, consumers) for stages in STRESS_STAGES for consumers in (1, 2)]
    return protocols + [wgmma_protocol(stages) for stages in WGMMA_STAGES]


def check_shipped_kernels(trace: bool = True) -> list[CheckResult]:
    """Check every kernel configuration the library ships (in parallel: checker.check_all)."""
    return check_all(shipped_protocols, trace)


UNCHECKED = {
    "restage": "the restaging copy has no pipelines",
    "shift": "the shifted scale copies have no pipelines",
}
"""Shipped variants the checker does not model, by what their names contain, and why."""


def unchecked_reason(variant: Variant) -> str | None:
    """Why the checker does not cover `variant` (None: it does, through a protocol of its kernel and epilogue)."""
    return next((why for key, why in UNCHECKED.items() if key in variant.name.split()), None)


def covering_kernel(variant: Variant) -> str:
    """The Protocol.kernel name that covers a checked catalogue variant."""
    schedule = variant.options.get("schedule", "static")
    if variant.kernel == "matmul_kernel":  # static: the epilogue's (or cluster's) protocol; dynamic, stream-K: the
        if schedule == "dynamic" and "cluster" in variant.options and variant.options.get("has_c"):
            return variant.name.replace("+C ", "")  # the plain cluster's scheduler ring: cluster_dynamic_protocols
        # D in sub-tiles: its epilogue's protocols in their config's (a pieced tile's: its own variant's)
        name = variant.name if "tile" in variant.options else variant.name.replace(" subtiled", "")
        return name if schedule != "static" else name.rsplit(" ", 1)[0]  # variant's own
    return f"{variant.kernel} streamk" if schedule == "streamk" else variant.kernel  # FP8: stream-K adds a role
