"""Pipeline timelines: one traced launch as a Chrome/Perfetto trace and a Gantt chart, one lane per role per SM
(in a cluster launch, per CTA: each SM's lanes name its program and the CTA's rank in the cluster).

A kernel launched with PROBE = n >= 2 (tilepipe.pipeline.probe; `tilepipe.matmul(..., trace=path)`) writes, for each
program, role and pipeline, up to n acquisitions: %globaltimer when the wait began, when it passed, and when the
role released the stage. `decode` turns that buffer into `Span`s; `chrome_trace` into a trace JSON that
ui.perfetto.dev or chrome://tracing opens; `plot` into a PNG (matplotlib, the `plot` extra);
`wait_fractions` into how much of its time each role spent waiting, per pipeline.

    python -m tilepipe.probes.timeline TRACE.json OUT.png [SMS]   # re-draw a saved trace (first SMS SMs, default 8)
"""

import json
import sys
from collections import defaultdict
from dataclasses import astuple, dataclass, fields
from pathlib import Path

from tilepipe.pipeline import probe as _probe

DEFAULT_EVENTS = 1024
MAX_BUFFER_BYTES = 512 << 20


@dataclass(frozen=True)
class Span:
    """One acquisition of a pipeline stage by one role: the wait, then the hold until release (times in ns)."""
    program: int
    cta: int  # rank in the program's cluster (0 without clusters)
    sm: int
    partition: int
    role: str
    pipeline: str
    side: int  # tilepipe.pipeline.probe.PRODUCER or CONSUMER
    stage: int
    phase: int
    iteration: int
    wait_start: int
    acquired: int
    released: int


