"""The DuckDB catalog: ``<warehouse>/tracedb.duckdb``.

It holds the ``traces`` table (one row per ingested or failed file), raw
views over the Parquet files (``events``, ``flows``, ``counters``) and the
view library from queries/: marts beside the tables in ``main``, staging and
intermediate views in schemas of their own (views.LAYER_SCHEMAS), and the
bookkeeping (the migrations' ``schema_version``, ``catalog_info``, the
library's docs) in ``tracedb_meta``.

Readers are never locked out: a writer never opens the live catalog file.
It copies it to a temp file under an exclusive lock (the warehouse's
catalog lock, so concurrent ingests queue), changes the copy, and swaps it in with
``os.replace``. Readers holding the old file keep a consistent snapshot; new
readers see the new one. The raw views list their Parquet files explicitly
(absolute paths, so the catalog works from any directory), so a Parquet file
becomes visible in the same atomic swap that registers its trace.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import duckdb

from .errors import MigrationError, WarehouseError
from .sqltext import sql_literal
from .views import LAYER_SCHEMAS, META_SCHEMA, set_search_path
from .warehouse import CATALOG_NAME

# Building the views (schema, views, summaries: pyarrow) is imported by the
# methods that write: a reader opens the catalog with DuckDB alone.
if TYPE_CHECKING:
    from .views import ViewDef
    from .warehouse import Warehouse

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
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {META_SCHEMA}")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {META_SCHEMA}.schema_version (version INTEGER PRIMARY KEY,"
        " name VARCHAR, checksum VARCHAR, applied_at TIMESTAMPTZ)"
    )
    if con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database()"
                   " AND schema_name = 'main' AND table_name = 'schema_version'").fetchone()[0]:
        # A catalog made before the bookkeeping had its schema.
        con.execute(f"INSERT INTO {META_SCHEMA}.schema_version SELECT * FROM main.schema_version")
        con.execute("DROP TABLE main.schema_version")
    applied = dict(con.execute(f"SELECT version, checksum FROM {META_SCHEMA}.schema_version").fetchall())
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
                f"INSERT INTO {META_SCHEMA}.schema_version VALUES (?, ?, ?, now())",
                [m.version, m.name, m.checksum],
            )
            con.execute("COMMIT")
        except duckdb.Error as e:
            con.execute("ROLLBACK")
            raise MigrationError(f"migration {m.version:04d}_{m.name} failed: {e}") from None
        done.append(m.version)
    return done


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
    "file_id": "Content hash of the trace file (xxh3-...); joins to traces.file_id.",
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


# A new warehouse's catalog starts as a copy of one of no traces that this
# tracedb and DuckDB made before: its first commit takes 1.3 CPU-s where it
# applies the library's views and their thousand comments, 0.35 s from the
# copy (what is the warehouse's own, its path, comm_patterns.csv, tags, the
# views over its files, every commit writes again). Kept in the user's
# cache folder under a name that hashes DuckDB's version and every file a
# catalog is made from; none is used or kept where that folder cannot be
# written.
_TEMPLATE_PREFIX = "empty-catalog-"


def _template_path() -> Path | None:
    """Where this tracedb and DuckDB keep the template; None where there is
    no home folder or the files to hash cannot be read."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    try:  # a relative XDG_CACHE_HOME is ignored, as the XDG spec says
        root = (Path(cache) if os.path.isabs(cache) else Path.home() / ".cache") / "tracedb"
        made_from = hashlib.sha256(duckdb.__version__.encode())
        files = [*Path(__file__).resolve().parent.rglob("*.py"),
                 *resource_dir("queries").rglob("*"), *resource_dir("migrations").rglob("*")]
        for path in sorted(f for f in files if f.is_file()):
            made_from.update(path.name.encode() + b"\0" + path.read_bytes())
    except (RuntimeError, OSError):  # RuntimeError: no home folder
        return None
    return root / f"{_TEMPLATE_PREFIX}{made_from.hexdigest()[:32]}.duckdb"


