"""The critical path of one rank's profiler step, computed in Python.

The path is a walk backwards in time from the moment the step's work ends,
each time to whatever the current piece of work waited on last. SQL can
state each rule but not the walk: every move depends on the one before
(which thread or stream, which event), so it is a loop over one trace's
events rather than a set operation; a recursive CTE choosing one
predecessor per round would redo each lookup over the whole step. The
module reads one trace file's rows of ``int_path_events`` (the view library
supplies the data) and walks them here.

The rules (docs/analysis.md says the same with a picture):

- The step's window runs from its ProfilerStep#N start to the later of its
  end and the last end of the GPU operations launched inside it. With
  ``span`` (``--span NAME``), the window is the step-th (from 0, as HTA's
  instance_id) CPU annotation or op of that name instead: traces without
  profiler steps.
- On a CPU thread at time t, the work is the innermost event holding t (an
  op, annotation or runtime call): its piece runs back to the nearest start
  or end of an event on that thread, kind ``cpu`` (``launch`` in a runtime
  call that launched a GPU operation, ``sync`` in a synchronizing one). A gap with no event is ``cpu``
  time of the step's main thread (untraced Python), and a gap on another
  thread hands the walk to the main thread.
- A synchronizing runtime call (``*Synchronize``, ``cudaMemcpy``) waits on
  the GPU: the walk goes to the GPU operation that ended last while it
  waited (piece kind ``sync`` from that end to the call's end).
- A GPU operation (kind ``kernel``, ``comm``, ``memcpy``, ``memset``) waited
  either on the operation before it on its stream, or on its launch: when
  its launch call started after the previous operation ended (the GPU ran
  dry, as host_wait in idle_breakdown), the piece from the call's start to
  the operation's start is ``launch`` and the walk goes to the launching
  thread at the call's start; else the gap after the previous operation is
  ``idle`` and the walk goes to that operation.
- The walk stops at the step's start; the pieces cover the window exactly,
  so the time per kind adds up to the window.

Unlike HTA's critical_path_analysis, which builds the whole event graph and
takes its longest path, this follows the last-arriving dependency (the
same path where the trace ran every event as soon as it could); it does not
model cross-stream event waits (cudaStreamWaitEvent), whose gaps show as
``idle``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

import duckdb

from .errors import QueryError

if TYPE_CHECKING:
    import pyarrow as pa

SYNC_CALLS = ("cudaMemcpy", "hipMemcpy", "cudaMemset", "hipMemset")


def is_sync(name: str) -> bool:
    return "Synchronize" in name or name in SYNC_CALLS


@dataclass
class Event:
    event_id: int
    side: str
    kind: str
    name: str
    ts: int
    end: int
    lane: tuple
    launch: int | None = None  # event id of the launching runtime call


@dataclass
class Piece:
    kind: str
    ts: int
    end: int
    event: Event | None
    lane: tuple


@dataclass
class Step:
    run: str
    rank: int
    phase: str
    file_id: str
    step: int
    ts: int
    end: int
    lane: tuple


@dataclass
class _Thread:
    """The innermost event of a thread over time: pieces (start, end, event)."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    events: list[Event | None] = field(default_factory=list)

    @classmethod
    def of(cls, events: list[Event]) -> _Thread:
        bounds = sorted({t for e in events for t in (e.ts, e.end)})
        out = cls()
        by_start = sorted(events, key=lambda e: (e.ts, -e.end, e.event_id))
        stack: list[Event] = []
        i = 0
        for a, b in zip(bounds, bounds[1:]):
            while i < len(by_start) and by_start[i].ts <= a:
                stack.append(by_start[i])
                i += 1
            stack = [e for e in stack if e.end > a]
            inner = max(stack, key=lambda e: (e.ts, -e.end, e.event_id)) if stack else None
            out.starts.append(a)
            out.ends.append(b)
            out.events.append(inner)
        return out

    def at(self, t: int) -> tuple[int, Event | None]:
        """(start of the piece holding the instant just before t, its event);
        (the last end before t, None) in a gap."""
        i = bisect.bisect_left(self.ends, t)
        if i < len(self.starts) and self.starts[i] < t:
            return self.starts[i], self.events[i]
        return (self.ends[i - 1] if i > 0 else -(1 << 62)), None


