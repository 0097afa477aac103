"""Load the SQL view library in queries/: headers, dependencies, column docs.

One view or table macro per file; the file name is the object's name; the
folder is its layer (staging -> intermediate -> marts). A file starts with a
header comment::

    -- What the view answers, in a sentence or two.
    -- Grain: one row per run, phase, kind, name.
    -- requires: stg_kernels, stg_cpu_ops
    -- param base: the run to compare against        (table macros)
    -- order by: total_us DESC                       (how `query` sorts)
    -- default kind: kernel, cpu_op                   (`query` without --kind
                                                      takes the first present)
    -- materialize: per trace                         (computed once per trace
                                                      at ingest: summaries.py)

and documents each output column with a comment line right above it::

    -- Total time, microseconds.
    sum(dur_ns) / 1e3 AS total_us,

Files hold only ``CREATE OR REPLACE VIEW|MACRO``; they are re-applied on
every catalog build, in dependency order (a cycle is an error). The loader
refuses a view without a ``Grain:`` line, one whose ``requires:`` differs
from the views its SQL reads, and one that reads a view of a higher layer.

In the catalog each layer has its schema (:data:`LAYER_SCHEMAS`): the marts
beside the raw tables in ``main``, where clients look first, the staging and
intermediate views in schemas of their own, and the bookkeeping tables in
:data:`META_SCHEMA`. The files name no schema (they stay readable, and
summaries.py and Spark run them in one flat namespace); :func:`catalog_sql`
adds the schemas where the catalog creates them.
"""

from __future__ import annotations

import graphlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from typing import TYPE_CHECKING, Callable

import duckdb

from .errors import ViewError
from .sqltext import sql_literal as _quote

# The raw tables' Arrow schemas (pyarrow) are imported where they are read:
# loading the library's files needs DuckDB alone (`tracedb views`).
if TYPE_CHECKING:
    import pyarrow as pa

LAYERS = ("staging", "intermediate", "marts")

#: The catalog's schema of each layer's views.
LAYER_SCHEMAS = {"staging": "staging", "intermediate": "intermediate", "marts": "main"}
#: The catalog's bookkeeping: schema_version, catalog_info, the library's docs
#: (tracedb_views, tracedb_view_columns) and the copy of comm_patterns.csv.
META_SCHEMA = "tracedb_meta"
#: Relations the library reads that are not its views, by schema.
CATALOG_TABLES = {"events": "main", "flows": "main", "counters": "main", "traces": "main", "run_tags": "main",
                  "user_comm_patterns": META_SCHEMA}
#: Where ``tracedb sql``, the Python API and ``tracedb serve`` look up an
#: unqualified name (a file opened with DuckDB alone looks in main only).
SEARCH_PATH = ("main", "staging", "intermediate")

_TAG_RE = re.compile(r"^--\s*(requires|param\s+\w+|order by|default kind|materialize)\s*:\s*(.*)$",
                     re.IGNORECASE)