def _start_from_template(catalog: Path, template: Path) -> bool:
    """A new warehouse's ``catalog`` as a copy of ``template``, if there is
    one (else it stays absent, and is made from nothing); whether it is."""
    try:
        if template.exists():
            shutil.copyfile(template, catalog)
            return True
    except OSError:
        catalog.unlink(missing_ok=True)
    return False


def _keep_as_template(catalog: Path, template: Path) -> None:
    """A new ``catalog`` of no traces becomes ``template``, unless one is
    kept; older templates go."""
    try:
        if template.exists():
            return
        template.parent.mkdir(parents=True, exist_ok=True)
        # A name of its own (two threads may keep one at once), renamed whole.
        fd, name = tempfile.mkstemp(dir=template.parent, prefix=f"{template.name}.", suffix=".part")
        os.close(fd)
        part = Path(name)
        try:
            shutil.copyfile(catalog, part)
            os.replace(part, template)
        finally:
            part.unlink(missing_ok=True)
        for old in template.parent.glob(f"{_TEMPLATE_PREFIX}*.duckdb"):
            if old != template:
                old.unlink(missing_ok=True)
    except OSError:
        pass


def views_fingerprint(defs: list[ViewDef], common: dict[str, str]) -> str:
    """What the library's views in a catalog are made from: their SQL, docs
    and layers, not where their files are (the same tracedb installed in two
    places makes the same views, and shares one template)."""
    made_from = [{k: val for k, val in vars(v).items() if k != "path"} for v in defs]
    return hashlib.sha256(json.dumps(made_from + [common, LAYER_SCHEMAS], sort_keys=True).encode()).hexdigest()


