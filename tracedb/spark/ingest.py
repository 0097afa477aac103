"""``tracedb ingest --engine spark``: the files of an ingest handed to a
Spark cluster's executors, one task per file, the largest first.

Each executor runs tracedb's own per-file pipeline (tracedb.ingest.ingest_file:
hash, parse, Parquet, per-trace summaries, published into the warehouse)
and returns the file's ``traces`` row; the driver then registers every row
in one catalog commit (tracedb.ingest.register), so the traces appear
together, or, if the job dies first, not at all (their files are orphans
that no reader lists and ``tracedb check --repair`` removes). Content
already ingested is skipped; a file that fails is recorded with its error
and the others still ingest: the same rules, the same file ids and rows as
a local ingest. The warehouse must be on storage every executor sees.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ..discover import TraceFile
from ..ingest import FileResult, IngestReport, _json_bytes, ingest_file, new_summarizer
from ..warehouse import Warehouse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"


def session(master: str | None = None, app_name: str = "tracedb") -> SparkSession:
    """A SparkSession on ``master`` (default local[*]); in local mode the
    Python workers are this interpreter, which has tracedb."""
    from pyspark.sql import SparkSession

    master = master or DEFAULT_MASTER
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.showConsoleProgress", "false"))
    if master.startswith("local"):
        # pyspark starts its Python workers with $PYSPARK_PYTHON, else python3.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # Marts are small: Spark's 200 shuffle partitions would be 200 tasks
        # per shuffle on a few cores.
        builder = builder.config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("FATAL")  # errors reach the caller as exceptions
    return spark


def _ingest_partition(warehouse: Warehouse, known_ids: frozenset[str], files: Iterator[TraceFile]) -> list[FileResult]:
    """On an executor: ingest_file for each file of the task (one), with a
    summarizer of its own, closed (its spill folder gone) at the end."""
    with new_summarizer(warehouse, threads=1) as summarizer:
        return [ingest_file(warehouse, tf, summarizer, known_ids) for tf in files]


def ingest(spark: SparkSession, warehouse: Warehouse | str | Path, files: list[TraceFile],
           on_result: Callable[[FileResult], None] | None = None,
           on_wait: Callable[[str], None] | None = None) -> IngestReport:
    """Ingest ``files`` on the executors of ``spark``; one catalog commit."""
    t0 = time.perf_counter()
    wh = Warehouse.of(warehouse)
    wh.create()
    report = IngestReport()
    with wh.ingesting(on_wait):
        known_ids, known_paths = wh.known()
        pending: list[TraceFile] = []
        for tf in files:
            key = (str(tf.path), tf.size_bytes, tf.mtime_ns)
            if key in known_paths:
                report.results.append(FileResult(path=str(tf.path), run=tf.run, rank=tf.rank, phase=tf.phase,
                                                 status="skipped", file_id=known_paths[key], bytes=tf.size_bytes))
            else:
                pending.append(tf)
        if pending:
            # The largest first, one partition each: a large trace last would
            # leave one executor working while the others idle.
            largest_first = sorted(pending, key=_json_bytes, reverse=True)
            rdd = spark.sparkContext.parallelize(largest_first, numSlices=len(largest_first))
            report.results += rdd.mapPartitions(lambda it: _ingest_partition(wh, known_ids, it)).collect()
            wh.register([r.row for r in report.results if r.row is not None], on_wait)
            report.stale_summaries = wh.catalog.committed_stale
    if on_result:
        for r in report.results:
            on_result(r)
    report.seconds = time.perf_counter() - t0
    return report