_CREATE_RE = re.compile(
    r"^\s*CREATE\s+OR\s+REPLACE\s+(VIEW|MACRO)\s+(\w+)", re.IGNORECASE | re.MULTILINE
)
_ALIAS_RE = re.compile(r"\bAS\s+\"?(\w+)\"?\s*,?\s*$", re.IGNORECASE)
_BARE_RE = re.compile(r"^\s*(?:\w+\.)?(\w+)\s*,?\s*$")
_GRAIN_RE = re.compile(r"^grain\s*:\s*\S", re.IGNORECASE)
# What is not a name in SQL text: comments, string literals, quoted names.
_NOT_NAMES_RE = re.compile(r"--[^\n]*|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_CTE_RE = re.compile(r"\b(\w+)\s+AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", re.IGNORECASE)
# A relation is read where FROM or JOIN names it unqualified (no view here
# joins with a comma); a column or alias that shares a view's name is not a
# read. Comments, literals and quoted names match as a whole, without "name".
_READ_RE = re.compile(_NOT_NAMES_RE.pattern + r"|(?P<read>\b(?:FROM|JOIN)\s+)(?P<name>[A-Za-z_]\w*)\b(?!\s*\.)",
                         re.IGNORECASE)


def set_search_path(con: duckdb.DuckDBPyConnection) -> None:
    """Make ``con`` find unqualified names in the schemas of :data:`SEARCH_PATH`
    that its catalog has (one an older tracedb made has main alone)."""
    have = {s for (s,) in con.execute(
        "SELECT schema_name FROM duckdb_schemas() WHERE database_name = current_database()").fetchall()}
    con.execute(f"SET search_path = {_quote(','.join(s for s in SEARCH_PATH if s in have))}")


@dataclass
class ViewDef:
    name: str
    layer: str
    kind: str  # "view" or "macro"
    path: Path
    sql: str
    description: str
    requires: list[str] = field(default_factory=list)
    params: dict[str, str] = field(default_factory=dict)
    order_by: str | None = None
    default_kind: list[str] = field(default_factory=list)
    column_docs: dict[str, str] = field(default_factory=dict)
    # Every row comes from one trace file: computed per trace at ingest and
    # read from summary files (``-- materialize: per trace``).
    per_trace: bool = False

    @property
    def schema(self) -> str:
        return LAYER_SCHEMAS[self.layer]

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.name}"


def parse_view_file(path: Path, layer: str) -> ViewDef:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    header: list[str] = []
    requires: list[str] = []
    params: dict[str, str] = {}
    order_by = None
    default_kind: list[str] = []
    per_trace = False
    body_start = 0
    for i, line in enumerate(lines):
        if not line.startswith("--"):
            body_start = i
            break
        m = _TAG_RE.match(line)
        if m:
            tag, value = m.group(1).lower(), m.group(2).strip()
            if tag == "requires":
                requires += [r.strip() for r in value.split(",") if r.strip()]
            elif tag == "order by":
                order_by = value
            elif tag == "default kind":
                default_kind = [k.strip() for k in value.split(",") if k.strip()]
            elif tag == "materialize":
                if value.lower() != "per trace":
                    raise ViewError(f"{path}: materialize: expected 'per trace', found {value!r}")
                per_trace = True
            else:
                params[tag.split()[1]] = value
        else:
            header.append(line[2:].strip())
    else:
        body_start = len(lines)
    m = _CREATE_RE.search(text)
    if not m:
        raise ViewError(f"{path}: expected CREATE OR REPLACE VIEW|MACRO {path.stem}")
    kind, name = m.group(1).lower(), m.group(2)
    if name != path.stem:
        raise ViewError(f"{path}: defines {name}, but the file name says {path.stem}")
    description = " ".join(h for h in header if h).strip()
    if not description:
        raise ViewError(f"{path}: missing header comment (what the view answers, its grain)")
    if not any(_GRAIN_RE.match(h) for h in header):
        raise ViewError(f"{path}: the header states no grain (a line '-- Grain: one row per ...')")
    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in lines[body_start:]:
        stripped = line.strip()
        if stripped.startswith("--"):
            pending.append(stripped[2:].strip())
            continue
        if pending and stripped:
            col = _ALIAS_RE.search(stripped) or _BARE_RE.match(stripped)
            if col:
                docs.setdefault(col.group(1), " ".join(pending))
        pending = []
    return ViewDef(name=name, layer=layer, kind=kind, path=path, sql=text,
                   description=description, requires=requires, params=params,
                   order_by=order_by, default_kind=default_kind, column_docs=docs,
                   per_trace=per_trace)


