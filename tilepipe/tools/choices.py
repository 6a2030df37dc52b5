"""Every choice the cost model makes on a grid of a few thousand calls, one snapshot file per GPU model, so a change to
the model (its code, or a model file's constants) shows as the list of calls it moves (tests/test_choices.py compares
the code with the snapshots).

    python -m tilepipe.tools.choices --gpu h200            # list the moves against the committed snapshot
    python -m tilepipe.tools.choices --gpu h200 --write    # accept them: rewrite the snapshot (commit it with its A/B)
    python -m tilepipe.tools.choices --gpu h200 --ab h100  # on the GPU: time each call the h200 model moves from the
                                                           # h100 model's choice, both choices interleaved
    python -m tilepipe.tools.choices --gpu h200 --dump old.json   # the code's choices, whole configs (on the CPU,
    python -m tilepipe.tools.choices --gpu h200 --ab-file old.json  # at the commit before a change), then on the GPU
                                                           # with the change: time each call it moves from old.json
    python -m tilepipe.tools.choices --explain 384 14336 4096  # why: each call's rounds of candidates at that shape

A choice is the configuration and schedule matmul (bf16 or fp32 D; with or without C, an fp32 C too; B K-major or
row-major) or matmul_fp8 (per-tensor or blockwise scales) takes without an autotune entry: host/configs.py's
modelled_config, schedule_for, fp8_config_for and fp8_schedule_for, for the GPU model of host/gpus/<model>.json. Each
is the last of its rounds' winners (host/configs.py: Candidate, fastest): --explain prints every round's candidates
with their predicted time, handicap and handicapped time, the winner marked.
"""

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from tilepipe.host.configs import (MatmulConfig, Round, fp8_config_for, fp8_round, fp8_schedule_for, modelled_config,
                                   modelled_rounds, predict_us, schedule_for)
from tilepipe.host.gpus import H100, GpuModel, gpu_models
from tilepipe.verify.report import describe

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
SNAPSHOTS = {"h100": FIXTURES / "choices-hopper.json", "h200": FIXTURES / "choices-h200.json"}
"""The committed snapshot of each GPU model the grid test covers."""
GRID_M = (1, 8, 16, 32, 48, 64, 96, 128, 129, 192, 256, 320, 384, 448, 512, 640, 768, 1000, 1024, 1536, 2048, 2560,
          3072, 4096, 8192)
GRID_NK = ((1024, 1024), (2048, 7168), (4096, 4096), (4096, 14336), (6144, 4096), (7168, 2048), (8960, 1536),
           (14336, 4096), (2560, 2560), (4000, 3500), (5120, 5120))
BF16_FORMS = (("bf16", "", True), ("bf16", "", False), ("fp32", "", True), ("bf16", "+C", True), ("fp32", "+C", True),
              ("bf16", "+C fp32", True))
"""matmul's calls per shape: (D's dtype, C, B K-major)."""
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


@dataclass(frozen=True)
class Call:
    """One call of the grid: matmul in one of BF16_FORMS (`d`, `c`, `b_kmajor`), or matmul_fp8 (`scaling`)."""
    M: int
    N: int
    K: int
    d: str = "bf16"
    c: str = ""
    b_kmajor: bool = True
    scaling: str = ""  # "per-tensor" or "blockwise": a matmul_fp8 call

    @property
    def name(self) -> str:
        size = f"{self.M}x{self.N}x{self.K}"
        if self.scaling:
            return f"matmul_fp8 {self.scaling} {size}"
        layout = "B K-major" if self.b_kmajor else "B row-major"
        return f"matmul {size} -> {self.d} {self.c} {layout}".replace("  ", " ")

    def choose(self, gpu: GpuModel) -> tuple[MatmulConfig, str]:
        """The configuration and schedule the model of `gpu` takes for this call."""
        M, N, K = self.M, self.N, self.K
        if self.scaling:
            blockwise = self.scaling == "blockwise"
            cfg = fp8_config_for(M, N, K, blockwise, torch.bfloat16, gpu)
            return cfg, fp8_schedule_for(M, N, K, cfg, blockwise, gpu)
        cfg = modelled_config(M, N, K, torch.bfloat16, DTYPES[self.d], self.b_kmajor, gpu,
                              own_source=self.c == "+C fp32", has_c=bool(self.c))
        return cfg, schedule_for(M, N, K, cfg, gpu)

    def rounds(self, gpu: GpuModel) -> list[Round]:
        """The rounds of candidates behind choose's configuration."""
        if self.scaling:
            return [fp8_round(self.M, self.N, self.K, self.scaling == "blockwise", torch.bfloat16, gpu)]
        return modelled_rounds(self.M, self.N, self.K, torch.bfloat16, DTYPES[self.d], self.b_kmajor, gpu,
                               own_source=self.c == "+C fp32", has_c=bool(self.c))


