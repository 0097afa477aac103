"""A window of one rank's trace back to Chrome-trace JSON, for Perfetto UI
and chrome://tracing, which cannot open a 2 GB trace comfortably.

    tracedb export --run v2 --rank 0 --step 2 -o step2.json
    tracedb export --run v2 --rank 0 --start-ns A --end-ns B -o slice.json.gz
    tracedb export --run v2 --rank 0 --step 2 --compare v1 -o v1-v2.json

The window holds the events, flows and counters that start in it (a step's
window runs from the step's start to its end or to the end of the last GPU
kernel it launched, whichever is later), with every metadata event (process
and thread names, labels, sort indexes) of the traces it comes from. Events
keep their original args, pid, tid, id and time to the nanosecond: times are
written as microseconds with three decimals relative to
``baseTimeNanoseconds``, as Kineto writes them, so ingesting an export gives
back the same rows. With ``compare``, the base run's same step of the same
rank sits beside it in the same file, as separate processes (their pids
renumbered, their names prefixed with the run) shifted so that both steps
start at the same time.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from .errors import QueryError

if TYPE_CHECKING:
    from .api import TraceDB

# Pids of the compared base run start here (a real pid is below 2^22 on Linux).
BASE_PID_START = 1 << 24


@dataclass(frozen=True)
class Window:
    """What an export holds: one rank and phase of a run, [start_ns, end_ns)."""

    run: str
    rank: int
    phase: str
    start_ns: int
    end_ns: int
    step: int | None = None


@dataclass
class ExportResult:
    path: Path
    window: Window
    event_count: int
    flow_count: int
    counter_count: int
    base: Window | None = None


def _phase(db: TraceDB, run: str, rank: int, phase: str | None) -> str:
    phases = [p for (p,) in db.sql(
        "SELECT DISTINCT phase FROM traces WHERE run = ? AND rank = ? AND status = 'ok' ORDER BY phase",
        [run, rank]).fetchall()]
    if not phases:
        raise QueryError(f"run {run!r} has no rank {rank} in the warehouse")
    if phase is None:
        if len(phases) > 1:
            raise QueryError(f"run {run!r} rank {rank} has phases {', '.join(phases)}; choose one with --phase")
        return phases[0]
    if phase not in phases:
        raise QueryError(f"run {run!r} rank {rank} has no phase {phase!r} (it has {', '.join(phases)})")
    return phase


def window(db: TraceDB, run: str, rank: int, phase: str | None = None, step: int | None = None,
           start_ns: int | None = None, end_ns: int | None = None) -> Window:
    """The window of a step (its CPU range, extended to the end of the GPU
    kernels it launched) or of explicit nanosecond bounds."""
    phase = _phase(db, run, rank, phase)
    if step is not None:
        if start_ns is not None or end_ns is not None:
            raise QueryError("give --step or --start-ns/--end-ns, not both")
        row = db.sql(
            "SELECT min(ts_ns), max(end_ns) FROM int_steps WHERE run = ? AND rank = ? AND phase = ? AND step = ?",
            [run, rank, phase, step]).fetchall()[0]
        if row[0] is None:
            steps = [s for (s,) in db.sql(
                "SELECT DISTINCT step FROM int_steps WHERE run = ? AND rank = ? AND phase = ? ORDER BY step",
                [run, rank, phase]).fetchall()]
            raise QueryError(f"run {run!r} rank {rank} phase {phase!r} has no step {step}"
                             f" (steps: {', '.join(map(str, steps)) or 'none'})")
        start, end = row
        gpu_end = db.sql(
            "SELECT max(kernel_ts_ns + CAST(round(kernel_dur_us * 1000) AS BIGINT)) FROM kernel_launches"
            " WHERE run = ? AND rank = ? AND phase = ? AND step = ?", [run, rank, phase, step]).fetchall()[0][0]
        return Window(run, rank, phase, start, max(end, gpu_end or end), step)
    if start_ns is None and end_ns is None:
        raise QueryError("give --step K or --start-ns A and --end-ns B")
    lo, hi = db.sql("SELECT min(ts_min_ns), max(ts_max_ns) FROM traces WHERE run = ? AND rank = ? AND phase = ?",
                    [run, rank, phase]).fetchall()[0]
    start = lo if start_ns is None else start_ns
    end = hi + 1 if end_ns is None else end_ns
    if end <= start:
        raise QueryError(f"the window is empty: end {end} is not after start {start}")
    return Window(run, rank, phase, start, end, None)


def _micros(ns: int) -> str:
    """Nanoseconds as exact microseconds with three decimals."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    return f"{sign}{q}.{r:03d}" if r else f"{sign}{q}"