def load_view_files(root: Path) -> list[ViewDef]:
    """All view files under root, ordered so that dependencies come first.

    Each view must declare in ``requires:`` exactly the library views its SQL
    reads, and read none of a higher layer (staging < intermediate < marts)."""
    defs: dict[str, ViewDef] = {}
    for layer in LAYERS:
        d = root / layer
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.sql")):
            v = parse_view_file(path, layer)
            if v.name in defs:
                raise ViewError(f"{path}: {v.name} is also defined in {defs[v.name].path}")
            defs[v.name] = v
    for v in defs.values():
        _check_reads(v, defs)
    return _toposort(defs)


NOT_ON_SPARK = "not_on_spark.json"


def not_on_spark(root: Path) -> dict[str, str]:
    """View -> why it cannot run on Spark, as spark/dialect.py's generator
    found it for this library and wrote it into ``root``/not_on_spark.json
    (``spark.dialect.write_not_on_spark``; tests/test_docs.py keeps it current), so that
    listing the views does not translate the whole library."""
    return json.loads((root / NOT_ON_SPARK).read_text())


def reads(v: ViewDef, names: set[str]) -> set[str]:
    """The views of ``names`` that the SQL of ``v`` reads: the names after
    FROM or JOIN outside comments and string literals, less its own common
    table expressions and itself."""
    words = {m.group("name").lower() for m in _READ_RE.finditer(v.sql) if m.group("name")}
    return (words & names) - _ctes(v) - {v.name}


def _ctes(v: ViewDef) -> set[str]:
    """The names of the common table expressions of ``v`` (lower case)."""
    return {c.lower() for c in _CTE_RE.findall(_NOT_NAMES_RE.sub(" ", v.sql))}


def relation_schemas(defs: list[ViewDef]) -> dict[str, str]:
    """The catalog's schema of every relation the library reads, by name."""
    return {**CATALOG_TABLES, **{v.name: v.schema for v in defs}}


def catalog_sql(v: ViewDef, schemas: dict[str, str]) -> str:
    """The SQL of ``v`` as the catalog runs it: created in its layer's
    schema, and each relation of ``schemas`` (name -> schema) that it reads
    after FROM or JOIN named with its schema.

    DuckDB binds an unqualified name in a view first in the view's own
    schema, then on the search path of the connection that reads it (main of
    that connection's first database, not of the view's), and a qualified
    ``schema.name`` in the view's own database. So a staging view that read
    ``events`` unqualified would break where the catalog is attached under
    another name, and an intermediate view could not find a staging one."""
    ctes = _ctes(v)

    def one(m: re.Match[str]) -> str:
        name = m.group("name")
        if name is None or name.lower() in ctes or name.lower() not in schemas:
            return m.group(0)
        return f"{m.group('read')}{schemas[name.lower()]}.{name}"

    create = _CREATE_RE.search(v.sql)
    assert create is not None  # parse_view_file checked it
    head = v.sql[:create.start(2)] + f"{v.schema}." + v.sql[create.start(2):create.end()]
    return head + _READ_RE.sub(one, v.sql[create.end():])


def _check_reads(v: ViewDef, defs: dict[str, ViewDef]) -> None:
    for dep in v.requires:
        if dep not in defs:
            raise ViewError(f"{v.path}: requires unknown view {dep}")
    declared = set(v.requires)
    read = reads(v, set(defs))
    if read - declared:
        raise ViewError(f"{v.path}: reads {', '.join(sorted(read - declared))} without declaring it"
                        " in '-- requires:'")
    if declared - read:
        raise ViewError(f"{v.path}: requires {', '.join(sorted(declared - read))} but does not read it")
    for dep in sorted(declared):
        if LAYERS.index(defs[dep].layer) > LAYERS.index(v.layer):
            raise ViewError(f"{v.path}: {v.layer} view {v.name} reads {dep}, a view of the higher layer"
                            f" {defs[dep].layer}")


def _toposort(defs: dict[str, ViewDef]) -> list[ViewDef]:
    sorter = graphlib.TopologicalSorter({name: v.requires for name, v in defs.items()})
    try:
        return [defs[name] for name in sorter.static_order()]
    except graphlib.CycleError as e:
        raise ViewError("cycle in queries/: " + " -> ".join(reversed(e.args[1]))) from None


