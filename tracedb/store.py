"""Write one trace's record batches to Parquet and publish them atomically.

Layout (the contract BI users see)::

    <warehouse>/<table>/run=<run>/rank=<rank>/phase=<phase>/<file_id>.parquet

Batches stream into a private staging folder (``<warehouse>/.staging/``).
``finalize`` then makes each table's final file in one DuckDB pass over the
staged one: it adds ``file_id``, shifts times by ``baseTimeNanoseconds``
(known only once the whole trace is read) and computes ``self_ns``.
``publish`` moves the final files into their partitions with ``os.replace``.
A file in a partition is visible to queries only once the catalog lists it
(see catalog.py), so a crash at any point leaves nothing half-visible.
"""

from __future__ import annotations

import heapq
import os
import shutil
import uuid
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import WarehouseError
from .schema import SCHEMAS, TABLES

STAGING = ".staging"
FINALIZE_MEMORY = "256MB"
# One thread: split across threads, 256MB no longer holds the self-time
# join's hash table (one row per parent slice) of a 4 GiB trace; the join
# spills, and DuckDB's memory outside memory_limit grows with what spills.
FINALIZE_THREADS = 1


def partition_dir(warehouse: Path, table: str, run: str, rank: int, phase: str) -> Path:
    return warehouse / table / f"run={run}" / f"rank={rank}" / f"phase={phase}"


def data_path(warehouse: Path, table: str, run: str, rank: int, phase: str, file_id: str) -> Path:
    return partition_dir(warehouse, table, run, rank, phase) / f"{file_id}.parquet"


