"""A model of the tensor-parallel ops' chunk-flag protocol (tilepipe/distributed/workspace.py), explored over every
interleaving (small groups) or many random ones (large groups), so a change to it is checked before a GPU sees it.

Each of W ranks makes `calls` calls. In call n a rank:
  epoch     sets its epoch (n; a seeded "baked" epoch stays 1, as a host constant replayed by a CUDA graph would)
  copies    (its copy engine, in order) for each peer in push order: the chunk into that rank's slot, then the epoch
            into that rank's flag of this rank
  kernel    its own chunk first, read where it lies (no copy, no flag); then each peer's chunk in tile order (rank + 1,
            rank + 2, ...): waits until the chunk's flag holds its epoch, then reads the slot, which must hold call
            n's chunk
  finish    once its copies and its kernel are done, arrives at the group's barrier of call n, and goes on when every
            rank arrived (a seeded "no_barrier" goes on at once)
A rank that "skips" a call (seeded) makes no step of it. Findings: "stale" (a read of another call's chunk), "hang"
(no step can run, naming the rank, the chunk and the peer it waits for).

The reduce-scatter's ring (op "reduce_scatter", distributed/reduce_scatter.py) replaces the copies and the kernel:
one kernel per call walks every chunk c = rank + 1 + s (mod W, s = 0 .. W-1), TILES tiles each, in the staggered
order of schedulers/chunked.py (tile k of step s in slot k + s * LAG), on PROGRAMS programs that take the positions
in turn. Slots and flags come in two sets, call n using set n mod 2 (its epoch's parity). For a tile of step s >= 1 a
program waits until its flag of the tile holds its epoch, then reads its slot of the tile, which must hold rank + 1's
partial sums of call n (at s = 0 it reads nothing: the first chunk's epilogue adds no C). Then (s < W-1) it stores
the tile into rank - 1's slot and sets rank - 1's flag of the tile to its epoch (the store role, once the stores are
written); the own chunk's tiles stay here. No barrier: a rank whose programs are done goes on to its next call. The
ring's seeded fault is "one_set" (every call on set 0).
"""

import random
from dataclasses import dataclass

SEEDS = ("baked_epoch", "no_barrier", "skip", "one_set")


@dataclass(frozen=True)
class TpFinding:
    kind: str  # "stale" or "hang"
    message: str


