"""Per-trace summaries: the heavy intermediate views, computed once per trace.

A view of the library whose header says ``-- materialize: per trace`` has
rows that each come from one trace file (the collectives, the summed kernel
islands, operation sums and duration counts). At ingest, right after a
trace's Parquet files are final, its summaries are computed by running the
library's own SQL over that one trace, and written beside the events, at ``Warehouse.summary_key``::

    <warehouse>/summaries/<view>/run=<run>/rank=<rank>/phase=<phase>/<file_id>.parquet

The catalog then defines each such view over these files instead of over the
events (catalog.py), so the marts read thousands of rows, not 100M events.
The events stay the source of truth: a summary is recomputed from them.

A summary is only as good as the SQL and the settings that made it: its
fingerprint hashes the SQL of the view and everything it requires, and the
warehouse's ``comm_patterns.csv``. When any trace's fingerprint differs from
the current one (tracedb was upgraded, comm_patterns.csv changed), the catalog
falls back to computing the views from the events, which is right but slow,
until ``tracedb migrate`` recomputes the stale summaries (``refresh``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from .schema import SCHEMAS
from .sqltext import sql_literal
from .views import ViewDef, create_views, load_comm_patterns, raw_view_sql

if TYPE_CHECKING:
    from .warehouse import Warehouse

# A Summarizer's connection closes after a trace whose Parquet files are this
# large: DuckDB's allocator keeps what a trace's tables took until its
# connection closes (after a 190 MB rank file, about 65 MiB more than a
# closed one leaves; `SET allocator_flush_threshold` or its background
# threads give none of it back). Kept, the connection is 0.15-0.18 s faster
# on the next trace than a new one, bound again with its caches cold: that
# rank file's summaries take 0.45 s, not 0.63. Up to 16 MB of Parquet (about
# 400 MB of JSON), the time wins: 8 such rank files on two workers in 9.13 s,
# not 9.66 (17.3 CPU-s, not 18.1), at a peak of 820 MiB, not 688 (medians of
# 4, alternating). A larger trace's summaries fill DuckDB's memory_limit,
# which would stay through the next trace's parse.
REBIND_AFTER_BYTES = 16 << 20
# After a group of small traces (compute_many), the connection closes unless
# their Parquet files are under this: DuckDB keeps what a group's statements
# took (64 rank files of 10 MB on two workers, 3-4 MB of Parquet a group,
# peaked at 625 MiB so, at 678 kept, 2% faster), but a group of tiny traces
# takes next to nothing, and binding the library again was a fifth of its
# summaries (0.11 of 0.5 CPU-s for 8 traces of 20 events). Such a group's
# summaries are also written by one COPY a view (_write_each), and its raw
# tables are read once, into tables of the connection: the statements' 23
# scans of its 128 small Parquet files were most of its time (1,000 traces
# of 21 events on two workers: 28.1 CPU-s against 35.3). A larger group's
# scans are faster from its files, whose statistics prune lanes (128 rank
# files of 9.8 MB read into tables: 31.4 CPU-s against 26.6, at a peak of
# 790 MiB against 626).
GROUP_REBIND_AFTER_BYTES = 1 << 20
# Over one trace, file_id has one value: the views run with this stand-in,
# which DuckDB keeps inline (strings up to 12 bytes), instead of the
# 37-character id, compared through a pointer in every join, sort and group
# (a 1.1 GB trace's summaries: 9% less CPU); each summary is written with
# the trace's id.
_FILE_ID = "f"


@dataclass
class TraceFiles:
    """One trace's final Parquet files (table -> file), where its summaries
    go, and what the library reads of its traces row."""

    tables: dict[str, Path]
    out_dir: Path
    file_id: str
    run: str
    rank: int
    phase: str
    distributed_info: str | None = None


def per_trace(defs: list[ViewDef]) -> list[ViewDef]:
    """The library's per-trace views, in dependency order."""
    return [v for v in defs if v.per_trace]


