"""Run the named views and macros of the library with common parameters.

``query(con, "hotspots", run="v2", kind="kernel", limit=20)`` filters a
view on its run / rank / phase / kind columns; a table macro gets its
parameters by name (``regressions(base := 'v1', target := 'v2')``, where
``run`` fills ``target``). With ``rank``, a view ``NAME_by_rank`` is used
when the library has one (``hotspots`` sums over ranks,
``hotspots_by_rank`` keeps them apart); with ``base``, a view
``NAME_compare`` (``latency --base bs1``: latency_compare). ``tags``
keeps the rows of runs that carry every tag (the ``run_tags`` view).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import duckdb

from . import critical_path
from .errors import QueryError, UnknownView
from .views import LAYER_SCHEMAS, META_SCHEMA

FILTER_COLUMNS = ("run", "rank", "phase", "kind")


@dataclass
class ViewInfo:
    name: str
    layer: str
    kind: str
    description: str
    params: dict[str, str]
    order_by: str | None
    default_kind: list[str]

    @property
    def relation(self) -> str:
        """Its schema-qualified name in the catalog (views.LAYER_SCHEMAS)."""
        return f"{LAYER_SCHEMAS[self.layer]}.{self.name}"


def list_views(con: duckdb.DuckDBPyConnection, layer: str | None = None) -> list[ViewInfo]:
    sql = f"SELECT name, layer, kind, description, params, order_by, default_kind FROM {META_SCHEMA}.tracedb_views"
    args: list = []
    if layer:
        sql += " WHERE layer = ?"
        args.append(layer)
    sql += " ORDER BY CASE layer WHEN 'marts' THEN 0 WHEN 'intermediate' THEN 1 ELSE 2 END, name"
    found = [
        ViewInfo(n, lay, k, d, json.loads(p) if p else {}, o, dk or [])
        for n, lay, k, d, p, o, dk in con.execute(sql, args).fetchall()
    ]
    if layer in (None, "marts"):
        found += [ViewInfo(n, "marts", "python", m.description, m.params, m.order_by, [])
                  for n, m in critical_path.MARTS.items()]
        found.sort(key=lambda v: (("marts", "intermediate", "staging").index(v.layer), v.name))
    return found


def view_columns(con: duckdb.DuckDBPyConnection, name: str) -> list[tuple[str, str | None, str | None]]:
    """(column, type, doc) of a view, macro or Python-computed mart."""
    if name in critical_path.MARTS:
        return [(c, t, doc) for c, (t, doc) in critical_path.MARTS[name].columns.items()]
    return con.execute(f"SELECT column_name, data_type, description FROM {META_SCHEMA}.tracedb_view_columns "
                       "WHERE view_name = ? ORDER BY position", [name]).fetchall()


def query(con: duckdb.DuckDBPyConnection, name: str, **params) -> duckdb.DuckDBPyRelation:
    """Run a mart: a view or macro of the library through `plans`, or one
    computed in Python (critical_path*: see tracedb/critical_path.py)."""
    if params.get("base") is not None and f"{name}_compare" in critical_path.MARTS:
        name = f"{name}_compare"
    if name not in critical_path.MARTS:
        *tries, last = plans(con, name, **params)
        for sql, args in tries:
            found = _relation(con, sql, args).materialize()  # its rows, computed once, held by the relation
            if found.shape[0]:
                return found
        return _relation(con, *last)
    return _python_mart(con, name, **params)


def _relation(con: duckdb.DuckDBPyConnection, sql: str, args: list) -> duckdb.DuckDBPyRelation:
    return con.sql(sql, params=args) if args else con.sql(sql)


def _python_mart(con: duckdb.DuckDBPyConnection, name: str, *, run=None, base=None, rank=None, phase=None,
                 kind=None, limit=None, tags=None, step=None, span=None, **extra) -> duckdb.DuckDBPyRelation:
    stray = [k for k, v in {"tag": tags, **extra}.items() if v is not None]
    if base is not None and "base" not in critical_path.MARTS[name].params:
        stray.insert(0, "base")
    if stray:
        raise QueryError(f"{name} takes no --{_option(stray[0])}")
    table = critical_path.compute(con, name, run=run, rank=rank, step=step, phase=phase, base=base, span=span)
    rel = con.from_arrow(table)
    if kind is not None:
        rel = rel.filter(duckdb.ColumnExpression("kind") == duckdb.ConstantExpression(kind))
    rel = rel.order(critical_path.MARTS[name].order_by)
    if limit is not None:
        rel = rel.limit(checked_limit(limit))
    return rel


def _columns(con: duckdb.DuckDBPyConnection, info: ViewInfo) -> list[str]:
    return [c for (c,) in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = ? AND schema_name = ? "
        "AND database_name = current_database() ORDER BY column_index", [info.name, LAYER_SCHEMAS[info.layer]]
    ).fetchall()]


@dataclass
class Resolved:
    """What a query asks of the library: the view or macro to run, the
    macro's arguments, and the column filters."""

    info: ViewInfo
    args: dict[str, object]  # macro parameter -> value, those given
    filters: dict[str, object]  # column -> value (None: no filter)