def _macro_columns(con: duckdb.DuckDBPyConnection, v: ViewDef) -> list[tuple[str, str]] | None:
    """(name, type) of a table macro's output, bound with NULL for each
    required parameter (those whose doc gives no default); None if that
    does not bind."""
    required = ", ".join("NULL" for doc in v.params.values() if "default" not in doc)
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM {v.qualified_name}({required})").fetchall()
    except duckdb.Error:
        return None
    return [(r[0], r[1]) for r in rows]


def _drop_misplaced(con: duckdb.DuckDBPyConnection, defs: list[ViewDef]) -> None:
    """Drop the library's views and macros found outside their layer's schema
    (a catalog built before the layers had schemas had them all in main), and
    whatever the staging and intermediate schemas hold that the library no
    longer defines (a view an older tracedb had, which may read what is gone)."""
    home = {v.name: v.schema for v in defs}
    owned = {schema for schema in LAYER_SCHEMAS.values() if schema != "main"}
    found = con.execute(
        "SELECT schema_name, view_name, 'VIEW' FROM duckdb_views() WHERE NOT internal AND database_name = "
        "current_database() UNION ALL SELECT DISTINCT schema_name, function_name, 'MACRO TABLE' FROM "
        "duckdb_functions() WHERE function_type = 'table_macro' AND database_name = current_database()"
    ).fetchall()
    for schema, name, kind in found:
        if (name in home and schema != home[name]) or (schema in owned and name not in home):
            con.execute(f"DROP {kind} {schema}.{name}")


# A view's name while create_views binds the views that read it over an
# empty table of its columns.
_ASIDE = "__bound"


def create_views(con: duckdb.DuckDBPyConnection, defs: list[ViewDef], sql: Callable[[ViewDef], str], *,
                 in_layers: bool, renamed: dict[str, str] | None = None) -> None:
    """Run ``sql(v)`` for each of ``defs`` (in dependency order): the view
    or macro ``v``, in its layer's schema when ``in_layers`` (else in main),
    named as ``renamed`` says (else ``v.name``).

    DuckDB binds a view as it creates it, and with it every view it reads,
    and theirs, again: the library's 81 views and macros took 0.50-0.55 s.
    Here each is bound once (0.21 s): a view, once created, steps aside for
    an empty table of its columns, over which the views that read it bind;
    at the end the tables go and the views take their names. A view's SQL
    is kept as text and bound again when it is read, so nothing of the
    stand-ins stays in it; its columns are the same (tests/test_catalog.py)."""
    renamed = renamed or {}
    aside: list[tuple[str, str, str]] = []  # (schema, name, final name)
    for v in defs:
        try:
            con.execute(sql(v))
        except duckdb.Error as e:
            raise ViewError(f"{v.path}: {e}") from None
        if v.kind == "view":
            schema = v.schema if in_layers else "main"
            con.execute(f"ALTER VIEW {schema}.{v.name} RENAME TO {v.name}{_ASIDE}")
            con.execute(f"CREATE TABLE {schema}.{v.name} AS SELECT * FROM {schema}.{v.name}{_ASIDE} LIMIT 0")
            aside.append((schema, v.name, renamed.get(v.name, v.name)))
    for schema, name, final in aside:
        con.execute(f"DROP TABLE {schema}.{name}")
        con.execute(f"ALTER VIEW {schema}.{name}{_ASIDE} RENAME TO {final}")