def requirements(defs: list[ViewDef], names: list[str]) -> list[ViewDef]:
    """``names`` and every view they require, in dependency order."""
    by_name = {v.name: v for v in defs}
    needed: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += by_name[name].requires
    return [v for v in defs if v.name in needed]


# SQL that does work per row read: a view without any of it is a filter, a
# projection or a union of what it reads.
_WORK_RE = re.compile(r"\b(JOIN|GROUP\s+BY|OVER|QUALIFY|DISTINCT|unnest)\b", re.IGNORECASE)


def _does_work(v: ViewDef) -> bool:
    return _WORK_RE.search(re.sub(r"--[^\n]*", "", v.sql)) is not None


def worth_a_table(v: ViewDef, by_name: dict[str, ViewDef]) -> bool:
    """Whether ``v``, read by several views over one trace, is computed once
    as a table: an intermediate view that joins, groups or windows, or a
    projection of one (int_launch_steps of int_launch_calls: the narrow
    copy, and its source then runs once, for it). A projection or a union
    of the events costs more to copy than to read again (int_timed_ops, on
    a 69 MB trace: 0.12 s to copy)."""
    if v.kind != "view" or v.layer != "intermediate":
        return False
    return _does_work(v) or any(
        by_name[dep].layer == "intermediate" and _does_work(by_name[dep]) for dep in v.requires if dep in by_name)


def to_tables(needed: list[ViewDef]) -> list[str]:
    """Which of ``needed`` (in dependency order) the summaries of one trace
    compute once, as tables: those worth a table that would otherwise run
    more than once. A per-trace view runs once, for its COPY; a view runs
    once for each run of a view that reads it, unless that reader is a
    table (read from then on). So a projection read by four views
    (int_launch_steps) is the table, and the view it projects
    (int_launch_calls) runs once, to fill it."""
    by_name = {v.name: v for v in needed}
    runs = {v.name: int(v.per_trace) for v in needed}
    tables: list[str] = []
    for v in reversed(needed):
        if runs[v.name] > 1 and worth_a_table(v, by_name):
            tables.append(v.name)
            runs[v.name] = 1
        for dep in v.requires:
            if dep in by_name:
                runs[dep] += runs[v.name]
    return tables[::-1]


def fingerprint(defs: list[ViewDef], warehouse: Warehouse) -> str:
    """What the summaries of this library and warehouse settings depend on."""
    h = hashlib.sha256()
    for v in requirements(defs, [v.name for v in per_trace(defs)]):
        h.update(v.sql.encode())
    patterns = warehouse.comm_patterns
    h.update(patterns.read_bytes() if patterns.exists() else b"")
    return h.hexdigest()[:16]


def _run(con: duckdb.DuckDBPyConnection, sql: str, threads: int) -> list[tuple]:
    """Run ``sql`` and return its rows (a COPY's: the rows it wrote); if it
    runs out of memory on several threads, again on one. Each thread holds
    its own share of memory_limit: on a large trace two can run short where
    one fits (seen on a 3M-event trace's largest table, about one time in
    five). The statement failed whole, so it simply runs again."""
    try:
        return con.execute(sql).fetchall()
    except duckdb.OutOfMemoryException:
        if threads == 1:
            raise
        con.execute("SET threads = 1")
        try:
            return con.execute(sql).fetchall()
        finally:
            con.execute(f"SET threads = {threads}")


def _copy(con: duckdb.DuckDBPyConnection, query: str, dst: Path, threads: int) -> Path | None:
    """``query``'s rows written to ``dst`` (Parquet, zstd), or None and no
    file where it has none (a view without rows for a trace)."""
    [(rows,)] = _run(con, f"COPY ({query}) TO {sql_literal(dst)} (FORMAT parquet, COMPRESSION zstd)", threads)
    if not rows:
        dst.unlink()
        return None
    return dst