def calls() -> list[Call]:
    """GRID_M x GRID_NK in matmul's forms (BF16_FORMS) and matmul_fp8's two scalings."""
    return [call for M in GRID_M for N, K in GRID_NK for call in calls_at(M, N, K)]


def choices(gpu: GpuModel = H100) -> dict[str, tuple[MatmulConfig, str]]:
    """{call: (configuration, schedule)} of the model of `gpu` over calls()."""
    return {call.name: call.choose(gpu) for call in calls()}


def grid(gpu: GpuModel = H100) -> dict[str, str]:
    """{call: choice} of the model of `gpu` over calls(), each choice in a few characters."""
    return {name: f"{describe(cfg)} {schedule}" for name, (cfg, schedule) in choices(gpu).items()}


def explain(M: int, N: int, K: int, gpu: GpuModel = H100) -> list[str]:
    """Lines saying why each call of the grid's forms at M x N x K chose what it did: each round's candidates in tie
    order with predicted time, handicap and handicapped time (the winner marked *), then what runs."""
    lines = []
    for call in calls_at(M, N, K):
        lines.append(call.name)
        for round_ in call.rounds(gpu):
            winner = round_.winner
            lines.append(f"  {round_.question} round:")
            lines += [f"  {'*' if candidate is winner else ' '} {describe(candidate.config)} {candidate.schedule}: "
                      f"{candidate.time_us:.2f} us x {candidate.handicap:.2f} = {candidate.cost_us:.2f} us"
                      + (f"  ({candidate.why})" if candidate.why else "") for candidate in round_.candidates]
        cfg, schedule = call.choose(gpu)
        lines.append(f"  runs {describe(cfg)} {schedule}")
    return lines


def calls_at(M: int, N: int, K: int) -> list[Call]:
    """The grid's calls at one shape: matmul in BF16_FORMS, matmul_fp8 in both scalings."""
    return [*(Call(M, N, K, d, c, b_kmajor) for d, c, b_kmajor in BF16_FORMS),
            Call(M, N, K, scaling="per-tensor"), Call(M, N, K, scaling="blockwise")]