def find_step(con: duckdb.DuckDBPyConnection, run: str, rank: int, step: int, phase: str | None,
              span: str | None = None) -> Step:
    """ProfilerStep#<step>; with ``span``, the step-th (from 0, HTA's
    instance_id) CPU annotation or op of that name instead."""
    if span is None:
        sql = ("SELECT s.run, s.rank, s.phase, s.file_id, s.step, s.ts_ns, s.end_ns, e.pid, e.tid "
               "FROM int_steps s LEFT JOIN int_path_events e ON e.file_id = s.file_id AND e.side = 'cpu' "
               "AND e.name = s.step_name AND e.ts_ns = s.ts_ns WHERE s.step = ?")
        args: list = [step]
        what = f"ProfilerStep#{step}"
    else:
        sql = ("SELECT run, rank, phase, file_id, ? AS step, ts_ns, end_ns, pid, tid FROM ("
               "  SELECT *, row_number() OVER (PARTITION BY file_id ORDER BY ts_ns, event_id) - 1 AS instance"
               "  FROM int_path_events WHERE side = 'cpu' AND kind IN ('annotation', 'cpu_op') AND name = ?) e "
               "WHERE instance = ?")
        args = [step, span, step]
        what = f"instance {step} of {span!r}"
    sql = f"SELECT * FROM ({sql}) q WHERE run = ? AND rank = ?"
    args += [run, rank]
    if phase is not None:
        sql += " AND phase = ?"
        args.append(phase)
    found = con.execute(sql + " ORDER BY file_id", args).fetchall()
    found = list({r[3]: r for r in reversed(found)}.values())  # one row per trace file
    where = f"run {run!r}, rank {rank}" + (f", phase {phase!r}" if phase else "")
    if not found:
        raise QueryError(f"no {what} in {where}")
    if len(found) > 1:
        phases = ", ".join(sorted({str(r[2]) for r in found}))
        raise QueryError(f"{what} of {where} is in {len(found)} traces (phases {phases}): give --phase")
    r = found[0]
    return Step(*r[:7], ("cpu", r[7], r[8]))


def load_events(con: duckdb.DuckDBPyConnection, s: Step) -> list[Event]:
    """The trace file's events that may lie on the step's path: GPU operations
    launched in the step or running in its window, CPU events in the window."""
    rows = con.execute(
        "WITH w AS (SELECT greatest(?, max(g.end_ns)) AS window_end_ns FROM int_path_events g "
        "  JOIN int_path_events c ON c.file_id = g.file_id AND c.event_id = g.launch_event_id "
        "  WHERE g.file_id = ? AND g.side = 'gpu' AND c.ts_ns >= ? AND c.ts_ns < ?) "
        "SELECT event_id, side, kind, name, ts_ns, end_ns, pid, tid, device, stream, launch_event_id "
        "FROM int_path_events, w WHERE file_id = ? AND end_ns > ? AND ts_ns <= w.window_end_ns "
        "ORDER BY ts_ns, event_id",
        [s.end, s.file_id, s.ts, s.end, s.file_id, s.ts]).fetchall()
    return [Event(eid, side, kind, name, ts, end,
                  ("cpu", pid, tid) if side == "cpu" else ("gpu", dev, stream), launch)
            for eid, side, kind, name, ts, end, pid, tid, dev, stream, launch in rows]


def walk(s: Step, events: list[Event]) -> list[Piece]:
    """The step's critical path as pieces in time order (module doc)."""
    by_id = {e.event_id: e for e in events}
    cpu: dict[tuple, list[Event]] = {}
    streams: dict[tuple, list[Event]] = {}
    for e in events:
        (cpu if e.side == "cpu" else streams).setdefault(e.lane, []).append(e)
    threads = {lane: _Thread.of(evs) for lane, evs in cpu.items()}
    threads.setdefault(s.lane, _Thread())
    prev_on_stream: dict[int, Event | None] = {}
    gpu_ends: list[tuple[int, int, Event]] = []
    for lane, evs in streams.items():
        evs.sort(key=lambda e: (e.ts, e.event_id))
        for a, b in zip([None] + evs, evs):
            prev_on_stream[b.event_id] = a
        gpu_ends += [(e.end, e.event_id, e) for e in evs]
    gpu_ends.sort(key=lambda x: x[:2])
    launched = [e for e in events if e.side == "gpu" and e.launch in by_id and s.ts <= by_id[e.launch].ts < s.end]
    launchers = {e.launch for e in events if e.side == "gpu"}
    last = max(launched, key=lambda e: (e.end, e.event_id), default=None)

    pieces: list[Piece] = []

    def add(kind: str, a: int, b: int, event: Event | None, lane: tuple) -> None:
        a = max(a, s.ts)
        if b > a:
            pieces.append(Piece(kind, a, b, event, lane))

    state: tuple = ("gpu", last) if last is not None and last.end > s.end else ("cpu", s.lane, s.end)
    # every move goes back in time or to an earlier operation of a stream: a bound, not a stop
    for _ in range(4 * len(events) + 16):
        if state[0] == "gpu":
            g: Event = state[1]
            add(g.kind, g.ts, g.end, g, g.lane)
            if g.ts <= s.ts:
                break
            prev, call = prev_on_stream.get(g.event_id), by_id.get(g.launch)
            if call is not None and call.ts <= g.ts and (prev is None or call.ts > prev.end):
                add("launch", call.ts, g.ts, call, g.lane)
                state = ("cpu", call.lane, call.ts)
            elif prev is not None:
                add("idle", prev.end, g.ts, None, g.lane)
                state = ("gpu", prev)
            else:
                add("idle", s.ts, g.ts, None, g.lane)
                break
            continue
        _, lane, t = state
        if t <= s.ts:
            break
        start, ev = threads[lane].at(t) if lane in threads else (-(1 << 62), None)
        if ev is not None and is_sync(ev.name):
            i = bisect.bisect_right(gpu_ends, (t, 1 << 62)) - 1
            if i >= 0 and gpu_ends[i][0] > ev.ts:
                g = gpu_ends[i][2]
                add("sync", g.end, t, ev, lane)
                state = ("gpu", g)
                continue
        if ev is None and lane != s.lane:
            state = ("cpu", s.lane, t)
            continue
        kind = ("sync" if ev is not None and ev.kind == "runtime" and is_sync(ev.name)
                else "launch" if ev is not None and ev.event_id in launchers else "cpu")
        add(kind, start, t, ev, lane)
        state = ("cpu", lane, start)
    pieces.reverse()
    return _merge(pieces)


