"""Pipeline probes: what each role's waits record when a kernel runs in debug or trace mode.

A kernel takes `probe_buf` and a constexpr `PROBE` and hands `Probe.create(probe_buf, PROBE)` to its storage
plan; every pipeline then carries the probe and `tilepipe.pipeline.roles.warp_specialize` binds it to each role. The
pipeline layer calls the hooks below around its waits and steps; the kernel's own code never does.

PROBE (a constexpr, so each mode is its own binary):
  OFF (0)    nothing: every hook returns at trace time, the probe's fields are constexprs, the PTX is unchanged.
  DEBUG (1)  before each wait a role writes (status, side, stage, phase, iteration, pipeline, role) to its
             PROGRESS_WORDS int32 record in host-mapped memory, and marks it passed after; `tilepipe.probes.debug`
             watches the records and names the stuck roles when nothing changes for a few seconds.
  n >= 2     trace: each role writes %globaltimer at wait start, wait end and release, for up to n
             acquisitions per (program, role, pipeline), into a device buffer that `tilepipe.probes.timeline` decodes.
"""

from triton.experimental import gluon
from triton.experimental.gluon import aggregate
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.language.core import _unwrap_if_constexpr

from tilepipe.pipeline import _trace

OFF = 0
DEBUG = 1
MAX_ROLES = 8
MAX_PIPELINES = 8
NAME_CHARS = 16
PROGRESS_WORDS = 16  # int32: status, side, stage, phase, iteration, 3 spare, pipeline name (4 words), role name (4)
PROGRESS_NAME_WORD = 8
TRACE_WORDS = 4  # int64 per event: t_wait, t_acquired, t_released, meta; event 0 of a region holds the names
WAITING, PASSED = 1, 2
PRODUCER, CONSUMER, PAIR = 0, 1, 2  # a producer waits on `empty` (multicast: then on `pair`), a consumer on `full`


def buffer_signature(mode: int) -> str:
    """The Triton signature of `probe_buf` in `mode`: a constexpr (None) when off."""
    return "constexpr" if mode == OFF else "*i32" if mode == DEBUG else "*i64"


def pack_name(name: str, word_bits: int) -> list[int]:
    """`name` as NAME_CHARS ASCII bytes (truncated, zero-padded), little-endian, in signed words of `word_bits`."""
    data = name.encode("ascii", "replace")[:NAME_CHARS].ljust(NAME_CHARS, b"\0")
    step = word_bits // 8
    return [int.from_bytes(data[i:i + step], "little", signed=True) for i in range(0, NAME_CHARS, step)]