@dataclass(frozen=True)
class TpResult:
    world: int
    calls: int
    seed: str | None
    states: int  # distinct states visited (exhaustive) or steps taken (random walks)
    findings: tuple[TpFinding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


class _Model:
    """The protocol's steps over a state tuple: per rank (call, stage, epoch, copy pc, kernel pc), then the flags and
    slots (rank x chunk: the epoch / the call whose chunk is there), then the barrier arrivals per call."""

    def __init__(self, world: int, calls: int, seed: str | None) -> None:
        if seed is not None and seed not in SEEDS:
            raise ValueError(f"seed must be None or one of {SEEDS}, got {seed!r}")
        self.world, self.calls, self.seed = world, calls, seed
        self.targets = [[(r - s) % world for s in range(1, world)] for r in range(world)]  # copy order
        self.order = [[(r + s) % world for s in range(world)] for r in range(world)]  # tile order

    def initial(self) -> tuple:
        ranks = tuple((1, "start", 0, 0, 0) for _ in range(self.world))
        zeros = tuple(tuple(0 for _ in range(self.world)) for _ in range(self.world))
        return ranks, zeros, zeros, tuple(0 for _ in range(self.calls + 1))

    def skips(self, rank: int, call: int) -> bool:
        return self.seed == "skip" and rank == self.world - 1 and call == self.calls

    def steps(self, state: tuple):
        """(description, next state) for every step that can run; a "stale" read is a step that reports itself."""
        ranks, _, _, arrived = state
        for r, (call, stage, epoch, *_) in enumerate(ranks):
            if stage == "done" or self.skips(r, call):
                continue
            if stage == "start":
                value = 1 if self.seed == "baked_epoch" else call
                yield f"rank {r} call {call}: epoch {value}", self._rank(state, r, (call, "run", value, 0, 0))
            elif stage == "run":
                yield from self.run_steps(state, r)
            elif stage == "barrier" and (self.seed == "no_barrier" or arrived[call] == self.world):
                after = (call + 1, "start", epoch, 0, 0) if call < self.calls else (call, "done", epoch, 0, 0)
                yield f"rank {r} leaves barrier {call}", self._rank(state, r, after)

    def run_steps(self, state: tuple, r: int):
        """Rank r's copies and kernel steps in its call, then its arrival at the barrier."""
        ranks, flags, slots, arrived = state
        W = self.world
        call, stage, epoch, copy_pc, kernel_pc = ranks[r]
        if copy_pc < 2 * (W - 1):
            peer = self.targets[r][copy_pc // 2]
            table, value = (slots, call) if copy_pc % 2 == 0 else (flags, epoch)
            table = _set(table, peer, r, value)
            new = (ranks, table, slots, arrived) if copy_pc % 2 else (ranks, flags, table, arrived)
            what = "chunk" if copy_pc % 2 == 0 else "flag"
            yield f"rank {r} copies its {what} to rank {peer}", self._rank(
                new, r, (call, stage, epoch, copy_pc + 1, kernel_pc))
        if kernel_pc < W:
            chunk = self.order[r][kernel_pc]
            if chunk == r:
                yield f"rank {r} reads its own chunk", self._rank(state, r, (call, stage, epoch, copy_pc,
                                                                            kernel_pc + 1))
            elif flags[r][chunk] == epoch:
                step = self._rank(state, r, (call, stage, epoch, copy_pc, kernel_pc + 1))
                if slots[r][chunk] != call:
                    yield "stale", (f"rank {r} call {call} read chunk {chunk} holding call "
                                    f"{slots[r][chunk]}'s data (its flag held epoch {epoch})")
                yield f"rank {r} reads chunk {chunk}", step
        if copy_pc == 2 * (W - 1) and kernel_pc == W:
            yield from self.arrive(state, r)

    def arrive(self, state: tuple, r: int):
        """Rank r, done with its call, arrives at the call's barrier."""
        ranks, flags, slots, arrived = state
        call, _, epoch, *pcs = ranks[r]
        count = list(arrived)
        count[call] += 1
        yield f"rank {r} arrives at barrier {call}", self._rank((ranks, flags, slots, tuple(count)), r,
                                                                (call, "barrier", epoch, *pcs))

    def _rank(self, state: tuple, r: int, value: tuple) -> tuple:
        ranks, flags, slots, arrived = state
        return ranks[:r] + (value, ) + ranks[r + 1:], flags, slots, arrived

    def finished(self, state: tuple) -> bool:
        return all(stage == "done" or self.skips(r, call) for r, (call, stage, *_) in enumerate(state[0]))

    def hang(self, state: tuple) -> str:
        """Who waits for what where no step can run."""
        ranks, flags, _, arrived = state
        waits = []
        for r, (call, stage, epoch, copy_pc, kernel_pc) in enumerate(ranks):
            if stage == "run" and kernel_pc < self.world:
                chunk = self.order[r][kernel_pc]
                waits.append(f"rank {r} call {call}: role 'load' waits for chunk {chunk} from peer {chunk} "
                             f"(epoch {epoch}, flag holds {flags[r][chunk]})")
            elif stage == "barrier":
                waits.append(f"rank {r} call {call}: waits at the barrier ({arrived[call]} of {self.world} arrived)")
        return "; ".join(waits) or "no rank waits"


class _RingModel(_Model):
    """The reduce-scatter's ring: a rank's programs each walk a list of actions on (chunk, tile) keys, ("read", key)
    but for the first chunk, then ("store", key) and ("flag", key) but for the own chunk; the rank tuple's two pcs are
    its two programs'. Flags and slots are indexed by rank and (set * W + chunk) * TILES + tile."""

    TILES, PROGRAMS, LAG = 2, 2, 1

    def __init__(self, world: int, calls: int, seed: str | None) -> None:
        super().__init__(world, calls, seed)
        order = sorted((k + s * self.LAG, s, k) for s in range(world) for k in range(self.TILES))
        self.programs = [[[action for _, s, k in order[p::self.PROGRAMS] for action in self._actions(r, s, k, world)]
                          for p in range(self.PROGRAMS)] for r in range(world)]

    def _actions(self, r: int, s: int, k: int, world: int) -> list[tuple[str, int]]:
        key = ((r + 1 + s) % world) * self.TILES + k
        return ([("read", key)] if s else []) + ([("store", key), ("flag", key)] if s < world - 1 else [])

    def initial(self) -> tuple:
        ranks, _, _, arrived = super().initial()
        zeros = tuple(tuple(0 for _ in range(2 * self.world * self.TILES)) for _ in range(self.world))
        return ranks, zeros, zeros, arrived

    def set_offset(self, epoch: int) -> int:
        """Where the set of a call of `epoch` starts in a rank's flags and slots (set 0 always under "one_set")."""
        return 0 if self.seed == "one_set" else epoch % 2 * self.world * self.TILES

    def arrive(self, state: tuple, r: int):
        """Rank r's programs are done: its next call, no barrier."""
        call, _, epoch, *_ = state[0][r]
        after = (call + 1, "start", epoch, 0, 0) if call < self.calls else (call, "done", epoch, 0, 0)
        yield f"rank {r} ends call {call}", self._rank(state, r, after)

    def run_steps(self, state: tuple, r: int):
        ranks, flags, slots, arrived = state
        call, stage, epoch, *pcs = ranks[r]
        if all(pc == len(actions) for pc, actions in zip(pcs, self.programs[r])):
            yield from self.arrive(state, r)
            return
        offset = self.set_offset(epoch)
        for p, (pc, actions) in enumerate(zip(pcs, self.programs[r])):
            if pc == len(actions):
                continue
            kind, key = actions[pc]
            after = (call, stage, epoch, *pcs[:p], pc + 1, *pcs[p + 1:])
            chunk, tile = divmod(key, self.TILES)
            key += offset
            to = (r - 1) % self.world
            if kind == "read" and flags[r][key] == epoch:
                if slots[r][key] != call:
                    yield "stale", (f"rank {r} call {call} read chunk {chunk} (tile {tile}) holding call "
                                    f"{slots[r][key]}'s partial sums (its flag held epoch {flags[r][key]})")
                yield f"rank {r} reads chunk {chunk} tile {tile}", self._rank(state, r, after)
            elif kind == "store":
                yield f"rank {r} stores chunk {chunk} tile {tile} into rank {to}", self._rank(
                    (ranks, flags, _set(slots, to, key, call), arrived), r, after)
            elif kind == "flag":
                yield f"rank {r} flags chunk {chunk} tile {tile} at rank {to}", self._rank(
                    (ranks, _set(flags, to, key, epoch), slots, arrived), r, after)

    def hang(self, state: tuple) -> str:
        ranks, flags, _, arrived = state
        waits = []
        for r, (call, stage, epoch, *pcs) in enumerate(ranks):
            offset = self.set_offset(epoch)
            for pc, actions in zip(pcs, self.programs[r]):
                if stage == "run" and pc < len(actions):
                    chunk, tile = divmod(actions[pc][1], self.TILES)
                    waits.append(f"rank {r} call {call}: role 'epilogue_load' waits for chunk {chunk} from peer "
                                 f"{(r + 1) % self.world} (tile {tile}, epoch {epoch}, flag holds "
                                 f"{flags[r][actions[pc][1] + offset]})")
        return "; ".join(waits) or "no rank waits"


def _set(table: tuple, row: int, col: int, value: int) -> tuple:
    line = table[row][:col] + (value, ) + table[row][col + 1:]
    return table[:row] + (line, ) + table[row + 1:]


def check_tp_protocol(world: int, calls: int = 2, seed: str | None = None, walks: int = 0,
                      rng_seed: int = 0, op: str = "all_gather") -> TpResult:
    """Explore the model of `world` ranks making `calls` calls of `op` ("all_gather" or "reduce_scatter"): every
    interleaving, or (`walks` > 0) that many random ones from the start, for groups too large to explore whole. At
    most one finding of each kind is kept."""
    if op not in ("all_gather", "reduce_scatter"):
        raise ValueError(f"op must be 'all_gather' or 'reduce_scatter', got {op!r}")
    model = (_Model if op == "all_gather" else _RingModel)(world, calls, seed)
    found: dict[str, TpFinding] = {}

    def visit(state: tuple) -> list[tuple]:
        nexts = []
        for description, step in model.steps(state):
            if description == "stale":
                found.setdefault("stale", TpFinding("stale", step))
            else:
                nexts.append(step)
        if not nexts and not model.finished(state):
            found.setdefault("hang", TpFinding("hang", model.hang(state)))
        return nexts

    count = 0
    if walks:
        rng = random.Random(rng_seed)
        for _ in range(walks):
            state = model.initial()
            while nexts := visit(state):
                state = rng.choice(nexts)
                count += 1
    else:
        seen, stack = {model.initial()}, [model.initial()]
        while stack:
            for step in visit(stack.pop()):
                if step not in seen:
                    seen.add(step)
                    stack.append(step)
        count = len(seen)
    return TpResult(world, calls, seed, count, tuple(found.values()))