def _id_value(text: str | None) -> bytes:
    """A pid or tid as the trace wrote it: a number when it is one."""
    if text is not None and text.lstrip("-").isdigit() and len(text) < 19:
        return text.encode()
    return orjson.dumps(text)


class _Writer:
    """Chrome-trace JSON, one event a line, written as it goes."""

    def __init__(self, out, base_ns: int):
        self.out = out
        self.base_ns = base_ns
        self.first = True

    def event(self, fields: list[tuple[str, bytes]]) -> None:
        body = b",".join(b'"' + k.encode() + b'":' + v for k, v in fields)
        self.out.write((b"\n" if self.first else b",\n") + b"{" + body + b"}")
        self.first = False

    def ts(self, ns: int) -> bytes:
        return _micros(ns - self.base_ns).encode()


def _source(db: TraceDB, table: str, w: Window, columns: str, extra: str = "") -> list[tuple]:
    return db.sql(
        f"SELECT {columns} FROM {table} WHERE run = ? AND rank = ? AND phase = ?"
        f" AND ts_ns >= ? AND ts_ns < ?{extra} ORDER BY file_id, event_id",
        [w.run, w.rank, w.phase, w.start_ns, w.end_ns]).fetchall()


def _write_window(db: TraceDB, wr: _Writer, w: Window, shift_ns: int = 0,
                  pid_map: dict[str, bytes] | None = None, label: str | None = None) -> tuple[int, int, int]:
    """Write a window's events, flows and counters (and its traces' metadata
    events); times shifted by ``shift_ns``, pids through ``pid_map``, flow
    and async ids prefixed with ``label`` (so that they never join the
    other run's)."""

    def ident(text):
        return _id_value(text) if label is None else orjson.dumps(f"{label}:{text}")

    def pid(text):
        if pid_map is None:
            return _id_value(text)
        if text not in pid_map:
            pid_map[text] = str(BASE_PID_START + len(pid_map)).encode()
        return pid_map[text]

    def common(ph, cat, name, p, t, ts):
        f = [("ph", orjson.dumps(ph))]
        if cat is not None:
            f.append(("cat", orjson.dumps(cat)))
        if name is not None:
            f.append(("name", orjson.dumps(name)))
        f += [("pid", pid(p)), ("tid", _id_value(t))]
        if ts is not None:
            f.append(("ts", wr.ts(ts + shift_ns)))
        return f

    cols = "file_id, ts_ns, dur_ns, ph, cat, name, pid, tid, id, CAST(args AS VARCHAR)"
    events = _source(db, "events", w, cols, " AND ph <> 'M'")
    files = sorted({e[0] for e in events})
    meta = db.sql(
        f"SELECT {cols} FROM events WHERE run = ? AND rank = ? AND phase = ? AND ph = 'M'"
        " AND list_contains(?, file_id) ORDER BY file_id, event_id",
        [w.run, w.rank, w.phase, files]).fetchall() if files else []
    named = set()
    for _f, ts, dur, ph, cat, name, p, t, eid, args in meta:
        if label is not None and name == "process_name":
            named.add(p)
            args = orjson.dumps({"name": f"{label}: {orjson.loads(args).get('name', p) if args else p}"}).decode()
        wr.event(common(ph, cat, name, p, t, ts) + ([("args", args.encode())] if args is not None else []))
    if label is not None:  # a process without a name still says which run it is
        for p in sorted({e[6] for e in events} - named, key=str):
            wr.event(common("M", None, "process_name", p, None, None)
                     + [("args", orjson.dumps({"name": f"{label}: {p}"}))])
    for _f, ts, dur, ph, cat, name, p, t, eid, args in events:
        f = common(ph, cat, name, p, t, ts)
        if dur is not None:
            f.append(("dur", _micros(dur).encode()))
        if eid is not None:
            f.append(("id", orjson.dumps(eid) if label is None else ident(eid)))
        if args is not None:
            f.append(("args", args.encode()))
        wr.event(f)
    flows = _source(db, "flows", w, "file_id, ts_ns, ph, id, cat, name, pid, tid, bp")
    for _f, ts, ph, fid, cat, name, p, t, bp in flows:
        f = common(ph, cat, name, p, t, ts)
        if fid is not None:
            f.append(("id", ident(fid)))
        if bp is not None:
            f.append(("bp", orjson.dumps(bp)))
        wr.event(f)
    counters = _source(db, "counters", w, "file_id, event_id, ts_ns, cat, name, pid, tid, id, series, value")
    grouped: dict[tuple, list] = {}
    for row in counters:
        grouped.setdefault(row[:8], []).append((row[8], row[9]))
    for (_f, _e, ts, cat, name, p, t, cid), series in grouped.items():
        f = common("C", cat, name, p, t, ts)
        if cid is not None:
            f.append(("id", orjson.dumps(cid)))
        f.append(("args", orjson.dumps(dict(series))))
        wr.event(f)
    return len(events), len(flows), len(grouped)


