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


def partition_dir(warehouse: Path, table: str, run: str, rank: int, phase: str) -> Path:
    return warehouse / table / f"run={run}" / f"rank={rank}" / f"phase={phase}"


def data_path(warehouse: Path, table: str, run: str, rank: int, phase: str, file_id: str) -> Path:
    return partition_dir(warehouse, table, run, rank, phase) / f"{file_id}.parquet"


def _sql_str(s: str | Path) -> str:
    return "'" + str(s).replace("'", "''") + "'"


# Self time of every slice: its duration less the durations of its direct
# children on the same (pid, tid). Slices are ordered per thread by start
# (longer first on ties); an event's depth is the number of earlier slices
# still open at its start; its parent is the nearest earlier slice one level
# up (an ASOF join). Sort-based, so it stays O(n log n) on any trace.
_SELF_TIME_SQL = """
s AS (
    SELECT event_id, pid, tid, ts_ns, dur_ns,
           row_number() OVER (PARTITION BY pid, tid ORDER BY ts_ns, dur_ns DESC, event_id) AS ord
    FROM staged
    WHERE ph = 'X' AND ts_ns IS NOT NULL AND dur_ns IS NOT NULL AND dur_ns >= 0
),
points AS (
    SELECT pid, tid, ts_ns + dur_ns AS t, CASE WHEN dur_ns > 0 THEN 0 ELSE 1 END AS grp,
           ord, 1 AS sub, 1 AS is_end
    FROM s
    UNION ALL
    SELECT pid, tid, ts_ns AS t, 1 AS grp, ord, 0 AS sub, 0 AS is_end FROM s
),
ends AS (
    SELECT pid, tid, ord, is_end,
           sum(is_end) OVER (PARTITION BY pid, tid ORDER BY t, grp, ord, sub
                             ROWS UNBOUNDED PRECEDING) AS ended
    FROM points
),
depth AS (
    SELECT s.event_id, s.pid, s.tid, s.dur_ns, s.ord, (s.ord - 1) - e.ended AS depth
    FROM s JOIN ends e ON s.pid IS NOT DISTINCT FROM e.pid
                      AND s.tid IS NOT DISTINCT FROM e.tid
                      AND s.ord = e.ord AND e.is_end = 0
),
children AS (
    SELECT p.event_id AS parent_id, TRY_CAST(sum(c.dur_ns) AS BIGINT) AS child_ns
    FROM depth c ASOF JOIN depth p
      ON c.pid = p.pid AND c.tid = p.tid AND c.depth - 1 = p.depth AND c.ord > p.ord
    GROUP BY p.event_id
)
"""


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
        # 256MB: with the interpreter, the whole ingest stays under 600 MB
        # whatever the trace's size (DuckDB spills its sorts to disk).
        con = duckdb.connect(config={"threads": threads, "memory_limit": FINALIZE_MEMORY,
                                     "temp_directory": str(self.dir / "spill")})
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
                    sql = (
                        f"COPY (WITH staged AS (SELECT * FROM read_parquet({src})), {_SELF_TIME_SQL}"
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
