"""What a tensor-parallel op keeps per (group, geometry): a symmetric buffer of W slots that peers copy their chunks
into, a symmetric int32 flag per slot, the call's epoch on the GPU, a side stream for the copy engine, and the debug
report. Everything moves through torch's symmetric memory (torch.distributed._symmetric_memory: empty, rendezvous,
get_buffer, barrier); tilepipe has no transport of its own.

all_gather_matmul's call:
  main stream   epoch += 1 (a one-element add, before anything that waits)
  side stream   for each peer p, in push order (p = rank - 1, rank - 2, ... mod W, so rank r hears from r + 1 first):
                copy this rank's chunk into p's slot `rank` (copy engine), then copy the epoch into p's flag `rank`
                (4 bytes, copy engine): a flag never lands before its chunk, and no SM is needed
  main stream   the kernel that waits on the flags (its own chunk it reads from the shard where it lies); then waits
                for the side stream and (`finish`) a barrier of the group, so no peer copies the next call's chunk
                into a slot this rank may still read
matmul_reduce_scatter's kernel stores into the previous rank's slots itself and sets its flags, one per tile of each
chunk (reduce_scatter.py), the same epoch. Its workspace has two sets of slots and flags (`sets`), call n using set n
mod 2, and no closing barrier (pipeline/flags.py says why that is safe); a copy-engine push, whose destination a CUDA
graph would fix, cannot alternate so, hence the all-gather's barrier. The slots start zeroed, though no tile reads a
slot its call did not write: the ring's first chunk adds no C.
Each rank adds 1 to its own epoch once a call, so every rank's call n has epoch n: a flag holding an earlier epoch is
stale, and CUDA-graph replays (which replay the add) need no reset. The flags start at zero before the first call.
"""

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from tilepipe.pipeline.flags import REPORT_WORDS

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
"""The environment every process on the 2-GPU machines must start with: NVLink multicast is switched off there (the
ops themselves never use multicast; NCCL and torch's symmetric memory would probe it)."""
FLAG_PAD = 32  # int32 flags a workspace allocates at least, in whole 128-byte lines (W <= flags.py MAX_CHUNKS)


@dataclass
class Workspace:
    """One geometry's buffers on one rank: `slots` (sets x W x slot_shape, symmetric), their flags (symmetric), `epoch`
    (int32 [1]), the peers' slots and flags mapped here, the side stream and `report` (debug mode)."""
    group_name: str
    rank: int
    world: int
    slots: torch.Tensor
    flags: torch.Tensor
    epoch: torch.Tensor
    report: torch.Tensor
    stream: torch.cuda.Stream
    peer_slots: dict[int, torch.Tensor] = field(default_factory=dict)
    peer_flags: dict[int, torch.Tensor] = field(default_factory=dict)
    handle: object = None  # the slots' _SymmetricMemory (its barrier)
    unit: torch.Tensor | None = None  # an fp32 1.0: the scale pointers of a 16-bit call (never read)

    def push_order(self) -> list[int]:
        """The peers this rank copies its chunk to, in order: rank - 1, rank - 2, ... (mod W)."""
        return [(self.rank - step) % self.world for step in range(1, self.world)]

    def send(self, chunk: torch.Tensor, peer: int) -> None:
        """On the side stream (current): `chunk` into `peer`'s slot of this rank, then this call's epoch into its
        flag, both by the copy engine."""
        self.peer_slots[peer][self.rank].copy_(chunk)
        self.peer_flags[peer][self.rank:self.rank + 1].copy_(self.epoch)

    def finish(self) -> None:
        """Main stream (all-gather): wait for the side stream's copies, then for every rank of the group to get here."""
        torch.cuda.current_stream().wait_stream(self.stream)
        self.handle.barrier(channel=0)


_WORKSPACES: dict[tuple, Workspace] = {}


def workspace(group: dist.ProcessGroup, slot_shape: tuple[int, ...], dtype: torch.dtype,
              device: torch.device, purpose: str, flag_count: int = FLAG_PAD, sets: int = 1) -> Workspace:
    """The workspace of `purpose` ("all_gather" or "reduce_scatter") for `sets` sets of W slots of `slot_shape` and
    `dtype` and of `flag_count` flags on `group`, made on first use (collectively: every rank of the group must make
    the same call)."""
    key = (group.group_name, purpose, tuple(slot_shape), dtype, device, flag_count, sets)
    found = _WORKSPACES.get(key)
    if found is None and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"the first call of a tensor-parallel op for a geometry sets up symmetric memory, which a "
                           f"CUDA graph cannot capture: call it once before capturing ({purpose}, {slot_shape})")
    if found is None:
        found = _WORKSPACES[key] = _create(group, (sets * group.size(), *slot_shape), dtype, device,
                                           sets * flag_count)
    return found


def _create(group: dist.ProcessGroup, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
            flag_count: int) -> Workspace:
    """Allocate the slots (`shape`), zero them and the flags, synchronize, rendezvous (a collective), map the peers'
    slots and flags, and meet at a barrier, so no peer's first write can land before this rank zeroed its own."""
    from torch.distributed import _symmetric_memory as symm_mem

    rank, world = group.rank(), group.size()
    slots = symm_mem.empty(shape, dtype=dtype, device=device)
    slots.zero_()
    flag_count = -(-max(flag_count, FLAG_PAD) // FLAG_PAD) * FLAG_PAD
    flags = symm_mem.empty((flag_count, ), dtype=torch.int32, device=device)
    flags.zero_()
    torch.cuda.synchronize(device)
    handle = symm_mem.rendezvous(slots, group.group_name)
    flag_handle = symm_mem.rendezvous(flags, group.group_name)
    ws = Workspace(group.group_name, rank, world, slots, flags, torch.zeros(1, dtype=torch.int32, device=device),
                   torch.zeros(REPORT_WORDS, dtype=torch.int32, device=device), torch.cuda.Stream(device, priority=-1),
                   handle=handle, unit=torch.ones(1, dtype=torch.float32, device=device))
    for peer in ws.push_order():
        ws.peer_slots[peer] = handle.get_buffer(peer, shape, dtype)
        ws.peer_flags[peer] = flag_handle.get_buffer(peer, (flag_count, ), torch.int32)
    handle.barrier(channel=0)
    torch.cuda.synchronize(device)
    return ws


def check_report(ws: Workspace, op: str, role: str, timeout_s: float, sender: int | None = None) -> None:
    """Debug mode, after the kernels: raise TimeoutError naming the role, chunk and peer of a flag wait that gave up
    (pipeline/flags.py's report), and clear the report. `sender`: the rank that sends every chunk (a ring), else
    chunk c comes from rank c."""
    words = ws.report.tolist()
    if not words[0]:
        return
    ws.report.zero_()
    _, chunk, epoch, seen, program = words[:5]
    peer = chunk if sender is None else sender
    raise TimeoutError(f"tilepipe debug: {op} on rank {ws.rank} of {ws.world}: role '{role}' (program {program}) "
                       f"waited {timeout_s:.1f} s for chunk {chunk} from peer rank {peer} (epoch {epoch}; its flag "
                       f"holds {seen}): rank {peer} never sent it (did it skip the call, or call another op?)")
