"""``tracedb serve``: the catalog over the PostgreSQL wire protocol, read-only.

BI tools and drivers that speak PostgreSQL (psql, psycopg, SQLAlchemy's
``postgresql`` dialect, JDBC, Grafana, Superset, Metabase, DBeaver) connect
to a :class:`Server`; every statement runs in DuckDB against the views of the
catalog file ``<warehouse>/tracedb.duckdb``, which read the warehouse's
Parquet files.

Usage::

    server = Server(warehouse / "tracedb.duckdb", warehouse, ServeConfig(port=5433))
    server.serve_forever()          # or start() ... stop() from a program

Safety, in layers, DuckDB's own first:

1. The catalog is opened ``read_only=True``; then, in this order,
   ``allowed_directories=['<warehouse>/']``, ``enable_external_access=false``
   and ``lock_configuration=true`` are set once for the database instance
   that every session shares (each session has its own cursor). DuckDB itself
   then refuses to read or write any file outside the warehouse, to attach
   databases, to install or load extensions and to change any setting.
2. A statement policy: each statement is split and typed by DuckDB's own
   parser (:meth:`duckdb.DuckDBPyConnection.extract_statements`). Only
   ``SELECT`` (which includes ``SHOW``, ``DESCRIBE``, ``SUMMARIZE`` and
   FROM-first queries), ``EXPLAIN`` of a ``SELECT`` and a few read-only
   ``PRAGMA`` statements reach DuckDB; ``COPY``, ``ATTACH``, ``DETACH``,
   ``INSTALL``, ``LOAD``, ``EXPORT``, ``IMPORT``, DDL, DML, ``CALL``,
   ``PREPARE``/``EXECUTE`` and ``SET`` of DuckDB settings are refused with an
   ErrorResponse (SQLSTATE 25006 for writes, 42501 for the rest).
3. Limits: a statement timeout (``ServeConfig.statement_timeout_s``; the
   query is interrupted and fails with SQLSTATE 57014) and a row limit
   (``ServeConfig.max_rows``): rows are streamed in batches and a result
   that would exceed the limit fails with SQLSTATE 54000 after the rows
   already sent; the client discards the partial result. Nothing is
   silently truncated.

Binding a non-loopback address without a password is refused at
construction (:class:`ServeError`). With a password, clients must
authenticate (SCRAM-SHA-256 by default; MD5 or cleartext on request); there
is no TLS, so a non-loopback server belongs behind a TLS-terminating proxy or
an SSH tunnel.

PostgreSQL emulation. DuckDB already provides ``pg_catalog`` (pg_class,
pg_namespace, pg_attribute, pg_type, ...) and ``information_schema``; what
clients send beyond that (psql's ``\\d`` family, SQLAlchemy's inspector,
Grafana's pickers) is handled by four documented tables below, and nothing is
ever created in the catalog:

- :data:`REWRITES`: regular rewrites of PostgreSQL-only syntax into DuckDB
  syntax (``OPERATOR(pg_catalog.~)``, ``COLLATE pg_catalog.default``,
  ``'x'::regclass``, ``pg_catalog.fn(`` ...), applied outside string literals
  and comments;
- :data:`COMPAT_MACROS`: temporary macros, created in each session, for
  PostgreSQL functions DuckDB lacks or answers differently (``version()``,
  ``format_type``, ``obj_description``, ``quote_ident`` ...);
- :data:`COMPAT_RELATIONS`: catalog relations with the columns PostgreSQL
  clients expect, added to a query as CTEs when it mentions them;
- :data:`INTERCEPTS`: statements the server answers itself: transaction
  control (no-ops), ``SET``/``RESET``/``SHOW`` of PostgreSQL client settings,
  ``DEALLOCATE``, ``DISCARD`` and SQL cursors (``DECLARE``/``FETCH``/``CLOSE``).

Values go out in text format, or in binary where a client asks for it
(:mod:`tracedb.pgwire` lists the types); nested DuckDB values (LIST, STRUCT,
MAP) are sent as JSON text.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import itertools
import logging
import os
import re
import secrets
import socket
import socketserver
import threading
import time
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import duckdb

from tracedb import pgwire
from tracedb.errors import TracedbError
from tracedb.pgwire import Column, PgType, ProtocolError

log = logging.getLogger(__name__)

#: The PostgreSQL version reported to clients; psql and drivers pick their
#: catalog queries by it.
PG_VERSION = "15.0"


class ServeError(TracedbError):
    """The server cannot start: bad configuration, missing catalog, unsafe address."""


@dataclass(frozen=True)
class ServeConfig:
    """How :class:`Server` listens and what it allows.

    ``port=0`` picks a free port (see :attr:`Server.port`). ``password=None``
    accepts every client without authentication and is only allowed on a
    loopback ``host``. ``auth_method`` is ``"scram-sha-256"``, ``"md5"`` or
    ``"password"`` (cleartext). ``statement_timeout_s`` and ``max_rows``
    bound each statement (see the module documentation).
    """

    host: str = "127.0.0.1"
    port: int = 5433
    password: str | None = None
    statement_timeout_s: float = 30.0
    max_rows: int = 1_000_000
    auth_method: str = "scram-sha-256"


AUTH_METHODS = ("scram-sha-256", "md5", "password")


class StatementError(Exception):
    """One statement failed; the client gets an ErrorResponse and the session goes on.

    Internal to the server, like :class:`tracedb.pgwire.ProtocolError`.
    """

    def __init__(self, sqlstate: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.hint = hint


# ---------------------------------------------------------------------------
# DuckDB: the sandboxed catalog
# ---------------------------------------------------------------------------


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def open_catalog(catalog_path: Path, warehouse: Path) -> duckdb.DuckDBPyConnection:
    """Open the catalog read-only, allowed to read files under ``warehouse`` only.

    The settings are global to the returned database instance and locked, so
    every ``cursor()`` of it is sandboxed the same way.
    """
    try:
        # A configuration of its own keeps this instance out of DuckDB's per-process
        # instance cache: a plain duckdb.connect(catalog) elsewhere in the process then
        # fails loudly instead of silently sharing this locked-down instance.
        db = duckdb.connect(str(catalog_path), read_only=True, config={"custom_user_agent": "tracedb-serve"})
    except duckdb.Error as e:
        raise ServeError(f"cannot open catalog {catalog_path} read-only: {e}") from e
    directories = sorted({str(warehouse.absolute()).rstrip(os.sep) + os.sep,
                          str(warehouse.resolve()).rstrip(os.sep) + os.sep})
    locked, external, allowed = db.execute(
        "SELECT current_setting('lock_configuration'), current_setting('enable_external_access'),"
        " current_setting('allowed_directories')"
    ).fetchone()
    if locked:
        # DuckDB handed back the instance another Server of this process opened.
        # (DuckDB adds its temp directory, <catalog>.tmp/, inside the warehouse.)
        if external or not all(any(a.startswith(d) for d in directories) for a in allowed):
            db.close()
            raise ServeError(f"catalog {catalog_path} is already open in this process with other settings")
        return db
    db.execute("SET autoinstall_known_extensions = false")
    db.execute("SET allow_community_extensions = false")
    db.execute(f"SET allowed_directories = [{', '.join(_sql_string(d) for d in directories)}]")
    db.execute("SET enable_external_access = false")
    db.execute("SET lock_configuration = true")
    return db


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


def _sqlstate_for(error: duckdb.Error) -> str:
    return next(code for cls, code in _DUCKDB_SQLSTATES if isinstance(error, cls))


# ---------------------------------------------------------------------------
# Statement policy
# ---------------------------------------------------------------------------

_T = duckdb.StatementType

#: Statement types refused as writes (SQLSTATE 25006 read_only_sql_transaction).
_WRITE_TYPES = frozenset(
    {_T.CREATE, _T.CREATE_FUNC, _T.DROP, _T.ALTER, _T.INSERT, _T.UPDATE, _T.DELETE, _T.MERGE_INTO,
     _T.COPY, _T.COPY_DATABASE, _T.EXPORT, _T.VACUUM, _T.ANALYZE}
)

#: PRAGMA names that only read; any other PRAGMA, and any PRAGMA assignment, is refused.
READ_ONLY_PRAGMAS = frozenset(
    {"version", "database_list", "show_tables", "show_tables_expanded", "table_info", "show",
     "database_size", "functions", "collations", "platform", "user_agent"}
)

_EXPLAIN_PREFIX = re.compile(
    r"^\s*EXPLAIN\s+(?:\((?:[^()']|'[^']*')*\)\s*)?(?:ANALY[SZ]E\s+)?(?:VERBOSE\s+)?", re.IGNORECASE
)
_PRAGMA_READ = re.compile(r"^\s*PRAGMA\s+(\w+)\s*(?:\(.*\))?\s*;?\s*$", re.IGNORECASE | re.DOTALL)


def check_statement(cursor: duckdb.DuckDBPyConnection, statement: Any) -> None:
    """Raise :class:`StatementError` unless DuckDB may run ``statement`` (a parsed ``Statement``)."""
    kind = statement.type
    text = statement.query
    if kind == _T.SELECT:
        return
    if kind == _T.EXPLAIN:
        # EXPLAIN ANALYZE runs its statement: only a SELECT may follow.
        prefix = _EXPLAIN_PREFIX.match(text)
        inner = text[prefix.end():] if prefix else ""
        try:
            inner_statements = cursor.extract_statements(inner) if inner.strip() else []
        except duckdb.Error:
            inner_statements = []
        if len(inner_statements) == 1 and inner_statements[0].type == _T.SELECT:
            return
        raise StatementError("42501", "tracedb serve only explains SELECT statements")
    if kind == _T.PRAGMA:
        m = _PRAGMA_READ.match(text)
        if m and m.group(1).lower() in READ_ONLY_PRAGMAS:
            return
        raise StatementError(
            "42501", "this PRAGMA is not allowed by tracedb serve",
            hint="allowed: " + ", ".join(sorted(READ_ONLY_PRAGMAS)),
        )
    name = kind.name.replace("_", " ")
    if kind == _T.LOAD:
        name = "INSTALL/LOAD"
    if kind in _WRITE_TYPES:
        raise StatementError("25006", f"cannot execute {name}: tracedb serve is read-only")
    if kind in (_T.SET, _T.VARIABLE_SET):
        raise StatementError("42501", "tracedb serve does not allow changing DuckDB settings")
    raise StatementError("42501", f"{name} statements are not allowed by tracedb serve")


# ---------------------------------------------------------------------------
# PostgreSQL emulation: rewrites, compat macros, intercepted statements
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """A PostgreSQL run-time parameter the server knows."""

    name: str  # as PostgreSQL spells it (DateStyle, TimeZone, ...)
    default: str
    settable: bool = True  # SET is accepted (and remembered for SHOW) but does not reach DuckDB
    reported: bool = False  # sent as ParameterStatus at start-up and when it changes


#: Parameters answered by SHOW and accepted by SET. ``SET`` of any other name
#: (in particular every DuckDB setting) is refused.
SETTINGS: dict[str, Setting] = {
    s.name.lower(): s
    for s in (
        Setting("server_version", PG_VERSION, settable=False, reported=True),
        Setting("server_version_num", "150000", settable=False),
        Setting("server_encoding", "UTF8", settable=False, reported=True),
        Setting("client_encoding", "UTF8", reported=True),
        Setting("DateStyle", "ISO, MDY", reported=True),
        Setting("IntervalStyle", "postgres", reported=True),
        Setting("TimeZone", "UTC", reported=True),
        Setting("integer_datetimes", "on", settable=False, reported=True),
        Setting("standard_conforming_strings", "on", reported=True),
        Setting("is_superuser", "off", settable=False, reported=True),
        Setting("session_authorization", "tracedb", settable=False, reported=True),
        Setting("application_name", "", reported=True),
        Setting("default_transaction_read_only", "on", reported=True),
        Setting("in_hot_standby", "off", settable=False, reported=True),
        Setting("transaction_read_only", "on"),
        Setting("transaction_isolation", "read committed"),
        Setting("default_transaction_isolation", "read committed"),
        Setting("search_path", "main"),
        Setting("extra_float_digits", "1"),
        Setting("statement_timeout", "0"),
        Setting("lock_timeout", "0"),
        Setting("idle_in_transaction_session_timeout", "0"),
        Setting("client_min_messages", "notice"),
        Setting("bytea_output", "hex"),
        Setting("escape_string_warning", "on"),
        Setting("max_identifier_length", "63", settable=False),
        Setting("lc_collate", "C", settable=False),
        Setting("lc_ctype", "C", settable=False),
        Setting("lc_messages", "C"),
        Setting("lc_monetary", "C"),
        Setting("lc_numeric", "C"),
        Setting("lc_time", "C"),
        Setting("row_security", "on"),
        Setting("jit", "off"),
        Setting("synchronize_seqscans", "on"),
        Setting("ssl", "off", settable=False),
    )
}

@dataclass(frozen=True)
class Rewrite:
    """Replace PostgreSQL-only syntax by its DuckDB equivalent (outside literals and comments)."""

    name: str
    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]
    why: str


#: DuckDB's ``format_type`` names -> PostgreSQL's, as psql and SQLAlchemy expect them.
#: Nested types are ``text`` (their values are sent as JSON text).
_FORMAT_TYPE_NAMES = {
    "bool": "boolean", "int2": "smallint", "int4": "integer", "int8": "bigint", "tinyint": "smallint",
    "utinyint": "smallint", "usmallint": "integer", "uinteger": "bigint", "ubigint": "numeric",
    "hugeint": "numeric", "uhugeint": "numeric", "bignum": "numeric", "float4": "real",
    "float8": "double precision", "varchar": "character varying", "time": "time without time zone",
    "timetz": "time with time zone", "timestamp": "timestamp without time zone",
    "timestamp_s": "timestamp without time zone", "timestamp_ms": "timestamp without time zone",
    "timestamp_ns": "timestamp without time zone", "timestamptz": "timestamp with time zone",
    "list": "text", "array": "text", "struct": "text", "map": "text", "union": "text", "bit": "text",
}

#: DuckDB's ``information_schema.columns.data_type`` -> PostgreSQL's.
_DATA_TYPE_NAMES = {
    "BOOLEAN": "boolean", "TINYINT": "smallint", "SMALLINT": "smallint", "INTEGER": "integer",
    "BIGINT": "bigint", "UTINYINT": "smallint", "USMALLINT": "integer", "UINTEGER": "bigint",
    "UBIGINT": "numeric", "HUGEINT": "numeric", "UHUGEINT": "numeric", "FLOAT": "real",
    "DOUBLE": "double precision", "VARCHAR": "character varying", "BLOB": "bytea", "DATE": "date",
    "TIME": "time without time zone", "TIME WITH TIME ZONE": "time with time zone",
    "TIMESTAMP": "timestamp without time zone", "TIMESTAMP_S": "timestamp without time zone",
    "TIMESTAMP_MS": "timestamp without time zone", "TIMESTAMP_NS": "timestamp without time zone",
    "TIMESTAMP WITH TIME ZONE": "timestamp with time zone", "INTERVAL": "interval", "UUID": "uuid",
    "JSON": "json",
}

#: Temporary scalar macros created in every session (``CREATE TEMP MACRO name...``) for
#: PostgreSQL functions that DuckDB lacks or answers differently. They shadow
#: DuckDB's built-ins for unqualified calls; the ``function-qualifier`` rewrite turns
#: ``pg_catalog.name(`` into ``name(``. Macros never show up in table listings.
COMPAT_MACROS: dict[str, str] = {
    "version": f"() AS 'PostgreSQL {PG_VERSION} (tracedb serve, DuckDB {duckdb.__version__})'",
    "pg_get_userbyid": "(role_oid_) AS 'tracedb'",
    "pg_get_expr": "(node_, relation_oid_) AS node_, (node_, relation_oid_, pretty_) AS node_",
    "obj_description": "(object_oid_) AS (SELECT max(description) FROM pg_catalog.pg_description"
    " WHERE objoid = object_oid_ AND objsubid = 0),"
    " (object_oid_, catalog_name_) AS (SELECT max(description) FROM pg_catalog.pg_description"
    " WHERE objoid = object_oid_ AND objsubid = 0)",
    "col_description": "(table_oid_, column_number_) AS (SELECT max(description) FROM pg_catalog.pg_description"
    " WHERE objoid = table_oid_ AND objsubid = column_number_)",
    "pg_get_viewdef": "(view_oid_) AS (SELECT regexp_replace(max(sql), '^CREATE\\s+VIEW\\s+.*?\\s+AS\\s+', '', 's')"
    " FROM duckdb_views() WHERE view_oid = view_oid_),"
    " (view_oid_, pretty_) AS (SELECT regexp_replace(max(sql), '^CREATE\\s+VIEW\\s+.*?\\s+AS\\s+', '', 's')"
    " FROM duckdb_views() WHERE view_oid = view_oid_)",
    "pg_table_size": "(relation_oid_) AS (SELECT max(estimated_size) FROM duckdb_tables()"
    " WHERE table_oid = relation_oid_)",
    "pg_total_relation_size": "(relation_oid_) AS pg_table_size(relation_oid_)",
    "pg_relation_size": "(relation_oid_) AS pg_table_size(relation_oid_)",
    "pg_encoding_to_char": "(encoding_) AS 'UTF8'",
    "pg_get_function_result": "(function_oid_) AS NULL::VARCHAR",
    "pg_get_function_arguments": "(function_oid_) AS NULL::VARCHAR",
    "pg_get_function_identity_arguments": "(function_oid_) AS NULL::VARCHAR",
    "pg_get_serial_sequence": "(table_name_, column_name_) AS NULL::VARCHAR",
    "pg_get_indexdef": "(index_oid_) AS NULL::VARCHAR, (index_oid_, column_, pretty_) AS NULL::VARCHAR",
    "quote_ident": "(name_) AS CASE WHEN regexp_full_match(name_, '[a-z_][a-z0-9_$]*') THEN name_"
    " ELSE '\"' || replace(name_, '\"', '\"\"') || '\"' END",
    "array_lower": "(array_, dim_) AS CASE WHEN len(array_) > 0 THEN 1 END",
    "array_upper": "(array_, dim_) AS CASE WHEN len(array_) > 0 THEN len(array_) END",
    "current_setting": "(name_) AS CASE lower(name_) "
    + " ".join(f"WHEN '{key}' THEN '{s.default}'" for key, s in SETTINGS.items())
    + " ELSE \"system\".main.current_setting(name_)::VARCHAR END",
    "format_type": "(type_oid_, typemod_) AS CASE \"system\".pg_catalog.format_type(type_oid_, typemod_) "
    + " ".join(f"WHEN '{duck}' THEN '{pg}'" for duck, pg in _FORMAT_TYPE_NAMES.items())
    + " ELSE \"system\".pg_catalog.format_type(type_oid_, typemod_) END",
    "parse_ident": "(name_) AS list_transform(string_split(name_, '.'), lambda part_: trim(part_, '\"'))",
    "pg_data_type": "(duckdb_type_) AS CASE WHEN duckdb_type_ LIKE 'DECIMAL%' THEN 'numeric'"
    " WHEN duckdb_type_ LIKE '%]' THEN 'ARRAY'"
    " WHEN regexp_matches(duckdb_type_, '^(STRUCT|MAP|UNION)') THEN 'text' ELSE CASE duckdb_type_ "
    + " ".join(f"WHEN '{duck}' THEN '{pg}'" for duck, pg in _DATA_TYPE_NAMES.items())
    + " ELSE lower(duckdb_type_) END END",
    "regclass_oid": "(name_) AS (SELECT max(oid) FROM pg_catalog.pg_class"
    " WHERE relname = trim(string_split(name_, '.')[-1], '\"'))",
}

#: PostgreSQL catalog relations that DuckDB lacks, or has with fewer columns or
#: DuckDB-style values: qualified name -> SELECT. A statement that mentions one
#: gets it as a CTE (``pg_catalog.X``: named ``X``, so unqualified references
#: match too; ``information_schema.X``: named ``information_schema_X``), so
#: nothing is created in the database and listings stay exactly the catalog's.
COMPAT_RELATIONS: dict[str, str] = {
    "pg_catalog.pg_class": "SELECT * REPLACE ('d' AS relreplident, CAST(reloptions AS VARCHAR[]) AS reloptions),"
    " false AS relforcerowsecurity FROM pg_catalog.pg_class",
    "pg_catalog.pg_attribute": "SELECT * REPLACE ('p' AS attstorage) FROM pg_catalog.pg_attribute",
    "pg_catalog.pg_description": "SELECT objoid,"
    " (SELECT max(oid) FROM pg_catalog.pg_class WHERE relname = 'pg_class') AS classoid,"
    " objsubid, description FROM pg_catalog.pg_description",
    "pg_catalog.pg_index": "SELECT *, false AS indnullsnotdistinct FROM pg_catalog.pg_index",
    "pg_catalog.pg_opclass": "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS opcname, NULL::BOOLEAN AS opcdefault"
    " WHERE false",
    "pg_catalog.pg_database": "SELECT *, 6 AS encoding, 'C' AS datcollate, 'C' AS datctype,"
    " NULL::VARCHAR AS daticulocale, 'c' AS datlocprovider, NULL::VARCHAR[] AS datacl, 0 AS dattablespace, 0 AS datdba,"
    " -1 AS datconnlimit FROM pg_catalog.pg_database",
    "information_schema.columns": "SELECT * REPLACE (pg_data_type(data_type) AS data_type)"
    " FROM information_schema.columns",
}

#: Applied in order to every query before it is parsed.
REWRITES: tuple[Rewrite, ...] = (
    Rewrite(
        "operator-syntax",
        re.compile(r"OPERATOR\s*\(\s*(?:pg_catalog\s*\.\s*)?([~!=<>@#%^&|`?*+/-]+)\s*\)", re.IGNORECASE),
        lambda m: f" {m.group(1)} ",
        "psql writes operators as OPERATOR(pg_catalog.~); DuckDB has the bare operators",
    ),
    Rewrite(
        "collate-default",
        re.compile(r"\s+COLLATE\s+(?:pg_catalog\s*\.\s*)?(?:\"default\"|default|\"C\"|C)\b", re.IGNORECASE),
        "",
        "psql adds COLLATE pg_catalog.default to name patterns",
    ),
    Rewrite(
        "function-qualifier",
        re.compile(r"\bpg_catalog\s*\.\s*(\w+)\s*\(", re.IGNORECASE),
        lambda m: f"{m.group(1)}(",
        "DuckDB keeps few functions in pg_catalog but finds all of them, and the session's"
        " compat macros, unqualified",
    ),
    Rewrite(
        "grafana-search-path",
        re.compile(
            r"SELECT\s+CASE\s+WHEN\s+trim\(s\[i\]\)\s*=\s*\0\d+\0\s+THEN\s+user\s+ELSE\s+trim\(s\[i\]\)\s+END"
            r"\s+FROM\s+generate_series\(.*?\)\s+as\s+i\s*,"
            r"\s*string_to_array\(\s*current_setting\(\s*\0\d+\0\s*\)\s*,\s*\0\d+\0\s*\)\s+s\b",
            re.IGNORECASE | re.DOTALL,
        ),
        "SELECT current_schema()",
        "Grafana's schemas-on-the-search-path subquery (a set-returning function in FROM)",
    ),
    Rewrite(
        "function-renames",
        re.compile(r"\b(json_build_object|jsonb_build_object)\s*\(", re.IGNORECASE),
        "json_object(",
        "json_build_object is DuckDB's json_object",
    ),
    Rewrite(
        "regclass-literal",
        re.compile(r"(\0\d+\0|\$\d+)\s*::\s*(?:pg_catalog\s*\.\s*)?regclass\b", re.IGNORECASE),
        lambda m: f"regclass_oid({m.group(1)})",
        "'name'::regclass is the OID of a relation",
    ),
    Rewrite(
        "regclass-literal-cast",
        re.compile(r"\bCAST\s*\(\s*(\0\d+\0|\$\d+)\s+AS\s+(?:pg_catalog\s*\.\s*)?regclass\s*\)", re.IGNORECASE),
        lambda m: f"regclass_oid({m.group(1)})",
        "CAST('name' AS REGCLASS), as SQLAlchemy writes it",
    ),
    Rewrite(
        "reg-types-cast",
        re.compile(r"\bAS\s+(?:pg_catalog\s*\.\s*)?(?:regtype|regclass|regproc|regprocedure|regnamespace|regrole)\s*\)",
                   re.IGNORECASE),
        "AS VARCHAR)",
        "CAST(expr AS REGCLASS): the name is printed as the number",
    ),
    Rewrite(
        "reg-types",
        re.compile(r"::\s*(?:pg_catalog\s*\.\s*)?(?:regtype|regclass|regproc|regprocedure|regnamespace|regrole)\b",
                   re.IGNORECASE),
        "::VARCHAR",
        "OID alias types, used by psql to print names: DuckDB prints the number",
    ),
    Rewrite(
        "type-qualifier",
        re.compile(r"::\s*pg_catalog\s*\.\s*(?:\"(\w+)\"|(\w+))", re.IGNORECASE),
        lambda m: "::" + _PG_TYPE_NAMES.get((m.group(1) or m.group(2)).lower(), m.group(1) or m.group(2)),
        "casts to pg_catalog.text, pg_catalog.\"char\" ...: DuckDB types are unqualified",
    ),
    Rewrite(
        "name-type",
        re.compile(r"::\s*(?:name|\"char\"|bpchar)\b", re.IGNORECASE),
        "::VARCHAR",
        "PostgreSQL's name and \"char\" types",
    ),
)

#: PostgreSQL type names in casts that DuckDB spells differently.
_PG_TYPE_NAMES = {"name": "VARCHAR", "char": "VARCHAR", "bpchar": "VARCHAR", "text": "VARCHAR", "oid": "BIGINT",
                  "int2": "SMALLINT", "int4": "INTEGER", "int8": "BIGINT", "float4": "REAL", "float8": "DOUBLE",
                  "bool": "BOOLEAN", "regtype": "VARCHAR", "regclass": "VARCHAR", "regproc": "VARCHAR"}

_LITERAL_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|--[^\n]*|/\*.*?\*/", re.DOTALL)


def _outside_literals(sql: str, transform: Callable[[str], str]) -> str:
    """Apply ``transform`` to ``sql`` with string literals and comments held aside."""
    kept: list[str] = []

    def stash(m: re.Match[str]) -> str:
        kept.append(m.group(0))
        return f"\0{len(kept) - 1}\0"

    code = transform(_LITERAL_OR_COMMENT.sub(stash, sql))
    return re.sub(r"\0(\d+)\0", lambda m: kept[int(m.group(1))], code)


def rewrite(sql: str) -> str:
    """Apply :data:`REWRITES` to ``sql`` outside string literals and comments."""

    # The literal placeholders are visible to the rules (see "regclass-literal").
    def apply(code: str) -> str:
        for rule in REWRITES:
            code = rule.pattern.sub(rule.replacement, code)  # type: ignore[arg-type]
        return code

    return _outside_literals(sql, apply)


def _compat_cte_name(qualified: str) -> str:
    schema, _, name = qualified.partition(".")
    return name if schema == "pg_catalog" else f"{schema}_{name}"


_COMPAT_CTES = {_compat_cte_name(q): sql for q, sql in COMPAT_RELATIONS.items()}
_COMPAT_RELATION_REF = re.compile(
    r"\b(?:"
    + "|".join(
        rf"(?:pg_catalog\s*\.\s*)?{q.partition('.')[2]}" if q.startswith("pg_catalog.")
        else rf"{q.partition('.')[0]}\s*\.\s*{q.partition('.')[2]}"
        for q in sorted(COMPAT_RELATIONS)
    )
    + r")\b(?!\s*\()",
    re.IGNORECASE,
)
_SELECT_START = re.compile(r"^\s*(?:SELECT|WITH|FROM)\b", re.IGNORECASE)
_WITH_PREFIX = re.compile(r"^\s*WITH(\s+RECURSIVE)?\s+", re.IGNORECASE)


def add_compat_relations(sql: str) -> str:
    """Give a SELECT the :data:`COMPAT_RELATIONS` it mentions as CTEs."""
    used: list[str] = []

    def unqualify(code: str) -> str:
        def one(m: re.Match[str]) -> str:
            text = re.sub(r"\s+", "", m.group(0)).lower()
            name = _compat_cte_name(text) if "." in text else text
            if name not in used:
                used.append(name)
            return name

        return _COMPAT_RELATION_REF.sub(one, code)

    if not _SELECT_START.match(sql):
        return sql
    sql = _outside_literals(sql, unqualify)
    if not used:
        return sql
    ctes = ", ".join(f"{name} AS ({_COMPAT_CTES[name]})" for name in used)
    with_prefix = _WITH_PREFIX.match(sql)
    if with_prefix:
        return f"WITH{with_prefix.group(1) or ''} {ctes}, {sql[with_prefix.end():]}"
    return f"WITH {ctes} {sql}"


@dataclass
class Result:
    """What a statement returns: columns (None: no rows), rows, and the command tag.

    With rows, the tag is ``"<row_tag> <rows sent>"`` (``SELECT 5``, ``FETCH 2``);
    without, it is ``tag`` (``SET``, ``BEGIN``).
    """

    columns: list[tuple[str, PgType]] | None
    rows: Iterator[Sequence[Any]] = field(default_factory=lambda: iter(()))
    tag: str | None = None
    row_tag: str = "SELECT"

    def command_tag(self, rows_sent: int) -> str:
        return self.tag if self.tag is not None else f"{self.row_tag} {rows_sent}"


def _command(tag: str) -> Result:
    return Result(None, iter(()), tag)


_NAME = r"(?:[A-Za-z_][\w.$]*|\"(?:[^\"]|\"\")+\")"


def _unquote(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name.lower()


Handler = Callable[["Session", "Plan", Sequence[Any]], Result]


@dataclass(frozen=True)
class Intercept:
    """A statement form the server answers itself instead of passing it to DuckDB."""

    name: str
    pattern: re.Pattern[str]  # over the statement without comments and trailing ';'
    handler: Handler
    returns_rows: bool = False
    ends_transaction: bool = False  # allowed in a failed transaction
    query_group: str | None = None  # a group holding a query DuckDB runs (policy-checked)
    applies: Callable[[re.Match[str]], bool] = lambda m: True  # else DuckDB gets the statement


#: Statements the server answers itself, tried in order: transaction control
#: (accepted as no-ops: the session is read-only), PostgreSQL client settings
#: (SET/RESET/SHOW, remembered per session, never passed to DuckDB), prepared
#: statement housekeeping and SQL cursors (DECLARE/FETCH/CLOSE, as psql's
#: FETCH_COUNT and psycopg's server-side cursors use them).
INTERCEPTS: list[Intercept] = []


def intercept(name: str, pattern: str, **options: Any) -> Callable[[Handler], Handler]:
    """Register a handler in :data:`INTERCEPTS` (the pattern is matched case-insensitively)."""

    def register(handler: Handler) -> Handler:
        INTERCEPTS.append(Intercept(name, re.compile(pattern, re.IGNORECASE | re.DOTALL), handler, **options))
        return handler

    return register


@intercept("begin", r"^(?:BEGIN|START\s+TRANSACTION)\b[^;]*$")
def _begin(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    if session.tx_status == b"I":
        session.tx_status = b"T"
    return _command("BEGIN")


@intercept("commit", r"^(?:COMMIT|END)(?:\s+(?:WORK|TRANSACTION))?(?:\s+AND\s+(?:NO\s+)?CHAIN)?$",
           ends_transaction=True)
def _commit(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    failed = session.tx_status == b"E"
    session.end_transaction()
    return _command("ROLLBACK" if failed else "COMMIT")


@intercept("rollback-to", r"^ROLLBACK(?:\s+(?:WORK|TRANSACTION))?\s+TO\b[^;]*$", ends_transaction=True)
def _rollback_to(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    if session.tx_status == b"E":
        session.tx_status = b"T"
    return _command("ROLLBACK")


@intercept("rollback", r"^(?:ROLLBACK|ABORT)(?:\s+(?:WORK|TRANSACTION))?(?:\s+AND\s+(?:NO\s+)?CHAIN)?$",
           ends_transaction=True)
def _rollback(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    session.end_transaction()
    return _command("ROLLBACK")


@intercept("savepoint", r"^(SAVEPOINT|RELEASE)\b[^;]*$")
def _savepoint(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    return _command(plan.match.group(1).upper())


@intercept("set-transaction", r"^SET\s+(?:SESSION\s+CHARACTERISTICS\s+AS\s+)?TRANSACTION\b[^;]*$")
def _set_transaction(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    return _command("SET")


@intercept("set-time-zone", r"^SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(?P<value>[^;]+)$")
def _set_time_zone(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    session.set_setting("timezone", plan.match.group("value"))
    return _command("SET")


@intercept("set", rf"^SET\s+(?:SESSION\s+|LOCAL\s+)?(?P<name>{_NAME})\s*(?:=|\s+TO\s+)\s*(?P<value>[^;]+)$")
def _set(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    session.set_setting(plan.match.group("name"), plan.match.group("value"))
    return _command("SET")


@intercept("reset", rf"^RESET\s+(?P<name>ALL|{_NAME})$")
def _reset(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    name = _unquote(plan.match.group("name"))
    if name == "all":
        session.settings.clear()
    else:
        session.set_setting(name, "DEFAULT")
    return _command("RESET")


_SHOW_ALIASES = {"time zone": "timezone", "transaction isolation level": "transaction_isolation"}


def _show_name(m: re.Match[str]) -> str:
    name = re.sub(r"\s+", " ", _unquote(m.group("name")))
    return _SHOW_ALIASES.get(name, name)


@intercept("show", rf"^SHOW\s+(?P<name>{_NAME}|TIME\s+ZONE|TRANSACTION\s+ISOLATION\s+LEVEL)$",
           returns_rows=True,
           # Other names are DuckDB's own SHOW (SHOW TABLES, SHOW events).
           applies=lambda m: _show_name(m) in SETTINGS or _show_name(m) == "all")
def _show(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    name = _show_name(plan.match)
    if name == "all":
        rows = [(s.name, session.setting(key), "") for key, s in sorted(SETTINGS.items())]
        columns = [("name", pgwire.TEXT), ("setting", pgwire.TEXT), ("description", pgwire.TEXT)]
        return Result(columns, iter(rows), "SHOW")
    return Result([(name, pgwire.TEXT)], iter([(session.setting(name),)]), "SHOW")


@intercept("deallocate", rf"^DEALLOCATE\s+(?:PREPARE\s+)?(?P<name>ALL|{_NAME})$")
def _deallocate(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    name = plan.match.group("name")
    if name.upper() == "ALL":
        session.prepared.clear()
        return _command("DEALLOCATE ALL")
    session.prepared.pop(name.strip('"'), None)
    return _command("DEALLOCATE")


@intercept("discard", r"^DISCARD\s+(?P<what>ALL|PLANS|SEQUENCES|TEMP|TEMPORARY)$")
def _discard(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    what = plan.match.group("what").upper()
    if what == "ALL":
        session.prepared.clear()
        session.portals.clear()
        for each in list(session.cursors):
            session.close_cursor(each)
        session.settings.clear()
    return _command(f"DISCARD {what}")


@intercept(
    "declare",
    rf"^DECLARE\s+(?P<name>{_NAME})\s+(?P<binary>BINARY\s+)?(?:(?:ASENSITIVE|INSENSITIVE)\s+)?"
    r"(?:(?:NO\s+)?SCROLL\s+)?CURSOR\s+(?:(?P<hold>WITH|WITHOUT)\s+HOLD\s+)?FOR\s+(?P<query>.+)$",
    query_group="query",
)
def _declare(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    name = _unquote(plan.match.group("name"))
    if name in session.cursors:
        raise StatementError("42P03", f'cursor "{name}" already exists')
    assert plan.inner is not None
    result = session.run_plan(plan.inner, params)
    formats = [1] if plan.match.group("binary") else []
    cursor = Portal(Prepared(plan.inner, []), list(params), formats, result=result,
                    columns=session.columns(result, formats),
                    with_hold=(plan.match.group("hold") or "").upper() == "WITH")
    session.cursors[name] = cursor
    session.open_portal = cursor
    return _command("DECLARE CURSOR")


@intercept(
    "fetch",
    rf"^FETCH\s+(?:(?P<direction>NEXT|FORWARD)\s+)?(?:(?P<count>ALL|\d+)\s+)?(?:(?:FROM|IN)\s+)?(?P<name>{_NAME})$",
    returns_rows=True,
)
def _fetch(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    cursor = session.sql_cursor(plan.match.group("name"))
    assert cursor.result is not None and cursor.result.columns is not None
    count = plan.match.group("count")
    rows = cursor.result.rows if (count or "").upper() == "ALL" else itertools.islice(
        cursor.result.rows, int(count) if count else 1)
    return Result(cursor.result.columns, rows, row_tag="FETCH")


@intercept("close", rf"^CLOSE\s+(?P<name>ALL|{_NAME})$")
def _close(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    name = plan.match.group("name")
    if name.upper() == "ALL":
        for each in list(session.cursors):
            session.close_cursor(each)
    else:
        session.sql_cursor(name)
        session.close_cursor(_unquote(name))
    return _command("CLOSE CURSOR")


def _strip_statement(text: str) -> str:
    """The statement without leading comments, surrounding blanks and trailing semicolons."""
    text = text.strip()
    while True:
        if text.startswith("--"):
            text = text.partition("\n")[2].lstrip()
        elif text.startswith("/*") and "*/" in text:
            text = text.partition("*/")[2].lstrip()
        else:
            break
    return text.rstrip().rstrip(";").rstrip()


# ---------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------


@dataclass
class Plan:
    """One statement, ready to run: either intercepted or sent to DuckDB."""

    sql: str  # as DuckDB will run it (rewritten)
    n_params: int = 0
    intercept: Intercept | None = None
    match: re.Match[str] | None = None  # of the intercept's pattern
    inner: "Plan | None" = None  # the intercept's query (DECLARE ... FOR <query>)

    @property
    def returns_rows(self) -> bool:
        return self.intercept is None or self.intercept.returns_rows


@dataclass
class Prepared:
    """A statement of the extended protocol (``Parse``)."""

    plan: Plan | None  # None: empty query
    param_oids: list[int]


@dataclass
class Portal:
    """A bound statement (``Bind``), executed by one or more ``Execute`` messages."""

    prepared: Prepared
    params: list[Any]
    result_formats: list[int]
    result: Result | None = None
    columns: list[Column] | None = None
    sent: int = 0
    done: bool = False
    buffered: list[Sequence[Any]] | None = None
    with_hold: bool = False  # a SQL cursor that outlives its transaction


_BATCH_ROWS = 1000
_FLUSH_BYTES = 64 * 1024


def _replay(rows: list[Sequence[Any]], error: StatementError | None) -> Iterator[Sequence[Any]]:
    yield from rows
    if error is not None:
        raise error


class Session:
    """One client connection: start-up, authentication, then the query loop."""

    def __init__(self, server: "Server", sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.rfile = sock.makefile("rb")
        self.out = bytearray()
        self.process_id = 0
        self.secret_key = secrets.randbits(31)
        self.user = ""
        self.cursor: duckdb.DuckDBPyConnection | None = None
        self.settings: dict[str, str] = {}
        self.tx_status = b"I"
        self.prepared: dict[str, Prepared] = {}
        self.portals: dict[str, Portal] = {}  # of the extended protocol (Bind)
        self.cursors: dict[str, Portal] = {}  # SQL cursors (DECLARE)
        self.open_portal: Portal | None = None  # whose DuckDB result is still being read
        self._skip_until_sync = False
        self._closed = False
        self._call_lock = threading.Lock()
        self._in_call = False
        self._cancel_reason: str | None = None
        self._deadline = 0.0

    # -- settings --------------------------------------------------------

    def setting(self, name: str) -> str:
        key = name.lower()
        if key == "statement_timeout" and key not in self.settings:
            return f"{int(self.server.config.statement_timeout_s * 1000)}ms"
        return self.settings.get(key, SETTINGS[key].default)

    def set_setting(self, name: str, raw_value: str) -> None:
        """``SET name = value`` for a PostgreSQL client setting; DuckDB never sees it."""
        key = name.strip('"').lower()
        known = SETTINGS.get(key)
        if known is None:
            raise StatementError(
                "42501", f'setting "{name}" cannot be changed through tracedb serve',
                hint="only PostgreSQL client settings are accepted (and have no effect on DuckDB)",
            )
        if not known.settable:
            raise StatementError("55P02", f'parameter "{known.name}" cannot be changed')
        value = raw_value.strip()
        if value.upper() in ("DEFAULT", "LOCAL"):
            self.settings.pop(key, None)
            value = known.default
        else:
            value = ", ".join(part.strip().strip("'\"") for part in value.split(","))
        if key == "client_encoding" and value.upper().replace("-", "") not in ("UTF8", "UNICODE"):
            raise StatementError("0A000", "tracedb serve only speaks UTF8")
        if key == "timezone":
            value = value.upper() if value.upper() == "UTC" else value
            self._zone(value)
        if key == "statement_timeout":
            self._timeout_seconds(value)
        if value != known.default or key in self.settings:
            self.settings[key] = value
        if known.reported:
            self.send(pgwire.parameter_status(known.name, value))

    def _zone(self, value: str | None = None) -> dt.tzinfo:
        name = value if value is not None else self.setting("timezone")
        if name.upper() in ("UTC", "GMT", "Z"):
            return dt.timezone.utc
        try:
            return zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise StatementError("22023", f'invalid value for parameter "TimeZone": "{name}"') from e

    @staticmethod
    def _timeout_seconds(value: str) -> float:
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|min|h)?\s*", value)
        if not m:
            raise StatementError("22023", f'invalid value for parameter "statement_timeout": "{value}"')
        return float(m.group(1)) * {"ms": 0.001, None: 0.001, "s": 1, "min": 60, "h": 3600}[m.group(2)]

    def statement_timeout(self) -> float:
        """The effective timeout: the server's, or the client's ``statement_timeout`` if shorter."""
        limit = self.server.config.statement_timeout_s
        if "statement_timeout" in self.settings:
            client = self._timeout_seconds(self.settings["statement_timeout"])
            if 0 < client < limit:
                return client
        return limit

    # -- output ------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self.out += data
        if len(self.out) >= _FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.out:
            self.sock.sendall(self.out)
            self.out.clear()

    def send_error(self, error: StatementError) -> None:
        self.send(pgwire.error_response(error.sqlstate, error.message, hint=error.hint))
        if self.tx_status == b"T":
            self.tx_status = b"E"

    # -- life cycle --------------------------------------------------------

    def run(self) -> None:
        """Serve the connection until the client leaves; never raises."""
        try:
            if self._startup():
                self._loop()
        except ProtocolError as e:
            log.info("protocol error from client: %s", e)
            try:
                self.send(pgwire.error_response("08P01", str(e), severity="FATAL"))
                self.flush()
            except OSError:
                pass
        except OSError:  # the client went away
            pass
        except ValueError:
            if not self._closed:  # else: Server.stop() closed the stream under us
                log.exception("session ended by an unexpected error")
        except Exception:  # a bug: keep serving the other clients
            log.exception("session ended by an unexpected error")
        finally:
            self.close()
            for closer in (self.rfile.close, self.sock.close):
                try:
                    closer()
                except OSError:
                    pass
            if self.cursor is not None:
                try:
                    self.cursor.close()
                except duckdb.Error:
                    pass
            self.server.unregister(self)

    def close(self) -> None:
        """Drop the connection and stop its query (also called by :meth:`Server.stop`)."""
        self._closed = True
        self.cancel("connection closed")
        try:
            # Wakes the session's blocked read with end-of-stream; the session's own
            # thread then closes the stream and the socket (see run()).
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def cancel(self, reason: str) -> None:
        """Interrupt the running DuckDB call, if any (CancelRequest, timeout, stop)."""
        with self._call_lock:
            if self._in_call and self.cursor is not None:
                self._cancel_reason = reason
                self.cursor.interrupt()

    def _startup(self) -> bool:
        while True:
            first = pgwire.read_startup(self.rfile)
            if first is None:
                return False
            if isinstance(first, (pgwire.SSLRequest, pgwire.GSSENCRequest)):
                self.sock.sendall(b"N")
                continue
            if isinstance(first, pgwire.CancelRequest):
                self.server.cancel(first.process_id, first.secret_key)
                return False
            break
        params = first.parameters
        self.user = params.get("user", "")
        if "replication" in params and params["replication"].lower() not in ("false", "off", "no", "0"):
            self.send(pgwire.error_response("0A000", "replication is not supported", severity="FATAL"))
            self.flush()
            return False
        if not self._authenticate():
            return False
        self.cursor = self.server.new_cursor()
        self.process_id = self.server.register(self)
        self.send(pgwire.authentication_ok())
        for key in ("application_name", "datestyle", "timezone", "extra_float_digits", "search_path",
                    "intervalstyle", "client_encoding", "statement_timeout"):
            for given, value in params.items():
                if given.lower() == key:
                    try:
                        self.set_setting(key, value)
                    except StatementError as e:
                        self.send(pgwire.notice_response(e.sqlstate, e.message, severity="WARNING"))
        for key, s in SETTINGS.items():
            if s.reported and key not in self.settings:
                self.send(pgwire.parameter_status(s.name, self.setting(key)))
        self.send(pgwire.backend_key_data(self.process_id, self.secret_key))
        self.send(pgwire.ready_for_query(self.tx_status))
        self.flush()
        return True

    def _read_password_message(self) -> bytes:
        self.flush()
        msg = pgwire.read_message(self.rfile)
        if msg is None:
            raise ConnectionError("client left during authentication")
        tag, body = msg
        if tag != b"p":
            raise ProtocolError(f"expected a password message, got {tag!r}")
        return body

    def _authenticate(self) -> bool:
        config = self.server.config
        if config.password is None:
            return True
        ok = False
        if config.auth_method == "password":
            self.send(pgwire.authentication_cleartext())
            given = pgwire.Reader(self._read_password_message()).cstr()
            ok = secrets.compare_digest(given.encode("utf-8"), config.password.encode("utf-8"))
        elif config.auth_method == "md5":
            salt = secrets.token_bytes(4)
            self.send(pgwire.authentication_md5(salt))
            given = pgwire.Reader(self._read_password_message()).cstr()
            expected = pgwire.md5_password_hash(self.user, config.password, salt)
            ok = secrets.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
        else:
            verifier = self.server.scram
            assert verifier is not None
            self.send(pgwire.authentication_sasl([verifier.MECHANISM]))
            r = pgwire.Reader(self._read_password_message())
            mechanism = r.cstr()
            if mechanism != verifier.MECHANISM:
                raise ProtocolError(f"unsupported SASL mechanism {mechanism!r}")
            length = r.int32()
            client_first = r.bytes(length) if length >= 0 else b""

            def continue_(server_first: bytes) -> bytes:
                self.send(pgwire.authentication_sasl_continue(server_first))
                return self._read_password_message()

            server_final = verifier.exchange(client_first, continue_)
            ok = server_final is not None
            if ok:
                self.send(pgwire.authentication_sasl_final(server_final))  # type: ignore[arg-type]
        if not ok:
            self.send(pgwire.error_response(
                "28P01", f'password authentication failed for user "{self.user}"', severity="FATAL"))
            self.flush()
        return ok

    def _loop(self) -> None:
        handlers: dict[bytes, Callable[[bytes], None]] = {
            b"Q": self._on_query,
            b"P": self._on_parse,
            b"B": self._on_bind,
            b"D": self._on_describe,
            b"E": self._on_execute,
            b"C": self._on_close,
            b"H": lambda body: self.flush(),
            b"S": self._on_sync,
        }
        while True:
            msg = pgwire.read_message(self.rfile)
            if msg is None or msg[0] == b"X":
                return
            tag, body = msg
            handler = handlers.get(tag)
            if handler is None:
                if tag in (b"d", b"c", b"f"):  # COPY data: never asked for, ignore
                    continue
                if tag == b"F":
                    self.send(pgwire.error_response("0A000", "function call messages are not supported"))
                    self.send(pgwire.ready_for_query(self.tx_status))
                    self.flush()
                    continue
                raise ProtocolError(f"unexpected message type {tag!r}")
            if self._skip_until_sync and tag not in (b"S", b"Q"):
                continue
            try:
                handler(body)
            except StatementError as e:
                log.debug("statement failed (%s): %s", e.sqlstate, e.message)
                self.send_error(e)
                if tag == b"Q":
                    self.send(pgwire.ready_for_query(self.tx_status))
                    self.flush()
                else:
                    self._skip_until_sync = True

    # -- planning and running ----------------------------------------------

    def plan_all(self, sql: str) -> list[Plan]:
        """Split ``sql`` into statements and decide, for each, who answers it."""
        return self._plan(rewrite(sql))

    def _plan(self, text: str) -> list[Plan]:
        assert self.cursor is not None
        if not _strip_statement(text):
            return []
        try:
            statements = self.cursor.extract_statements(text)
        except duckdb.Error as e:
            # Not DuckDB syntax: perhaps a PostgreSQL command (DISCARD, DECLARE ...).
            plan = self._intercepted(_strip_statement(text))
            if plan is None:
                raise StatementError(_sqlstate_for(e), str(e)) from e
            return [plan]
        plans = []
        for statement in statements:
            stripped = _strip_statement(statement.query)
            plan = self._intercepted(stripped)
            if plan is None:
                check_statement(self.cursor, statement)
                params = [int(p) for p in statement.named_parameters if p.isdigit()]
                sql = add_compat_relations(stripped) if statement.type == _T.SELECT else stripped
                plan = Plan(sql, n_params=max(params, default=0))
            plans.append(plan)
        return plans

    def _intercepted(self, text: str) -> Plan | None:
        for icpt in INTERCEPTS:
            m = icpt.pattern.match(text)
            if m is None or not icpt.applies(m):
                continue
            plan = Plan(text, intercept=icpt, match=m)
            if icpt.query_group is not None:
                inner = self._plan(m.group(icpt.query_group))
                if len(inner) != 1 or inner[0].intercept is not None:
                    raise StatementError("42601", f"{icpt.name.upper()} needs exactly one SELECT")
                plan.inner = inner[0]
                plan.n_params = inner[0].n_params
            return plan
        return None

    def run_plan(self, plan: Plan, params: Sequence[Any]) -> Result:
        """Start a statement: intercepted ones answer at once, DuckDB ones stream."""
        if self.tx_status == b"E" and not (plan.intercept is not None and plan.intercept.ends_transaction):
            raise StatementError(
                "25P02", "current transaction is aborted, commands ignored until end of transaction block")
        self._deadline = time.monotonic() + self.statement_timeout()
        if plan.intercept is not None:
            return plan.intercept.handler(self, plan, params)
        return self._run_duckdb(plan.sql, list(params))

    def end_transaction(self) -> None:
        """COMMIT or ROLLBACK: back to idle; cursors without HOLD close."""
        self.tx_status = b"I"
        for name in [n for n, c in self.cursors.items() if not c.with_hold]:
            self.close_cursor(name)

    def sql_cursor(self, name: str) -> Portal:
        cursor = self.cursors.get(_unquote(name))
        if cursor is None:
            raise StatementError("34000", f'cursor "{_unquote(name)}" does not exist')
        return cursor

    def close_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is not None and cursor is self.open_portal:
            self.open_portal = None

    def _duckdb_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one DuckDB call under the statement deadline; map its errors."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise StatementError("57014", "canceling statement due to statement timeout")
        timer = threading.Timer(remaining, self.cancel, args=("statement timeout",))
        timer.daemon = True
        with self._call_lock:
            self._in_call = True
            self._cancel_reason = None
        timer.start()
        try:
            return fn(*args)
        except duckdb.Error as e:
            if isinstance(e, duckdb.InterruptException):
                reason = self._cancel_reason or "user request"
                raise StatementError("57014", f"canceling statement due to {reason}") from e
            raise StatementError(_sqlstate_for(e), str(e)) from e
        finally:
            timer.cancel()
            with self._call_lock:
                self._in_call = False

    def _run_duckdb(self, sql: str, params: list[Any]) -> Result:
        assert self.cursor is not None
        self._park_open_portal()
        cursor = self.cursor
        self._duckdb_call(cursor.execute, sql, params)
        description = cursor.description or []
        columns = [(d[0], pgwire.pg_type_for_duckdb(d[1])) for d in description]
        max_rows = self.server.config.max_rows

        def rows() -> Iterator[Sequence[Any]]:
            count = 0
            while True:
                batch = self._duckdb_call(cursor.fetchmany, _BATCH_ROWS)
                if not batch:
                    return
                count += len(batch)
                if count > max_rows:
                    yield from batch[: len(batch) - (count - max_rows)]
                    raise StatementError(
                        "54000", f"result has more than {max_rows} rows, the tracedb serve limit",
                        hint="add a LIMIT, or aggregate",
                    )
                yield from batch

        return Result(columns, rows())

    def _park_open_portal(self) -> None:
        """Before DuckDB runs something else, buffer the rest of a suspended portal.

        An error met while buffering (row limit, timeout) is kept for the
        portal's next read instead of failing the statement about to run.
        """
        portal, self.open_portal = self.open_portal, None
        if portal is None or portal.done or portal.result is None or portal.buffered is not None:
            return
        buffered: list[Sequence[Any]] = []
        error: StatementError | None = None
        try:
            buffered.extend(portal.result.rows)
        except StatementError as e:
            error = e
        portal.buffered = buffered
        portal.result.rows = _replay(buffered, error)

    def columns(self, result: Result, formats: Sequence[int]) -> list[Column] | None:
        if result.columns is None:
            return None
        n = len(result.columns)
        if not formats:
            fmts = [0] * n
        elif len(formats) == 1:
            fmts = [formats[0]] * n
        elif len(formats) == n:
            fmts = list(formats)
        else:
            raise StatementError("08P01", f"bind message has {len(formats)} result formats but query has {n} columns")
        out = []
        for (name, pg_type), fmt in zip(result.columns, fmts):
            if fmt == 1 and pg_type.oid not in pgwire.BINARY_RESULT_OIDS:
                raise StatementError("0A000", f"binary format is not supported for column {name} ({pg_type.name})")
            out.append(Column(name, pg_type, fmt))
        return out

    def _send_rows(self, result: Result, columns: list[Column], limit: int = 0) -> tuple[int, bool]:
        """Send up to ``limit`` rows (0: all); returns (rows sent, exhausted)."""
        tz = self._zone()
        encoders = [
            (lambda v, t=c.pg_type: pgwire.encode_binary(v, t)) if c.format == 1
            else (lambda v, t=c.pg_type: pgwire.encode_text(v, t, tz))
            for c in columns
        ]
        sent = 0
        for row in result.rows:
            self.send(pgwire.data_row([None if v is None else enc(v) for enc, v in zip(encoders, row)]))
            sent += 1
            if limit and sent >= limit:
                return sent, False
        return sent, True

    # -- simple query protocol ---------------------------------------------

    def _on_query(self, body: bytes) -> None:
        sql = pgwire.Reader(body).cstr()
        log.debug("query: %s", sql)
        self.portals.pop("", None)
        try:
            plans = self.plan_all(sql)
            if not plans:
                self.send(pgwire.empty_query_response())
            for plan in plans:
                result = self.run_plan(plan, ())
                columns = self.columns(result, ())
                if columns is not None:
                    self.send(pgwire.row_description(columns))
                    sent, _ = self._send_rows(result, columns)
                else:
                    sent = 0
                self.send(pgwire.command_complete(result.command_tag(sent)))
        except StatementError as e:
            log.debug("statement failed (%s): %s", e.sqlstate, e.message)
            self.send_error(e)
        self.send(pgwire.ready_for_query(self.tx_status))
        self.flush()

    # -- extended query protocol -------------------------------------------

    def _on_parse(self, body: bytes) -> None:
        r = pgwire.Reader(body)
        name, sql = r.cstr(), r.cstr()
        oids = [r.int32() for _ in range(r.int16())]
        log.debug("parse %r: %s", name, sql)
        if name and name in self.prepared:
            raise StatementError("42P05", f'prepared statement "{name}" already exists')
        plans = self.plan_all(sql)
        if len(plans) > 1:
            raise StatementError("42601", "cannot insert multiple commands into a prepared statement")
        plan = plans[0] if plans else None
        n = plan.n_params if plan else 0
        self.prepared[name] = Prepared(plan, oids + [0] * max(0, n - len(oids)))
        self.send(pgwire.parse_complete())

    def _on_bind(self, body: bytes) -> None:
        r = pgwire.Reader(body)
        portal_name, statement_name = r.cstr(), r.cstr()
        formats = [r.int16() for _ in range(r.int16())]
        raw_params = []
        for _ in range(r.int16()):
            length = r.int32()
            raw_params.append(None if length < 0 else r.bytes(length))
        result_formats = [r.int16() for _ in range(r.int16())]
        prepared = self.prepared.get(statement_name)
        if prepared is None:
            raise StatementError("26000", f'prepared statement "{statement_name}" does not exist')
        oids = prepared.param_oids + [0] * max(0, len(raw_params) - len(prepared.param_oids))
        params = []
        for i, raw in enumerate(raw_params):
            fmt = formats[0] if len(formats) == 1 else (formats[i] if formats else 0)
            if raw is None:
                params.append(None)
                continue
            try:
                params.append(pgwire.decode_parameter(raw, oids[i], fmt))
            except (ValueError, UnicodeDecodeError, ArithmeticError) as e:
                raise StatementError("22P02", f"invalid value for parameter ${i + 1}: {e}") from e
        self.portals[portal_name] = Portal(prepared, params, result_formats)
        self.send(pgwire.bind_complete())

    def _start_portal(self, portal: Portal) -> None:
        if portal.result is None:
            plan = portal.prepared.plan
            assert plan is not None
            portal.result = self.run_plan(plan, portal.params)
            portal.columns = self.columns(portal.result, portal.result_formats)

    def _on_describe(self, body: bytes) -> None:
        r = pgwire.Reader(body)
        kind, name = r.byte(), r.cstr()
        if kind == b"S":
            prepared = self.prepared.get(name)
            if prepared is None:
                raise StatementError("26000", f'prepared statement "{name}" does not exist')
            self.send(pgwire.parameter_description([o or pgwire.TEXT.oid for o in prepared.param_oids]))
            columns = self._describe_statement(prepared)
        else:
            portal = self.portals.get(name)
            cursor = self.cursors.get(name)
            if portal is None and cursor is None:
                raise StatementError("34000", f'portal "{name}" does not exist')
            columns = None
            if portal is None:
                columns = cursor.columns if cursor is not None else None
            elif portal.prepared.plan is not None and portal.prepared.plan.returns_rows:
                self._start_portal(portal)
                columns = portal.columns
        self.send(pgwire.row_description(columns) if columns is not None else pgwire.no_data())

    def _describe_statement(self, prepared: Prepared) -> list[Column] | None:
        """Result columns of a statement before its parameters are known."""
        plan = prepared.plan
        if plan is None or not plan.returns_rows:
            return None
        if plan.intercept is not None:
            return self.columns(self.run_plan(plan, ()), ())
        assert self.cursor is not None
        self._park_open_portal()
        try:
            # Bound (not run) with NULL parameters: enough for the result's names and types.
            params = [None] * plan.n_params
            relation = self.cursor.sql(plan.sql, params=params) if params else self.cursor.sql(plan.sql)
        except duckdb.Error as e:
            raise StatementError(_sqlstate_for(e), str(e)) from e
        if relation is None:
            return None
        return [Column(name, pgwire.pg_type_for_duckdb(t)) for name, t in zip(relation.columns, relation.types)]

    def _on_execute(self, body: bytes) -> None:
        r = pgwire.Reader(body)
        name, limit = r.cstr(), r.int32()
        portal = self.portals.get(name)
        if portal is None:
            raise StatementError("34000", f'portal "{name}" does not exist')
        if portal.prepared.plan is None:
            self.send(pgwire.empty_query_response())
            return
        if portal.done:
            assert portal.result is not None
            self.send(pgwire.command_complete(portal.result.command_tag(portal.sent)))
            return
        self._start_portal(portal)
        assert portal.result is not None
        if portal.columns is None:
            portal.done = True
            self.send(pgwire.command_complete(portal.result.command_tag(0)))
            return
        if portal.prepared.plan.intercept is None:
            self.open_portal = portal  # its DuckDB result stays open while suspended
        self._deadline = time.monotonic() + self.statement_timeout()
        sent, exhausted = self._send_rows(portal.result, portal.columns, max(limit, 0))
        portal.sent += sent
        if exhausted:
            portal.done = True
            if self.open_portal is portal:
                self.open_portal = None
            self.send(pgwire.command_complete(portal.result.command_tag(portal.sent)))
        else:
            self.send(pgwire.portal_suspended())

    def _on_close(self, body: bytes) -> None:
        r = pgwire.Reader(body)
        kind, name = r.byte(), r.cstr()
        if kind == b"S":
            self.prepared.pop(name, None)
        else:
            portal = self.portals.pop(name, None)
            if portal is not None and portal is self.open_portal:
                self.open_portal = None
        self.send(pgwire.close_complete())

    def _on_sync(self, body: bytes) -> None:
        self._skip_until_sync = False
        if self.tx_status == b"I":
            # The implicit transaction ends: portals close (SQL cursors WITH HOLD stay).
            self.portals.clear()
            if not any(c is self.open_portal for c in self.cursors.values()):
                self.open_portal = None
        self.send(pgwire.ready_for_query(self.tx_status))
        self.flush()


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------


def _is_loopback(host: str) -> bool:
    if host in ("", "*"):
        return False
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as e:
        raise ServeError(f"cannot resolve host {host!r}: {e}") from e
    return all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("error while serving %s", client_address)  # the library never prints


class Server:
    """A threaded PostgreSQL-protocol server over one catalog (see the module docs).

    One DuckDB database instance, opened read-only and sandboxed at
    :meth:`start`, is shared; each client session gets its own cursor and
    thread. Raises :class:`ServeError` for an unsafe or impossible
    configuration; errors of clients and queries never escape.
    """

    def __init__(self, catalog_path: Path, warehouse: Path, config: ServeConfig = ServeConfig()) -> None:
        self.catalog_path = Path(catalog_path).absolute()
        self.warehouse = Path(warehouse).absolute()
        self.config = config
        if not self.catalog_path.is_file():
            raise ServeError(f"catalog {self.catalog_path} does not exist")
        if not self.warehouse.is_dir():
            raise ServeError(f"warehouse {self.warehouse} is not a directory")
        if config.auth_method not in AUTH_METHODS:
            raise ServeError(f"unknown auth_method {config.auth_method!r}; expected one of {', '.join(AUTH_METHODS)}")
        if config.statement_timeout_s <= 0 or config.max_rows <= 0:
            raise ServeError("statement_timeout_s and max_rows must be positive")
        if config.password is not None and not config.password:
            raise ServeError("the password must not be empty")
        if config.password is None and not _is_loopback(config.host):
            raise ServeError(
                f"refusing to listen on non-loopback address {config.host!r} without a password"
            )
        self.scram = (
            pgwire.ScramVerifier(config.password)
            if config.password is not None and config.auth_method == "scram-sha-256"
            else None
        )
        self._db: duckdb.DuckDBPyConnection | None = None
        self._generation: tuple[int, int] = (0, 0)
        self._tcp: _TCPServer | None = None
        self._thread: threading.Thread | None = None
        self._serving = threading.Event()
        self._lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._sessions: dict[int, Session] = {}
        self._next_pid = 1

    @property
    def port(self) -> int:
        """The port listened on (useful with ``ServeConfig(port=0)``); 0 before binding."""
        return self._tcp.server_address[1] if self._tcp is not None else 0

    def _bind(self) -> None:
        if self._tcp is not None:
            return
        self._db = self._open_generation()
        try:
            self.new_cursor().close()  # the compat macros must be valid in this DuckDB
        except duckdb.Error as e:
            self._db.close()
            self._db = None
            raise ServeError(f"cannot prepare PostgreSQL compatibility macros: {e}") from e
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    return  # already gone
                Session(server, self.request).run()

        host = self.config.host
        family = socket.AF_INET
        try:
            family = socket.getaddrinfo(host or None, self.config.port, proto=socket.IPPROTO_TCP)[0][0]
        except socket.gaierror as e:
            raise ServeError(f"cannot resolve host {host!r}: {e}") from e
        tcp_class = type("_TCPServer", (_TCPServer,), {"address_family": family})
        try:
            self._tcp = tcp_class((host, self.config.port), Handler)
        except OSError as e:
            self._db.close()
            self._db = None
            raise ServeError(f"cannot listen on {host}:{self.config.port}: {e}") from e

    def start(self) -> None:
        """Bind and serve in a background thread; returns once the port is listening."""
        self._bind()
        assert self._tcp is not None
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="tracedb-serve", daemon=True)
            self._thread.start()

    def serve_forever(self) -> None:
        """Bind (if :meth:`start` did not) and serve in the calling thread.

        Returns after :meth:`stop` (from another thread); a KeyboardInterrupt
        propagates. Either way the server is stopped on the way out.
        """
        try:
            if self._thread is not None:
                self._thread.join()
            else:
                self._bind()
                self._serve()
        finally:
            self.stop()

    def _serve(self) -> None:
        assert self._tcp is not None
        self._serving.set()
        try:
            self._tcp.serve_forever(poll_interval=0.2)
        finally:
            self._serving.clear()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, end every session, and close the catalog. Idempotent."""
        with self._stop_lock:
            tcp, self._tcp = self._tcp, None
            if tcp is not None:
                if self._serving.is_set():
                    tcp.shutdown()
                tcp.server_close()
            with self._lock:
                sessions = list(self._sessions.values())
            for session in sessions:
                session.close()
            deadline = time.monotonic() + timeout_s
            while self._sessions and time.monotonic() < deadline:  # each closes its cursor
                time.sleep(0.01)
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
            self._thread = None
            if self._db is not None:
                self._db.close()
                self._db = None

    def __enter__(self) -> "Server":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by sessions ---------------------------------------------------

    def _open_generation(self) -> duckdb.DuckDBPyConnection:
        """Open the catalog file as it is now.

        An ingest swaps in a new catalog file with ``os.replace``; an open
        instance keeps reading the old one. DuckDB caches one instance per
        path, so each generation is opened through a private hard link
        (removed once open: the open file keeps its inode alive).
        """
        st = os.stat(self.catalog_path)
        self._generation = (st.st_ino, st.st_mtime_ns)
        links = self.warehouse / ".serve"
        links.mkdir(exist_ok=True)
        link = links / f"catalog.{os.getpid()}.{st.st_ino}.{st.st_mtime_ns}.duckdb"
        link.unlink(missing_ok=True)
        os.link(self.catalog_path, link)
        try:
            return open_catalog(link, self.warehouse)
        finally:
            link.unlink(missing_ok=True)

    def _current_db(self) -> duckdb.DuckDBPyConnection:
        """The newest catalog generation; sessions already open keep theirs
        (their cursors hold the old instance until they end)."""
        if self._db is None:
            raise ConnectionAbortedError("the server is stopping")
        try:
            st = os.stat(self.catalog_path)
        except FileNotFoundError:
            return self._db
        if (st.st_ino, st.st_mtime_ns) != self._generation:
            with self._lock:
                if (st.st_ino, st.st_mtime_ns) != self._generation:
                    self._db = self._open_generation()
        return self._db

    def new_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of the shared, sandboxed database, with the compat macros."""
        cursor = self._current_db().cursor()
        for name, definition in COMPAT_MACROS.items():
            cursor.execute(f"CREATE OR REPLACE TEMP MACRO {name}{definition}")
        return cursor

    def register(self, session: Session) -> int:
        with self._lock:
            pid = self._next_pid
            self._next_pid += 1
            self._sessions[pid] = session
        return pid

    def unregister(self, session: Session) -> None:
        with self._lock:
            self._sessions.pop(session.process_id, None)

    def cancel(self, process_id: int, secret_key: int) -> None:
        with self._lock:
            session = self._sessions.get(process_id)
        if session is not None and secrets.compare_digest(
            session.secret_key.to_bytes(4, "big"), (secret_key & 0xFFFFFFFF).to_bytes(4, "big")
        ):
            session.cancel("user request")