def _sql_str(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


# Self time of every slice: its duration less the durations of its direct
# children on the same (pid, tid). DuckDB sorts the slices per thread by
# start (longer first on ties, then event_id; an external sort, so memory
# stays bounded); one streaming pass then keeps, per thread, a heap of the
# ends of the slices still open (an event's depth is how many earlier slices
# end after it starts) and the latest slice seen at each depth: the parent of
# a slice at depth d is the latest slice at depth d - 1. It writes
# (parent, child duration) pairs; a GROUP BY sums them. Memory is the
# nesting depth, not the trace.
_SLICES_SQL = """
SELECT pid, tid, ts_ns, dur_ns, event_id FROM read_parquet({src})
WHERE ph = 'X' AND ts_ns IS NOT NULL AND dur_ns IS NOT NULL AND dur_ns >= 0
ORDER BY pid, tid, ts_ns, dur_ns DESC, event_id
"""
_PAIR_SCHEMA = pa.schema([("parent_id", pa.int64()), ("dur_ns", pa.int64())])


def _child_pairs(con: duckdb.DuckDBPyConnection, src: str, dst: Path) -> None:
    reader = con.sql(_SLICES_SQL.format(src=src)).to_arrow_reader(1 << 16)
    key: tuple = (object(),)
    ends: list[int] = []
    last: list[int] = []
    with pq.ParquetWriter(dst, _PAIR_SCHEMA, compression="lz4") as w:
        for batch in reader:
            pids, tids, ts, dur, eid = (batch.column(i).to_pylist() for i in range(5))
            parents: list[int] = []
            durs: list[int] = []
            for pid, tid, t, d, e in zip(pids, tids, ts, dur, eid):
                if (pid, tid) != key:
                    key = (pid, tid)
                    ends, last = [], []
                while ends and ends[0] <= t:
                    heapq.heappop(ends)
                depth = len(ends)
                if depth and pid is not None and tid is not None:
                    parents.append(last[depth - 1])
                    durs.append(d)
                if depth < len(last):
                    last[depth] = e
                else:
                    last.append(e)
                heapq.heappush(ends, t + d)
            if parents:
                w.write_batch(pa.record_batch([pa.array(parents, pa.int64()), pa.array(durs, pa.int64())],
                                              schema=_PAIR_SCHEMA))


def cannot_write(warehouse: Path, e: OSError) -> WarehouseError:
    """One line: pyarrow's messages are long, its errno is the point."""
    why = os.strerror(e.errno) if e.errno else (e.strerror or str(e))
    return WarehouseError(f"{warehouse}: cannot write the warehouse: {why}")


class TraceWriter:
    """Stage, finalize and publish the Parquet files of one trace."""

    def __init__(self, warehouse: Path, file_id: str):
        self.warehouse = warehouse
        self.file_id = file_id
        self.dir = warehouse / STAGING / f"{file_id}.{uuid.uuid4().hex[:8]}"
        try:
            self.dir.mkdir(parents=True)
        except OSError as e:
            raise cannot_write(warehouse, e) from None
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._tables: set[str] = set()
        self._parts: dict[str, list[Path]] = {}
        self.final: dict[str, Path] = {}

    def staged(self, table: str) -> Path:
        return self.dir / f"{table}.staged.parquet"

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        try:
            w = self._writers.get(table)
            if w is None:
                w = pq.ParquetWriter(self.staged(table), SCHEMAS[table], compression="lz4")
                self._writers[table] = w
                self._tables.add(table)
            w.write_batch(batch)
        except OSError as e:  # e.g. the disk is full
            raise cannot_write(self.warehouse, e) from None

    def part(self, table: str, number: int) -> Path:
        """Where a piece parsed elsewhere (chunked.py) stages its rows."""
        return self.dir / f"{table}.part{number:06d}.parquet"

    def add_part(self, table: str, path: Path) -> None:
        self._parts.setdefault(table, []).append(path)

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

    def finalize(self, shift_ns: int, threads: int = 1) -> None:
        """One DuckDB pass per table: file_id, absolute times, self_ns."""
        self.close_staged()
        # 256MB, one thread: ingest of a 4 GiB trace peaks at ~550 MB (2 threads:
        # ~660 MB, slower). Still grows a little with the trace (~560 MB for
        # finalize alone at 8 GiB): the join's table and the sort runs.
        con = duckdb.connect(config={"threads": min(threads, FINALIZE_THREADS), "memory_limit": FINALIZE_MEMORY,
                                     "temp_directory": str(self.dir / "spill")})
        con.execute("SET enable_progress_bar = false")  # it would draw on stderr
        try:
            for table in TABLES:
                sources = self._sources(table)
                if not sources:
                    continue
                src = "[" + ", ".join(_sql_str(p) for p in sources) + "]"
                dst = self.dir / f"{table}.parquet"
                names = SCHEMAS[table].names
                cols = []
                for n in names:
                    if n == "ts_ns":
                        cols.append(f"staged.ts_ns + {int(shift_ns)} AS ts_ns")
                    else:
                        cols.append(f"staged.{n}")
                    if table == "events" and n == "dur_ns":
                        cols.append(
                            "CASE WHEN staged.ph = 'X' AND staged.dur_ns >= 0 "
                            "THEN CAST(staged.dur_ns - coalesce(children.child_ns, 0) AS BIGINT) END AS self_ns"
                        )
                select = ",\n  ".join([f"{_sql_str(self.file_id)} AS file_id", *cols])
                if table == "events":
                    pairs = self.dir / "child_pairs.parquet"
                    _child_pairs(con, src, pairs)
                    sql = (
                        f"COPY (WITH staged AS (SELECT * FROM read_parquet({src})), "
                        f"children AS (SELECT parent_id, CAST(sum(dur_ns) AS BIGINT) AS child_ns "
                        f"FROM read_parquet({_sql_str(pairs)}) GROUP BY parent_id) "
                        f"SELECT {select} FROM staged "
                        f"LEFT JOIN children ON children.parent_id = staged.event_id "
                        f"ORDER BY staged.event_id) "
                    )
                else:
                    sql = (
                        f"COPY (WITH staged AS (SELECT * FROM read_parquet({src})) "
                        f"SELECT {select} FROM staged ORDER BY staged.event_id) "
                    )
                sql += f"TO {_sql_str(dst)} (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
                con.execute(sql)
                self.final[table] = dst
        except duckdb.IOException as e:
            raise WarehouseError(f"{self.warehouse}: cannot write the warehouse: {e}") from None
        finally:
            con.close()

    def publish(self, run: str, rank: int, phase: str) -> dict[str, str]:
        """Move the final files into their partitions; returns table -> path
        relative to the warehouse."""
        out: dict[str, str] = {}
        created: list[Path] = []
        try:
            for table, src in self.final.items():
                dst = data_path(self.warehouse, table, run, rank, phase, self.file_id)
                dst.parent.mkdir(parents=True, exist_ok=True)
                existed = dst.exists()  # a concurrent ingest of the same content
                os.replace(src, dst)
                if not existed:
                    created.append(dst)
                out[table] = str(dst.relative_to(self.warehouse))
        except OSError as e:
            for dst in created:  # leave no part of this trace behind
                dst.unlink(missing_ok=True)
            raise WarehouseError(f"{self.warehouse}: cannot publish {self.file_id}: {e.strerror or e}") from None
        return out

    def discard(self) -> None:
        for w in self._writers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - already failing; clean up what we can
                pass
        self._writers.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def write_part(path: Path, table: str, batches: list[pa.RecordBatch]) -> None:
    """Stage rows parsed in another process (one piece of a large trace)."""
    pq.write_table(pa.Table.from_batches(batches, schema=SCHEMAS[table]), path, compression="lz4")


def clear_staging(warehouse: Path, older_than_s: float = 0) -> None:
    """Remove staging leftovers of crashed ingests."""
    import time

    root = warehouse / STAGING
    if not root.exists():
        return
    now = time.time()
    for p in root.iterdir():
        try:
            if now - p.stat().st_mtime >= older_than_s:
                shutil.rmtree(p, ignore_errors=True)
        except FileNotFoundError:
            pass
