"""The statement gate: what DuckDB may run for a client, decided by DuckDB's own parser.

:func:`checked` takes one statement as DuckDB split it
(``extract_statements``) and returns the statement object to execute, or
raises :class:`StatementError`. The caller executes exactly that object, so
the text checked is the text run; no rewrite happens after the check.

Allowed:

- ``SELECT`` (which in DuckDB includes ``SHOW``, ``DESCRIBE``, ``SUMMARIZE``,
  ``VALUES`` and FROM-first queries) whose parse tree, as DuckDB serializes it
  (``json_serialize_sql``), calls no function and names no relation of
  :data:`DENIED_NAMES`;
- ``EXPLAIN [ANALYZE]`` of such a SELECT: the server builds the EXPLAIN
  itself around the checked SELECT;
- ``PRAGMA`` of a name in :data:`READ_ONLY_PRAGMAS`.

Everything else is refused: writes with SQLSTATE 25006, the rest 42501.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Iterator

import duckdb

from tracedb.serve import lexer

_T = duckdb.StatementType


class StatementError(Exception):
    """One statement failed; the client gets an ErrorResponse and the session goes on."""

    def __init__(self, sqlstate: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint


# DuckDB exception class -> SQLSTATE; the first match wins (subclasses first).
_DUCKDB_SQLSTATES: tuple[tuple[type[BaseException], str], ...] = (
    (duckdb.InterruptException, "57014"),  # query_canceled
    (duckdb.ParserException, "42601"),  # syntax_error
    (duckdb.SyntaxException, "42601"),
    (duckdb.CatalogException, "42704"),  # undefined_object
    (duckdb.BinderException, "42703"),  # undefined_column (most binder errors)
    (duckdb.PermissionException, "42501"),  # insufficient_privilege
    (duckdb.TypeMismatchException, "42804"),  # datatype_mismatch
    (duckdb.ConversionException, "22P02"),  # invalid_text_representation
    (duckdb.OutOfRangeException, "22003"),  # numeric_value_out_of_range
    (duckdb.InvalidInputException, "22023"),  # invalid_parameter_value
    (duckdb.OutOfMemoryException, "53200"),  # out_of_memory
    (duckdb.NotImplementedException, "0A000"),  # feature_not_supported
    (duckdb.TransactionException, "25000"),  # invalid_transaction_state
    (duckdb.IOException, "58030"),  # io_error
    (duckdb.Error, "XX000"),  # internal_error
)


def sqlstate_for(error: duckdb.Error) -> str:
    return next(code for cls, code in _DUCKDB_SQLSTATES if isinstance(error, cls))


#: Statement types refused as writes (SQLSTATE 25006 read_only_sql_transaction).
WRITE_TYPES = frozenset(
    {_T.CREATE, _T.CREATE_FUNC, _T.DROP, _T.ALTER, _T.INSERT, _T.UPDATE, _T.DELETE, _T.MERGE_INTO,
     _T.COPY, _T.COPY_DATABASE, _T.EXPORT, _T.VACUUM, _T.ANALYZE}
)

#: PRAGMA names that only read and show nothing of the host.
READ_ONLY_PRAGMAS = frozenset(
    {"version", "show_tables", "show_tables_expanded", "table_info", "show", "functions", "collations",
     "platform"}
)

#: Functions and relations a client may not name: they run SQL held in a
#: string (out of the gate's sight), or show the host (settings, paths,
#: environment, files, extensions, secrets). ``current_setting`` is allowed
#: unqualified only: that name is the session's compatibility macro, which
#: answers PostgreSQL settings and nothing of DuckDB's.
DENIED_NAMES = frozenset({
    "query", "query_table", "json_execute_serialized_sql", "getenv", "current_setting",
    "duckdb_settings", "pg_settings", "duckdb_databases", "duckdb_extensions", "duckdb_secrets",
    "duckdb_secret_types", "which_secret", "duckdb_temporary_files", "duckdb_memory", "duckdb_logs",
    "duckdb_log_contexts", "duckdb_external_file_cache", "duckdb_variables",
    "pragma_database_list", "pragma_database_size", "pragma_storage_info", "pragma_metadata_info",
    "pragma_user_agent", "read_text", "read_blob", "glob", "checkpoint", "force_checkpoint",
    "enable_logging", "disable_logging", "truncate_duckdb_logs",
})
_UNQUALIFIED_OK = frozenset({"current_setting"})

_EXPLAIN = re.compile(r"EXPLAIN (ANALY[SZ]E )?", re.IGNORECASE)
_PRAGMA = re.compile(r"PRAGMA ([A-Za-z_][A-Za-z0-9_]*)\b", re.IGNORECASE)


def checked(cursor: duckdb.DuckDBPyConnection, statement: Any) -> Any:
    """The statement object DuckDB may run for ``statement``, or :class:`StatementError`."""
    kind = statement.type
    if kind == _T.SELECT:
        _check_select(cursor, statement.query)
        return statement
    if kind == _T.EXPLAIN:
        return _checked_explain(cursor, statement)
    if kind == _T.PRAGMA:
        m = _PRAGMA.match(lexer.significant(statement.query))
        if m and m.group(1).lower() in READ_ONLY_PRAGMAS:
            return statement
        raise StatementError("42501", "this PRAGMA is not allowed by tracedb serve",
                             hint="allowed: " + ", ".join(sorted(READ_ONLY_PRAGMAS)))
    name = "INSTALL/LOAD" if kind == _T.LOAD else kind.name.replace("_", " ")
    if kind in WRITE_TYPES:
        raise StatementError("25006", f"cannot execute {name}: tracedb serve is read-only")
    if kind in (_T.SET, _T.VARIABLE_SET):
        raise StatementError("42501", "tracedb serve does not allow changing DuckDB settings")
    raise StatementError("42501", f"{name} statements are not allowed by tracedb serve")


def _checked_explain(cursor: duckdb.DuckDBPyConnection, statement: Any) -> Any:
    """EXPLAIN [ANALYZE] of one SELECT, rebuilt around the SELECT that was checked."""
    text = lexer.significant(statement.query)
    m = _EXPLAIN.match(text)
    refused = StatementError("42501", "tracedb serve only explains SELECT statements")
    if m is None:
        raise refused
    try:
        inner = duckdb.extract_statements(text[m.end():])
    except duckdb.Error:
        raise refused from None
    if len(inner) != 1 or inner[0].type != _T.SELECT:
        raise refused
    _check_select(cursor, inner[0].query)
    prefix = "EXPLAIN ANALYZE " if m.group(1) else "EXPLAIN "
    rebuilt = duckdb.extract_statements(prefix + inner[0].query)
    if len(rebuilt) != 1 or rebuilt[0].type != _T.EXPLAIN:
        raise refused
    return rebuilt[0]


def _check_select(cursor: duckdb.DuckDBPyConnection, sql: str) -> None:
    try:
        raw = cursor.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0]
    except duckdb.Error as e:
        raise StatementError(sqlstate_for(e), str(e)) from e
    try:
        tree = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise StatementError("54001", "statement too complex for tracedb serve to check") from e
    if tree.get("error") or len(tree.get("statements", ())) != 1:
        raise StatementError("42501", "tracedb serve cannot check this statement: "
                             + str(tree.get("error_message", "not one SELECT")))
    for name, qualified in _names(tree):
        if name in DENIED_NAMES and (qualified or name not in _UNQUALIFIED_OK):
            raise StatementError("42501", f"{name} is not allowed by tracedb serve")


@functools.cache
def _duckdb_settings() -> frozenset[str]:
    """Names of DuckDB's settings: ``SHOW <name>`` would print their values."""
    with duckdb.connect() as con:
        return frozenset(name.lower() for (name,) in con.execute("SELECT name FROM duckdb_settings()").fetchall())


def _names(node: Any) -> Iterator[tuple[str, bool]]:
    """Every function and relation a serialized parse tree names: (name, qualified?).
    ``SHOW <setting>`` counts as naming ``duckdb_settings``."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "function_name" in item:
                yield str(item["function_name"]).lower(), bool(item.get("schema") or item.get("catalog"))
            if item.get("type") == "BASE_TABLE":
                yield (str(item.get("table_name", "")).lower(),
                       bool(item.get("schema_name") or item.get("catalog_name")))
            if item.get("type") == "SHOW_REF" and str(item.get("table_name", "")).lower() in _duckdb_settings():
                yield "duckdb_settings", True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