class Catalog:
    """The catalog file of one warehouse (``Warehouse.catalog``)."""

    def __init__(self, warehouse: Warehouse):
        self.wh = warehouse
        self._path = warehouse.catalog_path
        # stale_summaries of the catalog this process last committed (None:
        # it committed none), so that an ingest can say it without opening
        # the catalog again (40-75 ms).
        self.committed_stale: int | None = None

    @property
    def path(self) -> Path:
        """The catalog file DuckDB opens: the warehouse's own, or for an
        object store the local copy of the version last fetched."""
        return self._path

    def exists(self) -> bool:
        if self.wh.remote is not None:
            return self.wh.remote.exists(CATALOG_NAME)
        return self.path.exists()

    def _missing(self) -> WarehouseError:
        if self.wh.remote is not None:
            self.wh.remote.check_access()  # a missing bucket or a refusal says so first
        return WarehouseError(
            f"no tracedb warehouse at {self.wh} (run `tracedb ingest` first, "
            "or point --warehouse / TRACEDB_WAREHOUSE at one)"
        )

    def fetch(self) -> Path:
        """An object store's catalog, as a local copy of its current version
        (fetched only when the bucket holds a newer one than this machine)."""
        remote = self.wh.remote
        assert remote is not None
        version = remote.etag(CATALOG_NAME)
        if version is None:
            raise self._missing()
        cached = self.wh.cached_catalog(version)
        if not cached.exists():
            self.wh.create_local()
            tmp = self.wh.catalog_fetch_copy()
            try:
                version = remote.fetch(CATALOG_NAME, tmp)
                if version is None:
                    raise self._missing()
                cached = self.wh.cached_catalog(version)
                os.replace(tmp, cached)
            finally:
                tmp.unlink(missing_ok=True)
            self._keep_only(cached)
        self._path = cached
        return cached

    def _keep_only(self, cached: Path) -> None:
        """Older cached versions go (a connection still open on one keeps it)."""
        for old in self.wh.cached_catalogs():
            if old != cached:
                old.unlink(missing_ok=True)

    def connect_readonly(self) -> duckdb.DuckDBPyConnection:
        if self.wh.remote is not None:
            self.fetch()
        elif not self.path.exists():
            raise self._missing()
        con = self.wh.attach(duckdb.connect(str(self.path), read_only=True))
        # DuckDB draws a progress bar on stdout for a query past 2 s: in the
        # middle of `tracedb query -f csv > out.csv`'s rows.
        con.execute("SET enable_progress_bar = false")
        set_search_path(con)
        return con

    def _copy(self, tmp: Path) -> str | None:
        """Start a writer's copy: the catalog as it is now (none for a new
        warehouse); returns the object store's version it copied."""
        if self.wh.remote is not None:
            self.wh.create_local()
            return self.wh.remote.fetch(CATALOG_NAME, tmp)
        if self.path.exists():
            shutil.copyfile(self.path, tmp)
        return None

    def _swap_in(self, tmp: Path, version: str | None) -> None:
        """The writer's copy becomes the catalog; in an object store, only if
        no other writer committed since ``version`` (else CommitConflict)."""
        if self.wh.remote is None:
            os.replace(tmp, self.path)
            return
        cached = self.wh.cached_catalog(self.wh.remote.swap(tmp, CATALOG_NAME, version))
        os.replace(tmp, cached)
        self._keep_only(cached)
        self._path = cached

    @contextmanager
    def writing(self, on_wait: Callable[[str], None] | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection to a private copy of the catalog, swapped
        in atomically when the block ends without error. In an object store,
        the swap is a conditional write, which raises CommitConflict when
        another writer committed first (``Warehouse.commit`` redoes it)."""
        with self.wh.catalog_lock(on_wait):
            # Copies exist only under this lock: any found now are a killed writer's.
            for stale in self.wh.catalog_copies():
                stale.unlink(missing_ok=True)
            tmp = self.wh.catalog_copy()
            try:
                version = self._copy(tmp)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                raise WarehouseError(f"{self.wh}: cannot write the warehouse: {e.strerror or e}") from None
            # A new warehouse's template (hashed once, for its copy and its keeping).
            template = None if tmp.exists() else _template_path()
            seeded = template is not None and _start_from_template(tmp, template)
            con = self._open_copy(tmp, template if seeded else None)
            try:
                migrate(con, load_migrations())
                yield con
                # One transaction: each statement on its own would commit
                # (the library's views and their docs are a thousand).
                con.execute("BEGIN TRANSACTION")
                stale = self._rebuild_views(con)
                con.execute("COMMIT")
                con.execute("CHECKPOINT")
                keep = template is not None and not con.execute("SELECT count(*) FROM traces").fetchone()[0]
                con.close()
                if keep:
                    _keep_as_template(tmp, template)
                self._swap_in(tmp, version)
                self.committed_stale = stale
            except BaseException as e:
                con.close()
                tmp.unlink(missing_ok=True)
                Path(str(tmp) + ".wal").unlink(missing_ok=True)
                if isinstance(e, (duckdb.IOException, OSError)):  # e.g. the disk is full
                    raise WarehouseError(f"{self.wh}: cannot write the catalog: "
                                         f"{getattr(e, 'strerror', None) or str(e).splitlines()[0]}") from None
                raise

    def _open_copy(self, tmp: Path, template: Path | None) -> duckdb.DuckDBPyConnection:
        """The writer's copy, opened. One copied from a template that DuckDB
        cannot open is made from nothing, and the template goes, so that a
        damaged cache fails no warehouse."""
        try:
            return self.wh.attach(duckdb.connect(str(tmp)))
        except duckdb.Error as e:
            tmp.unlink(missing_ok=True)
            if template is None:
                raise WarehouseError(f"{self.path}: cannot open the catalog: {e}") from None
        template.unlink(missing_ok=True)
        return self._open_copy(tmp, None)

    def _rebuild_views(self, con: duckdb.DuckDBPyConnection) -> int:
        """The catalog's views over the traces it lists; returns how many
        of them have stale summaries (_bind_summaries)."""
        from . import tags
        from .schema import SCHEMAS
        from .views import apply_views, load_comm_patterns, load_view_files, raw_columns, raw_view_sql

        con.execute(
            f"INSERT OR REPLACE INTO {META_SCHEMA}.catalog_info VALUES ('warehouse', ?)", [str(self.wh)]
        )
        rows = con.execute(
            "SELECT files FROM traces WHERE status = 'ok' ORDER BY run, rank, phase, file_id"
        ).fetchall()
        files: dict[str, list[str]] = {t: [] for t in SCHEMAS}
        for (raw,) in rows:
            for table, key in json.loads(raw or "{}").items():
                if table in files:
                    files[table].append(self.wh.location(key))
        load_comm_patterns(con, self.wh.comm_patterns, META_SCHEMA)
        tags.bind(con, self.wh)
        common = {k: RAW_COLUMN_DOCS[k] for k in COMMON_COLUMNS}
        defs = load_view_files(resource_dir("queries"))
        # The library's views are SQL text bound at query time: re-applying
        # them (seconds) is needed only when their SQL or docs changed, not
        # when the raw views below list new files.
        fingerprint = views_fingerprint(defs, common)
        row = con.execute(f"SELECT value FROM {META_SCHEMA}.catalog_info WHERE key = 'views_fingerprint'").fetchall()
        if not row or row[0][0] != fingerprint:
            # Bound over empty raw views of the same columns: over a trace's
            # files, each view's binding read their Parquet footers (a new
            # warehouse's first commit after a 1 GiB trace: 0.9 s, not 0.4).
            for table in SCHEMAS:
                con.execute(raw_view_sql(table, []))
            apply_views(con, defs, common)
            con.execute(f"INSERT OR REPLACE INTO {META_SCHEMA}.catalog_info VALUES ('views_fingerprint', ?)",
                        [fingerprint])
        for table, paths in files.items():
            con.execute(raw_view_sql(table, paths))
            con.execute(f"COMMENT ON VIEW {table} IS {sql_literal(RAW_DOCS[table])}")
            for col, _typ in raw_columns(table):
                doc = RAW_COLUMN_DOCS.get(col)
                if doc:
                    con.execute(f'COMMENT ON COLUMN {table}."{col}" IS {sql_literal(doc)}')
        return self._bind_summaries(con, defs)

    def _bind_summaries(self, con: duckdb.DuckDBPyConnection, defs: list[ViewDef]) -> int:
        """Define each per-trace view over its summary files when every trace
        has current ones; else over the events (its own SQL: right, slower).
        Returns how many traces have stale summaries."""
        from . import summaries
        from .views import HIVE_OPTIONS, catalog_sql, empty_select, relation_schemas

        views = summaries.per_trace(defs)
        schemas = relation_schemas(defs)
        current = summaries.fingerprint(defs, self.wh)
        rows = con.execute(
            "SELECT summaries, summaries_fingerprint FROM traces WHERE status = 'ok' "
            "ORDER BY run, rank, phase, file_id"
        ).fetchall()
        files: dict[str, list[str]] = {v.name: [] for v in views}
        stale = 0
        for listed, made_by in rows:
            listed = json.loads(listed or "{}")
            if made_by != current or any(v.name not in listed for v in views):
                stale += 1
                continue
            for v in views:
                if listed[v.name] is not None:  # else no rows for this trace, no file
                    files[v.name].append(self.wh.location(listed[v.name]))
        con.execute(f"INSERT OR REPLACE INTO {META_SCHEMA}.catalog_info VALUES ('stale_summaries', ?)",
                    [str(stale)])
        for v in views:
            cols = con.execute(
                f"SELECT column_name, data_type, description FROM {META_SCHEMA}.tracedb_view_columns "
                "WHERE view_name = ? ORDER BY position", [v.name]
            ).fetchall()
            if not rows or stale:
                con.execute(catalog_sql(v, schemas))
            elif files[v.name]:
                select = ", ".join(f'CAST("{c}" AS {t}) AS "{c}"' for c, t, _ in cols)
                file_list = ", ".join(sql_literal(f) for f in files[v.name])
                con.execute(f"CREATE OR REPLACE VIEW {v.qualified_name} AS SELECT {select} "
                            f"FROM read_parquet([{file_list}], {HIVE_OPTIONS})")
            else:  # no trace has rows of it
                empty = empty_select([(c, t) for c, t, _ in cols])
                con.execute(f"CREATE OR REPLACE VIEW {v.qualified_name} AS {empty}")
            con.execute(f"COMMENT ON VIEW {v.qualified_name} IS {sql_literal(v.description)}")
            for c, _t, doc in cols:
                if doc:
                    con.execute(f'COMMENT ON COLUMN {v.qualified_name}."{c}" IS {sql_literal(doc)}')
        return stale

    @staticmethod
    def stale_summaries(con: duckdb.DuckDBPyConnection) -> int:
        """Traces whose summaries another view library or comm_patterns.csv
        made (the per-trace views then read the events)."""
        rows = con.execute(f"SELECT value FROM {META_SCHEMA}.catalog_info WHERE key = 'stale_summaries'").fetchall()
        return int(rows[0][0]) if rows else 0

    def refresh_summaries(self, on_wait: Callable[[str], None] | None = None) -> int:
        """Recompute the stale summaries from the events (``tracedb
        migrate``); returns how many traces were done."""
        from . import summaries
        from .views import load_view_files

        defs = load_view_files(resource_dir("queries"))
        current = summaries.fingerprint(defs, self.wh)
        spill = self.wh.staging_path(f"summaries.spill.{os.getpid()}")
        with self.writing(on_wait) as con, summaries.Summarizer(self.wh, defs, spill) as summarizer:
            rows = con.execute(
                "SELECT file_id, run, rank, phase, files, distributed_info, source_path FROM traces "
                "WHERE status = 'ok' AND summaries_fingerprint IS DISTINCT FROM ?", [current]
            ).fetchall()
            for file_id, run, rank, phase, listed, info, source in rows:
                work = self.wh.staging_path(f"summaries.{file_id}.{os.getpid()}")
                try:
                    work.mkdir(parents=True, exist_ok=True)
                    tables = {t: self.wh.local_file(key, work) for t, key in json.loads(listed or "{}").items()}
                    made = summarizer.compute(tables, work, file_id=file_id, run=run, rank=rank, phase=phase,
                                              distributed_info=info)
                    done = summaries.publish(self.wh, made, run, rank, phase, file_id)
                    for view, key in done.items():
                        if key is None:  # no rows now: the file an older tracedb wrote goes
                            self.wh.storage.remove(self.wh.summary_key(view, run, rank, phase, file_id))
                except (duckdb.Error, OSError) as e:
                    why = getattr(e, "strerror", None) or str(e).splitlines()[0]
                    raise WarehouseError(f"{source}: cannot summarize trace {file_id}: {why}") from None
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                con.execute(
                    "UPDATE traces SET summaries = ?, summaries_fingerprint = ? "
                    "WHERE file_id = ? AND status = 'ok'", [json.dumps(done), summarizer.fingerprint, file_id]
                )
        return len(rows)

    def rebuild(self) -> None:
        """Re-create every view (after a move of the warehouse, or an upgrade)."""
        with self.writing():
            pass

    @staticmethod
    def recorded_warehouse(con: duckdb.DuckDBPyConnection) -> str | None:
        """The warehouse folder the views were built for (read on ``con``)."""
        try:
            rows = con.execute(f"SELECT value FROM {META_SCHEMA}.catalog_info WHERE key = 'warehouse'").fetchall()
        except duckdb.Error:
            return None
        return rows[0][0] if rows else None