def export(db: TraceDB, path: str | os.PathLike, run: str, rank: int, phase: str | None = None,
           step: int | None = None, start_ns: int | None = None, end_ns: int | None = None,
           compare: str | None = None) -> ExportResult:
    """Write the window as Chrome-trace JSON (gzip when ``path`` ends in .gz)."""
    w = window(db, run, rank, phase, step, start_ns, end_ns)
    base = None
    if compare is not None:
        if w.step is None:
            raise QueryError("--compare needs --step: the base run's same step is put beside it")
        base = window(db, compare, rank, w.phase, w.step)
    info = db.sql(
        "SELECT base_time_ns, distributed_info, device_properties FROM traces"
        " WHERE run = ? AND rank = ? AND phase = ? AND status = 'ok' ORDER BY file_id LIMIT 1",
        [w.run, w.rank, w.phase]).fetchall()
    info = info[0] if info else None
    base_ns = info[0] if info and info[0] is not None else 0
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(tmp, "wb") as out:
        out.write(b'{"schemaVersion":1,"displayTimeUnit":"ns"')
        out.write(b',"baseTimeNanoseconds":' + str(base_ns).encode())
        for key, value in (("distributedInfo", info and info[1]), ("deviceProperties", info and info[2])):
            if value is not None:
                out.write(b',"' + key.encode() + b'":' + value.encode())
        meta = {"run": w.run, "rank": w.rank, "phase": w.phase, "step": w.step,
                "start_ns": w.start_ns, "end_ns": w.end_ns}
        if base is not None:
            meta["compare"] = {"run": base.run, "start_ns": base.start_ns, "end_ns": base.end_ns,
                               "shift_ns": w.start_ns - base.start_ns}
        out.write(b',"tracedbExport":' + orjson.dumps(meta))
        out.write(b',"traceName":' + orjson.dumps(f"tracedb export {w.run} rank {w.rank} {w.phase}"))
        out.write(b',"traceEvents":[')
        wr = _Writer(out, base_ns)
        counts = _write_window(db, wr, w)
        if base is not None:
            _write_window(db, wr, base, shift_ns=w.start_ns - base.start_ns, pid_map={},
                          label=f"{base.run} (base)")
        out.write(b"\n]}\n")
    os.replace(tmp, path)
    return ExportResult(path, w, *counts, base=base)