def apply_views(con: duckdb.DuckDBPyConnection, defs: list[ViewDef],
                common_docs: dict[str, str] | None = None) -> None:
    """Create every view and macro in its layer's schema, comment them, and
    record their docs (``tracedb_views``, ``tracedb_view_columns`` in
    :data:`META_SCHEMA`).

    ``common_docs`` documents the key columns every layer shares (run, rank,
    phase, file_id, ...) where a view does not say more itself. A column a
    view passes through undocumented takes the doc of the same column in a
    view it requires."""
    common_docs = common_docs or {}
    applied: dict[str, dict[str, str]] = {}
    schemas = relation_schemas(defs)
    for schema in (*LAYER_SCHEMAS.values(), META_SCHEMA):
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    _drop_misplaced(con, defs)
    con.execute(
        f"CREATE OR REPLACE TABLE {META_SCHEMA}.tracedb_views (name VARCHAR, layer VARCHAR, kind VARCHAR,"
        " description VARCHAR, params JSON, order_by VARCHAR, default_kind VARCHAR[])"
    )
    con.execute(
        f"CREATE OR REPLACE TABLE {META_SCHEMA}.tracedb_view_columns (view_name VARCHAR, column_name VARCHAR,"
        " position INTEGER, data_type VARCHAR, description VARCHAR)"
    )
    create_views(con, defs, lambda v: catalog_sql(v, schemas), in_layers=True)
    # Every view's columns in one query, not one per view.
    view_columns: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for schema, name, col, typ in con.execute(
        "SELECT schema_name, table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE database_name = current_database() ORDER BY schema_name, table_name, column_index"
    ).fetchall():
        view_columns.setdefault((schema, name), []).append((col, typ))
    view_rows: list[list] = []
    column_rows: list[list] = []
    for v in defs:
        docs = {**common_docs}
        for dep in reversed(v.requires):
            docs.update(applied.get(dep, {}))
        docs.update(v.column_docs)
        applied[v.name] = docs
        if v.kind == "view":
            con.execute(f"COMMENT ON VIEW {v.qualified_name} IS {_quote(v.description)}")
            cols = view_columns.get((v.schema, v.name), [])
            for pos, (col, typ) in enumerate(cols):
                doc = docs.get(col)
                if doc:
                    con.execute(f'COMMENT ON COLUMN {v.qualified_name}."{col}" IS {_quote(doc)}')
                column_rows.append([v.name, col, pos, typ, doc])
        else:
            con.execute(f"COMMENT ON MACRO TABLE {v.qualified_name} IS {_quote(v.description)}")
            cols = _macro_columns(con, v) or [(col, None) for col in v.column_docs]
            column_rows += [[v.name, col, pos, typ, docs.get(col)] for pos, (col, typ) in enumerate(cols)]
        view_rows.append([v.name, v.layer, v.kind, v.description, json.dumps(v.params), v.order_by,
                          v.default_kind])
    _insert(con, f"{META_SCHEMA}.tracedb_views", view_rows)
    _insert(con, f"{META_SCHEMA}.tracedb_view_columns", column_rows)


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[list]) -> None:
    """All ``rows`` at once, as an Arrow table: one INSERT per row costs a
    millisecond, and one INSERT of the library's 4,000 values as parameters
    took 90 ms to bind."""
    import pyarrow as pa

    if rows:
        con.register("tracedb_rows", pa.table({f"c{i}": list(col) for i, col in enumerate(zip(*rows))}))
        try:
            con.execute(f"INSERT INTO {table} SELECT * FROM tracedb_rows")
        finally:
            con.unregister("tracedb_rows")


# -- raw views and the tables the library reads ------------------------------


