"""The DuckDB catalog: ``<warehouse>/tracedb.duckdb``.

It holds the ``traces`` table (one row per ingested or failed file), the
migrations' ``schema_version`` table, and views: raw views over the Parquet
files (``events``, ``flows``, ``counters``) and the view library from
queries/.

Readers are never locked out: a writer never opens the live catalog file.
It copies it to a temp file under an exclusive lock (``.tracedb.lock``, so
concurrent ingests queue), changes the copy, and swaps it in with
``os.replace``. Readers holding the old file keep a consistent snapshot; new
readers see the new one. The raw views list their Parquet files explicitly
(absolute paths, so the catalog works from any directory), so a Parquet file
becomes visible in the same atomic swap that registers its trace.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import duckdb
import pyarrow as pa

from .errors import MigrationError, ViewError, WarehouseError
from .schema import SCHEMAS
from .views import apply_views, load_view_files

CATALOG_NAME = "tracedb.duckdb"
LOCK_NAME = ".tracedb.lock"
_MIGRATION_RE = re.compile(r"^(\d{4})_(\w+)\.sql$")


def resource_dir(name: str) -> Path:
    """queries/ or migrations/: inside the installed package, or at the root
    of a source checkout (editable install)."""
    pkg = Path(__file__).resolve().parent
    for cand in (pkg / name, pkg.parent / name):
        if cand.is_dir():
            return cand
    raise WarehouseError(f"tracedb is installed without its {name}/ folder")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(root: Path | None = None) -> list[Migration]:
    root = root or resource_dir("migrations")
    migrations = []
    for path in sorted(root.glob("*.sql")):
        m = _MIGRATION_RE.match(path.name)
        if not m:
            raise MigrationError(f"{path}: migration files are named NNNN_name.sql")
        migrations.append(Migration(int(m.group(1)), m.group(2), path.read_text(encoding="utf-8")))
    for i, mig in enumerate(migrations, start=1):
        if mig.version != i:
            raise MigrationError(f"migrations are not gapless: expected {i:04d}, found {mig.version:04d}")
    return migrations


def migrate(con: duckdb.DuckDBPyConnection, migrations: list[Migration]) -> list[int]:
    """Apply the pending migrations, each in its own transaction."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY,"
        " name VARCHAR, checksum VARCHAR, applied_at TIMESTAMPTZ)"
    )
    applied = dict(con.execute("SELECT version, checksum FROM schema_version").fetchall())
    known = {m.version: m for m in migrations}
    newer = [v for v in applied if v not in known]
    if newer:
        raise MigrationError(
            f"the catalog is at schema version {max(newer)}, newer than this tracedb "
            f"knows ({len(migrations)}); upgrade tracedb"
        )
    for v, checksum in applied.items():
        if known[v].checksum != checksum:
            raise MigrationError(
                f"migration {v:04d}_{known[v].name} changed after it was applied "
                "(checksum mismatch); migrations are never edited, add a new one"
            )
    done = []
    for m in migrations:
        if m.version in applied:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(m.sql)
            con.execute(
                "INSERT INTO schema_version VALUES (?, ?, ?, now())",
                [m.version, m.name, m.checksum],
            )
            con.execute("COMMIT")
        except duckdb.Error as e:
            con.execute("ROLLBACK")
            raise MigrationError(f"migration {m.version:04d}_{m.name} failed: {e}") from None
        done.append(m.version)
    return done


def _duck_type(t: pa.DataType) -> str:
    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_list(t):
        return _duck_type(t.value_type) + "[]"
    raise TypeError(t)


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def raw_columns(table: str) -> list[tuple[str, str]]:
    """(name, DuckDB type) of a raw view, in order."""
    cols = [("run", "VARCHAR"), ("rank", "BIGINT"), ("phase", "VARCHAR"), ("file_id", "VARCHAR")]
    for f in SCHEMAS[table]:
        cols.append((f.name, "JSON" if f.name == "args" else _duck_type(f.type)))
        if table == "events" and f.name == "dur_ns":
            cols.append(("self_ns", "BIGINT"))
    return cols


