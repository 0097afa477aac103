"""PostgreSQL 15 catalog rows that JDBC, ODBC and BI clients read and DuckDB lacks.

pgjdbc's ``DatabaseMetaData`` (DBeaver, Metabase, Tableau's JDBC path),
psqlODBC's catalog calls and SQLAlchemy look types up by PostgreSQL's fixed
OIDs and names (``name`` under ``pg_catalog`` for
``getClientInfoProperties``, ``int4``/``_int4``... for ``getTypeInfo``),
owners in ``pg_roles``, privileges in ACL strings and limits in
``pg_settings``. This module holds those rows as SELECTs over VALUES lists;
:mod:`tracedb.serve.pgcompat` adds them to a query as CTEs when it names
them, so nothing is created in the warehouse and nothing of the host shows.

The served role is ``tracedb`` (OID 10, PostgreSQL's bootstrap role), owner of
every relation, holding SELECT only: ACL ``{tracedb=r/tracedb}``.
"""

from __future__ import annotations

from typing import Iterable

from tracedb.sqltext import sql_literal

ROLE = "tracedb"
ROLE_OID = 10  # PostgreSQL's bootstrap superuser OID; tracedb's one role owns everything
PG_CATALOG_OID = 11  # fixed in PostgreSQL
RELATION_ACL = f"{{{ROLE}=r/{ROLE}}}"  # SELECT for the one role, granted by itself

#: PostgreSQL 15 base types that DuckDB values are sent as (see
#: :data:`tracedb.serve.wire.DUCKDB_TO_PG`) plus the ones catalogs use:
#: (oid, name, typlen, typbyval, typcategory, array type oid).
BASE_TYPES: tuple[tuple[int, str, int, bool, str, int], ...] = (
    (16, "bool", 1, True, "B", 1000),
    (17, "bytea", -1, False, "U", 1001),
    (18, "char", 1, True, "S", 1002),
    (19, "name", 64, False, "S", 1003),
    (20, "int8", 8, True, "N", 1016),
    (21, "int2", 2, True, "N", 1005),
    (23, "int4", 4, True, "N", 1007),
    (25, "text", -1, False, "S", 1009),
    (26, "oid", 4, True, "N", 1028),
    (114, "json", -1, False, "U", 199),
    (700, "float4", 4, True, "N", 1021),
    (701, "float8", 8, True, "N", 1022),
    (1042, "bpchar", -1, False, "S", 1014),
    (1043, "varchar", -1, False, "S", 1015),
    (1082, "date", 4, True, "D", 1182),
    (1083, "time", 8, True, "D", 1183),
    (1114, "timestamp", 8, True, "D", 1115),
    (1184, "timestamptz", 8, True, "D", 1185),
    (1186, "interval", 16, False, "T", 1187),
    (1266, "timetz", 12, False, "D", 1270),
    (1700, "numeric", -1, False, "N", 1231),
    (2950, "uuid", 16, False, "U", 2951),
    (3802, "jsonb", -1, False, "U", 3807),
)

#: DuckDB gives its types without a PostgreSQL counterpart the OID 16384 +
#: LogicalTypeId; values of those types are sent as the PostgreSQL type here
#: (as :data:`tracedb.serve.wire.DUCKDB_TO_PG` sends them); any other such
#: OID (LIST, STRUCT, MAP, UNION: JSON text) is ``text``.
DUCKDB_TYPE_OIDS: dict[int, int] = {
    16384 + 11: 21,  # TINYINT -> int2
    16384 + 20: 1114, 16384 + 21: 1114, 16384 + 22: 1114,  # TIMESTAMP_S/MS/NS -> timestamp
    16384 + 28: 21,  # UTINYINT -> int2
    16384 + 29: 23,  # USMALLINT -> int4
    16384 + 30: 20,  # UINTEGER -> int8
    16384 + 31: 1700, 16384 + 49: 1700, 16384 + 50: 1700,  # UBIGINT, UHUGEINT, HUGEINT -> numeric
    16384 + 25: 1043,  # ENUM -> varchar
}


def _literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return sql_literal(str(value))


def _values(rows: Iterable[tuple[object, ...]], columns: str, select: str = "*") -> str:
    body = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
    return f"SELECT {select} FROM (VALUES {body}) AS v({columns})"


def _type_rows() -> Iterable[tuple[object, ...]]:
    for oid, name, length, byval, category, array in BASE_TYPES:
        yield (oid, name, length, byval, category, 0, array, f"{name}in", f"{name}out", "-", ",")
        yield (array, f"_{name}", -1, False, "A", oid, 0, "array_in", "array_out", "array_subscript_handler", ",")


