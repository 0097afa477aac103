"""``tracedb serve``: the catalog over the PostgreSQL wire protocol, read-only.

BI tools and drivers that speak PostgreSQL (psql, psycopg, SQLAlchemy's
``postgresql`` dialect, JDBC, Grafana, Superset, Metabase, DBeaver) connect
to a :class:`Server`; every statement runs in DuckDB against the views of the
catalog, which read the warehouse's Parquet files.

Usage::

    server = Server(warehouse / "tracedb.duckdb", warehouse, ServeConfig(port=5433))
    server.serve_forever()          # or start() ... stop() from a program

(or ``tracedb.open(warehouse).serve(ServeConfig(...))``).

The package, one concern a module:

- :mod:`~tracedb.serve.config`: :class:`ServeConfig` and its limits;
- :mod:`~tracedb.serve.wire`: the protocol codec (messages, values, SCRAM);
- :mod:`~tracedb.serve.lexer`: a linear SQL lexer (literals, comments, statements);
- :mod:`~tracedb.serve.pgcompat`: PostgreSQL compatibility rewrites, macros and relations;
- :mod:`~tracedb.serve.gate`: the statement gate on DuckDB's parser;
- :mod:`~tracedb.serve.sandbox`: the private read-only catalog, DuckDB's
  file sandbox, Landlock and the redaction of host paths;
- :mod:`~tracedb.serve.intercepts`: statements the server answers itself;
- :mod:`~tracedb.serve.session`: one connection; :mod:`~tracedb.serve.server`: the listener.

docs/serving.md says which layer stops what.
"""

from tracedb.serve.config import PG_VERSION, ServeConfig, ServeError
from tracedb.serve.sandbox import open_catalog
from tracedb.serve.server import Server

__all__ = ["PG_VERSION", "ServeConfig", "ServeError", "Server", "open_catalog"]
