"""Write one trace's record batches to Parquet and publish them atomically.

Each table's rows of a trace are published at ``Warehouse.data_key`` (the
layout, warehouse.py, is the contract BI users see)::

    <warehouse>/<table>/run=<run>/rank=<rank>/phase=<phase>/<file_id>.parquet

Batches stream into a private folder of the warehouse's staging area:
one Parquet file from the streaming parser, or one Arrow IPC file per piece
from the split path (parse/pieces.py), which finalize reads at a quarter of
Parquet's cost.
``finalize`` then makes each table's final file in one streaming pass over
the staged rows, in event_id order (the events lane after lane: a row
group holds one lane, schema.EVENT_LANES, but in a tiny trace's one row
group, ONE_ROW_GROUP_EVENTS): it adds ``file_id``, shifts times by
``baseTimeNanoseconds`` (known only once the whole trace is read) and adds
``self_ns`` (the children's time comes from
the C pass of _selftime.c over the slices in the trace's order, a window
of each thread's sorted at a time, fed as the parse stages each piece;
where that cannot be, a sort of the slices in memory, by the same C pass or
by numpy, or for a trace of more than IN_MEMORY_EVENTS, DuckDB's external
sort; summed and sorted by parent, and matched to the rows as both go by:
no join, no sort of the whole table).
``publish`` puts the final files into their partitions, atomically, through
the warehouse's storage.
A file in a partition is visible to queries only once the catalog lists it
(see catalog.py), so a crash at any point leaves nothing half-visible.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import os
import re
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from .errors import UploadError, WarehouseError
from .schema import EVENT_LANES, N_EVENT_LANES, SCHEMAS, by_lane
from .sqltext import sql_list, sql_literal
from .warehouse import TABLES

# glibc's malloc_trim, where the C library has it (glibc; not musl, macOS).
_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None) if os.name == "posix" else None

try:
    from . import _selftime
except ImportError:  # not compiled (no C compiler at install): numpy solves (_Threads)
    _selftime = None
try:  # after pyarrow.parquet, which loads the C++ libraries it links to
    from . import _pqwriter
except ImportError:  # not compiled, or built against another pyarrow: pyarrow's writer
    _pqwriter = None

if TYPE_CHECKING:
    from .warehouse import Warehouse

FINALIZE_MEMORY = "256MB"
# Self time's children come from the C pass as a stream (_SumsStream), fed
# each piece as the parse stages it (or, for the streaming parser's file,
# in finalize): each thread's latest STREAM_WINDOW to 2 x STREAM_WINDOW
# slices are held and sorted (the 4.5 GB bench trace lists a slice up to
# 8,554 places after its place in its thread's order), at most
# STREAM_HELD_BYTES of them in all (24 bytes a slice). The final sums are
# sorted by parent SUM_RUN at a time, staged and merged. A trace further
# from its order, or with more threads than that holds, is sorted: up to
# IN_MEMORY_EVENTS (JSON events: a 1 GiB trace has 4.5M, 3M of them
# slices), in memory (_Slices: 21 bytes an event, and the sort's copies;
# the 1 GiB trace's sums peak 280 MiB above the process's 120); above, by
# DuckDB's external sort, whose memory is bounded.
IN_MEMORY_EVENTS = 5_000_000
# The streaming parser's staged rows of a table, up to this much Parquet, are
# put in order in memory (Arrow), not by a DuckDB of their own: starting one
# took 19 ms, two a trace, most of a tiny trace's ingest (1,000 traces
# written by json.dumps, one line each: 50.8 s in one process, 18.7 s of it
# starting DuckDB).
SORT_IN_MEMORY_BYTES = 4 << 20
SORTED_BATCH_ROWS = 1 << 16  # the batches of the rows so sorted
# After finalizing a trace of at least this many events, the memory freed is
# given back (give_back_freed).
GIVE_BACK_AFTER_EVENTS = 10_000
# A trace of fewer events has its lanes in one row group of each final file
# (while under FINAL_ROW_GROUP_BYTES: _joined): a row group costs the writer
# ~0.8 ms whatever its rows (29 columns), and a lane of such a trace is too
# small for skipping it to matter.
ONE_ROW_GROUP_EVENTS = 10_000
STREAM_WINDOW = 1 << 14
STREAM_HELD_BYTES = 64 << 20
SUM_RUN = 1 << 21


# Self time of every slice: its duration less the durations of its direct
# children on the same (pid, tid). DuckDB sorts the slices per thread by
# start (longer first on ties, then event_id; an external sort, so memory
# stays bounded). A slice's depth is how many earlier slices of its thread
# end after it starts; its parent is the latest earlier slice one level up.
# Each sorted batch is solved at once with numpy (_Threads.pairs), carrying
# the open slices and the latest slice at each depth to the next batch. It
# writes (parent, child duration) pairs; a GROUP BY sums them. Memory is a
# batch and the nesting depth, not the trace.
_SLICES_SQL = """
SELECT pid, tid, ts_ns, dur_ns, event_id FROM {src}
WHERE ph = 'X' AND ts_ns IS NOT NULL AND dur_ns IS NOT NULL AND dur_ns >= 0
    AND pid IS NOT NULL AND tid IS NOT NULL
ORDER BY pid, tid, ts_ns, dur_ns DESC, event_id
"""
_SLICE_COLUMNS = ["ph", "pid", "tid", "ts_ns", "dur_ns", "event_id"]
_PAIR_SCHEMA = pa.schema([("parent_id", pa.int64()), ("dur_ns", pa.int64())])


def _on_one_line(seg: np.ndarray, first: np.ndarray, ts: np.ndarray, ends: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Starts and (sorted) ends as int64s that compare like (thread, time):
    each thread's times moved into a range of its own, after the thread
    before; where those ranges would pass 2^62, dense ranks instead."""
    heads = np.flatnonzero(first == np.arange(len(ts)))
    low = ts[heads]  # rows are sorted: a thread's first start is its least time
    span = np.maximum.reduceat(ends, heads) - low + 1
    if float(np.sum(span.astype(np.float64))) < 2.0**62 and np.all(span > 0):
        shift = (np.cumsum(span) - span - low)[seg]
        return ts + shift, np.sort(ends + shift)
    _, rank = np.unique(np.concatenate((ts, ends)), return_inverse=True)
    width = int(rank.max()) + 1
    return seg * width + rank[:len(ts)], np.sort(seg * width + rank[len(ts):])