#: ``pg_catalog.pg_type``: every column PostgreSQL 15 has, the base types above and their arrays.
PG_TYPE = (
    "SELECT oid, typname, " + str(PG_CATALOG_OID) + "::BIGINT AS typnamespace, " + str(ROLE_OID)
    + "::BIGINT AS typowner, typlen, typbyval, 'b' AS typtype, typcategory, false AS typispreferred,"
    " true AS typisdefined, typdelim, 0::BIGINT AS typrelid, typsubscript, typelem, typarray, typinput, typoutput,"
    " NULL::VARCHAR AS typreceive, NULL::VARCHAR AS typsend, '-' AS typmodin, '-' AS typmodout,"
    " '-' AS typanalyze, CASE WHEN typlen = 8 THEN 'd' WHEN typlen IN (4, -1) THEN 'i' WHEN typlen = 2 THEN 's'"
    " ELSE 'c' END AS typalign, CASE WHEN typlen = -1 THEN 'x' ELSE 'p' END AS typstorage, false AS typnotnull,"
    " 0::BIGINT AS typbasetype, -1 AS typtypmod, 0 AS typndims,"
    " CASE WHEN typcategory = 'S' AND typname <> 'name' AND typname <> 'char' THEN 100 ELSE 0 END::BIGINT"
    " AS typcollation, NULL::VARCHAR AS typdefaultbin, NULL::VARCHAR AS typdefault, NULL::VARCHAR AS typacl"
    " FROM (" + _values(_type_rows(), "oid, typname, typlen, typbyval, typcategory, typelem, typarray, typinput,"
                        " typoutput, typsubscript, typdelim") + ")"
)

#: ``pg_catalog.pg_namespace``: the warehouse's schemas plus pg_catalog, where clients look types up.
PG_NAMESPACE = (
    f"SELECT oid, nspname, {ROLE_OID}::BIGINT AS nspowner, NULL::VARCHAR AS nspacl FROM pg_catalog.pg_namespace"
    f" UNION ALL SELECT {PG_CATALOG_OID}, 'pg_catalog', {ROLE_OID}, NULL"
)

#: ``pg_catalog.pg_roles`` (and ``pg_authid``'s public columns): the one role.
PG_ROLES = (
    f"SELECT '{ROLE}' AS rolname, false AS rolsuper, true AS rolinherit, false AS rolcreaterole,"
    " false AS rolcreatedb, true AS rolcanlogin, false AS rolreplication, -1 AS rolconnlimit,"
    " '********' AS rolpassword, NULL::TIMESTAMPTZ AS rolvaliduntil, false AS rolbypassrls,"
    f" NULL::VARCHAR AS rolconfig, {ROLE_OID}::BIGINT AS oid"
)

#: ``pg_catalog.pg_user``: the one role, as psqlODBC and older tools read it.
PG_USER = (
    f"SELECT '{ROLE}' AS usename, {ROLE_OID}::BIGINT AS usesysid, false AS usecreatedb, false AS usesuper,"
    " false AS userepl, false AS usebypassrls, '********' AS passwd, NULL::TIMESTAMPTZ AS valuntil,"
    " NULL::VARCHAR AS useconfig"
)

#: ``pg_catalog.pg_matviews``: tracedb has no materialized views (Metabase unions it with pg_views).
PG_MATVIEWS = ("SELECT NULL::VARCHAR AS schemaname, NULL::VARCHAR AS matviewname, NULL::VARCHAR AS matviewowner,"
               " NULL::VARCHAR AS tablespace, false AS hasindexes, true AS ispopulated, NULL::VARCHAR AS definition"
               " WHERE false")

#: ``pg_catalog.pg_stat_user_tables``: one row a table, ``n_live_tup`` being DuckDB's estimate of
#: its rows (Metabase's and DBeaver's row count estimate); no scans are counted.
PG_STAT_USER_TABLES = (
    "SELECT table_oid AS relid, schema_name AS schemaname, table_name AS relname, 0::BIGINT AS seq_scan,"
    " 0::BIGINT AS seq_tup_read, 0::BIGINT AS idx_scan, 0::BIGINT AS idx_tup_fetch, 0::BIGINT AS n_tup_ins,"
    " 0::BIGINT AS n_tup_upd, 0::BIGINT AS n_tup_del, 0::BIGINT AS n_tup_hot_upd,"
    " estimated_size::BIGINT AS n_live_tup, 0::BIGINT AS n_dead_tup, NULL::TIMESTAMPTZ AS last_vacuum,"
    " NULL::TIMESTAMPTZ AS last_autovacuum, NULL::TIMESTAMPTZ AS last_analyze,"
    " NULL::TIMESTAMPTZ AS last_autoanalyze FROM duckdb_tables() WHERE NOT internal"
)

#: ``pg_catalog.pg_inherits``: no table inherits another (DBeaver reads it with every table).
PG_INHERITS = ("SELECT NULL::BIGINT AS inhrelid, NULL::BIGINT AS inhparent, NULL::INTEGER AS inhseqno,"
               " false AS inhdetachpending WHERE false")

#: Planner limits clients read from ``pg_settings`` (PostgreSQL 15's compiled-in values).
LIMITS = {"max_index_keys": "32", "max_function_args": "100", "block_size": "8192"}


def pg_settings(settings: dict[str, str]) -> str:
    """``pg_catalog.pg_settings`` over the server's PostgreSQL settings (defaults) and :data:`LIMITS`."""
    rows = [(name, value, "tracedb serve", "user" if name not in LIMITS else "internal", "string", "default",
             value, value, False) for name, value in sorted({**settings, **LIMITS}.items())]
    return _values(rows, "name, setting, category, context, vartype, source, boot_val, reset_val, pending_restart",
                   "name, setting, NULL::VARCHAR AS unit, category, '' AS short_desc, NULL::VARCHAR AS extra_desc,"
                   " context, vartype, source, NULL::VARCHAR AS min_val, NULL::VARCHAR AS max_val,"
                   " NULL::VARCHAR[] AS enumvals, boot_val, reset_val, NULL::VARCHAR AS sourcefile,"
                   " NULL::INTEGER AS sourceline, pending_restart")
