"""tracedb on Apache Spark: the warehouse's Parquet and the view library as
Spark temp views (``register``), the marts as DataFrames (``query``), and
ingest fanned out over a cluster's executors (``ingest``).

    from tracedb.spark import register, query
    query(spark, "wh", "hotspots", run="v2").show()

Needs the ``spark`` extra (``pip install 'tracedb[spark]'``) and a Java
runtime; the SQL is generated from queries/ by dialect.py. pyspark itself is
imported by the functions that use it.
"""

from __future__ import annotations

from .query import query
from .register import Registered, register

__all__ = ["Registered", "query", "register"]