def events_for(programs: int, wanted: int = DEFAULT_EVENTS) -> int:
    """Acquisitions recorded per (program, role, pipeline): `wanted`, lowered so the buffer stays within bounds."""
    per_event = programs * _probe.MAX_ROLES * _probe.MAX_PIPELINES * _probe.TRACE_WORDS * 8
    return max(2, min(wanted, MAX_BUFFER_BYTES // per_event - 1))


def trace_buffer(programs: int, events: int, device):
    """A zeroed trace buffer for `programs` programs recording up to `events` acquisitions each (PROBE = events)."""
    import torch

    if events < 2:
        raise ValueError(f"a trace records at least 2 events per role and pipeline, got {events}")
    shape = (programs, _probe.MAX_ROLES, _probe.MAX_PIPELINES, events + 1, _probe.TRACE_WORDS)
    return torch.zeros(shape, dtype=torch.int64, device=device)


def decode(buffer, ctas: int = 1) -> tuple[list[Span], bool]:
    """The spans a trace buffer (tensor or array shaped as trace_buffer's, one region per CTA: `ctas` per program)
    holds, by time; and whether any (CTA, role, pipeline) ran out of room (its later acquisitions are missing)."""
    import numpy as np

    data = buffer.cpu().numpy() if hasattr(buffer, "cpu") else np.asarray(buffer)
    capacity = data.shape[3] - 1
    spans, truncated = [], False
    for cta, partition, pipe in zip(*np.nonzero(data[:, :, :, 0, 0])):
        region = data[cta, partition, pipe]
        pipeline = _probe.unpack_name(region[0, :2], 64)
        role = _probe.unpack_name(region[0, 2:], 64)
        iterations = np.flatnonzero(region[1:, 1])
        truncated |= len(iterations) == capacity
        for iteration, (wait_start, acquired, released, meta) in zip(iterations.tolist(),
                                                                      region[1 + iterations].tolist()):
            spans.append(Span(int(cta) // ctas, int(cta) % ctas, meta >> 32, int(partition), role, pipeline,
                              (meta >> 9) & 1, meta & 0xFF, (meta >> 8) & 1, iteration, wait_start, acquired,
                              max(released, acquired)))
    spans.sort(key=lambda s: (s.wait_start, s.sm, s.partition))
    return spans, truncated


def wait_fractions(spans: list[Span]) -> dict[str, dict[str, float]]:
    """Per role, the share of its active time (first wait to last release, summed over programs) spent waiting on
    each pipeline."""
    busy: dict[str, int] = defaultdict(int)
    waited: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    lanes: dict[tuple[int, int, str], list[Span]] = defaultdict(list)
    for span in spans:
        lanes[span.program, span.cta, span.role].append(span)
        waited[span.role][span.pipeline] += span.acquired - span.wait_start
    for (_, _, role), lane in lanes.items():
        busy[role] += max(s.released for s in lane) - min(s.wait_start for s in lane)
    return {role: {pipe: ns / busy[role] if busy[role] else 0.0 for pipe, ns in pipes.items()}
            for role, pipes in waited.items()}


def chrome_trace(spans: list[Span], kernel: str, truncated: bool = False) -> dict:
    """A Chrome/Perfetto trace: a process per SM (named with its CTA's rank in a cluster launch), a thread per role;
    `wait <pipeline>` and `<pipeline>[stage]` slices in microseconds from the first event; the wait fractions under
    `tilepipe`."""
    origin = min((s.wait_start for s in spans), default=0)
    clustered = any(s.cta for s in spans)
    events: list[dict] = []
    for sm, cta, partition, role in sorted({(s.sm, s.cta, s.partition, s.role) for s in spans}):
        name = f"SM {sm} CTA {cta}" if clustered else f"SM {sm}"
        events.append({"ph": "M", "name": "process_name", "pid": sm, "args": {"name": name}})
        events.append({"ph": "M", "name": "thread_name", "pid": sm, "tid": partition, "args": {"name": role}})
    for s in spans:
        common = {"pid": s.sm, "tid": s.partition, "args": {"program": s.program, "cta": s.cta, "stage": s.stage,
                                                              "phase": s.phase, "iteration": s.iteration}}
        events.append({"name": f"wait {s.pipeline}", "cat": "wait", "ph": "X", "ts": (s.wait_start - origin) / 1e3,
                       "dur": (s.acquired - s.wait_start) / 1e3, **common})
        events.append({"name": f"{s.pipeline}[{s.stage}]", "cat": "hold", "ph": "X", "ts": (s.acquired - origin) / 1e3,
                       "dur": (s.released - s.acquired) / 1e3, **common})
    summary = {"kernel": kernel, "origin_ns": origin, "truncated": truncated, "wait_fraction": wait_fractions(spans),
               "span_fields": [f.name for f in fields(Span)], "spans": [astuple(s) for s in spans]}
    return {"traceEvents": events, "displayTimeUnit": "ns", "tilepipe": summary}


def spans_of(trace: dict) -> list[Span]:
    """The spans a chrome_trace JSON carries."""
    names = trace["tilepipe"]["span_fields"]
    return [Span(**dict(zip(names, row))) for row in trace["tilepipe"]["spans"]]


def plot(spans: list[Span], path: str | Path, title: str = "", sms: int = 8) -> None:
    """A Gantt chart of the first `sms` SMs: a lane per role per SM (labelled with the CTA's rank in a cluster
    launch), waits dark and holds light, colored by pipeline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = sorted({s.sm for s in spans})[:sms]
    clustered = any(s.cta for s in spans)
    lanes = sorted({(s.sm, s.partition, s.role, s.cta) for s in spans if s.sm in chosen})
    row = {(sm, partition): i for i, (sm, partition, _, _) in enumerate(lanes)}
    pipelines = sorted({s.pipeline for s in spans})
    colors = dict(zip(pipelines, plt.get_cmap("tab10").colors))
    origin = min((s.wait_start for s in spans), default=0)
    fig, ax = plt.subplots(figsize=(16, 1 + 0.32 * len(lanes)))
    for s in spans:
        lane = row.get((s.sm, s.partition))
        if lane is None:
            continue
        start, acquired, end = ((t - origin) / 1e3 for t in (s.wait_start, s.acquired, s.released))
        ax.broken_barh([(acquired, max(end - acquired, 1e-3))], (lane - 0.35, 0.7), color=colors[s.pipeline],
                       alpha=0.3, linewidth=0)
        ax.broken_barh([(start, max(acquired - start, 1e-3))], (lane - 0.35, 0.7), color=colors[s.pipeline],
                       linewidth=0)
    ax.set_yticks(range(len(lanes)), [f"SM {sm}{f' CTA {cta}' if clustered else ''} {role}"
                                      for sm, _, role, cta in lanes], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("time (µs)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[p]) for p in pipelines]
    ax.legend(handles, [f"{p} (dark: wait, light: held)" for p in pipelines], loc="upper right", fontsize=7)
    fractions = wait_fractions(spans)
    summary = "; ".join(f"{role} waits {sum(f.values()):.0%}" for role, f in sorted(fractions.items()))
    ax.set_title(f"{title}\n{summary}" if title else summary, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save(buffer, path: str | Path, kernel: str, png: bool = True, ctas: int = 1) -> dict:
    """Decode a trace buffer (`ctas` CTAs per program), write its Chrome trace to `path` (and the Gantt chart next to
    it as .png); returns the trace's summary (kernel, truncated, wait fractions)."""
    spans, truncated = decode(buffer, ctas)
    trace = chrome_trace(spans, kernel, truncated)
    path = Path(path)
    path.write_text(json.dumps(trace, separators=(",", ":")))
    if png:
        plot(spans, path.with_suffix(".png"), kernel)
    return {key: value for key, value in trace["tilepipe"].items() if key != "spans"}


if __name__ == "__main__":
    source, target, *rest = sys.argv[1:]
    saved = json.loads(Path(source).read_text())
    plot(spans_of(saved), target, saved["tilepipe"]["kernel"], *(int(n) for n in rest))