def raw_view_sql(table: str, files: list[str]) -> str:
    cols = raw_columns(table)
    if not files:
        select = ", ".join(f"CAST(NULL AS {t}) AS {n}" for n, t in cols)
        return f"CREATE OR REPLACE VIEW {table} AS SELECT {select} LIMIT 0"
    exprs = ", ".join(f"CAST({n} AS JSON) AS {n}" if t == "JSON" else n for n, t in cols)
    file_list = ", ".join(_quote(f) for f in files)
    return (
        f"CREATE OR REPLACE VIEW {table} AS SELECT {exprs} FROM read_parquet([{file_list}], "
        "hive_partitioning = true, "
        "hive_types = {'run': VARCHAR, 'rank': BIGINT, 'phase': VARCHAR})"
    )


RAW_DOCS = {
    "events": "Every slice, instant and metadata event of every ingested trace, one row per "
              "event (a matched B/E pair is one row, ph 'X'). Times in integer nanoseconds.",
    "flows": "Flow events (ph s/t/f), e.g. Kineto's ac2g CPU launch -> GPU kernel links; "
             "one row per flow event.",
    "counters": "Counter events (ph C): one row per counter event and series (args key).",
}

RAW_COLUMN_DOCS = {
    "run": "Run (version) the trace belongs to.",
    "rank": "Rank of the trace (distributedInfo.rank, else from the file name, else 0).",
    "phase": "Phase: train, prefill, decode, ... or the folder name.",
    "file_id": "Content hash of the trace file; joins to traces.file_id.",
    "event_id": "Index of the event in its file (0-based).",
    "ts_ns": "Start time, nanoseconds (epoch when the trace has absolute times or baseTimeNanoseconds).",
    "dur_ns": "Duration, nanoseconds; NULL for instants and unmatched B/E.",
    "self_ns": "Duration less that of direct child slices on the same pid/tid, nanoseconds.",
    "ph": "Chrome-trace phase (X, i, M, b, e, n, s, t, f, C, ...).",
    "cat": "Category (kernel, cpu_op, cuda_runtime, gpu_memcpy, user_annotation, ...).",
    "name": "Event name.",
    "pid": "Process id as written in the trace (GPU events: the device).",
    "tid": "Thread id as written in the trace (GPU events: the stream).",
    "id": "Event id (async and flow events).",
    "args": "The event's complete args object.",
    "bp": "Flow binding point ('e' = enclosing slice).",
    "series": "Counter series (the args key).",
    "value": "Counter value.",
}


# Key columns with one meaning in every view: documented once.
COMMON_COLUMNS = ("run", "rank", "phase", "file_id", "event_id", "pid", "tid", "args")


COMM_PATTERNS_CSV = "comm_patterns.csv"
COMM_SOURCES = ("kernel", "annotation", "cpu_op")