def moves(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Each call whose choice differs between two grids, as "call: before -> after" (new or dropped calls too)."""
    return [f"{call}: {before.get(call, '(none)')} -> {after.get(call, '(none)')}"
            for call in sorted(before.keys() | after.keys()) if before.get(call) != after.get(call)]


def dump(gpu: GpuModel) -> dict[str, dict]:
    """{call: {"config": its MatmulConfig's fields, "schedule": ...}} of the model of `gpu` over calls(): the choices of
    one commit, which ab_moves can time against another's."""
    return {name: {"config": asdict(cfg), "schedule": schedule} for name, (cfg, schedule) in choices(gpu).items()}


def from_dump(dumped: dict[str, dict]) -> Callable[[Call], tuple[MatmulConfig, str] | None]:
    """The chooser of a dump's choices (a call it lacks keeps `after`'s: no move)."""
    def choose(call: Call) -> tuple[MatmulConfig, str] | None:
        found = dumped.get(call.name)
        return None if found is None else (MatmulConfig(**found["config"]), found["schedule"])
    return choose


def ab_moves(before: Callable[[Call], tuple[MatmulConfig, str] | None], after: GpuModel, pairs: int = 3,
             rep_ms: int = 25) -> list[dict]:
    """On this GPU: each call whose choice moves from `before`'s (a chooser: another model's, or a dump's) to the
    model of `after`'s, both choices run through the public op (config= and scheduler=) on the same random inputs,
    timed in interleaved pairs (tools.bench.compare); one record per move with both choices, their predicted times
    under `after` and the measured ones (medians)."""
    from tilepipe.tools.bench import compare

    records = []
    for call in calls():
        (cfg_b, sched_b) = call.choose(after)
        (cfg_a, sched_a) = before(call) or (cfg_b, sched_b)
        if (cfg_a, sched_a) == (cfg_b, sched_b):
            continue
        run_a, run_b = _runs(call, (cfg_a, sched_a), (cfg_b, sched_b))
        flops = 2.0 * call.M * call.N * call.K
        after_tflops, before_tflops, ratio, ratios = compare(run_b, run_a, flops, pairs, rep_ms, settle=1)
        in_bytes = 1 if call.scaling else 2
        records.append({"call": call.name, "before": f"{describe(cfg_a)} {sched_a}",
                        "after": f"{describe(cfg_b)} {sched_b}",
                        "predicted_before_us": round(predict_us(call.M, call.N, call.K, cfg_a, sched_a, after,
                                                                in_bytes), 2),
                        "predicted_after_us": round(predict_us(call.M, call.N, call.K, cfg_b, sched_b, after,
                                                               in_bytes), 2),
                        "before_us": round(flops / before_tflops * 1e-6, 2),
                        "after_us": round(flops / after_tflops * 1e-6, 2),
                        "speedup": round(ratio, 4), "pair_speedups": ratios})
        print(f"{call.name}: {records[-1]['before']} -> {records[-1]['after']}: {ratio:.3f}x", flush=True)
    return records


def _runs(call: Call, *choices: tuple[MatmulConfig, str]) -> list:
    """One callable per choice running `call` on shared random CUDA inputs."""
    import tilepipe
    from tilepipe.tools.bench import _operands
    from tilepipe.tools.bench_fp8 import _fp8_operands, _scales

    M, N, K = call.M, call.N, call.K
    if call.scaling:
        a, b = _fp8_operands(M, N, K)
        scale_a, scale_b = _scales(M, N, K, "blockwise" if call.scaling == "blockwise" else "tensor")
        return [lambda cfg=cfg, s=s: tilepipe.matmul_fp8(a, b, scale_a, scale_b, config=cfg, scheduler=s)
                for cfg, s in choices]
    a, b = _operands(M, N, K, "kmajor" if call.b_kmajor else "rowmajor")
    c = None if not call.c else torch.randn(M, N, device="cuda",
                                            dtype=torch.float32 if call.c == "+C fp32" else DTYPES[call.d])
    return [lambda cfg=cfg, s=s: tilepipe.matmul(a, b, out_dtype=DTYPES[call.d], c=c, beta=1.0 if call.c else 0.0,
                                                 config=cfg, scheduler=s) for cfg, s in choices]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tilepipe.tools.choices", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="h100", choices=sorted(SNAPSHOTS), help="the GPU model (host/gpus/)")
    parser.add_argument("--write", action="store_true", help="rewrite the snapshot with the code's choices")
    parser.add_argument("--ab", metavar="MODEL", choices=sorted(gpu_models()),
                        help="time each move from MODEL's choices to --gpu's on this GPU, into bench/results/")
    parser.add_argument("--dump", metavar="FILE", help="write the code's choices, whole configs, to FILE, then exit")
    parser.add_argument("--ab-file", metavar="FILE",
                        help="time each move from FILE's choices (--dump at another commit) to the code's on this GPU")
    parser.add_argument("--name", help="the results file's name with --ab/--ab-file (default choices-A-to-B)")
    parser.add_argument("--explain", nargs=3, type=int, metavar=("M", "N", "K"),
                        help="print each call's candidates at M x N x K and the winner, then exit")
    args = parser.parse_args(argv)
    gpu = gpu_models()[args.gpu]
    if args.explain:
        if min(args.explain) < 1:
            parser.error(f"--explain: M, N and K must be positive, got {args.explain}")
        print("\n".join(explain(*args.explain, gpu)))
        return 0
    if args.dump:
        Path(args.dump).write_text(json.dumps(dump(gpu), indent=0, sort_keys=True) + "\n")
        print(f"wrote {args.dump}")
        return 0
    if args.ab or args.ab_file:
        from tilepipe.tools.bench import RESULTS_DIR, run_environment

        if args.ab:
            model, name = replace(gpu_models()[args.ab], sms=gpu.sms), f"choices-{args.ab}-to-{args.gpu}"
            before = lambda call: call.choose(model)  # noqa: E731
        else:
            before, name = from_dump(json.loads(Path(args.ab_file).read_text())), f"choices-{Path(args.ab_file).stem}"
        start, name = time.time(), args.name or name
        records = ab_moves(before, gpu)
        path = RESULTS_DIR / f"{name}.json"
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)  # a fresh clone or snapshot has no bench/results
        path.write_text(json.dumps({**run_environment(name), "seconds": round(time.time() - start, 1),
                                    "method": ab_moves.__doc__, "moves": records}, indent=1) + "\n")
        print(f"{len(records)} moves timed: wrote {path}")
        return 0
    now, snapshot = grid(gpu), SNAPSHOTS[args.gpu]
    before = json.loads(snapshot.read_text()) if snapshot.exists() else {}
    listed = moves(before, now)
    print("\n".join(listed) or "no moves", f"\n{len(listed)} of {len(now)} calls move", sep="\n")
    if args.write:
        snapshot.write_text(json.dumps(now, indent=0, sort_keys=True) + "\n")
        print(f"wrote {snapshot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
