"""``tracedb query NAME`` on Spark: the same view or macro of the library,
the same parameters, the same columns and rows, as a Spark DataFrame.

The rules that pick the view (``--base`` -> NAME_compare, ``--rank`` ->
NAME_by_rank), check the parameters and choose the default kind are
tracedb.query's, shared with DuckDB. A macro's parameters reach Spark as
named parameter markers, never in the SQL text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import sqlglot

from ..errors import QueryError
from ..query import ViewInfo, check_filters, checked_limit, resolve
from . import dialect
from .register import Registered, duckdb_semantics, library, register

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def view_infos(reg: Registered) -> dict[str, ViewInfo]:
    return {v.name: ViewInfo(v.name, v.layer, v.kind, v.description, v.params, v.order_by, v.default_kind)
            for v in reg.defs}


def order_sql(order_by: str) -> str:
    """A view's ``-- order by:`` (DuckDB) as a Spark ORDER BY list, with
    DuckDB's NULL placement spelled out."""
    tree = sqlglot.parse_one(f"SELECT * FROM t ORDER BY {order_by}", read="duckdb")
    return ", ".join(o.sql(dialect="spark") for o in tree.args["order"].expressions)


def query(spark: SparkSession, warehouse: str | Path, name: str, *, run: str | None = None,
          base: str | None = None, rank: int | None = None, phase: str | None = None,
          kind: str | None = None, limit: int | None = None, tags: dict[str, str] | None = None,
          registered: Registered | None = None, **extra: object) -> DataFrame:
    """Run a view of the library on Spark: ``query(spark, "wh", "hotspots",
    run="v2")``. ``registered`` (what ``register`` returned) saves
    registering the warehouse's views again."""
    from pyspark.sql import functions as F

    reg = registered or register(spark, warehouse, only=[n for n in (name, f"{name}_compare", f"{name}_by_rank",
                                                                    f"{name}_compare_by_rank")
                                                          if n in {v.name for v in library()}])
    r = resolve(view_infos(reg), name, run=run, base=base, rank=rank, phase=phase, kind=kind, **extra)
    info, filters, name = r.info, r.filters, r.info.name
    if name in reg.unsupported:
        raise QueryError(f"{name} cannot run on Spark: {reg.unsupported[name]}")
    with duckdb_semantics(spark):
        if info.kind == "macro":
            df = spark.sql(dialect.macro_sql(name, reg.macros, r.args), args=r.args)
        else:
            df = spark.table(name)
        check_filters(name, filters, df.columns)
        if tags and "run" not in df.columns:
            raise QueryError(f"{name} has no run column, so --tag does not apply")
        for key, value in sorted((tags or {}).items()):  # before the default kind: the kinds of the runs asked
            tagged = spark.table("run_tags").where((F.col("key") == F.lit(key)) & (F.col("value") == F.lit(value)))
            df = df.join(tagged.select("run").distinct(), on="run", how="left_semi")
        if kind is None and info.default_kind and "kind" in df.columns:
            scoped = df
            for col, value in filters.items():
                if value is not None and col != "kind":
                    scoped = scoped.where(F.col(col) == F.lit(value))
            present = {row[0] for row in scoped.select("kind").distinct().collect()}
            filters["kind"] = next((k for k in info.default_kind if k in present), None)
        for col, value in filters.items():
            if value is not None:
                df = df.where(F.col(col) == F.lit(value))
        if info.order_by or limit is not None:
            sql = "SELECT * FROM {src}"
            if info.order_by:
                sql += f" ORDER BY {order_sql(info.order_by)}"
            if limit is not None:
                sql += f" LIMIT {checked_limit(limit)}"
            df = spark.sql(sql, src=df)
    return df


def query_relation(spark: SparkSession, warehouse: str | Path, name: str, **params: object):
    """``query``'s result collected to the driver (a mart: small) as a
    DuckDB relation, for the output formats of ``tracedb query``."""
    import duckdb
    from pyspark.sql.types import DecimalType

    df = query(spark, warehouse, name, **params)
    # Spark divides decimals into decimals where DuckDB gives a DOUBLE: the
    # same numbers, printed as DuckDB's are.
    df = df.select(*[df[f.name].cast("double").alias(f.name)
                     if isinstance(f.dataType, DecimalType) and f.dataType.scale > 0 else df[f.name]
                     for f in df.schema.fields])
    return duckdb.from_arrow(df.toArrow())
