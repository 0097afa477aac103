"""The view library in queries/ (DuckDB's dialect) as Spark SQL (or Trino),
generated with sqlglot: one source of truth, never a second library.

sqlglot transpiles most of it; what it cannot, this module maps on the
syntax tree before generating:

- ``quantile_cont(x, q)`` -> ``percentile(x, q)`` (Spark's linear
  interpolation, as DuckDB's);
- ``arg_max(v, (a, b))`` / ``arg_min``: the tuple becomes a struct (Trino:
  a ROW), ordered field by field as DuckDB orders the tuple;
- ``GROUP BY ALL`` -> the non-aggregate columns of the select list;
- the JSON type -> text (Spark's JSON functions read strings);
- table macros (``CREATE MACRO f(p, q := 1) AS TABLE ...``): Spark has no
  table macro a temp view can stand for, so a macro is expanded at query
  time: its parameters become Spark named parameter markers (``:p``,
  values passed apart from the SQL text) and a macro it calls
  (``int_latency(span := span)``) is inlined as a subquery.

The per-trace views (``-- materialize: per trace``) are not translated for
queries: register.py reads their summary Parquet instead. A view that
sqlglot cannot express for Spark, or that requires one, is listed by
``unsupported`` with the reason.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from ..catalog import resource_dir
from ..views import NOT_ON_SPARK, ViewDef, load_view_files

DIALECTS = ("spark", "trino")
_MACRO_RE = re.compile(r"CREATE\s+OR\s+REPLACE\s+MACRO\s+(\w+)\s*\((.*?)\)\s*AS\s+TABLE\b", re.IGNORECASE | re.DOTALL)


def library() -> list[ViewDef]:
    """The view library, in dependency order."""
    return load_view_files(resource_dir("queries"))


class Untranslatable(Exception):
    """A view the target dialect cannot express; the message says why."""


@dataclass
class Macro:
    name: str
    params: list[str]
    defaults: dict[str, exp.Expression] = field(default_factory=dict)
    body: exp.Expression | None = None


def _split_params(text: str) -> list[str]:
    """``base, span := 'x,y', alpha := 0.001`` -> its three parameters
    (commas inside quotes or parentheses do not split)."""
    parts, depth, quote, cur = [], 0, False, []
    for ch in text:
        if ch == "'":
            quote = not quote
        elif not quote and ch in "([":
            depth += 1
        elif not quote and ch in ")]":
            depth -= 1
        elif not quote and depth == 0 and ch == ",":
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


def parse_macro(v: ViewDef) -> Macro:
    m = _MACRO_RE.search(v.sql)
    if not m:
        raise Untranslatable(f"{v.path}: not a table macro sqlglot can read")
    macro = Macro(m.group(1), [])
    for part in _split_params(m.group(2)):
        name, _, default = part.partition(":=")
        name = name.strip()
        macro.params.append(name)
        if default.strip():
            macro.defaults[name] = sqlglot.parse_one(default.strip(), read="duckdb")
    body = v.sql[m.end():].strip().rstrip(";")
    macro.body = sqlglot.parse_one(body, read="duckdb")
    return macro


def _view_body(v: ViewDef) -> exp.Expression:
    tree = sqlglot.parse_one(v.sql, read="duckdb")
    if not isinstance(tree, exp.Create) or not isinstance(tree.expression, exp.Query):
        raise Untranslatable(f"{v.path}: not a CREATE VIEW sqlglot can read")
    return tree.expression


# -- what sqlglot does not map ------------------------------------------------


def _group_by_all(select: exp.Select) -> None:
    group = select.args.get("group")
    if not group or not group.args.get("all"):
        return
    keys = []
    for e in select.expressions:
        inner = e.this if isinstance(e, exp.Alias) else e
        if not inner.find(exp.AggFunc):
            keys.append(inner.copy())
    select.set("group", exp.Group(expressions=keys))


def _map_node(node: exp.Expression, dialect: str) -> exp.Expression:
    if isinstance(node, exp.Select):
        _group_by_all(node)
    if isinstance(node, exp.PercentileCont) and node.expression is not None:
        args = [node.this, node.expression]
        if dialect == "spark":
            return exp.Anonymous(this="percentile", expressions=[a.copy() for a in args])
        return exp.Anonymous(this="approx_percentile", expressions=[a.copy() for a in args])
    if isinstance(node, (exp.ArgMax, exp.ArgMin)) and isinstance(node.expression, exp.Tuple) and dialect == "trino":
        node.set("expression", exp.Anonymous(this="ROW", expressions=[e.copy() for e in node.expression.expressions]))
    elif isinstance(node, (exp.ArgMax, exp.ArgMin)) and isinstance(node.expression, exp.Tuple):
        fields = [exp.PropertyEQ(this=exp.to_identifier(f"k{i}"), expression=e.copy())
                  for i, e in enumerate(node.expression.expressions)]
        node.set("expression", exp.Struct(expressions=fields))
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.JSON:
        return exp.DataType.build("STRING")  # JSON is text to Spark: get_json_object reads it
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)
    return node


def _mapped(tree: exp.Expression, dialect: str) -> exp.Expression:
    return tree.copy().transform(lambda n: _map_node(n, dialect))


def generate(tree: exp.Expression, dialect: str) -> str:
    """SQL text of a DuckDB tree in ``dialect``; Untranslatable when sqlglot
    cannot express a part of it."""
    for join in tree.find_all(exp.Join):
        if (join.args.get("method") or "").upper() == "ASOF":
            raise Untranslatable(f"ASOF JOIN (nearest preceding row): {dialect} SQL has no such join")
    for spec in tree.find_all(exp.WindowSpec):
        for bound in (spec.args.get("start"), spec.args.get("end")):
            if isinstance(bound, exp.Expression) and not isinstance(bound, exp.Literal):
                raise Untranslatable(f"a window frame bound computed from a parameter: {dialect} SQL takes a number")
    for table in tree.find_all(exp.Table):
        if isinstance(table.this, exp.Anonymous) and table.this.name.lower() == "json_each":
            raise Untranslatable(f"json_each (a JSON object's keys as rows): {dialect} SQL has no such table function")
    try:
        return _mapped(tree, dialect).sql(dialect=dialect, unsupported_level=sqlglot.ErrorLevel.RAISE,
                                          comments=False)
    except SqlglotError as e:
        raise Untranslatable(str(e).splitlines()[0]) from None


def view_sql(v: ViewDef, dialect: str = "spark") -> str:
    """The SELECT of a view of the library, in ``dialect``."""
    try:
        return generate(_view_body(v), dialect)
    except SqlglotError as e:
        raise Untranslatable(str(e).splitlines()[0]) from None


# -- table macros: expanded at query time -------------------------------------


def _table_call(table: exp.Expression, macros: dict[str, Macro]) -> tuple[str, dict[str, exp.Expression]] | None:
    """``int_latency(span := x)`` in a FROM: (macro, named arguments)."""
    fn = table.this if isinstance(table, exp.Table) else None
    if not isinstance(fn, exp.Anonymous) or fn.name not in macros:
        return None
    args: dict[str, exp.Expression] = {}
    params = macros[fn.name].params
    for i, a in enumerate(fn.expressions):
        if isinstance(a, (exp.PropertyEQ, exp.Kwarg, exp.EQ)):
            args[a.this.name] = a.expression
        else:
            args[params[i]] = a
    return fn.name, args


def expand(name: str, macros: dict[str, Macro], bound: dict[str, exp.Expression]) -> exp.Expression:
    """The body of macro ``name`` with each parameter replaced by
    ``bound[param]`` (else its default), and each macro it calls inlined."""
    macro = macros[name]
    values = {p: bound[p] if p in bound else macro.defaults.get(p, exp.Null()) for p in macro.params}
    assert macro.body is not None

    def substitute(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name in values:
            return values[node.name].copy()
        if isinstance(node, exp.Table):
            call = _table_call(node, macros)
            if call:
                inner_args = {k: v.transform(substitute) for k, v in call[1].items()}
                sub = expand(call[0], macros, inner_args)
                return exp.Subquery(this=sub, alias=exp.TableAlias(this=exp.to_identifier(node.alias or call[0])))
        return node

    return macro.body.copy().transform(substitute)


def macro_sql(name: str, macros: dict[str, Macro], given: dict[str, object], dialect: str = "spark") -> str:
    """Spark SQL of macro ``name``: each parameter in ``given`` is a named
    marker ``:param`` (its value goes to spark.sql's args, never into the
    text); the others take their defaults."""
    bound: dict[str, exp.Expression] = {p: exp.Placeholder(this=p) for p in given}
    return generate(expand(name, macros, bound), dialect)


# -- the library in a dialect --------------------------------------------------


def translate(defs: list[ViewDef], dialect: str = "spark") -> tuple[dict[str, str], dict[str, str]]:
    """(view -> SELECT in ``dialect``, view -> why it cannot be expressed).
    Macros are checked with their parameters as markers; a view requiring
    one that cannot be expressed cannot be either."""
    macros = {}
    for v in defs:
        if v.kind == "macro":
            try:
                macros[v.name] = parse_macro(v)
            except (Untranslatable, SqlglotError):
                pass
    sql: dict[str, str] = {}
    why: dict[str, str] = {}
    for v in defs:
        missing = [d for d in v.requires if d in why]
        if missing:
            why[v.name] = f"requires {missing[0]}, which cannot be expressed"
            continue
        try:
            if v.kind == "macro":
                if v.name not in macros:
                    raise Untranslatable("sqlglot cannot read the macro")
                sql[v.name] = macro_sql(v.name, macros, {p: None for p in macros[v.name].params}, dialect)
            else:
                sql[v.name] = view_sql(v, dialect)
        except Untranslatable as e:
            why[v.name] = str(e)
    return sql, why


def macros_of(defs: list[ViewDef]) -> dict[str, Macro]:
    return {v.name: parse_macro(v) for v in defs if v.kind == "macro"}


def export(defs: list[ViewDef], out_dir, dialect: str = "spark") -> tuple[list, dict[str, str]]:
    """Write the library in ``dialect`` to ``out_dir``: one file per view
    (``NN_name.sql``, numbered in dependency order: run them in that order),
    a macro as a query with named parameter markers (``:base``). Returns the
    files written and what could not be expressed, with why."""
    from pathlib import Path

    if dialect not in DIALECTS:
        raise ValueError(f"dialect must be one of {', '.join(DIALECTS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sql, why = translate(defs, dialect)
    written = []
    for i, v in enumerate(defs, start=1):
        if v.name not in sql:
            continue
        header = [f"-- {line}" for line in _wrap(v.description)]
        if v.per_trace:
            header.append(f"-- tracedb reads this view from <warehouse>/summaries/{v.name}/ (Parquet, computed "
                          "at ingest); this SQL computes the same from the events.")
        if v.kind == "macro":
            header.append("-- A table macro: run it as a query; its parameters are named markers "
                          + ", ".join(f":{p} ({doc})" for p, doc in v.params.items()) + ".")
            text = "\n".join(header) + "\n" + sql[v.name] + ";\n"
        else:
            text = "\n".join(header) + f"\nCREATE OR REPLACE VIEW {v.name} AS\n{sql[v.name]};\n"
        path = out / f"{i:02d}_{v.name}.sql"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written, why


def _wrap(text: str, width: int = 76) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width) or [""]


def write_not_on_spark(check: bool = False) -> bool:
    """Write queries/not_on_spark.json (what ``translate`` refuses, and why),
    or with ``check`` only say whether the file says that now."""
    path = resource_dir("queries") / NOT_ON_SPARK
    text = json.dumps(translate(library(), "spark")[1], indent=2, sort_keys=True) + "\n"
    if check:
        return path.is_file() and path.read_text() == text
    path.write_text(text)
    return True