def unpack_name(words, word_bits: int) -> str:
    """The inverse of pack_name."""
    data = b"".join(int(w).to_bytes(word_bits // 8, "little", signed=True) for w in words)
    return data.rstrip(b"\0").decode("ascii", "replace")


def role_name(function_name: str) -> str:
    """The role a partition function plays: `mma_role` -> `mma`."""
    return function_name.removesuffix("_role")


@aggregate
class Probe:
    """A pipeline's probe as one role sees it: the buffer, this role's acquisitions so far, the mode, the role (and
    its warps, which its records' stores are laid out over)."""
    buffer: gl.tensor | gl.constexpr
    count: gl.tensor | gl.constexpr
    mode: gl.constexpr
    role: gl.constexpr
    role_name: gl.constexpr
    warps: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, buffer, count, mode, role, role_name, warps=0):
        self.buffer = buffer if isinstance(buffer, gl.tensor) else gl.constexpr(buffer)  # None when off
        self.count = count if isinstance(count, gl.tensor) else gl.constexpr(count)
        self.mode = gl.constexpr(mode)
        self.role = gl.constexpr(role)
        self.role_name = gl.constexpr(role_name)
        self.warps = gl.constexpr(warps)

    @builtin
    def create(buffer, mode, _semantic=None):
        """The kernel's probe: `buffer` is None when `mode` is OFF, else the probe buffer's pointer."""
        mode = _unwrap_if_constexpr(mode)
        if not isinstance(mode, int) or mode < 0:
            raise _trace.ProtocolError(f"PROBE must be a non-negative int (0 off, 1 debug, n >= 2 trace), got {mode!r}")
        if (mode == OFF) != (_unwrap_if_constexpr(buffer) is None):
            raise _trace.ProtocolError("probe_buf must be None exactly when PROBE is 0 (off)")
        return Probe(buffer if mode else gl.constexpr(None), gl.constexpr(0), mode, -1, "")


def off():
    """The probe of a pipeline declared without one."""
    return Probe(gl.constexpr(None), gl.constexpr(0), OFF, -1, "")


def started(probe, semantic):
    """The probe a new pipeline carries: its acquisition count starts at 0 (a tensor only when the probe is on)."""
    if not _unwrap_if_constexpr(probe.mode):
        return probe
    return Probe(probe.buffer, semantic.to_tensor(0), probe.mode, probe.role, probe.role_name, probe.warps)


def bind_role(value, role: int, name: str, warps: int):
    """`value` (a partition argument) with every probe inside it bound to partition `role`, named `name`, of `warps`
    warps."""
    if isinstance(value, Probe):
        if not value.mode.value:
            return value
        if role >= MAX_ROLES:
            raise _trace.ProtocolError(f"debug and trace modes record at most {MAX_ROLES} roles; role {name} is "
                                       f"partition {role}")
        return Probe(value.buffer, value.count, value.mode, role, name, warps)
    if isinstance(value, (tuple, list)):
        return type(value)(bind_role(v, role, name, warps) for v in value)
    if not getattr(type(value), "__triton_aggregate__", False):
        return value
    fields = {field: getattr(value, field) for field, _ in value.type.fields}
    bound = {field: bind_role(v, role, name, warps) for field, v in fields.items()}
    if all(bound[field] is fields[field] for field in fields):
        return value
    return gl.aggregate_replace(value, **bound)


def _checked(pipe):
    """The pipe's probe, once it is known to be bound to a role (it is not outside roles.warp_specialize)."""
    probe = pipe.probe
    if probe.role.value < 0:
        raise _trace.ProtocolError(f"pipeline '{pipe.name.value}' is probed outside tilepipe.pipeline.roles.warp_specialize, "
                                   "so no role can be named: launch the kernel's roles through it")
    return probe


def _store(probe, pointer, offset, value, semantic, mask=None):
    """One scalar store by one thread of the calling role in each CTA, written through to system memory when the
    pointer is host-mapped. The scalar goes out as a tensor of one element per CTA of the cluster: a plain scalar
    counts as replicated over the CTAs, and only the cluster's first CTA would store it, where each CTA must write
    its own record."""
    ctas = _unwrap_if_constexpr(gl.num_ctas(_semantic=semantic))
    warps = probe.warps.value
    per_cta = gl.BlockedLayout([1], [32], [warps], [0], cga_layout=[[1]] * (ctas.bit_length() - 1))
    zeros = gl.full([ctas], 0, gl.int32, per_cta, _semantic=semantic)
    value = semantic.to_tensor(value) if isinstance(value, int) else value
    value = value.__add__(zeros, _semantic=semantic).to(pointer.dtype.element_ty, _semantic=semantic)
    address = pointer.__add__(offset, _semantic=semantic).__add__(zeros, _semantic=semantic)
    mask = None if mask is None else mask.__and__(zeros.__eq__(0, _semantic=semantic), _semantic=semantic)
    gl.store(address, value, mask=mask, cache_modifier=".wt", _semantic=semantic)


def _special(register: str, dtype, semantic):
    """Read a special register (%globaltimer, %smid) of the calling thread."""
    kind = "l" if dtype == gl.int64 else "r"
    return gl.inline_asm_elementwise(f"mov.u{dtype.primitive_bitwidth} $0, %{register};", f"={kind}", [], dtype=dtype,
                                     is_pure=False, pack=1, _semantic=semantic)


def _cta(semantic):
    """This CTA's index in the grid (%ctaid.x): the program's in a kernel without clusters; in a cluster kernel
    program p's CTAs are p * n .. p * n + n - 1, so records are kept per CTA."""
    return _special("ctaid.x", gl.int32, semantic)


def _progress(probe, semantic):
    """Pointer to this CTA's and role's progress record (DEBUG)."""
    slot = _cta(semantic).__mul__(MAX_ROLES, _semantic=semantic).__add__(probe.role.value, _semantic=semantic)
    return probe.buffer.__add__(slot.__mul__(PROGRESS_WORDS, _semantic=semantic), _semantic=semantic)


def _event(probe, pipe_number: int, event, semantic):
    """Pointer to event `event` of this CTA's, role's and pipeline's trace region (trace mode)."""
    events = probe.mode.value + 1
    region = _cta(semantic).__mul__(MAX_ROLES, _semantic=semantic).__add__(probe.role.value, _semantic=semantic)
    region = region.__mul__(MAX_PIPELINES, _semantic=semantic).__add__(pipe_number, _semantic=semantic)
    word = region.__mul__(events, _semantic=semantic).__add__(event, _semantic=semantic)
    return probe.buffer.__add__(word.__mul__(TRACE_WORDS, _semantic=semantic), _semantic=semantic)


def _pipe_number(pipe) -> int:
    number = _trace.pipeline_number(pipe.name.value)
    if number >= MAX_PIPELINES:
        raise _trace.ProtocolError(f"trace mode records at most {MAX_PIPELINES} pipelines per kernel; "
                                   f"'{pipe.name.value}' is number {number}")
    return number


def before_wait(pipe, side: int, phase, semantic):
    """Hook before a role waits on `pipe` (side PRODUCER: its empty barrier; CONSUMER: its full one).

    DEBUG: write the progress record (status WAITING). Trace: return the wait's start time.
    """
    mode = _unwrap_if_constexpr(pipe.probe.mode)
    if mode == OFF:
        return None
    probe = _checked(pipe)
    if mode == DEBUG:
        record = _progress(probe, semantic)
        fields = [(1, side), (2, pipe.index), (3, phase), (4, probe.count)]
        fields += list(enumerate(pack_name(pipe.name.value, 32), PROGRESS_NAME_WORD))
        fields += list(enumerate(pack_name(probe.role_name.value, 32), PROGRESS_NAME_WORD + 4))
        for offset, value in fields + [(0, WAITING)]:
            _store(probe, record, offset, value, semantic)
        return None
    return _special("globaltimer", gl.int64, semantic)


def after_wait(pipe, side: int, phase, started_at, semantic) -> None:
    """Hook after the wait passed. DEBUG: mark the record PASSED. Trace: write the event (and, first, the names)."""
    mode = _unwrap_if_constexpr(pipe.probe.mode)
    if mode == OFF:
        return
    probe = _checked(pipe)
    if mode == DEBUG:
        _store(probe, _progress(probe, semantic), 0, PASSED, semantic)
        return
    now = _special("globaltimer", gl.int64, semantic)
    number = _pipe_number(pipe)
    first = probe.count.__eq__(0, _semantic=semantic)
    header = _event(probe, number, 0, semantic)
    for offset, word in enumerate(pack_name(pipe.name.value, 64) + pack_name(probe.role_name.value, 64)):
        _store(probe, header, offset, word, semantic, mask=first)
    meta = pipe.index.__or__(phase.__lshift__(8, _semantic=semantic), _semantic=semantic)
    meta = meta.__or__(side << 9, _semantic=semantic).to(gl.int64, _semantic=semantic)
    sm = _special("smid", gl.int32, semantic).to(gl.int64, _semantic=semantic)
    meta = meta.__or__(sm.__lshift__(32, _semantic=semantic), _semantic=semantic)
    in_range = probe.count.__lt__(probe.mode.value, _semantic=semantic)
    event = _event(probe, number, probe.count.__add__(1, _semantic=semantic), semantic)
    for offset, value in ((0, started_at), (1, now), (2, now), (3, meta)):
        _store(probe, event, offset, value, semantic, mask=in_range)


def advanced(pipe, semantic):
    """Hook when a role steps past its current stage; returns the probe with the acquisition counted.

    Trace: the stage's release time overwrites its provisional one (a wait without a stage releases at once).
    """
    probe = pipe.probe
    mode = _unwrap_if_constexpr(probe.mode)
    if mode == OFF:
        return probe
    probe = _checked(pipe)
    if mode != DEBUG:
        in_range = probe.count.__lt__(mode, _semantic=semantic)
        event = _event(probe, _pipe_number(pipe), probe.count.__add__(1, _semantic=semantic), semantic)
        _store(probe, event, 2, _special("globaltimer", gl.int64, semantic), semantic, mask=in_range)
    count = probe.count.__add__(1, _semantic=semantic)
    return Probe(probe.buffer, count, probe.mode, probe.role, probe.role_name, probe.warps)
