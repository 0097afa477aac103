"""The Python API: one TraceDB object per warehouse. The CLI is a thin layer
over it.

    import tracedb
    db = tracedb.open("runs-warehouse")
    db.ingest(["runs/"])
    db.query("hotspots", run="v2", kind="kernel").df()
    db.sql("SELECT count(*) FROM events").fetchall()
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import duckdb

from .catalog import CATALOG_NAME, Catalog
from .discover import TraceFile, discover
from .errors import WarehouseError
from .query import ViewInfo, build, list_views

# The writing side (parsers, Parquet writer, pyarrow, numpy) is imported by
# the methods that use it: a query needs only DuckDB, and starts in under
# half the time without them.
if TYPE_CHECKING:
    from .check import CheckReport
    from pyspark.sql import SparkSession

    from .ingest import FileResult, IngestReport

DEFAULT_WAREHOUSE = "tracedb"


def default_warehouse() -> Path:
    return Path(os.environ.get("TRACEDB_WAREHOUSE") or DEFAULT_WAREHOUSE)


class TraceDB:
    """A warehouse: Parquet files plus the DuckDB catalog that points at them."""

    def __init__(self, warehouse: str | os.PathLike | None = None):
        self.warehouse = Path(warehouse).expanduser().absolute() if warehouse else default_warehouse().absolute()
        self.catalog = Catalog(self.warehouse)
        self._con: duckdb.DuckDBPyConnection | None = None

    # -- writing ----------------------------------------------------------

    def _check_writable_target(self) -> None:
        from .schema import TABLES
        from .store import STAGING
        from .summaries import SUMMARY_DIR
        from .tags import TAGS_DIR
        from .views import COMM_PATTERNS_CSV

        w = self.warehouse
        if w.exists() and not w.is_dir():
            raise WarehouseError(f"{w}: exists and is not a folder")
        if w.is_dir() and not (w / CATALOG_NAME).exists() and any(
            # (.tracedb*: locks and catalog copies of an ingest killed before its first swap)
            p.name not in {*TABLES, SUMMARY_DIR, STAGING, COMM_PATTERNS_CSV, TAGS_DIR}
            and not p.name.startswith(".tracedb")
            for p in w.iterdir()
        ):
            raise WarehouseError(
                f"{w}: exists and is not a tracedb warehouse; choose another --warehouse"
            )

    def discover(self, paths: list[str | os.PathLike], run: str | None = None,
                 rank: int | None = None, phase: str | None = None) -> list[TraceFile]:
        """The files ``ingest`` would read, with their run / rank / phase."""
        return discover(paths, run=run, rank=rank, phase=phase)

    def ingest(self, paths: list[str | os.PathLike] | None = None, *, files: list[TraceFile] | None = None,
               run: str | None = None, rank: int | None = None, phase: str | None = None,
               jobs: int | None = None, tags: dict[str, str] | None = None,
               on_result: Callable[[FileResult], None] | None = None,
               on_wait: Callable[[str], None] | None = None, spark: SparkSession | None = None) -> IngestReport:
        """Ingest trace files (or folders of them). Already-ingested content is
        skipped; failures are recorded in ``traces`` and reported, never raised.
        Each run ingested (or already there) gets the tags of the run.json
        beside its traces, then ``tags`` (tracedb.tags). With ``spark``, the
        files are ingested on its executors (tracedb.spark.ingest)."""
        from . import tags as run_tags
        from .ingest import run_ingest

        if files is None:
            files = discover(paths or [], run=run, rank=rank, phase=phase)
        configs = run_tags.run_configs(files)
        self._check_writable_target()
        self.close()
        if spark is not None:
            from .spark.ingest import ingest as spark_ingest

            report = spark_ingest(spark, self.warehouse, files, on_result=on_result, on_wait=on_wait)
        else:
            jobs = jobs if jobs is not None else (os.cpu_count() or 1)
            report = run_ingest(self.warehouse, files, jobs=jobs, on_result=on_result, on_wait=on_wait)
        present = {r.run for r in report.results if r.status != "failed"}
        wanted = {r: {**configs.get(r, {}), **(tags or {})} for r in present}
        if any(wanted.values()):
            run_tags.save(self.catalog, wanted, on_wait)
        return report

    def rebuild_views(self, on_wait: Callable[[str], None] | None = None) -> int:
        """Re-create every view and recompute the per-trace summaries that an
        older view library or comm_patterns.csv made (after upgrading
        tracedb, moving the warehouse or changing comm_patterns.csv);
        returns how many traces' summaries were recomputed."""
        from . import locks

        self._check_writable_target()
        self.close()
        with locks.ingesting(self.warehouse, on_wait):
            return self.catalog.refresh_summaries(on_wait)

    def check(self, repair: bool = False, on_wait: Callable[[str], None] | None = None) -> CheckReport:
        """Verify the warehouse (orphan or missing Parquet files, row counts,
        leftovers of killed ingests); with ``repair``, fix what it finds."""
        from .check import check

        self.close()
        return check(self.warehouse, repair=repair, on_wait=on_wait)

    def remove(self, run: str, rank: int | None = None, phase: str | None = None,
               on_wait: Callable[[str], None] | None = None) -> int:
        """Take every trace of a run (or of one rank / phase of it) out of
        the warehouse, and a whole run's tags; returns how many traces went."""
        from . import tags
        from .remove import remove

        self.close()
        removed = remove(self.warehouse, run, rank=rank, phase=phase, on_wait=on_wait)
        if rank is None and phase is None:
            tags.drop(self.catalog, run, on_wait)
        return removed

    # -- reading ----------------------------------------------------------

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection to the catalog (shared by this object)."""
        if self._con is None:
            con = self.catalog.connect_readonly()
            recorded = self.catalog.recorded_warehouse(con)
            if recorded is not None and recorded != str(self.warehouse) and os.access(self.warehouse, os.W_OK):
                con.close()
                self.catalog.rebuild()  # the warehouse moved: re-point the views
                con = self.catalog.connect_readonly()
            self._con = con
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def query(self, name: str, **params) -> duckdb.DuckDBPyRelation:
        """Run a view of the library: ``query("hotspots", run="v2", limit=10)``;
        ``tags={"dtype": "bf16"}`` keeps the runs that carry every one of them."""
        con = self.connect()
        sql, args = build(con, name, **params)
        return con.sql(sql, params=args) if args else con.sql(sql)

    def sql(self, text: str, params: list | None = None) -> duckdb.DuckDBPyRelation:
        """Any read-only SQL over the catalog."""
        con = self.connect()
        return con.sql(text, params=params) if params else con.sql(text)

    def stale_summaries(self) -> int:
        """Traces whose per-trace summaries another view library or
        comm_patterns.csv made; while there are any, the per-trace views
        compute from the events. ``rebuild_views`` recomputes them."""
        return self.catalog.stale_summaries(self.connect())

    def views(self, layer: str | None = None) -> list[ViewInfo]:
        return list_views(self.connect(), layer)

    def runs(self) -> duckdb.DuckDBPyRelation:
        """What is in the warehouse: one row per run and phase, with the
        run's tags (``key=value`` by key, space-separated)."""
        tagged = self.sql(
            "SELECT count(*) FROM duckdb_views() WHERE view_name = 'run_tags' AND NOT internal"
        ).fetchall()[0][0]
        tags = ("(SELECT string_agg(key || '=' || value, ' ' ORDER BY key) FROM run_tags t WHERE t.run = traces.run)"
                if tagged else "NULL::VARCHAR")  # a catalog from before run_tags, until it is rebuilt
        return self.sql(
            "SELECT run, phase, count(DISTINCT rank) AS rank_count, list(DISTINCT rank ORDER BY rank) AS ranks,"
            " count(*) FILTER (status = 'ok') AS file_count,"
            " count(*) FILTER (status = 'failed') AS failed_count,"
            " sum(event_count) AS event_count,"
            " round(sum(source_bytes) FILTER (status = 'ok') / 1e6, 1) AS source_mb,"
            f" {tags} AS tags"
            " FROM traces GROUP BY run, phase ORDER BY run, phase"
        )

    def __enter__(self) -> "TraceDB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open(warehouse: str | os.PathLike | None = None) -> TraceDB:  # noqa: A001 - mirrors sqlite3/duckdb
    """Open (or name, for a first ingest) a warehouse."""
    return TraceDB(warehouse)
