"""PostgreSQL compatibility: what clients send that DuckDB does not speak, and the settings they ask for.

DuckDB already provides ``pg_catalog`` (pg_class, pg_namespace, pg_attribute,
pg_type, ...) and ``information_schema``; what clients send beyond that
(psql's ``\\d`` family, SQLAlchemy's inspector, Grafana's pickers) is handled
by three documented tables, and nothing is ever created in the catalog:

- :data:`REWRITES`: rewrites of PostgreSQL-only syntax into DuckDB syntax
  (``OPERATOR(pg_catalog.~)``, ``COLLATE pg_catalog.default``,
  ``'x'::regclass``, ``pg_catalog.fn(`` ...), applied to the code of a query
  (never inside literals or comments) *before* the statement gate sees it.
  They run on compacted text (:func:`tracedb.serve.lexer.compact`: every run
  of blanks is one character) and every pattern is bounded, so their cost is
  linear in the length of the query;
- :data:`COMPAT_MACROS`: temporary macros, created in each session, for
  PostgreSQL functions DuckDB lacks or answers differently (``version()``,
  ``format_type``, ``obj_description``, ``quote_ident`` ...);
- :data:`COMPAT_RELATIONS`: catalog relations with the columns PostgreSQL
  clients expect, added to a query as CTEs when it mentions them (again
  before the gate); the PostgreSQL 15 rows JDBC and ODBC drivers look up
  (types, roles, settings) are in :mod:`tracedb.serve.pgcatalog`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import duckdb

from tracedb.serve import lexer, pgcatalog
from tracedb.serve.config import PG_VERSION
from tracedb.serve.gate import DENIED_NAMES
from tracedb.views import SEARCH_PATH


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
        Setting("search_path", ", ".join(SEARCH_PATH)),  # where DuckDB looks (server.new_cursor)
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
    + " ELSE NULL::VARCHAR END",
    "format_type": "(type_oid_, typemod_) AS CASE \"system\".pg_catalog.format_type(type_oid_, typemod_) "
    + " ".join(f"WHEN '{duck}' THEN '{pg}'" for duck, pg in _FORMAT_TYPE_NAMES.items())
    + " ELSE \"system\".pg_catalog.format_type(type_oid_, typemod_) END",
    "parse_ident": "(name_) AS list_transform(string_split(name_, '.'), lambda part_: trim(part_, '\"'))",
    "pg_data_type": "(duckdb_type_) AS CASE WHEN duckdb_type_ LIKE 'DECIMAL%' THEN 'numeric'"
    " WHEN duckdb_type_ LIKE '%]' THEN 'ARRAY'"
    " WHEN regexp_matches(duckdb_type_, '^(STRUCT|MAP|UNION)') THEN 'text' ELSE CASE duckdb_type_ "
    + " ".join(f"WHEN '{duck}' THEN '{pg}'" for duck, pg in _DATA_TYPE_NAMES.items())
    + " ELSE lower(duckdb_type_) END END",
    # The one role reads every relation and column and may use every schema, nothing else.
    "has_table_privilege": "(table_, privilege_) AS regexp_matches(lower(privilege_), '^\\s*select'),"
    " (user_, table_, privilege_) AS regexp_matches(lower(privilege_), '^\\s*select')",
    "has_any_column_privilege": "(table_, privilege_) AS regexp_matches(lower(privilege_), '^\\s*select'),"
    " (user_, table_, privilege_) AS regexp_matches(lower(privilege_), '^\\s*select')",
    "has_column_privilege": "(table_, column_, privilege_) AS regexp_matches(lower(privilege_), '^\\s*select'),"
    " (user_, table_, column_, privilege_) AS regexp_matches(lower(privilege_), '^\\s*select')",
    "has_schema_privilege": "(schema_, privilege_) AS regexp_matches(lower(privilege_), '^\\s*usage'),"
    " (user_, schema_, privilege_) AS regexp_matches(lower(privilege_), '^\\s*usage')",
    "regproc_name": "(name_) AS string_split(name_, '.')[-1]",
    "_pg_expandarray": "(array_) AS unnest(list_transform(range(1, len(array_) + 1),"
    " lambda i_: {'x': array_[i_], 'n': i_}))",
    "regclass_oid": "(name_) AS (SELECT max(oid) FROM pg_catalog.pg_class"
    " WHERE relname = trim(string_split(name_, '.')[-1], '\"'))",
    # On the search path (psql's \dt, \dv list those; tracedb_meta's tables only when named).
    "pg_table_is_visible": "(relation_oid_) AS coalesce((SELECT bool_or(list_contains(["
    + ", ".join(f"'{schema}'" for schema in SEARCH_PATH)
    + "], nsp_.nspname)) FROM pg_catalog.pg_class cls_ JOIN pg_catalog.pg_namespace nsp_"
    " ON cls_.relnamespace = nsp_.oid WHERE cls_.oid = relation_oid_), false)",  # (the caller's c.oid is substituted)
}

#: PostgreSQL catalog relations that DuckDB lacks, or has with fewer columns or
#: DuckDB-style values: qualified name -> SELECT. A statement that mentions one
#: gets it as a CTE (``pg_catalog.X``: named ``X``, so unqualified references
#: match too; ``information_schema.X``: named ``information_schema_X``), so
#: nothing is created in the database and listings stay exactly the catalog's.
COMPAT_RELATIONS: dict[str, str] = {
    "pg_catalog.pg_class": "SELECT * REPLACE ('d' AS relreplident, CAST(reloptions AS VARCHAR[]) AS reloptions,"
    f" {pgcatalog.ROLE_OID}::BIGINT AS relowner, '{pgcatalog.RELATION_ACL}' AS relacl),"
    " false AS relforcerowsecurity FROM pg_catalog.pg_class",
    "pg_catalog.pg_attribute": f"SELECT * REPLACE ('p' AS attstorage, '{pgcatalog.RELATION_ACL}' AS attacl, CASE "
    + " ".join(f"WHEN atttypid = {duck} THEN {pg}" for duck, pg in pgcatalog.DUCKDB_TYPE_OIDS.items())
    + " WHEN atttypid >= 16384 THEN 25 ELSE atttypid END::BIGINT AS atttypid) FROM pg_catalog.pg_attribute",
    "pg_catalog.pg_description": "SELECT objoid,"
    " (SELECT max(oid) FROM pg_catalog.pg_class WHERE relname = 'pg_class') AS classoid,"
    " objsubid, description FROM pg_catalog.pg_description",
    "pg_catalog.pg_index": "SELECT *, false AS indnullsnotdistinct FROM pg_catalog.pg_index",
    "pg_catalog.pg_opclass": "SELECT NULL::BIGINT AS oid, NULL::VARCHAR AS opcname, NULL::BOOLEAN AS opcdefault"
    " WHERE false",
    "pg_catalog.pg_database": "SELECT *, 6 AS encoding, 'C' AS datcollate, 'C' AS datctype,"
    " NULL::VARCHAR AS daticulocale, 'c' AS datlocprovider, NULL::VARCHAR[] AS datacl, 0 AS dattablespace, 0 AS datdba,"
    " -1 AS datconnlimit FROM pg_catalog.pg_database",
    "pg_catalog.pg_type": pgcatalog.PG_TYPE,
    "pg_catalog.pg_namespace": pgcatalog.PG_NAMESPACE,
    "pg_catalog.pg_roles": pgcatalog.PG_ROLES,
    "pg_catalog.pg_user": pgcatalog.PG_USER,
    "pg_catalog.pg_matviews": pgcatalog.PG_MATVIEWS,
    "pg_catalog.pg_inherits": pgcatalog.PG_INHERITS,
    "pg_catalog.pg_stat_user_tables": pgcatalog.PG_STAT_USER_TABLES,
    "pg_catalog.pg_settings": pgcatalog.pg_settings({s.name: s.default for s in SETTINGS.values()}),
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
        "information-schema-function",
        re.compile(r"\binformation_schema\s*\.\s*(_pg_expandarray)\s*\(", re.IGNORECASE),
        lambda m: f"{m.group(1)}(",
        "pgjdbc's key and index queries call information_schema._pg_expandarray (a session macro)",
    ),
    Rewrite(
        "grafana-search-path",
        re.compile(
            r"SELECT\s+CASE\s+WHEN\s+trim\(s\[i\]\)\s*=\s*\0\d+\0\s+THEN\s+user\s+ELSE\s+trim\(s\[i\]\)\s+END"
            r"\s+FROM\s+generate_series\(.{1,400}?\)\s+as\s+i\s*,"
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
        "regproc-literal",
        re.compile(r"(\0\d+\0)\s*::\s*(?:pg_catalog\s*\.\s*)?regproc\b", re.IGNORECASE),
        lambda m: f"regproc_name({m.group(1)})",
        "'pg_catalog.array_in'::regproc (pgjdbc's array test) is the function's name as pg_type holds it",
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

_PLACEHOLDER = re.compile(r"\0(\d+)\0")


def _outside_literals(sql: str, transform: Callable[[str], str]) -> str:
    """Apply ``transform`` to ``sql`` with string literals and comments held aside
    as placeholders (``\\0<n>\\0``); quoted names stay in the code."""
    kept: list[str] = []
    code = []
    for seg in lexer.segments(sql):
        if seg.kind in (lexer.STRING, lexer.COMMENT):
            kept.append(seg.text)
            code.append(f"\0{len(kept) - 1}\0")
        else:
            code.append(seg.text)
    return _PLACEHOLDER.sub(lambda m: kept[int(m.group(1))], transform("".join(code)))


def rewrite(sql: str) -> str:
    """Apply :data:`REWRITES` to ``sql`` (compacted first) outside string literals and comments."""

    # The literal placeholders are visible to the rules (see "regclass-literal").
    def apply(code: str) -> str:
        for rule in REWRITES:
            code = rule.pattern.sub(rule.replacement, code)  # type: ignore[arg-type]
        return code

    return _outside_literals(lexer.compact(sql), apply)


def _compat_cte_name(qualified: str) -> str:
    """The CTE for a compat relation: ``pg_catalog.X`` is ``X`` unless the gate denies that name
    (``pg_settings``: DuckDB's settings), then ``X_compat``; ``schema.X`` is ``schema_X``."""
    schema, _, name = qualified.partition(".")
    if schema != "pg_catalog":
        return f"{schema}_{name}"
    return f"{name}_compat" if name in DENIED_NAMES else name


def _name_pattern(name: str) -> str:
    return rf"(?:{name}|\"{name}\")"  # as written bare or double-quoted (Metabase quotes every name)


_COMPAT_CTES = {_compat_cte_name(q): sql for q, sql in COMPAT_RELATIONS.items()}

_COMPAT_RELATION_REF = re.compile(
    r"(?<![\w.\"])(?:"
    + "|".join(
        rf"(?:{_name_pattern('pg_catalog')}\s*\.\s*)?{_name_pattern(q.partition('.')[2])}"
        if q.startswith("pg_catalog.")
        else rf"{_name_pattern(q.partition('.')[0])}\s*\.\s*{_name_pattern(q.partition('.')[2])}"
        for q in sorted(COMPAT_RELATIONS)
    )
    + r")(?![\w\"])(?!\s*\()",
    re.IGNORECASE,
)
_SELECT_START = re.compile(r"^\s*(?:SELECT|WITH|FROM)\b", re.IGNORECASE)
_WITH_PREFIX = re.compile(r"^\s*WITH(\s+RECURSIVE)?\s+", re.IGNORECASE)


def add_compat_relations(sql: str) -> str:
    """Give a SELECT the :data:`COMPAT_RELATIONS` it mentions as CTEs."""
    used: list[str] = []

    def unqualify(code: str) -> str:
        def one(m: re.Match[str]) -> str:
            text = re.sub(r"[\s\"]+", "", m.group(0)).lower()
            name = _compat_cte_name(text if "." in text else "pg_catalog." + text)
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