def load_comm_patterns(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Copy the user's communication patterns (``<warehouse>/comm_patterns.csv``:
    source, pattern, library, collective; first matching row wins) into the
    table ``user_comm_patterns``, which replaces the defaults of the
    ``comm_patterns`` view when it has rows. Without the file it is empty."""
    con.execute(
        "CREATE OR REPLACE TABLE user_comm_patterns (priority BIGINT, source VARCHAR,"
        " pattern VARCHAR, library VARCHAR, collective VARCHAR)"
    )
    if not path.exists():
        return
    try:
        con.execute(
            "INSERT INTO user_comm_patterns SELECT row_number() OVER (), lower(trim(source)),"
            " pattern, library, nullif(trim(collective), '')"
            " FROM read_csv(?, header = true, all_varchar = true)",
            [str(path)],
        )
        bad = con.execute(
            "SELECT source, pattern FROM user_comm_patterns"
            " WHERE NOT coalesce(list_contains(?, source), false) OR coalesce(pattern, '') = '' LIMIT 1",
            [list(COMM_SOURCES)],
        ).fetchone()
        con.execute("SELECT count(*) FROM user_comm_patterns WHERE regexp_matches('', pattern)")
    except duckdb.Error as e:
        raise ViewError(f"{path}: {str(e).splitlines()[0]}") from None
    if bad:
        raise ViewError(
            f"{path}: source {bad[0]!r}, pattern {bad[1]!r}: source must be one of "
            f"{', '.join(COMM_SOURCES)} and the pattern not empty"
        )


class Catalog:
    """The catalog file of one warehouse."""

    def __init__(self, warehouse: Path):
        self.warehouse = Path(warehouse).absolute()
        self.path = self.warehouse / CATALOG_NAME

    def exists(self) -> bool:
        return self.path.exists()

    def connect_readonly(self) -> duckdb.DuckDBPyConnection:
        if not self.path.exists():
            raise WarehouseError(
                f"no tracedb warehouse at {self.warehouse} (run `tracedb ingest` first, "
                "or point --warehouse / TRACEDB_WAREHOUSE at one)"
            )
        return duckdb.connect(str(self.path), read_only=True)

    @contextmanager
    def lock(self, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Exclusive writer lock; waits (telling on_wait) while another
        ingest holds it."""
        try:
            self.warehouse.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.warehouse / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise WarehouseError(f"{self.warehouse}: cannot write the warehouse: {e.strerror or e}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait:
                    on_wait(f"waiting for another tracedb writer on {self.warehouse} to finish")
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextmanager
    def writing(self, on_wait: Callable[[str], None] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection to a private copy of the catalog, swapped
        in atomically when the block ends without error."""
        with self.lock(on_wait):
            # Copies exist only under this lock: any found now are a killed writer's.
            for stale in self.warehouse.glob(f".{CATALOG_NAME}.*.tmp*"):
                stale.unlink(missing_ok=True)
            tmp = self.warehouse / f".{CATALOG_NAME}.{os.getpid()}.tmp"
            try:
                if self.path.exists():
                    shutil.copyfile(self.path, tmp)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                raise WarehouseError(f"{self.warehouse}: cannot write the warehouse: {e.strerror or e}") from None
            try:
                con = duckdb.connect(str(tmp))
            except duckdb.Error as e:
                tmp.unlink(missing_ok=True)
                raise WarehouseError(f"{self.path}: cannot open the catalog: {e}") from None
            try:
                migrate(con, load_migrations())
                yield con
                self._rebuild_views(con)
                con.execute("CHECKPOINT")
                con.close()
                os.replace(tmp, self.path)
            except BaseException as e:
                con.close()
                tmp.unlink(missing_ok=True)
                Path(str(tmp) + ".wal").unlink(missing_ok=True)
                if isinstance(e, (duckdb.IOException, OSError)):  # e.g. the disk is full
                    raise WarehouseError(f"{self.warehouse}: cannot write the catalog: "
                                         f"{getattr(e, 'strerror', None) or str(e).splitlines()[0]}") from None
                raise

    def _rebuild_views(self, con: duckdb.DuckDBPyConnection) -> None:
        con.execute(
            "INSERT OR REPLACE INTO catalog_info VALUES ('warehouse', ?)", [str(self.warehouse)]
        )
        rows = con.execute(
            "SELECT files FROM traces WHERE status = 'ok' ORDER BY run, rank, phase, file_id"
        ).fetchall()
        files: dict[str, list[str]] = {t: [] for t in SCHEMAS}
        for (raw,) in rows:
            for table, rel in json.loads(raw or "{}").items():
                if table in files:
                    files[table].append(str(self.warehouse / rel))
        for table, paths in files.items():
            con.execute(raw_view_sql(table, paths))
            con.execute(f"COMMENT ON VIEW {table} IS {_quote(RAW_DOCS[table])}")
            for col, _typ in raw_columns(table):
                doc = RAW_COLUMN_DOCS.get(col)
                if doc:
                    con.execute(f'COMMENT ON COLUMN {table}."{col}" IS {_quote(doc)}')
        load_comm_patterns(con, self.warehouse / COMM_PATTERNS_CSV)
        common = {k: RAW_COLUMN_DOCS[k] for k in COMMON_COLUMNS}
        defs = load_view_files(resource_dir("queries"))
        # The library's views are SQL text bound at query time: re-applying
        # them (seconds) is needed only when their SQL or docs changed, not
        # when the raw views above list new files.
        fingerprint = hashlib.sha256(
            json.dumps([vars(v) for v in defs] + [common], sort_keys=True, default=str).encode()
        ).hexdigest()
        row = con.execute("SELECT value FROM catalog_info WHERE key = 'views_fingerprint'").fetchone()
        if row and row[0] == fingerprint:
            return
        apply_views(con, defs, common)
        con.execute("INSERT OR REPLACE INTO catalog_info VALUES ('views_fingerprint', ?)", [fingerprint])

    def rebuild(self) -> None:
        """Re-create every view (after a move of the warehouse, or an upgrade)."""
        with self.writing():
            pass

    @staticmethod
    def recorded_warehouse(con: duckdb.DuckDBPyConnection) -> str | None:
        """The warehouse folder the views were built for (read on ``con``)."""
        try:
            rows = con.execute("SELECT value FROM catalog_info WHERE key = 'warehouse'").fetchall()
        except duckdb.Error:
            return None
        return rows[0][0] if rows else None
