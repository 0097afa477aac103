"""Temp views on a SparkSession over a warehouse: the tables read straight
from the Hive-partitioned Parquet, and every view of the library.

Which files exist is the catalog's word, as for DuckDB: the driver reads the
``traces`` rows of the catalog file (read-only) and hands Spark exactly the
files they list, so a trace not committed is not seen and nothing in
``.staging`` is ever read. run / rank / phase come from the partition
folders (``basePath``), so a filter on them prunes files.

The per-trace views (collectives' ops, step sums, ...) read their summary
Parquet when every trace's summaries are current, as the DuckDB catalog
does; otherwise their own SQL over the events.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import duckdb

from ..views import ViewDef, load_comm_patterns, raw_columns
from ..warehouse import SUMMARY_DIR, TABLES, Warehouse
from . import dialect
from .dialect import library

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# DuckDB's semantics where Spark's ANSI mode differs: an invalid cast or a
# division by zero gives NULL, not an error. Set while views are analyzed
# (a temp view keeps the settings it was made under).
_SESSION_CONF = {"spark.sql.ansi.enabled": "false", "spark.sql.legacy.storeAnalyzedPlanForView": "true"}


@dataclass
class Registered:
    """What ``register`` made: the library's views and macros, and those it
    could not express for Spark, with why."""

    warehouse: Warehouse
    defs: list[ViewDef]
    views: list[str] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    macros: dict[str, dialect.Macro] = field(default_factory=dict)


@contextmanager
def duckdb_semantics(spark: SparkSession) -> Iterator[None]:
    old = {k: spark.conf.get(k, None) for k in _SESSION_CONF}
    for k, v in _SESSION_CONF.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def _spark_type(duck: str) -> str:
    if duck.endswith("[]"):
        return f"ARRAY<{_spark_type(duck[:-2])}>"
    return {"VARCHAR": "STRING", "JSON": "STRING"}.get(duck, duck)


def _schema(table: str) -> str:
    """The DDL schema of a raw table's files plus its partition columns."""
    return ", ".join(f"`{n}` {_spark_type(t)}" for n, t in raw_columns(table))


def _catalog_rows(warehouse: Warehouse):
    """The traces table (Arrow) and the ok rows' files, summaries and
    summaries fingerprint, read from the catalog file."""
    con = warehouse.catalog.connect_readonly()
    try:
        cols = con.execute("SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = 'traces' "
                           "ORDER BY column_index").fetchall()
        # JSON as text, as Spark reads JSON.
        select = ", ".join(f'CAST("{c}" AS VARCHAR) AS "{c}"' if t == "JSON" else f'"{c}"' for c, t in cols)
        table = con.sql(f"SELECT {select} FROM traces ORDER BY run, rank, phase, file_id").to_arrow_table()
        ok = con.execute(
            "SELECT files, summaries, summaries_fingerprint FROM traces WHERE status = 'ok' "
            "ORDER BY run, rank, phase, file_id").fetchall()
    finally:
        con.close()
    return table, ok


def _small(spark: SparkSession, sql: str, warehouse: Warehouse) -> DataFrame:
    """A small table the driver computes with DuckDB (comm patterns, tags)."""
    from .. import tags

    con = duckdb.connect()
    try:
        load_comm_patterns(con, warehouse.comm_patterns)
        tags.bind(con, warehouse)
        table = con.sql(sql).to_arrow_table()
    finally:
        con.close()
    return _frame(spark, table)


def _frame(spark: SparkSession, table) -> DataFrame:
    """A DataFrame of a small Arrow table (from the driver)."""
    import pyarrow as pa

    def t(typ) -> str:
        if pa.types.is_integer(typ):
            return "BIGINT"
        if pa.types.is_floating(typ):
            return "DOUBLE"
        if pa.types.is_timestamp(typ):
            return "TIMESTAMP"
        return "STRING"

    return spark.createDataFrame(table, schema=", ".join(f"`{f.name}` {t(f.type)}" for f in table.schema))


def _parquet(spark: SparkSession, base: str, files: list[str], schema: str) -> DataFrame:
    reader = spark.read.schema(schema).option("basePath", base)
    if not files:
        return spark.createDataFrame([], schema)
    return reader.parquet(*files)


def register(spark: SparkSession, warehouse: Warehouse | str | Path, only: list[str] | None = None) -> Registered:
    """Temp views for ``traces``, ``events``, ``flows``, ``counters``, the
    per-trace summaries and every view of the library (or of ``only`` and
    the views they require: Spark analyzes each view as it is made, seconds
    for the whole library); returns what was registered and what could
    not be."""
    from pyspark.errors import AnalysisException

    from .. import summaries

    warehouse = Warehouse.of(warehouse)
    traces, ok = _catalog_rows(warehouse)
    defs = library()
    reg = Registered(warehouse, defs)
    with duckdb_semantics(spark):
        _frame(spark, traces).createOrReplaceTempView("traces")
        for table in TABLES:
            files = [warehouse.location(json.loads(f or "{}")[table]) for f, _, _ in ok
                     if table in json.loads(f or "{}")]
            df = _parquet(spark, warehouse.location(table), files, _schema(table))
            df.select(*[n for n, _ in raw_columns(table)]).createOrReplaceTempView(table)
        _small(spark, "SELECT priority, source, pattern, library, collective FROM user_comm_patterns",
               warehouse).createOrReplaceTempView("user_comm_patterns")
        _small(spark, "SELECT run, key, value FROM run_tags", warehouse).createOrReplaceTempView("run_tags")
        summary_views = _summaries(spark, warehouse, defs, ok)
        sql, reg.unsupported = dialect.translate(defs, "spark")
        reg.macros = {name: m for name, m in dialect.macros_of(defs).items() if name not in reg.unsupported}
        wanted = {v.name for v in summaries.requirements(defs, only)} if only is not None else None
        for v in defs:
            if v.kind == "macro" or v.name in reg.unsupported or (wanted is not None and v.name not in wanted):
                continue
            missing = [d for d in v.requires if d in reg.unsupported]
            if missing:
                reg.unsupported[v.name] = f"requires {missing[0]}, which cannot be expressed"
                continue
            if v.name in summary_views:
                summary_views[v.name].createOrReplaceTempView(v.name)
            else:
                try:
                    spark.sql(f"CREATE OR REPLACE TEMP VIEW `{v.name}` AS {sql[v.name]}")
                except AnalysisException as e:
                    reg.unsupported[v.name] = "Spark: " + str(e).splitlines()[0]
                    continue
            reg.views.append(v.name)
    return reg


def _summaries(spark: SparkSession, warehouse: Warehouse, defs: list[ViewDef], ok: list) -> dict[str, DataFrame]:
    """view -> its summary Parquet, when every trace has current summaries
    (else {}: the views compute from the events, as in the DuckDB catalog)."""
    from .. import summaries

    views = summaries.per_trace(defs)
    current = summaries.fingerprint(defs, warehouse)
    listed = [json.loads(s or "{}") for _, s, made_by in ok if made_by == current]
    if not ok or len(listed) != len(ok) or any(v.name not in s for s in listed for v in views):
        return {}
    out = {}
    for v in views:
        files = [warehouse.location(s[v.name]) for s in listed if s[v.name] is not None]  # None: no rows
        if files:  # else no trace has rows of it: its SQL over the events, which finds none
            out[v.name] = spark.read.option("basePath", warehouse.location(f"{SUMMARY_DIR}/{v.name}")).parquet(*files)
    return out