def _merge(pieces: list[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for p in pieces:
        last = out[-1] if out else None
        if last is not None and last.end == p.ts and last.event is p.event and (last.kind, last.lane) == (p.kind, p.lane):
            out[-1].end = p.end
        else:
            out.append(p)
    return out


# -- the marts ----------------------------------------------------------------


@dataclass
class PyMart:
    description: str
    params: dict[str, str]
    columns: dict[str, tuple[str, str]]  # name -> (type, doc)
    order_by: str


_KEY_COLUMNS = {
    "run": ("VARCHAR", "Run (version) the trace belongs to."),
    "rank": ("BIGINT", "Rank."),
    "phase": ("VARCHAR", "Phase: train, prefill, decode, ... or the folder name."),
    "step": ("BIGINT", "Profiler step N of ProfilerStep#N."),
}
_PARAMS = {"run": "run", "rank": "rank", "step": "profiler step N (with span: the instance, from 0)",
           "span": "an annotation or op to take the window from instead of ProfilerStep#N (optional)"}
_KINDS = "cpu, launch, sync, kernel, comm, memcpy, memset or idle"

MARTS = {
    "critical_path": PyMart(
        "The critical path of one rank's profiler step: a walk back from where the step's work ends "
        "through CPU ops, launches, kernels and stream order to what each piece waited on last "
        "(docs/analysis.md; tracedb/critical_path.py). `tracedb query critical_path --run v2 --rank 0 --step 2`; "
        "time by kind: critical_path_summary; against a base run: --base. Computed in Python, not a SQL view. "
        "Grain: one row per piece of the path.",
        _PARAMS,
        {**_KEY_COLUMNS,
         "seq": ("BIGINT", "Position on the path, from 1 at the step's start."),
         "kind": ("VARCHAR", f"{_KINDS}."),
         "name": ("VARCHAR", "Event on the path (CPU op, runtime call, kernel); NULL for idle and untraced CPU time."),
         "lane": ("VARCHAR", "Where it ran: 'cpu <pid>/<tid>' or 'gpu <device>/<stream>'."),
         "event_id": ("BIGINT", "Event id of the event (with the trace's file_id, the events row)."),
         "ts_ns": ("BIGINT", "Piece start, nanoseconds."),
         "offset_us": ("DOUBLE", "Piece start from the step's start, microseconds."),
         "dur_us": ("DOUBLE", "Piece duration, microseconds.")},
        "seq"),
    "critical_path_summary": PyMart(
        "Time on the critical path of one rank's profiler step by kind (CPU, launch, sync, kernel, comm, "
        "memcpy, memset, idle); the kinds add up to the step's window. "
        "`tracedb query critical_path_summary --run v2 --rank 0 --step 2`. Grain: one row per kind.",
        _PARAMS,
        {**_KEY_COLUMNS,
         "kind": ("VARCHAR", f"{_KINDS}."),
         "piece_count": ("BIGINT", "Pieces of this kind on the path."),
         "path_us": ("DOUBLE", "Time of this kind on the path, microseconds."),
         "path_pct": ("DOUBLE", "Share of the step's window, percent.")},
        "path_us DESC"),
    "critical_path_compare": PyMart(
        "Which events on the critical path of a step changed most between a base run and a target run "
        "(same rank, step and phase): time on the path per kind and name in each, and the change. "
        "`tracedb query critical_path --base v1 --run v2 --rank 0 --step 2`. Grain: one row per kind and name.",
        {"base": "base run", **_PARAMS, "run": "target run"},
        {"base": ("VARCHAR", "Base run."), **_KEY_COLUMNS,
         "kind": ("VARCHAR", f"{_KINDS}."),
         "name": ("VARCHAR", "Event name; NULL for idle and untraced CPU time."),
         "base_us": ("DOUBLE", "Time on the base run's path, microseconds (0 when absent)."),
         "target_us": ("DOUBLE", "Time on the target run's path, microseconds (0 when absent)."),
         "change_us": ("DOUBLE", "target_us - base_us, microseconds."),
         "status": ("VARCHAR", "new, gone or changed.")},
        "abs(change_us) DESC, kind, name"),
}


def _path(con: duckdb.DuckDBPyConnection, run: str, rank: int, step: int, phase: str | None,
          span: str | None) -> tuple[Step, list[Piece]]:
    s = find_step(con, run, rank, step, phase, span)
    return s, walk(s, load_events(con, s))


def _lane(lane: tuple) -> str:
    return f"{lane[0]} {lane[1]}/{lane[2]}"


def path_rows(s: Step, pieces: list[Piece]) -> list[dict]:
    return [{"run": s.run, "rank": s.rank, "phase": s.phase, "step": s.step, "seq": i, "kind": p.kind,
             "name": p.event.name if p.event is not None else None, "lane": _lane(p.lane),
             "event_id": p.event.event_id if p.event is not None else None, "ts_ns": p.ts,
             "offset_us": (p.ts - s.ts) / 1e3, "dur_us": (p.end - p.ts) / 1e3}
            for i, p in enumerate(pieces, 1)]


def summary_rows(s: Step, pieces: list[Piece]) -> list[dict]:
    window = pieces[-1].end - s.ts if pieces else 0
    per: dict[str, list[int]] = {}
    for p in pieces:
        acc = per.setdefault(p.kind, [0, 0])
        acc[0] += 1
        acc[1] += p.end - p.ts
    return [{"run": s.run, "rank": s.rank, "phase": s.phase, "step": s.step, "kind": k, "piece_count": n,
             "path_us": ns / 1e3, "path_pct": 100.0 * ns / window if window else None}
            for k, (n, ns) in per.items()]


def compare_rows(base: tuple[Step, list[Piece]], target: tuple[Step, list[Piece]]) -> list[dict]:
    def by_name(pieces: list[Piece]) -> dict[tuple, int]:
        out: dict[tuple, int] = {}
        for p in pieces:
            key = (p.kind, p.event.name if p.event is not None else None)
            out[key] = out.get(key, 0) + p.end - p.ts
        return out
    b, t = by_name(base[1]), by_name(target[1])
    s = target[0]
    return [{"base": base[0].run, "run": s.run, "rank": s.rank, "phase": s.phase, "step": s.step,
             "kind": kind, "name": name, "base_us": b.get((kind, name), 0) / 1e3,
             "target_us": t.get((kind, name), 0) / 1e3,
             "change_us": (t.get((kind, name), 0) - b.get((kind, name), 0)) / 1e3,
             "status": "new" if (kind, name) not in b else "gone" if (kind, name) not in t else "changed"}
            for kind, name in b.keys() | t.keys()]


def compute(con: duckdb.DuckDBPyConnection, name: str, *, run: str | None, rank: int | None,
            step: int | None, phase: str | None = None, base: str | None = None,
            span: str | None = None) -> pa.Table:
    """The rows of the mart ``name`` (one of MARTS) as an Arrow table."""
    import pyarrow as pa  # the reading commands load no pyarrow until a Python mart runs

    mart = MARTS[name]
    for param, value in (("run", run), ("rank", rank), ("step", step)) + ((("base", base),) if "base" in mart.params else ()):
        if value is None:
            raise QueryError(f"{name} needs --{param} ({mart.params[param]})")
    if name == "critical_path_compare":
        rows = compare_rows(_path(con, base, rank, step, phase, span), _path(con, run, rank, step, phase, span))
    elif name == "critical_path_summary":
        rows = summary_rows(*_path(con, run, rank, step, phase, span))
    else:
        rows = path_rows(*_path(con, run, rank, step, phase, span))
    types = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "DOUBLE": pa.float64()}
    schema = pa.schema([(c, types[t]) for c, (t, _) in mart.columns.items()])
    return pa.Table.from_pylist(rows, schema=schema)
