"""Render query results (DuckDB relations) as a text table, CSV, JSON or Parquet."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import date, datetime
from decimal import Decimal
from typing import IO, Any

import duckdb

FORMATS = ("table", "csv", "json", "parquet")
_TABLE_CELL_MAX = 70


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v != 0 and abs(v) < 0.001:
            return f"{v:.3g}"
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    s = str(v)
    return s if len(s) <= _TABLE_CELL_MAX else s[: _TABLE_CELL_MAX - 1] + "…"


def to_table(columns: list[str], rows: list[tuple]) -> str:
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [
        all(isinstance(r[i], (int, float, Decimal)) or r[i] is None for r in rows) and bool(rows)
        for i in range(len(columns))
    ]

    def fmt(row: list[str]) -> str:
        return "  ".join(
            c.rjust(widths[i]) if numeric[i] else c.ljust(widths[i]) for i, c in enumerate(row)
        ).rstrip()

    lines = [fmt(list(columns)), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in cells]
    return "\n".join(lines) + "\n"


def _json_value(v: Any) -> Any:
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return v


def write(rel: duckdb.DuckDBPyRelation, fmt: str, out: IO[str], path: str | None = None) -> None:
    """Write a relation to ``out`` in ``fmt`` (parquet goes to ``path``)."""
    if fmt == "parquet":
        if not path:
            raise ValueError("--format parquet needs --output FILE")
        rel.write_parquet(path)
        return
    columns = list(rel.columns)
    rows = rel.fetchall()
    if fmt == "table":
        out.write(to_table(columns, rows))
    elif fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for row in rows:
            w.writerow(["" if v is None else v for v in row])
        out.write(buf.getvalue())
    elif fmt == "json":
        json.dump([{c: _json_value(v) for c, v in zip(columns, row)} for row in rows],
                  out, ensure_ascii=False, indent=1)
        out.write("\n")
    else:
        raise ValueError(f"unknown format {fmt!r}")
