"""``tracedb check``: is the warehouse whole? ``--repair`` makes it so.

Checks, with no ingest running (the ingest lock is held exclusively):

- every Parquet file under events/, flows/, counters/, summaries/ belongs to a trace
  registered in ``traces`` (else: an orphan, left by a crashed ingest;
  invisible to queries, since the raw views list registered files only);
- every registered trace's files (and summaries) exist and hold its row counts
  (``event_count``, ``flow_count``, ``counter_count``; read from the Parquet
  footers, so the check is cheap);
- in a bucket, no ingest killed on any machine left its object in
  ``.tracedb/ingests/``; while another machine's ingest runs (its object is
  fresh), orphans are reported but kept: they may be its uploads, not yet
  committed;
- nothing is left in the staging area and no temporary catalog copy lies
  around (the names are the warehouse's: warehouse.py).

Repair removes orphans and leftovers, never registered data; a registered
trace whose files are missing or wrong loses its row in ``traces`` (and its
remaining files), so that the next ingest of its file redoes it. A missing
per-trace summary (summaries.py) is recomputed from the trace's events.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow.parquet as pq

from .catalog import Catalog
from .errors import WarehouseError
from .warehouse import PARQUET, Warehouse

COUNT_COLUMNS = {"events": "event_count", "flows": "flow_count", "counters": "counter_count"}


@dataclass
class Problem:
    """One thing wrong. ``kind``: orphan_file, missing_file, missing_summary, row_count,
    unreadable_file, staging_leftover, temp_catalog or dead_ingest (a bucket's)."""

    kind: str
    path: str
    detail: str
    file_id: str | None = None  # a registered trace that is broken (repair unregisters it)
    summary_of: str | None = None  # a trace whose summaries to recompute (missing_summary)
    key: str | None = None  # the stored file (orphan_file), for repair to remove
    repaired: str | None = None  # what --repair did about it

    def __str__(self) -> str:
        done = f" [repaired: {self.repaired}]" if self.repaired else ""
        return f"{self.kind}: {self.path}: {self.detail}{done}"


@dataclass
class CheckReport:
    warehouse: str
    trace_count: int = 0
    file_count: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing wrong is left (after repair, if asked)."""
        return all(p.repaired for p in self.problems)

    def summary(self) -> str:
        fixed = sum(1 for p in self.problems if p.repaired)
        state = "OK" if not self.problems else f"{len(self.problems)} problem(s), {fixed} repaired"
        return f"Checked {self.trace_count} trace(s), {self.file_count} Parquet file(s): {state}."


def _registered(catalog: Catalog) -> list[tuple]:
    if not catalog.exists():
        return []
    try:
        con = catalog.connect_readonly()
    except duckdb.Error as e:
        raise WarehouseError(f"{catalog.path}: cannot open the catalog: {str(e).splitlines()[0]}") from None
    try:
        return con.execute(
            "SELECT file_id, source_path, files, summaries, event_count, flow_count, counter_count "
            "FROM traces WHERE status = 'ok' ORDER BY source_path"
        ).fetchall()
    except duckdb.CatalogException:
        return []
    finally:
        con.close()


def _check_trace(wh: Warehouse, row: tuple, problems: list[Problem]) -> set[str]:
    """The keys of the trace's files (as listed); its problems appended."""
    file_id, source, files_json, summaries_json, *counts = row
    listed = json.loads(files_json or "{}")
    keys = set()
    for view, key in json.loads(summaries_json or "{}").items():
        if key is None:  # no rows: no file
            continue
        keys.add(key)
        if not wh.storage.exists(key):
            problems.append(Problem("missing_summary", wh.location(key), f"summary {view} of {source} is missing",
                                    summary_of=file_id))
    for table, column in COUNT_COLUMNS.items():
        expected = counts[list(COUNT_COLUMNS).index(table)] or 0
        key = listed.get(table)
        if key is None:
            if expected:
                problems.append(Problem("missing_file", source, f"{table}: {expected} row(s) "
                                        "registered but no file listed", file_id))
            continue
        keys.add(key)
        path = wh.location(key)
        if not wh.storage.exists(key):
            problems.append(Problem("missing_file", path, f"{table} of {source} is missing", file_id))
            continue
        try:
            with wh.storage.open(key) as f:
                rows = pq.ParquetFile(f).metadata.num_rows
        except Exception as e:  # noqa: BLE001 - any unreadable footer is the finding
            problems.append(Problem("unreadable_file", path,
                                    f"{table} of {source}: {str(e).splitlines()[0]}", file_id))
            continue
        if rows != expected:
            problems.append(Problem("row_count", path,
                                    f"{table} of {source} holds {rows} row(s), {expected} registered",
                                    file_id))
    return keys


def check(warehouse: Warehouse | str | os.PathLike, repair: bool = False,
          on_wait: Callable[[str], None] | None = None) -> CheckReport:
    """Check the warehouse (and repair it when asked); never raises for what
    it finds, only when the warehouse cannot be read at all."""
    wh = Warehouse.of(warehouse)
    if not wh.is_warehouse():
        raise WarehouseError(f"no tracedb warehouse at {wh}")
    report = CheckReport(str(wh))
    with wh.exclusive(on_wait):
        rows = _registered(wh.catalog)
        report.trace_count = len(rows)
        problems: list[Problem] = []
        listed: set[str] = set()
        for row in rows:
            listed |= _check_trace(wh, row, problems)
        for key in wh.data_keys():
            report.file_count += key.endswith(PARQUET)
            if key not in listed:
                problems.append(Problem("orphan_file", wh.location(key),
                                        "not part of any registered trace (left by an interrupted ingest)", key=key))
        running, killed = wh.running_ingests()
        for key in killed:
            problems.append(Problem("dead_ingest", wh.location(key), "left in the bucket by an ingest that was killed",
                                    key=key))
        if running:
            # Another machine's ingest uploads before it commits: its objects
            # look orphan until then, so none is removed meanwhile.
            for p in problems:
                if p.kind == "orphan_file":
                    p.detail += f"; kept while {len(running)} ingest(s) into {wh} run (check again after)"
        for path in sorted(wh.staging.iterdir()) if wh.staging.is_dir() else ():
            problems.append(Problem("staging_leftover", str(path), "left by an interrupted ingest"))
        for path in wh.catalog_copies():
            problems.append(Problem("temp_catalog", str(path), "catalog copy left by an interrupted writer"))
        report.problems = problems
        if repair and problems:
            try:
                _repair(wh, problems, on_wait, keep_orphans=bool(running))
            except OSError as e:  # e.g. a read-only file system
                raise WarehouseError(f"{wh}: cannot repair: {e.strerror or e}") from None
    return report


def _repair(wh: Warehouse, problems: list[Problem], on_wait: Callable[[str], None] | None,
            keep_orphans: bool) -> None:
    temps = [p for p in problems if p.kind == "temp_catalog"]
    if temps:
        with wh.catalog_lock(on_wait):  # no writer has a copy in flight
            for p in temps:
                Path(p.path).unlink(missing_ok=True)
                p.repaired = "removed"
    # Broken traces leave the live catalog first; their files go with them.
    wh.unregister(sorted({p.file_id for p in problems if p.file_id}), on_wait)
    # A lost summary is derived data: made again from the trace's events.
    resummarize = sorted({p.summary_of for p in problems if p.summary_of})
    if resummarize:
        wh.commit(lambda con: con.execute(
            "UPDATE traces SET summaries_fingerprint = NULL WHERE list_contains(?, file_id)", [resummarize]), on_wait)
        wh.catalog.refresh_summaries(on_wait)
    for p in problems:
        if p.file_id:
            p.repaired = "trace unregistered: ingest its file again to redo it"
        elif p.summary_of:
            p.repaired = "recomputed from the events"
        elif p.kind == "dead_ingest" or (p.kind == "orphan_file" and not keep_orphans):
            wh.storage.remove(p.key)
            p.repaired = "removed"
        elif p.kind == "staging_leftover":
            path = Path(p.path)
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            p.repaired = "removed"
    wh.prune()