def resolve(views: dict[str, ViewInfo], name: str, *, run: str | None = None, base: str | None = None,
            rank: int | None = None, phase: str | None = None, kind: str | None = None,
            **extra: object) -> Resolved:
    """``name`` with ``base`` -> NAME_compare, with ``rank`` -> NAME_by_rank
    where the library has them; a macro's arguments (``run`` fills its
    ``target``) checked against its parameters. Shared by every engine."""
    if name not in views:
        raise UnknownView(name, sorted(v for v, info in views.items() if info.layer == "marts"))
    if base is not None and f"{name}_compare" in views:
        name = f"{name}_compare"
    if rank is not None and f"{name}_by_rank" in views:
        name = f"{name}_by_rank"
    info = views[name]
    filters: dict[str, object] = {"run": run, "rank": rank, "phase": phase, "kind": kind}
    if info.kind != "macro":
        stray = [k for k, v in {"base": base, **extra}.items() if v is not None]
        if stray:
            raise QueryError(f"{name} takes no --{_option(stray[0])}")
        return Resolved(info, {}, filters)
    given = {"base": base, **{k: v for k, v in extra.items() if v is not None}}
    if "target" in info.params:
        given["target"] = run
        filters["run"] = None
    unknown = [k for k, v in given.items() if v is not None and k not in info.params]
    if unknown:
        raise QueryError(f"{name} takes no --{_option(unknown[0])}")
    missing = [p for p in info.params if given.get(p) is None and "default" not in info.params[p]]
    if missing:
        opt = "run" if missing[0] == "target" else missing[0]
        raise QueryError(f"{name} needs --{_option(opt)} ({info.params[missing[0]]})")
    return Resolved(info, {p: given[p] for p in info.params if given.get(p) is not None}, filters)


def check_filters(name: str, filters: dict[str, object], columns: list[str]) -> None:
    for col, value in filters.items():
        if value is not None and col not in columns:
            raise QueryError(f"{name} has no {col} column, so --{col} does not apply")


def plans(con: duckdb.DuckDBPyConnection, name: str, *, run: str | None = None,
          base: str | None = None, rank: int | None = None, phase: str | None = None,
          kind: str | None = None, limit: int | None = None, tags: dict[str, str] | None = None,
          **extra: object) -> list[tuple[str, list]]:
    """The SQL and parameters that `query` runs: one statement; or, for a
    view with a default kind (``-- default kind: kernel, cpu_op``) asked
    for none, one per kind in that order and a last one for every kind:
    the answer is the first with rows (the last whatever it has). Each is
    the whole query with the kind filter, which reaches the view's
    sources, so a view computes one kind's rows (hotspots: its
    percentiles): asking first whether a kind has rows, then for them,
    computed the answer twice (hotspots over 1,000 rank files: 0.63-0.78 s
    to ask, 0.79-0.81 s to answer)."""
    views = {v.name: v for v in list_views(con)}
    r = resolve(views, name, run=run, base=base, rank=rank, phase=phase, kind=kind, **extra)
    info, filters, name = r.info, r.filters, r.info.name
    if info.kind == "python":
        raise QueryError(f"{name} is computed in Python, not SQL: run it with query()")
    params: list = list(r.args.values())
    if info.kind == "macro":
        source = f"{info.relation}({', '.join(f'{p} := ?' for p in r.args)})"
        columns = [d[0] for d in con.execute(f"SELECT * FROM {source} LIMIT 0", params).description]
    else:
        source = info.relation
        columns = _columns(con, info)
    check_filters(name, filters, columns)
    if tags and "run" not in columns:
        raise QueryError(f"{name} has no run column, so --tag does not apply")
    tagged, tag_values = [], []
    for key, value in sorted((tags or {}).items()):
        tagged.append('"run" IN (SELECT run FROM run_tags WHERE key = ? AND value = ?)')
        tag_values += [key, value]
    kinds: list[str | None] = [kind]
    if kind is None and info.default_kind and "kind" in columns and limit != 0:
        kinds = [*info.default_kind, None]
    out = []
    for k in kinds:
        where, values = _equalities({**filters, "kind": k})
        where += tagged
        values += tag_values
        sql = f"SELECT * FROM {source}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        if info.order_by:
            sql += f" ORDER BY {info.order_by}"
        if limit is not None:
            sql += f" LIMIT {checked_limit(limit)}"
        out.append((sql, params + values))
    return out


def checked_limit(limit: int) -> int:
    """``limit`` as the LIMIT of a query; a negative one is an error."""
    if limit < 0:
        raise QueryError("--limit must be 0 or more")
    return int(limit)


def _option(param: str) -> str:
    """The CLI option of a parameter: resolution_us -> resolution-us."""
    return param.replace("_", "-")


def _equalities(filters: dict[str, object]) -> tuple[list[str], list]:
    """``"col" = ?`` for each filter with a value, and those values."""
    given = {col: value for col, value in filters.items() if value is not None}
    return [f'"{col}" = ?' for col in given], list(given.values())