class _Threads:
    """Parents of slices sorted by (thread, start, longer first, event_id),
    given batch by batch. What one batch leaves to the next is its last
    thread's: the ends of the slices still open, and the event_id of the
    latest slice at each depth."""

    def __init__(self) -> None:
        self._thread: tuple = (None, None)
        self._open = np.empty(0, np.int64)  # sorted
        self._last = np.empty(0, np.int64)  # by depth

    def pairs(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """(parent event_id, child duration) of each slice of ``batch``
        (columns pid, tid, ts_ns, dur_ns, event_id) that has a parent."""
        pid, tid = batch.column(0), batch.column(1)
        ts, dur, eid = (batch.column(i).to_numpy() for i in (2, 3, 4))
        m = len(ts)
        row = np.arange(m)
        changes = pc.or_(pc.not_equal(pid[1:], pid[:-1]), pc.not_equal(tid[1:], tid[:-1]))
        seg = np.concatenate(([0], np.cumsum(changes.to_numpy(zero_copy_only=False))))  # thread within the batch
        first = np.searchsorted(seg, seg)  # the row its thread starts at in this batch
        carried = (pid[0].as_py(), tid[0].as_py()) == self._thread
        ends = ts + np.minimum(dur, np.iinfo(np.int64).max - ts)  # past int64, the same as its last value
        starts_at, ends_at = _on_one_line(seg, first, ts, ends)
        # Earlier slices of the thread that end by a row's start: all that
        # end by then, less those at or after the row (zero length, same start).
        ended = np.searchsorted(ends_at, starts_at, "right") - first
        zeros = np.concatenate(([0], np.cumsum(dur == 0)))
        ended -= zeros[np.searchsorted(starts_at, starts_at, "right")] - zeros[row]
        depth = row - first - ended
        if carried:
            head = seg == 0
            depth[head] += len(self._open) - np.searchsorted(self._open, ts[head], "right")
        # The parent: the latest earlier row of the thread one level up; where
        # the batch has none (its first thread only), the one carried.
        levels = int(depth.max()) + 1
        keys = np.sort((seg * levels + depth) * m + row)
        group, rows = keys // m, keys % m  # (thread, depth), then row order
        child = np.flatnonzero(depth > 0)
        want = seg[child] * levels + depth[child] - 1
        at = np.searchsorted(keys, want * m + child) - 1
        found = (at >= 0) & (group[np.maximum(at, 0)] == want)
        parents = np.empty(len(child), np.int64)
        parents[found] = eid[rows[at[found]]]
        parents[~found] = self._last[depth[child[~found]] - 1]
        # For the next batch: the last thread's open slices and latest slice
        # at each depth (added to those carried, if it is the same thread).
        same = carried and seg[-1] == 0
        latest = np.append(group[1:] != group[:-1], True) & (group // levels == seg[-1])
        depths = group[latest] % levels
        last = self._last if same else np.empty(0, np.int64)
        self._last = np.concatenate((last, np.full(max(0, int(depths.max()) + 1 - len(last)), -1, np.int64)))
        self._last[depths] = eid[rows[latest]]
        still = np.concatenate((self._open if same else np.empty(0, np.int64), ends[first[-1]:]))
        self._open = np.sort(still[still > ts[-1]])
        self._thread = (pid[-1].as_py(), tid[-1].as_py())
        return parents, dur[child]


def _child_pairs(con: duckdb.DuckDBPyConnection, src: str, dst: Path, batch_rows: int = 1 << 16) -> None:
    reader = con.sql(_SLICES_SQL.format(src=src)).to_arrow_reader(batch_rows)
    threads = _Threads()
    with pq.ParquetWriter(dst, _PAIR_SCHEMA, compression="lz4") as w:
        for batch in reader:
            if batch.num_rows:
                parents, durs = threads.pairs(batch)
                if len(parents):
                    w.write_batch(pa.record_batch([pa.array(parents), pa.array(durs)], schema=_PAIR_SCHEMA))


def _slice_rows(path: Path) -> pa.Table | None:
    """A staged file's slices (_SLICE_COLUMNS; ph 'X' with a start, a
    duration of 0 or more and a thread), None where it has none."""
    t = _read_staged(path, _SLICE_COLUMNS)
    dur = t.column("dur_ns")
    keep = pc.and_kleene(pc.equal(t.column("ph"), "X"), pc.greater_equal(dur, 0))
    for col in (t.column("ts_ns"), t.column("pid"), t.column("tid")):
        keep = pc.and_kleene(keep, pc.is_valid(col))
    t = t.filter(pc.fill_null(keep, False))
    return t if t.num_rows else None


class _ThreadCodes:
    """A small integer for each thread, (pid, tid): the next code the
    first time any staged file has it (files read on several threads)."""

    def __init__(self) -> None:
        self._codes: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def of(self, t: pa.Table) -> np.ndarray:
        """The int32 code of each row of ``t`` (_slice_rows)."""
        pid = t.column("pid").combine_chunks().dictionary_encode()
        tid = t.column("tid").combine_chunks().dictionary_encode()
        width = len(tid.dictionary)
        local = pid.indices.to_numpy().astype(np.int64) * width + tid.indices.to_numpy()
        present = np.flatnonzero(np.bincount(local))  # the (pid, tid) pairs of this file
        pids, tids = pid.dictionary.to_pylist(), tid.dictionary.to_pylist()
        lookup = np.zeros(int(present[-1]) + 1, np.int32)
        lookup[present] = self.codes([(pids[i // width], tids[i % width]) for i in present])
        return lookup[local]

    def codes(self, threads: list[tuple[str, str]]) -> np.ndarray:
        """The int32 code of each (pid, tid)."""
        with self._lock:
            return np.array([self._codes.setdefault(t, len(self._codes)) for t in threads], np.int32)


class _Slices:
    """A trace's slices in numpy arrays indexed by event_id: start,
    duration, thread code, and whether the event is a slice. Filled a
    staged file at a time (``add``, from several threads: each file writes
    its own event_ids)."""

    def __init__(self, events: int):
        self.ts = np.zeros(events, np.int64)
        self.dur = np.zeros(events, np.int64)
        self.code = np.zeros(events, np.int32)
        self.is_slice = np.zeros(events, np.bool_)
        self.beyond = False  # an event_id past ``events``: these arrays cannot hold the trace
        self._codes = _ThreadCodes()

    def add(self, path: Path) -> None:
        t = _slice_rows(path)
        if t is None:
            return
        code = self._codes.of(t)
        eid = t.column("event_id").to_numpy()
        if eid.max() >= len(self.ts):
            self.beyond = True
            return
        self.ts[eid] = t.column("ts_ns").to_numpy()
        self.dur[eid] = t.column("dur_ns").to_numpy()
        self.code[eid] = code
        self.is_slice[eid] = True

    def halves(self) -> list[np.ndarray]:
        """The slices' event_ids in two groups of whole threads, about equal
        in rows (the larger threads first, each to the smaller group)."""
        rows = np.flatnonzero(self.is_slice)
        code = self.code[rows]
        sizes = np.bincount(code)
        first = np.zeros(len(sizes), np.bool_)  # thread code -> in the first group
        count = [0, 0]
        for c in np.argsort(-sizes, kind="stable"):
            g = int(count[1] < count[0])
            first[c] = g == 0
            count[g] += int(sizes[c])
        in_first = first[code]
        return [half for half in (rows[in_first], rows[~in_first]) if len(half)]

    def solve(self, rows: np.ndarray, child_ns: np.ndarray, has: np.ndarray) -> bool:
        """Each of the slices ``rows`` (whole threads) added to its parent's
        ``child_ns`` and marked in ``has``, sorted and solved by the C pass
        (_selftime.c); False where a sum would pass 2^63."""
        return _selftime.child_sums(rows, self.code, self.ts, self.dur, child_ns, has)

    def pairs(self, rows: np.ndarray, batch_rows: int) -> tuple[np.ndarray, np.ndarray]:
        """(parent, child duration) pairs of the slices ``rows`` (whole
        threads, event_ids ascending), sorted here by (thread, start, longer
        first, event_id: lexsort is stable) and solved by numpy a batch at
        a time."""
        rows = rows[np.lexsort((-self.dur[rows], self.ts[rows], self.code[rows]))]
        threads = _Threads()
        found = []
        for start in range(0, len(rows), batch_rows):
            at = rows[start:start + batch_rows]
            thread = pa.array(self.code[at])
            found.append(threads.pairs(pa.record_batch(
                [thread, thread, pa.array(self.ts[at]), pa.array(self.dur[at]), pa.array(at)],
                names=["pid", "tid", "ts_ns", "dur_ns", "event_id"])))
        return (np.concatenate([p for p, _ in found] or [np.empty(0, np.int64)]),
                np.concatenate([d for _, d in found] or [np.empty(0, np.int64)]))


def _sums_of_pairs(found: list[tuple[np.ndarray, np.ndarray]], child_ns: np.ndarray, has: np.ndarray) -> bool:
    """(parent, child duration) pairs summed into ``child_ns`` and marked
    in ``has``; False where a sum could pass 2^63."""
    parents = np.concatenate([p for p, _ in found] or [np.empty(0, np.int64)])
    durs = np.concatenate([d for _, d in found] or [np.empty(0, np.int64)])
    if len(durs) and float(durs.max()) * len(durs) >= 2.0**63:
        return False
    np.add.at(child_ns, parents, durs)
    has[parents] = True
    return True


def _child_sums_in_memory(sources: list[Path], events: int, threads: int = 2,
                          batch_rows: int = 1 << 18) -> pa.Table | None:
    """What ``_child_pairs`` and its GROUP BY give (parent_id, child_ns, in
    parent order), with the slices in memory (_Slices, for ``events``
    event_ids), on ``threads`` threads (numpy, Arrow and the C pass let go
    of the GIL): the files read, then the threads in two halves, each sorted
    and solved. A 1 GiB trace's 3M slices: 0.8 s and 1.2 CPU-s with the C
    pass, 1.3 s and 2.1 with numpy's, against DuckDB's 1.7-2.1 s and
    2.7-3.3. None where an event_id is past ``events``, or where a sum
    could pass 2^63 (the DuckDB path then fails the trace, as ever)."""
    slices = _Slices(events)
    child_ns = np.zeros(events, np.int64)
    has = np.zeros(events, np.bool_)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(slices.add, sources))
        if slices.beyond:
            return None
        if _selftime is not None:
            if not all(pool.map(lambda rows: slices.solve(rows, child_ns, has), slices.halves())):
                return None
        elif not _sums_of_pairs(list(pool.map(lambda rows: slices.pairs(rows, batch_rows), slices.halves())),
                                child_ns, has):
            return None
    del slices
    ids = np.flatnonzero(has)
    sums = pa.table({"parent_id": pa.array(ids, pa.int64()), "child_ns": pa.array(child_ns[ids], pa.int64())})
    del child_ns, has, ids
    # The allocator keeps what the sort freed (50-150 MiB for a 1 GiB
    # trace); the pass that writes the events would come on top of it.
    if events >= GIVE_BACK_AFTER_EVENTS:
        give_back_freed()
    return sums


class _SumsStream:
    """The C pass's stream (_selftime.Stream) fed a trace's slices piece
    after piece, in event order (the C reader's, ``of_parse``, or read from
    a staged file, ``read``), its final sums sorted and staged in ``spill``
    a run at a time (_SumRuns). ``read`` and ``of_parse`` run on any
    thread, ``feed`` and ``finish`` on one."""

    def __init__(self, spill: Path):
        self._stream = _selftime.Stream(STREAM_WINDOW, STREAM_HELD_BYTES)
        self._codes = _ThreadCodes()
        self._runs = _SumRuns(spill)
        self.going = True  # False once the stream has stopped

    def read(self, path: Path) -> tuple[np.ndarray, ...] | None:
        """A staged file's slices as the stream takes them."""
        t = _slice_rows(path)
        if t is None:
            return None
        return (self._codes.of(t),) + tuple(t.column(c).to_numpy() for c in ("ts_ns", "dur_ns", "event_id"))

    def of_parse(self, threads: list[tuple[str, str]], thread: np.ndarray, *values: np.ndarray
                 ) -> tuple[np.ndarray, ...] | None:
        """The C reader's slices of a piece (PieceResult.slices) as the
        stream takes them: each thread's code in place of its index."""
        if not len(thread):
            return None
        return (self._codes.codes(threads)[thread],) + values

    def feed(self, slices: tuple[np.ndarray, ...] | None) -> bool:
        if self.going and slices is not None:
            self.going = self._stream.feed(*slices)
            if self.going:
                self._runs.add(*self._stream.take())
        return self.going

    def finish(self) -> Callable[[], Iterator[pa.RecordBatch]] | None:
        """The sums in parent order (a reader, as _SumRuns.reader), or None
        where the stream stopped (slices too far from their order, too
        many held, a sum past 2^63)."""
        if not (self.going and self._stream.finish()):
            self.going = False
            return None
        self._runs.add(*self._stream.take())
        return self._runs.reader()


def _child_sums_streamed(sources: list[Path], spill: Path, threads: int = 2
                         ) -> Callable[[], Iterator[pa.RecordBatch]] | None:
    """What ``_child_sums_in_memory`` gives, for a trace too large to hold
    its slices: the staged files read in order (on ``threads`` threads, a
    few ahead) and fed to a _SumsStream. A 4.5 GB trace's 12M slices:
    2.2-2.5 s and 3.4-3.7 CPU-s, against 8.0-8.4 and 14.2-14.6 by DuckDB's
    sort. None where the stream stops."""
    sums = _SumsStream(spill)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for slices in _read_ahead(pool, sums.read, sources, threads):
            if not sums.feed(slices):
                return None
    return sums.finish()


def _read_ahead(pool: ThreadPoolExecutor, read: Callable, paths: list[Path], ahead: int) -> Iterator:
    """``read`` of each path, in order, up to ``ahead`` more being read on
    ``pool`` meanwhile."""
    pending: collections.deque = collections.deque()
    for path in paths:
        pending.append(pool.submit(read, path))
        if len(pending) > ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


class _SumRuns:
    """(parent_id, child_ns) pairs given in no order, each parent once:
    sorted and staged as Arrow IPC a SUM_RUN at a time, read back merged in
    parent order. Memory: a run, and a batch of each run as they merge."""

    def __init__(self, spill: Path):
        self._spill = spill
        self._held: list[tuple[np.ndarray, np.ndarray]] = []
        self._count = 0
        self._paths: list[Path] = []

    def add(self, eids: bytes, sums: bytes) -> None:
        if eids:
            self._held.append((np.frombuffer(eids, np.int64), np.frombuffer(sums, np.int64)))
            self._count += len(self._held[-1][0])
        if self._count >= SUM_RUN:
            self._stage()

    def _sorted(self) -> pa.Table:
        eids = np.concatenate([e for e, _ in self._held] or [np.empty(0, np.int64)])
        sums = np.concatenate([v for _, v in self._held] or [np.empty(0, np.int64)])
        self._held, self._count = [], 0
        order = np.argsort(eids, kind="stable")
        return pa.table({"parent_id": eids[order], "child_ns": sums[order]})

    def _stage(self) -> None:
        path = self._spill / f"child_sums.run{len(self._paths):04d}.arrow"
        run = self._sorted()
        with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, run.schema, options=_PIECE_PLAIN) as w:
            w.write_table(run, max_chunksize=1 << 16)
        self._paths.append(path)

    def reader(self) -> Callable[[], Iterator[pa.RecordBatch]]:
        """The sums in parent order, from the start at each call."""
        if not self._paths:
            sums = self._sorted()
            return lambda: iter(sums.to_batches(1 << 16))
        if self._count:
            self._stage()
        return lambda: _merged(self._paths)


def _merged(paths: list[Path]) -> Iterator[pa.RecordBatch]:
    """The staged runs' rows (parent_id, child_ns; each sorted, no
    parent_id in two) in parent_id order: each time, every run's rows up to
    the least of the runs' last read parent_id."""
    with contextlib.ExitStack() as files:
        readers = [ipc.open_file(files.enter_context(pa.OSFile(str(p))), options=_PIECE_READ) for p in paths]
        at = [0] * len(readers)
        heads: list[pa.RecordBatch | None] = [None] * len(readers)
        while True:
            for i, r in enumerate(readers):
                if heads[i] is None and at[i] < r.num_record_batches:
                    heads[i], at[i] = r.get_batch(at[i]), at[i] + 1
            live = [i for i, h in enumerate(heads) if h is not None]
            if not live:
                return
            bound = min(heads[i].column(0)[-1].as_py() for i in live)
            parts = []
            for i in live:
                upto = int(np.searchsorted(heads[i].column(0).to_numpy(), bound, "right"))
                parts.append(heads[i].slice(0, upto))
                heads[i] = heads[i].slice(upto) if upto < heads[i].num_rows else None
            batch = pa.Table.from_batches(parts).combine_chunks()
            yield batch.take(pc.sort_indices(batch.column(0))).to_batches()[0]


def give_back_freed() -> None:
    """Give the system the memory this process freed and its allocators
    keep for reuse: Arrow's pool's, and glibc's heaps' free pages (Arrow's
    release does not trim glibc's heaps: after a 1.1 GB trace's finalize the
    process held 160-194 MiB, 125 once trimmed, in 5 ms). DuckDB allocates
    from its own allocator, so the summaries' memory would come on top."""
    pa.default_memory_pool().release_unused()
    if _malloc_trim is not None:
        _malloc_trim(0)


def _final_schema(table: str) -> pa.Schema:
    """A table as published: file_id first; events also carry self_ns."""
    fields = [pa.field("file_id", pa.string())]
    for f in SCHEMAS[table]:
        fields.append(f)
        if table == "events" and f.name == "dur_ns":
            fields.append(pa.field("self_ns", pa.int64()))
    return pa.schema(fields)


FINAL_SCHEMAS = {table: _final_schema(table) for table in TABLES}
# The streaming parser's staged file is read once, whole, by DuckDB's sort:
# lz4 without dictionaries or statistics is a third faster to write than with
# them, and no larger.
_STAGED = dict(compression="lz4", use_dictionary=False, write_statistics=False)
# A piece's rows are staged as an Arrow IPC file: for the pieces of a
# 1 GiB trace, with lz4, 0.8 s of CPU to write and 0.4 to read back,
# against 1.2 and 1.7 as Parquet; 181 MB against 112. Uncompressed while
# the writer's plain_bytes last (plain_staging_bytes): lz4 was 7% of an
# ingest's CPU, and finalize reads a piece back and deletes it before the
# kernel has a reason to write its pages out.
# Its buffers are compressed and decompressed on the calling thread, not
# on Arrow's pool: the parse's threads and finalize's keep both cores busy,
# and handing each of a batch's hundred small buffers to the pool cost more
# than it saved (60 pieces of a 1 GiB trace's: written in 0.16 CPU-s, not
# 0.27, read in 0.08, not 0.14).
_PIECE_PLAIN = ipc.IpcWriteOptions(use_threads=False)
_PIECE_LZ4 = ipc.IpcWriteOptions(compression="lz4", use_threads=False)
_PIECE_READ = ipc.IpcReadOptions(use_threads=False)
# A staged file is read through a memory map: an uncompressed piece's
# buffers are the page cache's pages, not copied into new memory (16 rank
# files on two workers: 2.0% less CPU and a peak 80 MiB lower; the 1 GiB
# trace 2.2% less, 18 MiB lower; the 4 GiB one 4% less). Only this process
# writes and deletes these files, and a mapped one outlives its name.


def _read_staged(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A staged file's rows (``columns`` only, if given): a piece's Arrow
    IPC file, or the streaming parser's Parquet."""
    if path.suffix == ".parquet":
        return pq.read_table(path, columns=columns)
    with pa.memory_map(str(path)) as source:
        reader = ipc.open_file(source, options=_PIECE_READ)
        if columns is None:
            return reader.read_all()
        names = reader.schema.names
        reader = ipc.open_file(source, options=ipc.IpcReadOptions(
            included_fields=[names.index(c) for c in columns], use_threads=False))
        return reader.read_all().select(columns)  # included fields come in the file's order


FINAL_ROW_GROUP = 122_880
# and at most this much in memory (Arrow's bytes), so that a row group of
# kernels is about as large as one of CPU ops: the writer holds one and
# finalize makes the next.
FINAL_ROW_GROUP_BYTES = 48 << 20


# Text every row has, in rows in event order: a row group's least and
# greatest value span most of the file's and prune no query, and their
# comparisons (long kernel names) took 9% of the events' writer (1.33 CPU-s
# for a 1 GiB trace's, 1.21 without). file_id keeps its statistics (one
# value per file: they prune by trace), as do the args' typed columns
# (mostly NULL: theirs cost little), and cat: a row group holds one lane.
_NO_STATISTICS = frozenset({"ph", "name", "pid", "tid", "args"})
# Text that is mostly distinct: the flows' ids (a 1.1 GB trace's 1.5M flow
# rows hold 1.0M ids) and the args. A dictionary page fills before a row
# group ends and the writer falls back to plain, after hashing every value:
# plain from the start, the flows were written in 0.27 CPU-s against 0.32
# and 5.0 MB against 7.3; the events 3% faster and 2% smaller.
_PLAIN_TEXT = frozenset({"id", "args"})


def _encodings(schema: pa.Schema) -> dict:
    """Delta encoding for the integer columns (ids and times rise, durations
    are small), dictionaries for the other columns but _PLAIN_TEXT: a third
    smaller than dictionaries everywhere, and faster to write. Statistics
    for all but _NO_STATISTICS."""
    ints = [f.name for f in schema if f.type == pa.int64()]
    return dict(use_dictionary=[f.name for f in schema if f.name not in ints and f.name not in _PLAIN_TEXT],
                column_encoding={name: "DELTA_BINARY_PACKED" for name in ints},
                write_statistics=[f.name for f in schema if f.name not in _NO_STATISTICS])


@contextlib.contextmanager
def _final_writer(dst: Path, schema: pa.Schema, threads: int) -> Iterator[Callable[[pa.Table], None]]:
    """A final file's writer: a call writes one row group. On ``threads``
    > 1, a row group's columns are encoded and compressed on Arrow's
    threads (_pqwriter.cpp): a 1 GiB trace's events, written alone on two
    cores, in 0.98 s against pyarrow's 1.24, at 1.41 CPU-s against 1.24
    (benchmarks/writer.py), with the same encodings and statistics. Else,
    or where it is not built, pyarrow's writer."""
    options = _encodings(schema)
    if threads > 1 and _pqwriter is not None:
        w = _pqwriter.Writer(str(dst), schema.__arrow_c_schema__(), options["use_dictionary"],
                             list(options["column_encoding"]), options["write_statistics"])
        try:
            yield lambda rows: w.write(rows.__arrow_c_stream__())
        finally:
            w.close()
    else:
        with pq.ParquetWriter(dst, schema, compression="zstd", **options) as w:
            yield lambda rows: w.write_table(rows, row_group_size=FINAL_ROW_GROUP)


def _slices_source(con: duckdb.DuckDBPyConnection, sources: list[Path]) -> str:
    """What _SLICES_SQL reads: the streaming parser's Parquet, or the
    pieces' IPC files as a stream of their slice columns, read a piece at
    a time (DuckDB reads no IPC files of its own)."""
    if all(p.suffix == ".parquet" for p in sources):
        return f"read_parquet({sql_list(sources)})"
    schema = SCHEMAS["events"]
    batches = (b for p in sources for b in _read_staged(p, _SLICE_COLUMNS).to_batches())
    con.register("staged_slices", pa.RecordBatchReader.from_batches(
        pa.schema([schema.field(c) for c in _SLICE_COLUMNS]), batches))
    return "staged_slices"


class _Children:
    """Summed child time per parent event_id, read in parent_id order
    alongside events read in event_id order: memory is one window."""

    def __init__(self, batches: Iterator[pa.RecordBatch]):
        self._batches = batches
        self._ids = pa.array([], pa.int64())
        self._ns = pa.array([], pa.int64())
        self._done = False

    def take(self, event_ids: pa.Array) -> pa.Array:
        """Child time of each of ``event_ids`` (ascending, and above any
        asked before); NULL where an event has no children."""
        if len(event_ids) == 0:
            return pa.nulls(0, pa.int64())
        hi = pc.max(event_ids).as_py()
        while not self._done and (len(self._ids) == 0 or self._ids[-1].as_py() <= hi):
            try:
                b = next(self._batches)
            except StopIteration:
                self._done = True
                break
            self._ids = pa.concat_arrays([self._ids, b.column(0)])
            self._ns = pa.concat_arrays([self._ns, b.column(1)])
        upto = int(np.searchsorted(self._ids.to_numpy(), hi, "right"))
        if upto == 0:
            return pa.nulls(len(event_ids), pa.int64())
        ids, ns = self._ids.slice(0, upto).to_numpy(), self._ns.slice(0, upto).to_numpy()
        # The rest (within the last batch read) is copied: a slice would keep
        # the whole window's buffers, to the end of finalize after a lane's
        # last rows (a 4.4 GB trace's first lane: 56 MiB, for no rows).
        self._ids, self._ns = pa.concat_arrays([self._ids.slice(upto)]), pa.concat_arrays([self._ns.slice(upto)])
        # both ascending: a binary search, not a hash table of the window
        want = event_ids.to_numpy()
        at = np.minimum(np.searchsorted(ids, want), upto - 1)
        return pa.array(ns[at], pa.int64(), mask=ids[at] != want)


def _repeated(text: str, n: int) -> pa.Array:
    """``text`` n times, as a string array made from its buffers: a list of
    n references for pa.array took 0.3-0.45 s for a 1 GiB trace's 3M rows.
    For one batch (a piece's rows, or 2^16): n x len(text) is far below the
    2^31 bytes that 32-bit offsets can address."""
    data = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(data))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])


def _final_rows(rows: pa.Table, schema: pa.Schema, file_id: str, shift_ns: int,
                children: _Children | None) -> pa.Table:
    """A row group as published: file_id, absolute times, self_ns."""
    n = rows.num_rows
    arrays = []
    for f in schema:
        if f.name == "file_id":
            arr = _repeated(file_id, n)
        elif f.name == "self_ns":
            dur = rows.column("dur_ns")
            child = children.take(rows.column("event_id")) if children is not None else pa.nulls(n, pa.int64())
            is_slice = pc.and_(pc.equal(rows.column("ph"), "X"), pc.greater_equal(dur, 0))
            arr = pc.if_else(is_slice, pc.subtract_checked(dur, pc.coalesce(child, 0)), pa.nulls(n, pa.int64()))
        elif f.name == "ts_ns":
            arr = pc.add_checked(rows.column("ts_ns"), int(shift_ns))
        else:
            arr = rows.column(f.name)
        arrays.append(arr if arr.type == f.type else arr.cast(f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


_END = object()


def _ahead(items: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """The items, each made on a thread while the one before is used: a row
    group is read and computed while the writer compresses the one before
    (Arrow releases the GIL in both)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(next, items, _END)
        while (item := pending.result()) is not _END:
            pending = pool.submit(next, items, _END)
            yield item


def _joined(tables: Iterator[pa.Table], max_bytes: int) -> Iterator[pa.Table]:
    """The tables as one, or, once they pass ``max_bytes`` together (a
    few events with long args), as they come: memory stays bounded."""
    kept: list[pa.Table] = []
    nbytes = 0
    for table in tables:
        kept.append(table)
        nbytes += table.nbytes
        if nbytes > max_bytes:
            yield from kept
            yield from tables
            return
    if kept:
        yield pa.concat_tables(kept)


def _row_groups(batches: Iterator[tuple[int, pa.RecordBatch]], size: int,
                max_bytes: int) -> Iterator[tuple[int, pa.Table]]:
    """The batches, which come lane after lane, as tables of ``size`` rows,
    or fewer where they reach ``max_bytes`` first (the kernels' rows, long
    names and args, are twice the CPU ops'), with their lane (a lane's last
    table shorter): the writer's unit, so that it can be made ahead whole
    (a piece's batches are a tenth of a row group), each of one lane
    (schema.EVENT_LANES)."""
    kept: list[pa.RecordBatch] = []
    rows = nbytes = 0
    at = None
    for lane, batch in batches:
        if lane != at and rows:
            yield at, pa.Table.from_batches(kept)
            kept, rows, nbytes = [], 0, 0
        at = lane
        kept.append(batch)
        rows += batch.num_rows
        nbytes += batch.nbytes
        if rows >= size:
            table = pa.Table.from_batches(kept)
            full = rows - rows % size
            for start in range(0, full, size):
                yield at, table.slice(start, size)
            rest = table.slice(full)
            kept, rows, nbytes = rest.to_batches(), rest.num_rows, rest.nbytes
        elif nbytes >= max_bytes:
            yield at, pa.Table.from_batches(kept)
            kept, rows, nbytes = [], 0, 0
    if rows:
        yield at, pa.Table.from_batches(kept)


# A piece's staged events file lists the lane of each of its batches
# (write_part), for finalize to read one lane of each piece at a time.
_LANES_KEY = b"tracedb.lanes"


def _read_lane(path: Path, lane: int) -> pa.Table | None:
    """A piece's staged events of one lane (only its batches read), or
    None where the piece has none."""
    with pa.memory_map(str(path)) as source:
        reader = ipc.open_file(source, options=_PIECE_READ)
        lanes = json.loads(reader.schema.metadata[_LANES_KEY])
        assert len(lanes) == reader.num_record_batches, (path, lanes)
        batches = [reader.get_batch(i) for i, of in enumerate(lanes) if of == lane]
    return pa.Table.from_batches(batches, schema=reader.schema) if batches else None


def _in_id_order(rows: pa.Table) -> pa.Table:
    ids = rows.column("event_id")
    if len(ids) > 1 and not pc.all(pc.less(ids[:-1], ids[1:])).as_py():
        return rows.sort_by("event_id")  # a piece's odd events (no phase, ...) come after its slices
    return rows


def plain_staging_bytes(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> int:
    """How many bytes of pieces an ingest may stage uncompressed: half of
    the room left below the point where Linux starts writing dirty pages out
    in the background (``vm.dirty_background_bytes``, else
    ``vm.dirty_background_ratio`` percent of the memory available, or of
    what the process's memory cgroup has left, if less), less what is dirty
    or being written already. Within it the kernel keeps a trace's staged
    pieces in memory until finalize has read and deleted them, and nothing
    goes to the disk. Past it, lz4: the pieces of a 4.4 GB trace written
    uncompressed passed the threshold, and the kernel's writing made the
    ingest slower (31.6 s against 29.7). 0 (all lz4) where the kernel does
    not say: not Linux."""
    try:
        vm = proc / "sys" / "vm"
        fixed = int((vm / "dirty_background_bytes").read_text())
        ratio = int((vm / "dirty_background_ratio").read_text())
    except (OSError, ValueError):
        return 0
    kib = _meminfo(proc)
    if not kib:
        return 0
    if fixed:
        threshold = fixed
    else:
        available = _available(kib, proc, cgroups)
        if available is None:
            return 0
        threshold = available * ratio // 100
    return max(0, threshold - kib.get("Dirty", 0) - kib.get("Writeback", 0)) // 2


def memory_available(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The memory available without swapping (``MemAvailable``: free, and
    what the kernel can take back from its caches), or what the process's
    memory cgroup has left, if less; None where the kernel does not say."""
    return _available(_meminfo(proc), proc, cgroups)


def _available(kib: dict[str, int], proc: Path, cgroups: Path) -> int | None:
    """memory_available, of /proc/meminfo's figures as _meminfo read them."""
    available = kib.get("MemAvailable")
    if available is None:
        return None
    left = _cgroup_memory_left(proc, cgroups)
    return available if left is None else min(available, left)


def _meminfo(proc: Path) -> dict[str, int]:
    """/proc/meminfo's figures in bytes ({} where it cannot be read)."""
    try:
        text = (proc / "meminfo").read_text()
    except OSError:
        return {}
    return {m.group(1): int(m.group(2)) << 10 for m in re.finditer(r"^(\w+):\s+(\d+) kB", text, re.MULTILINE)}


def _cgroup_memory_left(proc: Path, cgroups: Path) -> int | None:
    """What the process's memory cgroup may still take (its limit less its
    use; cgroup v2 or v1), or None where it has no limit or none is found."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2
            folder, limit, used = cgroups / path.lstrip("/"), "memory.max", "memory.current"
        elif "memory" in controllers.split(","):  # v1
            folder, limit, used = cgroups / "memory" / path.lstrip("/"), "memory.limit_in_bytes", "memory.usage_in_bytes"
        else:
            continue
        try:
            cap, use = (folder / limit).read_text().strip(), int((folder / used).read_text())
        except (OSError, ValueError):
            continue
        if cap.isdigit() and int(cap) < 1 << 62:  # v2 says "max", v1 a huge number, for no limit
            return max(0, int(cap) - use)
    return None


def cannot_write(warehouse: Warehouse | Path, e: OSError) -> WarehouseError:
    """One line: pyarrow's messages are long, its errno is the point."""
    why = os.strerror(e.errno) if e.errno else (e.strerror or str(e))
    return WarehouseError(f"{warehouse}: cannot write the warehouse: {why}")


class TraceWriter:
    """Stage, finalize and publish the Parquet files of one trace."""

    def __init__(self, warehouse: Warehouse, plain_bytes: int = 0):
        self.warehouse = warehouse
        # How much more of the pieces' rows to stage uncompressed
        # (plain_staging_bytes; write_part runs on the parse's threads).
        self._plain_left = plain_bytes
        self._plain_lock = threading.Lock()
        # The content hash: set by the caller before finalize (ingest parses
        # a large trace while it is hashed).
        self.file_id: str | None = None
        self.dir = warehouse.staging_path(f"trace.{uuid.uuid4().hex[:8]}")
        try:
            self.dir.mkdir(parents=True)
        except OSError as e:
            raise cannot_write(warehouse, e) from None
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._tables: set[str] = set()
        self._parts: dict[str, list[Path]] = {}
        self.final: dict[str, Path] = {}
        # Self time's stream, fed each piece's events as the parse stages
        # them (add_piece), in piece order: finalize then waits for no sort.
        self._sums = _SumsStream(self.dir) if _selftime is not None else None
        self._unfed: dict[int, tuple] = {}  # pieces staged out of order, by number: (events part, slices)
        self._next_piece = 0
        self._feeder: ThreadPoolExecutor | None = None  # feeds it, one piece after another
        self._fed: list = []

    def staged(self, table: str) -> Path:
        return self.dir / f"{table}.staged.parquet"

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        try:
            w = self._writers.get(table)
            if w is None:
                w = pq.ParquetWriter(self.staged(table), SCHEMAS[table], **_STAGED)
                self._writers[table] = w
                self._tables.add(table)
            w.write_batch(batch)
        except OSError as e:  # e.g. the disk is full
            raise cannot_write(self.warehouse, e) from None

    def part(self, table: str, number: int) -> Path:
        """Where a piece (parse/pieces.py) stages its rows."""
        return self.dir / f"{table}.part{number:06d}.arrow"

    def write_part(self, table: str, number: int, batches: list[pa.RecordBatch],
                   lanes: list[int] | None = None) -> Path:
        """Stage the rows of one piece, the events' with the lane of each
        batch (``PieceResult.event_lanes``): uncompressed while the writer's
        plain_bytes last, else lz4. Returns the part, for ``add_piece``."""
        path = self.part(table, number)
        schema = SCHEMAS[table]
        if lanes is not None:
            schema = schema.with_metadata({_LANES_KEY: json.dumps(lanes)})
        size = sum(b.nbytes for b in batches)
        with self._plain_lock:
            plain = size <= self._plain_left
            if plain:
                self._plain_left -= size
        try:
            with (pa.OSFile(str(path), "wb") as sink,
                  ipc.new_file(sink, schema, options=_PIECE_PLAIN if plain else _PIECE_LZ4) as w):
                for batch in batches:
                    w.write_batch(batch)
        except OSError as e:  # e.g. the disk is full
            raise cannot_write(self.warehouse, e) from None
        return path

    def add_piece(self, number: int, parts: list[tuple[str, Path]], slices: tuple | None = None) -> None:
        """A piece's staged parts (write_part: (table, path)); its events'
        slices go to self time's stream once every piece before it has
        gone (pieces are numbered from 0, and finish in any order): the C
        reader's (PieceResult.slices), else read from its events part.
        Called on the parse's one collecting thread; the stream is fed on a
        thread of its own, a piece after another, while the parse goes on
        (fed on the collecting thread, the parse waited for it)."""
        events = None
        for table, path in parts:
            self._parts.setdefault(table, []).append(path)
            if table == "events":
                events = path
        self._unfed[number] = (events, slices)
        while self._next_piece in self._unfed:
            self._feed(*self._unfed.pop(self._next_piece))
            self._next_piece += 1

    def _feed(self, events: Path | None, slices: tuple | None) -> None:
        if events is not None and self._sums is not None:
            if self._feeder is None:
                self._feeder = ThreadPoolExecutor(max_workers=1)
            sums = self._sums
            read = (lambda: sums.of_parse(*slices)) if slices is not None else (lambda: sums.read(events))
            self._fed.append(self._feeder.submit(lambda: sums.going and sums.feed(read())))

    def _stop_feeding(self, cancel: bool = False) -> None:
        """The feeder's pieces fed (or with ``cancel``, those not begun let go)."""
        if self._feeder is not None:
            self._feeder.shutdown(wait=True, cancel_futures=cancel)
            self._feeder = None

    def _streamed_sums(self) -> Callable[[], Iterator[pa.RecordBatch]] | None:
        """The sums of the stream fed by add_piece (any pieces left, where
        numbers had a gap, fed now in order), or None where it stopped."""
        for number in sorted(self._unfed):
            self._feed(*self._unfed.pop(number))
        self._stop_feeding()
        for fed in self._fed:
            fed.result()  # an error reading a part
        self._fed = []
        return self._sums.finish()

    def _sources(self, table: str) -> list[Path]:
        staged = [self.staged(table)] if table in self._tables else []
        return staged + sorted(self._parts.get(table, ()))

    def close_staged(self) -> None:
        try:
            for w in self._writers.values():
                w.close()
        except OSError as e:  # e.g. the disk is full
            raise cannot_write(self.warehouse, e) from None
        finally:
            self._writers.clear()

    def finalize(self, shift_ns: int, events: int, threads: int = 1) -> None:
        """Each table's final file: file_id, absolute times, self_ns, rows
        in event_id order (the events' in each lane). One streaming pass per table, the small tables on
        a second thread while the events' self times are computed.
        ``events``: the trace's JSON events, more than its largest event_id."""
        self.close_staged()
        tables = [t for t in TABLES if self._sources(t)]
        try:
            # The small tables on a second thread when they need no DuckDB
            # sort of their own (pieces): memory stays one connection's.
            if threads > 1 and len(tables) > 1 and not self._tables:
                with ThreadPoolExecutor(max_workers=1) as pool:
                    others = pool.submit(lambda: [self._finalize_table(t, shift_ns, events) for t in tables[1:]])
                    self._finalize_table(tables[0], shift_ns, events, threads)
                    others.result()
            else:
                for table in tables:
                    self._finalize_table(table, shift_ns, events, threads)
        except duckdb.IOException as e:
            raise WarehouseError(f"{self.warehouse}: cannot write the warehouse: {e}") from None
        except OSError as e:
            raise cannot_write(self.warehouse, e) from None
        finally:
            # The allocators keep freed memory for reuse; the steps after this
            # one (summaries) are DuckDB's and would not reuse it. A tiny
            # trace's is next to nothing, and giving it back cost 0.5 ms.
            if events >= GIVE_BACK_AFTER_EVENTS:
                give_back_freed()

    def _finalize_table(self, table: str, shift_ns: int, events: int, threads: int = 1) -> None:
        sources = self._sources(table)
        children: list[_Children | None] = [None]
        if table == "events":
            sums = self._child_sums(sources, events, threads)
            children = [_Children(sums()) for _ in range(N_EVENT_LANES)]
        dst = self.dir / f"{table}.parquet"
        schema = FINAL_SCHEMAS[table]
        with _final_writer(dst, schema, threads) as write:
            groups = _row_groups(self._in_lanes(table, sources), FINAL_ROW_GROUP, FINAL_ROW_GROUP_BYTES)
            made = (_final_rows(rows, schema, self.file_id, shift_ns, children[lane]) for lane, rows in groups)
            for rows in (_joined(made, FINAL_ROW_GROUP_BYTES) if events < ONE_ROW_GROUP_EVENTS else _ahead(made)):
                write(rows)
        self.final[table] = dst
        # Read for the last time: deleted now, not with the staging folder
        # after the summaries, so that the kernel drops their pages instead
        # of writing them out once they are 30 s old (vm.dirty_expire_centisecs):
        # 1.9 GB of a 4.5 GB trace's were written during its ingest, 0.1
        # since (the final files), and it took 45.7 s instead of 49.8.
        for source in sources:
            source.unlink()

    def _child_sums(self, sources: list[Path], events: int,
                    threads: int) -> Callable[[], Iterator[pa.RecordBatch]]:
        """Summed child time per parent event_id, in parent order, read from
        the start by each call (a reader for each lane): from the C pass's
        stream, fed by the parse (pieces) or here (the streaming parser's
        file, past IN_MEMORY_EVENTS); where it stops or is not built,
        sorted in memory for a trace of up to IN_MEMORY_EVENTS, else by
        DuckDB's external sort; on ``threads`` threads."""
        streamed = None
        if self._sums is not None and self._parts and not self._tables:
            streamed = self._streamed_sums()  # fed by the parse
        elif _selftime is not None and events > IN_MEMORY_EVENTS:
            streamed = _child_sums_streamed(sources, self.dir, threads)
        if streamed is not None:
            return streamed
        if events <= IN_MEMORY_EVENTS:
            sums = _child_sums_in_memory(sources, events, threads)
            if sums is not None:
                return lambda: iter(sums.to_batches(1 << 16))
        path = self.dir / "child_sums.parquet"
        # The slices' sort on ``threads``: on two, a 1 GiB trace's takes
        # 1.3 s instead of 2.1, at 17 MiB more.
        con = self._duckdb("events", threads)
        try:
            _child_pairs(con, _slices_source(con, sources), self.dir / "child_pairs.parquet")
            con.execute(
                f"COPY (SELECT parent_id, CAST(sum(dur_ns) AS BIGINT) AS child_ns "
                f"FROM read_parquet({sql_literal(self.dir / 'child_pairs.parquet')}) "
                f"GROUP BY parent_id ORDER BY parent_id) TO {sql_literal(path)} (FORMAT parquet)")
        finally:
            con.close()  # its memory goes back before the pass that reads the sums
        return lambda: pq.ParquetFile(path).iter_batches(1 << 16)

    def _duckdb(self, table: str, threads: int = 1) -> duckdb.DuckDBPyConnection:
        # 256MB: the sorts here (slices per thread; all rows, for the
        # streaming parser's staged file, on one thread) are external, so
        # memory does not grow with the trace.
        con = duckdb.connect(config={"threads": threads, "memory_limit": FINALIZE_MEMORY,
                                     "temp_directory": str(self.dir / f"spill.{table}")})
        con.execute("SET enable_progress_bar = false")  # it would draw on stderr
        return con

    def _in_lanes(self, table: str, sources: list[Path]) -> Iterator[tuple[int, pa.RecordBatch]]:
        """A table's staged rows as (lane, batch), lane after lane (the
        events' lanes: schema.EVENT_LANES; the other tables have one), each
        lane's in event_id order. Pieces (parse/pieces.py) cover consecutive
        event_id ranges, in part order: each is sorted on its own, and read
        once for each lane, so that no lane's rows wait for another's. The
        streaming parser's file (a B/E pair is written at its E) takes an
        external sort."""
        if self._tables:
            for batch in self._sorted(table, sources):
                yield from by_lane(batch) if table == "events" else [(0, batch)]
        elif table != "events":
            for part in sources:
                for batch in _in_id_order(_read_staged(part)).to_batches():
                    yield 0, batch
        else:
            for lane in range(N_EVENT_LANES):
                for part in sources:
                    rows = _read_lane(part, lane)
                    for batch in _in_id_order(rows).to_batches() if rows is not None else ():
                        yield lane, batch

    def _sorted(self, table: str, sources: list[Path]) -> Iterator[pa.RecordBatch]:
        """The streaming parser's staged rows in event_id order; the
        events lane after lane. Up to SORT_IN_MEMORY_BYTES of them sorted
        by Arrow in memory, more by DuckDB's external sort."""
        if sum(p.stat().st_size for p in sources) <= SORT_IN_MEMORY_BYTES:
            rows = _in_id_order(pa.concat_tables([pq.read_table(p) for p in sources]))
            for _, lane in by_lane(rows) if table == "events" else [(0, rows)]:
                yield from lane.to_batches(SORTED_BATCH_ROWS)
            return
        lanes = ""
        if table == "events":
            lanes = "CASE cat " + " ".join(f"WHEN {sql_literal(cat)} THEN {lane}" for cat, lane in EVENT_LANES.items())
            lanes += " ELSE 0 END, "
        con = self._duckdb(table)
        try:
            yield from con.sql(f"SELECT * FROM read_parquet({sql_list(sources)}) ORDER BY {lanes}event_id"
                               ).to_arrow_reader(SORTED_BATCH_ROWS)
        finally:
            con.close()

    def publish(self, run: str, rank: int, phase: str) -> dict[str, str]:
        """Put the final files into their partitions; returns table -> key in
        the warehouse."""
        out: dict[str, str] = {}
        created: list[str] = []
        storage = self.warehouse.storage
        try:
            for table, src in self.final.items():
                key = self.warehouse.data_key(table, run, rank, phase, self.file_id)
                existed = storage.exists(key)  # a concurrent ingest of the same content
                storage.put(src, key)
                if not existed:
                    created.append(key)
                out[table] = key
        except (OSError, UploadError) as e:
            for key in created:  # leave no part of this trace behind
                storage.remove(key)
            if isinstance(e, UploadError):
                raise
            raise WarehouseError(f"{self.warehouse}: cannot publish {self.file_id}: {e.strerror or e}") from None
        return out

    def discard(self) -> None:
        self._stop_feeding(cancel=True)
        for w in self._writers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - already failing; clean up what we can
                pass
        self._writers.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