def _duck_type(t: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_int64(t):
        return "BIGINT"
    if pa.types.is_float64(t):
        return "DOUBLE"
    if pa.types.is_string(t):
        return "VARCHAR"
    if pa.types.is_list(t):
        return _duck_type(t.value_type) + "[]"
    raise TypeError(t)


def raw_columns(table: str) -> list[tuple[str, str]]:
    """(name, DuckDB type) of a raw view, in order."""
    cols = [("run", "VARCHAR"), ("rank", "BIGINT"), ("phase", "VARCHAR"), ("file_id", "VARCHAR")]
    from .schema import SCHEMAS

    for f in SCHEMAS[table]:
        cols.append((f.name, "JSON" if f.name == "args" else _duck_type(f.type)))
        if table == "events" and f.name == "dur_ns":
            cols.append(("self_ns", "BIGINT"))
    return cols


def empty_select(cols: list[tuple[str, str]]) -> str:
    """A SELECT of no rows with these (name, type) columns: a relation over
    no files."""
    return "SELECT " + ", ".join(f'CAST(NULL AS {t}) AS "{n}"' for n, t in cols) + " LIMIT 0"


# read_parquet's options for files under the warehouse's Hive partitions
# (Warehouse.partition): run, rank and phase come from each file's path, so a
# filter on them drops the other files unopened (1,000 rank files' summaries
# filtered to no run: 13 ms, against 107 ms opening each to read its
# statistics). Run and phase are names discover made safe as partition values.
HIVE_OPTIONS = "hive_partitioning = true, hive_types = {'run': VARCHAR, 'rank': BIGINT, 'phase': VARCHAR}"


def raw_view_sql(table: str, files: list[str], partition: tuple[str, int, str] | None = None,
                 file_id: str | None = None) -> str:
    """The raw view ``table`` over Parquet files: hive partitions give run,
    rank and phase, or ``partition`` does (one trace's files, anywhere);
    ``file_id``, with a partition, stands for the files' own."""
    cols = raw_columns(table)
    if not files:
        return f"CREATE OR REPLACE VIEW {table} AS {empty_select(cols)}"
    given: dict[str, str] = {}
    if partition is not None:
        run, rank, phase = partition
        given = {"run": _quote(run), "rank": f"CAST({int(rank)} AS BIGINT)", "phase": _quote(phase)}
        if file_id is not None:
            given["file_id"] = _quote(file_id)
    exprs = ", ".join(f"{given[n]} AS {n}" if n in given else f"CAST({n} AS JSON) AS {n}" if t == "JSON" else n
                      for n, t in cols)
    file_list = ", ".join(_quote(f) for f in files)
    if partition is not None:
        return f"CREATE OR REPLACE VIEW {table} AS SELECT {exprs} FROM read_parquet([{file_list}])"
    return f"CREATE OR REPLACE VIEW {table} AS SELECT {exprs} FROM read_parquet([{file_list}], {HIVE_OPTIONS})"


COMM_SOURCES = ("kernel", "annotation", "cpu_op")


def load_comm_patterns(con: duckdb.DuckDBPyConnection, path: Path, schema: str = "main") -> None:
    """Copy the user's communication patterns (``<warehouse>/comm_patterns.csv``:
    source, pattern, library, collective; first matching row wins) into the
    table ``user_comm_patterns`` of ``schema``, which replaces the defaults of the
    ``comm_patterns`` view when it has rows. Without the file it is empty."""
    table = f"{schema}.user_comm_patterns"
    con.execute(
        f"CREATE OR REPLACE TABLE {table} (priority BIGINT, source VARCHAR,"
        " pattern VARCHAR, library VARCHAR, collective VARCHAR)"
    )
    if not path.exists():
        return
    try:
        con.execute(
            f"INSERT INTO {table} SELECT row_number() OVER (), lower(trim(source)),"
            " pattern, library, nullif(trim(collective), '')"
            " FROM read_csv(?, header = true, all_varchar = true)",
            [str(path)],
        )
        bad = con.execute(
            f"SELECT source, pattern FROM {table}"
            " WHERE NOT coalesce(list_contains(?, source), false) OR coalesce(pattern, '') = '' LIMIT 1",
            [list(COMM_SOURCES)],
        ).fetchone()
        con.execute(f"SELECT count(*) FROM {table} WHERE regexp_matches('', pattern)")
    except duckdb.Error as e:
        raise ViewError(f"{path}: {str(e).splitlines()[0]}") from None
    if bad:
        raise ViewError(
            f"{path}: source {bad[0]!r}, pattern {bad[1]!r}: source must be one of "
            f"{', '.join(COMM_SOURCES)} and the pattern not empty"
        )
