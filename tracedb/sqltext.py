"""SQL text made from values: the one place a string is quoted for DuckDB.

Statements take values as parameters wherever DuckDB allows; a literal is
for the places it does not (DDL: ``CREATE VIEW ... read_parquet([...])``,
``COMMENT ON``, ``COPY ... TO``).
"""

from __future__ import annotations

import os


def sql_literal(value: str | os.PathLike) -> str:
    """A SQL string literal of ``value``: ``it's`` -> ``'it''s'``."""
    return "'" + os.fspath(value).replace("'", "''") + "'"


def sql_list(values) -> str:
    """A SQL list of string literals: ``['a', 'b']``."""
    return "[" + ", ".join(sql_literal(v) for v in values) + "]"