class Summarizer:
    """The per-trace views bound once, on one DuckDB connection, then run
    over one trace after another (``compute``). Binding the library takes
    about 55 ms, as long as computing a small trace's summaries, so an
    ingest binds once per process, not once per trace.

    The connection is made at the first trace, and ``fingerprint`` taken
    then, just before comm_patterns.csv is read: if the file changes
    afterwards, these summaries read as stale (recomputed), never as
    current. DuckDB spills to ``spill_dir``, which ``close`` removes."""

    def __init__(self, warehouse: Warehouse, defs: list[ViewDef], spill_dir: Path, *, threads: int = 1,
                 memory_limit: str = "256MB") -> None:
        self.warehouse = warehouse
        self.defs = defs
        self.spill_dir = spill_dir
        self.threads = threads
        self.memory_limit = memory_limit
        self.fingerprint: str | None = None  # of the summaries computed last
        self._con: duckdb.DuckDBPyConnection | None = None
        self._tables: dict[str, list[tuple[str, str]]] = {}  # views computed as tables: their columns

    def __enter__(self) -> Summarizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
        shutil.rmtree(self.spill_dir, ignore_errors=True)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        # In memory: the tables below are evicted to temp_directory when they
        # outgrow memory_limit (a 1 GiB trace's: 340 of 365 MB), so a trace of
        # any size fits. A database file would also compress them on write: 12%
        # slower on a 1 GiB trace, the same on a 4 GiB one, for nothing kept.
        con = duckdb.connect(config={"threads": self.threads, "memory_limit": self.memory_limit,
                                     "temp_directory": str(self.spill_dir),
                                     "preserve_insertion_order": False})
        self._tables = {}
        try:
            con.execute("SET enable_progress_bar = false")  # it would draw on stderr
            for table in SCHEMAS:
                con.execute(raw_view_sql(table, []))
            self._traces(con, [("", "", 0, "", None)])
            self.fingerprint = fingerprint(self.defs, self.warehouse)
            load_comm_patterns(con, self.warehouse.comm_patterns)
            needed = requirements(self.defs, [v.name for v in per_trace(self.defs)])
            # Over one trace, an intermediate view that joins, groups or windows
            # and would run more than once (tables()) is computed once, as a
            # table; such a view is kept as <name>__src, a trace's table is
            # <name>__rows, and the view <name> reads it (compute).
            tables = set(to_tables(needed))
            create_views(con, needed, lambda v: v.sql, in_layers=False,
                         renamed={name: f"{name}__src" for name in tables})
            self._tables = {v.name: [] for v in needed if v.name in tables}
        except BaseException:
            con.close()
            self._tables.clear()
            raise
        return con

    @staticmethod
    def _traces(con: duckdb.DuckDBPyConnection, rows: list[tuple[str, str, int, str, str | None]]) -> None:
        # The rows of the catalog's traces table that the library reads:
        # (file_id, run, rank, phase, distributed_info) of each trace.
        con.execute("CREATE OR REPLACE TABLE traces (file_id VARCHAR, run VARCHAR, rank BIGINT, phase VARCHAR, "
                    "status VARCHAR, distributed_info JSON)")
        # One statement: executemany runs one a row (64 rows: 37 ms).
        con.execute("INSERT INTO traces VALUES " + ", ".join(["(?, ?, ?, ?, 'ok', ?)"] * len(rows)),
                    [value for row in rows for value in row])

    def compute(self, tables: dict[str, Path], out_dir: Path, *, file_id: str, run: str, rank: int, phase: str,
                distributed_info: str | None) -> dict[str, Path | None]:
        """Run the per-trace views over one trace's final Parquet files
        (``tables``: table -> file) and write each to ``out_dir``; returns
        view -> written file, or None where the view has no rows for the
        trace (no file, which every query over the view would open for
        nothing: a CPU-only trace has no kernels, collectives or steps).
        ``distributed_info`` is the trace's (JSON text),
        for the process groups. Raises ViewError when the library's SQL does
        not bind, duckdb.Error when running it fails on this trace."""
        if self._con is None:
            self._con = self._connect()
        con = self._con
        large = sum(p.stat().st_size for p in tables.values()) >= REBIND_AFTER_BYTES
        try:
            for table in SCHEMAS:
                files = [str(tables[table])] if table in tables else []
                con.execute(raw_view_sql(table, files, partition=(run, rank, phase), file_id=_FILE_ID))
            self._traces(con, [(_FILE_ID, run, rank, phase, distributed_info)])
            keys = {"run": sql_literal(run), "rank": str(int(rank)), "phase": sql_literal(phase),
                    "file_id": sql_literal(_FILE_ID)}
            for name, columns in self._tables.items():  # computed here: an error now is this trace's, not the SQL's
                if not columns:  # bound once the tables it reads are
                    columns += [(c, t) for c, t, *_ in con.execute(f"DESCRIBE {name}__src").fetchall()]
                # Over one trace, the keys every layer shares are constants: the
                # table holds the other columns, and a view gives the keys back
                # as literals, which the joins and groups over it then fold
                # away instead of hashing them (a 1 GiB trace's summaries: 2.37
                # -> 2.06 s, 4.21 -> 3.64 CPU-s, medians of 5; the same rows).
                const = [c for c, _ in columns if c in keys]
                rows = f"SELECT * EXCLUDE ({', '.join(const)})" if const else "SELECT *"
                _run(con, f"CREATE TABLE {name}__rows AS {rows} FROM {name}__src", self.threads)
                select = ", ".join(f"CAST({keys[c]} AS {t}) AS {c}" if c in keys else c for c, t in columns)
                con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT {select} FROM {name}__rows")
            out: dict[str, Path | None] = {}
            for v in per_trace(self.defs):
                out[v.name] = _copy(con, f"SELECT * REPLACE ({sql_literal(file_id)} AS file_id) FROM {v.name}",
                                    out_dir / f"{v.name}.{uuid.uuid4().hex[:8]}.parquet", self.threads)
            return out
        finally:
            self._clear(rebind=large)

    def compute_many(self, traces: list[TraceFiles]) -> list[dict[str, Path | None]]:
        """``compute`` for several traces at once, their file_ids distinct:
        each statement is bound and run once over all of them, as over a
        warehouse (their files linked into its layout, read with its raw
        views), and each per-trace view's rows are made once, then written
        out trace by trace. Most of a small trace's summaries is binding and
        starting their statements (9.8 MB of JSON: 80 of its 180 ms plan
        them): eight such traces take 0.94 CPU-s at once, 1.61 one by one.
        Over several traces the keys are no constants, so a large trace is
        faster alone. The connection closes after a group but a tiny one
        (GROUP_REBIND_AFTER_BYTES), whose files are read into tables first. Raises as
        ``compute`` does, for all of them: which trace it was, only each
        alone says."""
        if len({t.file_id for t in traces}) != len(traces):
            raise ValueError("compute_many: two traces with one file_id")
        if self._con is None:
            self._con = self._connect()
        con = self._con
        linked = traces[0].out_dir / "summaries.many"
        large = sum(p.stat().st_size for t in traces for p in t.tables.values()) >= GROUP_REBIND_AFTER_BYTES
        try:
            files: dict[str, list[str]] = {table: [] for table in SCHEMAS}
            for t in traces:
                for table, src in t.tables.items():
                    dst = linked / self.warehouse.data_key(table, t.run, t.rank, t.phase, t.file_id)
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    os.link(src, dst)
                    files[table].append(str(dst))
            for table, paths in files.items():
                con.execute(raw_view_sql(table, paths))
                if not large:  # read once, not by each of the statements' scans
                    con.execute(f"CREATE TABLE {table}__raw AS SELECT * FROM {table}")
                    con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM {table}__raw")
            self._traces(con, [(t.file_id, t.run, t.rank, t.phase, t.distributed_info) for t in traces])
            for name in self._tables:
                _run(con, f"CREATE TABLE {name}__rows AS SELECT * FROM {name}__src", self.threads)
                con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {name}__rows")
            outs: list[dict[str, Path | None]] = [{} for _ in traces]
            for v in per_trace(self.defs):
                _run(con, f"CREATE TABLE {v.name}__all AS SELECT * FROM {v.name}", self.threads)
                written = self._write_each(con, v.name, traces, linked, one_copy=not large)
                for t, out, dst in zip(traces, outs, written, strict=True):
                    out[v.name] = None
                    if dst is not None:
                        out[v.name] = t.out_dir / f"{v.name}.{uuid.uuid4().hex[:8]}.parquet"
                        os.replace(dst, out[v.name])
            return outs
        finally:
            shutil.rmtree(linked, ignore_errors=True)
            self._clear(rebind=large)

    @staticmethod
    def _write_each(con: duckdb.DuckDBPyConnection, view: str, traces: list[TraceFiles], folder: Path, *,
                    one_copy: bool) -> list[Path | None]:
        """Each trace's rows of ``view`` (the table ``<view>__all``) in a
        Parquet file of its own under ``folder``, in the traces' order, or
        None for a trace without rows: a COPY per trace, or, with
        ``one_copy`` (a group of tiny traces), one COPY partitioned by trace
        for them all (a COPY per trace and view was 0.9 ms, 512 of them for
        64 such traces: 1,000 into a warehouse of 10,000 in 21.5-22.7 s
        against 24.6-26.1). Larger groups do without it: DuckDB holds a
        buffer per file it writes (128 rank files of 9.8 MB peaked 30 MiB
        higher, no faster). DuckDB writes a partition in one file; were one
        in several, this raises, and each trace's summaries are computed
        alone (ingest._summaries)."""
        if not one_copy:
            return [_copy(con, f"SELECT * FROM {view}__all WHERE file_id = {sql_literal(t.file_id)}",
                          folder / f"{view}.{i}.parquet", 1) for i, t in enumerate(traces, start=1)]
        parted = folder / f"{view}.parts"
        ids = ", ".join(sql_literal(t.file_id) for t in traces)
        con.execute(f"COPY (SELECT *, list_position([{ids}], file_id) AS __trace FROM {view}__all) "
                    f"TO {sql_literal(parted)} (FORMAT parquet, COMPRESSION zstd, PARTITION_BY (__trace))")
        written = []
        for i in range(1, len(traces) + 1):
            got = list((parted / f"__trace={i}").glob("*.parquet"))
            if len(got) > 1:
                raise RuntimeError(f"{parted}: trace {i}'s rows in {len(got)} files")
            written.append(got[0] if got else None)
        return written

    def _clear(self, rebind: bool) -> None:
        """Drop the tables of a trace or group (their spilled blocks go),
        or the connection: after a large trace or group, or a fatal error,
        after which it can run nothing. The next trace then gets a new one."""
        assert self._con is not None
        if not rebind:
            try:
                for name in [*(f"{name}__rows" for name in self._tables), *(f"{table}__raw" for table in SCHEMAS),
                             *(f"{v.name}__all" for v in per_trace(self.defs))]:
                    self._con.execute(f"DROP TABLE IF EXISTS {name}")
                return
            except duckdb.Error:
                pass
        self._con.close()
        self._con = None


def compute(warehouse: Warehouse, defs: list[ViewDef], tables: dict[str, Path], out_dir: Path, *,
            file_id: str, run: str, rank: int, phase: str, distributed_info: str | None,
            threads: int = 1, memory_limit: str = "256MB") -> dict[str, Path | None]:
    """``Summarizer.compute`` for one trace, on a connection of its own that
    spills into ``out_dir``."""
    with Summarizer(warehouse, defs, out_dir / "spill", threads=threads, memory_limit=memory_limit) as s:
        return s.compute(tables, out_dir, file_id=file_id, run=run, rank=rank, phase=phase,
                         distributed_info=distributed_info)


def publish(warehouse: Warehouse, made: dict[str, Path | None], run: str, rank: int, phase: str,
            file_id: str) -> dict[str, str | None]:
    """Publish computed summaries (atomically: a reader sees the old file or
    the new, never part of one); returns view -> key in the warehouse, or
    None for a view without rows for the trace (computed, no file)."""
    out: dict[str, str | None] = {}
    for view, src in made.items():
        if src is None:
            out[view] = None
            continue
        key = warehouse.summary_key(view, run, rank, phase, file_id)
        warehouse.storage.put(src, key)
        out[view] = key
    return out
