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

from .discover import TraceFile, discover
from .query import ViewInfo, list_views, query, view_columns
from .warehouse import Warehouse

# The writing side (parsers, Parquet writer, pyarrow, numpy) is imported by
# the methods that use it: a query needs only DuckDB, and starts in under
# half the time without them.
if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .check import CheckReport
    from .export import ExportResult
    from .ingest import FileResult, IngestReport
    from .report import ReportResult
    from .serve import ServeConfig, Server


class TraceDB:
    """A warehouse: Parquet files plus the DuckDB catalog that points at them
    (``wh``: its layout, locks, storage and registry of traces)."""

    def __init__(self, warehouse: str | os.PathLike | Warehouse | None = None):
        self.wh = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse or None)
        self.warehouse: Path = self.wh.root
        self.catalog = self.wh.catalog
        self._con: duckdb.DuckDBPyConnection | None = None

    # -- writing ----------------------------------------------------------

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
        self.wh.check_target()
        self.close()
        if spark is not None:
            from .spark.ingest import ingest as spark_ingest

            report = spark_ingest(spark, self.wh, files, on_result=on_result, on_wait=on_wait)
        else:
            jobs = jobs if jobs is not None else (os.cpu_count() or 1)
            report = run_ingest(self.wh, files, jobs=jobs, on_result=on_result, on_wait=on_wait)
        present = {r.run for r in report.results if r.status != "failed"}
        wanted = {r: {**configs.get(r, {}), **(tags or {})} for r in present}
        if any(wanted.values()):
            run_tags.save(self.wh, wanted, on_wait)
        return report

    def rebuild_views(self, on_wait: Callable[[str], None] | None = None) -> int:
        """Re-create every view and recompute the per-trace summaries that an
        older view library or comm_patterns.csv made (after upgrading
        tracedb, moving the warehouse or changing comm_patterns.csv);
        returns how many traces' summaries were recomputed."""
        self.wh.check_target()
        self.close()
        with self.wh.ingesting(on_wait):
            return self.catalog.refresh_summaries(on_wait)

    def check(self, repair: bool = False, on_wait: Callable[[str], None] | None = None) -> CheckReport:
        """Verify the warehouse (orphan or missing Parquet files, row counts,
        leftovers of killed ingests); with ``repair``, fix what it finds."""
        from .check import check

        self.close()
        return check(self.wh, repair=repair, on_wait=on_wait)

    def remove(self, run: str, rank: int | None = None, phase: str | None = None,
               on_wait: Callable[[str], None] | None = None) -> int:
        """Take every trace of a run (or of one rank / phase of it) out of
        the warehouse, and a whole run's tags; returns how many traces went."""
        from . import tags
        from .remove import remove

        self.close()
        removed = remove(self.wh, run, rank=rank, phase=phase, on_wait=on_wait)
        if rank is None and phase is None:
            tags.drop(self.wh, run, on_wait)
        return removed

    # -- reading ----------------------------------------------------------

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A read-only connection to the catalog (shared by this object)."""
        if self._con is None:
            con = self.catalog.connect_readonly()
            recorded = self.catalog.recorded_warehouse(con)
            if recorded != str(self.wh) and self.wh.remote is None and os.access(self.warehouse, os.W_OK):
                con.close()
                # The warehouse moved (re-point the views), or an older tracedb
                # made the catalog (None: the bookkeeping is not where it is now).
                self.catalog.rebuild()
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
        return query(self.connect(), name, **params)

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

    def view_columns(self, name: str) -> list[tuple[str, str | None, str | None]]:
        """(column, type, doc) of each column of a view, macro or Python-computed mart."""
        return view_columns(self.connect(), name)

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

    def serve(self, config: "ServeConfig | None" = None,
              on_ready: "Callable[[Server], None] | None" = None) -> None:
        """Serve the warehouse read-only over the PostgreSQL wire protocol until
        interrupted (KeyboardInterrupt propagates; the server is stopped first).
        ``on_ready(server)`` is called once the port listens (``server.port``)."""
        from .serve import ServeConfig, Server
        from .serve.server import RemoteCatalog

        self.connect()  # a clear error when there is no warehouse; re-points a moved one
        self.close()
        remote = None
        if self.wh.remote is not None:
            remote = RemoteCatalog(self.catalog.fetch, self.wh.remote.fs, self.wh.published_locations())
        server = Server(self.catalog.path, self.warehouse, config or ServeConfig(), remote=remote)
        server.start()
        if on_ready is not None:
            on_ready(server)
        server.serve_forever()

    def report(self, path: str | os.PathLike, runs: list[str] | None = None, base: str | None = None,
               phase: str | None = None) -> ReportResult:
        """Write one self-contained HTML page of charts over the marts
        (tracedb.report)."""
        from .report import write_report

        return write_report(self, path, runs=runs, base=base, phase=phase)

    def export(self, path: str | os.PathLike, run: str, rank: int, phase: str | None = None,
               step: int | None = None, start_ns: int | None = None, end_ns: int | None = None,
               compare: str | None = None) -> ExportResult:
        """Write a window of one rank's trace (a step, or nanosecond bounds)
        as Chrome-trace JSON for Perfetto (tracedb.export)."""
        from .export import export

        return export(self, path, run, rank, phase=phase, step=step, start_ns=start_ns, end_ns=end_ns,
                      compare=compare)

    def __enter__(self) -> "TraceDB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open(warehouse: str | os.PathLike | None = None) -> TraceDB:  # noqa: A001 - mirrors sqlite3/duckdb
    """Open (or name, for a first ingest) a warehouse."""
    return TraceDB(warehouse)
