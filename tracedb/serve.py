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
clients send beyond that is handled in two documented tables below:

- :data:`REWRITES`: token-level rewrites of PostgreSQL-only syntax into
  DuckDB syntax (``OPERATOR(pg_catalog.~)``, ``COLLATE pg_catalog.default``,
  ``::regclass`` ...), applied outside string literals and comments;
- :data:`INTERCEPTS`: statements answered by the server itself instead of
  DuckDB: session commands (``SET``/``RESET``/``SHOW`` of client settings,
  ``BEGIN``/``COMMIT``/``ROLLBACK``, ``DEALLOCATE``, ``DISCARD``).

Plus :data:`COMPAT_MACROS`: temporary macros created in every session for
PostgreSQL functions DuckDB lacks or answers differently (``version()``,
``pg_get_userbyid`` ...). Temporary objects shadow DuckDB's built-in
``pg_catalog`` for unqualified names, which is why the rewrites drop the
``pg_catalog.`` qualifier from the names that have a compat definition.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
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
from tracedb.pgwire import Column, PgType, ProtocolError

log = logging.getLogger(__name__)

#: The PostgreSQL version reported to clients; psql and drivers pick their
#: catalog queries by it.
PG_VERSION = "15.0"


class ServeError(Exception):
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
        db = duckdb.connect(str(catalog_path), read_only=True)
    except duckdb.Error as e:
        raise ServeError(f"cannot open catalog {catalog_path} read-only: {e}") from e
    directories = {str(warehouse.absolute()).rstrip(os.sep) + os.sep, str(warehouse.resolve()).rstrip(os.sep) + os.sep}
    dir_list = ", ".join(_sql_string(d) for d in sorted(directories))
    db.execute("SET autoinstall_known_extensions = false")
    db.execute("SET allow_community_extensions = false")
    db.execute(f"SET allowed_directories = [{dir_list}]")
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
class Rewrite:
    """Replace PostgreSQL-only syntax by its DuckDB equivalent (outside literals and comments)."""

    name: str
    pattern: re.Pattern[str]
    replacement: str | Callable[[re.Match[str]], str]
    why: str


#: Temporary scalar macros created in every session (``CREATE TEMP MACRO name...``) for
#: PostgreSQL functions that DuckDB lacks or answers differently. They shadow
#: DuckDB's built-ins for unqualified calls; the ``compat-qualifier`` rewrite turns
#: ``pg_catalog.name(`` into ``name(``. Macros never show up in table listings.
COMPAT_MACROS: dict[str, str] = {
    "version": f"() AS 'PostgreSQL {PG_VERSION} (tracedb serve, DuckDB {duckdb.__version__})'",
    "pg_get_userbyid": "(role_oid) AS 'tracedb'",
}

#: PostgreSQL catalog relations that DuckDB lacks, or has with fewer columns:
#: name -> SELECT. A statement that mentions one (qualified or not) gets it as a
#: CTE of that name, so nothing is created in the database and listings
#: (information_schema, SHOW TABLES, pg_class) stay exactly the catalog's.
COMPAT_RELATIONS: dict[str, str] = {
    "pg_class": "SELECT * REPLACE ('d' AS relreplident), false AS relforcerowsecurity FROM pg_catalog.pg_class",
}

_COMPAT_MACRO_NAMES = "|".join(sorted(COMPAT_MACROS))

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
        "compat-qualifier",
        re.compile(rf"\bpg_catalog\s*\.\s*({_COMPAT_MACRO_NAMES})\s*\(", re.IGNORECASE),
        lambda m: f"{m.group(1)}(",
        "let the session's compat macros shadow DuckDB's pg_catalog",
    ),
)

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

    def apply(code: str) -> str:
        for rule in REWRITES:
            code = rule.pattern.sub(rule.replacement, code)  # type: ignore[arg-type]
        return code

    return _outside_literals(sql, apply)


_COMPAT_RELATION_REF = re.compile(
    rf"\b(?:pg_catalog\s*\.\s*)?({'|'.join(sorted(COMPAT_RELATIONS))})\b(?!\s*\()", re.IGNORECASE
)
_WITH_PREFIX = re.compile(r"^\s*WITH(\s+RECURSIVE)?\s+", re.IGNORECASE)


def add_compat_relations(sql: str) -> str:
    """Give a SELECT the :data:`COMPAT_RELATIONS` it mentions as CTEs."""
    used: list[str] = []

    def unqualify(code: str) -> str:
        def one(m: re.Match[str]) -> str:
            name = m.group(1).lower()
            if name not in used:
                used.append(name)
            return name

        return _COMPAT_RELATION_REF.sub(one, code)

    sql = _outside_literals(sql, unqualify)
    if not used:
        return sql
    ctes = ", ".join(f"{name} AS ({COMPAT_RELATIONS[name]})" for name in used)
    with_prefix = _WITH_PREFIX.match(sql)
    if with_prefix:
        return f"WITH{with_prefix.group(1) or ''} {ctes}, {sql[with_prefix.end():]}"
    return f"WITH {ctes} {sql}"


@dataclass
class Result:
    """What a statement returns: columns (None: no rows), rows, and the command tag.

    ``tag`` None means ``SELECT <number of rows sent>``.
    """

    columns: list[tuple[str, PgType]] | None
    rows: Iterator[Sequence[Any]] = field(default_factory=lambda: iter(()))
    tag: str | None = None


def _command(tag: str) -> Result:
    return Result(None, iter(()), tag)


def _one_value(name: str, value: str) -> Result:
    return Result([(name, pgwire.TEXT)], iter([(value,)]), "SHOW")


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

_NAME = r"(?:[A-Za-z_][\w.]*|\"[^\"]+\")"

#: Statements the server answers itself: (name, pattern over the statement
#: without comments and trailing ';', handler). Tried in order.
INTERCEPTS: list[tuple[str, re.Pattern[str], Callable[["Session", re.Match[str]], Result]]] = []


def intercept(name: str, pattern: str) -> Callable[[Callable[["Session", re.Match[str]], Result]], Callable[["Session", re.Match[str]], Result]]:
    """Register a handler in :data:`INTERCEPTS` (the pattern is matched case-insensitively)."""

    def register(handler: Callable[["Session", re.Match[str]], Result]) -> Callable[["Session", re.Match[str]], Result]:
        INTERCEPTS.append((name, re.compile(pattern, re.IGNORECASE | re.DOTALL), handler))
        return handler

    return register


@intercept("begin", r"^(?:BEGIN|START\s+TRANSACTION)\b.*$")
def _begin(session: "Session", m: re.Match[str]) -> Result:
    """Transactions are accepted as no-ops: the session is read-only anyway."""
    if session.tx_status == b"I":
        session.tx_status = b"T"
    return _command("BEGIN")


@intercept("commit", r"^(?:COMMIT|END)(?:\s+(?:WORK|TRANSACTION))?(?:\s+AND\s+(?:NO\s+)?CHAIN)?$")
def _commit(session: "Session", m: re.Match[str]) -> Result:
    failed = session.tx_status == b"E"
    session.tx_status = b"I"
    return _command("ROLLBACK" if failed else "COMMIT")


@intercept("rollback-to", r"^ROLLBACK(?:\s+(?:WORK|TRANSACTION))?\s+TO\b.*$")
def _rollback_to(session: "Session", m: re.Match[str]) -> Result:
    if session.tx_status == b"E":
        session.tx_status = b"T"
    return _command("ROLLBACK")


@intercept("rollback", r"^(?:ROLLBACK|ABORT)(?:\s+(?:WORK|TRANSACTION))?(?:\s+AND\s+(?:NO\s+)?CHAIN)?$")
def _rollback(session: "Session", m: re.Match[str]) -> Result:
    session.tx_status = b"I"
    return _command("ROLLBACK")


@intercept("savepoint", r"^(SAVEPOINT|RELEASE)\b.*$")
def _savepoint(session: "Session", m: re.Match[str]) -> Result:
    return _command(m.group(1).upper())


@intercept("set-transaction", r"^SET\s+(?:SESSION\s+CHARACTERISTICS\s+AS\s+)?TRANSACTION\b.*$")
def _set_transaction(session: "Session", m: re.Match[str]) -> Result:
    return _command("SET")


@intercept("set-time-zone", r"^SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(?P<value>.+)$")
def _set_time_zone(session: "Session", m: re.Match[str]) -> Result:
    session.set_setting("timezone", m.group("value"))
    return _command("SET")


@intercept("set", rf"^SET\s+(?:SESSION\s+|LOCAL\s+)?(?P<name>{_NAME})\s*(?:=|\s+TO\s+)\s*(?P<value>.+)$")
def _set(session: "Session", m: re.Match[str]) -> Result:
    session.set_setting(m.group("name"), m.group("value"))
    return _command("SET")


@intercept("reset", rf"^RESET\s+(?P<name>ALL|{_NAME})$")
def _reset(session: "Session", m: re.Match[str]) -> Result:
    name = m.group("name").strip('"').lower()
    if name == "all":
        session.settings.clear()
    else:
        session.set_setting(name, "DEFAULT")
    return _command("RESET")


@intercept("show", rf"^SHOW\s+(?P<name>{_NAME}|TIME\s+ZONE|TRANSACTION\s+ISOLATION\s+LEVEL)$")
def _show(session: "Session", m: re.Match[str]) -> Result | None:
    name = re.sub(r"\s+", " ", m.group("name").strip('"').lower())
    name = {"time zone": "timezone", "transaction isolation level": "transaction_isolation"}.get(name, name)
    if name == "all":
        rows = [(s.name, session.setting(key), "") for key, s in sorted(SETTINGS.items())]
        return Result([("name", pgwire.TEXT), ("setting", pgwire.TEXT), ("description", pgwire.TEXT)], iter(rows), "SHOW")
    if name not in SETTINGS:
        return None  # not a PostgreSQL parameter: DuckDB's SHOW (SHOW TABLES, SHOW events)
    return _one_value(name, session.setting(name))


@intercept("deallocate", rf"^DEALLOCATE\s+(?:PREPARE\s+)?(?P<name>ALL|{_NAME})$")
def _deallocate(session: "Session", m: re.Match[str]) -> Result:
    name = m.group("name")
    if name.upper() == "ALL":
        session.prepared.clear()
        return _command("DEALLOCATE ALL")
    session.prepared.pop(name.strip('"'), None)
    return _command("DEALLOCATE")


@intercept("discard", r"^DISCARD\s+(?P<what>ALL|PLANS|SEQUENCES|TEMP|TEMPORARY)$")
def _discard(session: "Session", m: re.Match[str]) -> Result:
    what = m.group("what").upper()
    if what == "ALL":
        session.prepared.clear()
        session.portals.clear()
        session.settings.clear()
    return _command(f"DISCARD {what}")


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
    handler: Callable[["Session", re.Match[str]], Result | None] | None = None
    match: re.Match[str] | None = None

    @property
    def returns_rows(self) -> bool:
        return self.handler is None or self.handler in (_show,)


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


_BATCH_ROWS = 1000
_FLUSH_BYTES = 64 * 1024


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
        self.portals: dict[str, Portal] = {}
        self._skip_until_sync = False
        self._open_portal: Portal | None = None
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
        except (OSError, ValueError):  # the client went away (ValueError: closed file)
            pass
        except Exception:  # a bug: keep serving the other clients
            log.exception("session ended by an unexpected error")
        finally:
            self.close()
            self.server.unregister(self)
            if self.cursor is not None:
                try:
                    self.cursor.close()
                except duckdb.Error:
                    pass

    def close(self) -> None:
        """Drop the connection and stop its query (also called by :meth:`Server.stop`)."""
        self.cancel("connection closed")
        for closer in (self.rfile.close, lambda: self.sock.shutdown(socket.SHUT_RDWR), self.sock.close):
            try:
                closer()
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
                self.send_error(e)
                if tag == b"Q":
                    self.send(pgwire.ready_for_query(self.tx_status))
                    self.flush()
                else:
                    self._skip_until_sync = True

    # -- planning and running ----------------------------------------------

    def plan_all(self, sql: str) -> list[Plan]:
        """Split ``sql`` into statements and decide, for each, who answers it."""
        assert self.cursor is not None
        text = rewrite(sql)
        if not _strip_statement(text):
            return []
        try:
            statements = self.cursor.extract_statements(text)
        except duckdb.Error as e:
            # Not DuckDB syntax: perhaps a PostgreSQL session command.
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
        for _name, pattern, handler in INTERCEPTS:
            m = pattern.match(text)
            if m is not None:
                if handler is _show and re.sub(r"\s+", " ", m.group("name").strip('"').lower()) not in (
                    *SETTINGS, "all", "time zone", "transaction isolation level"):
                    return None
                return Plan(text, handler=handler, match=m)
        return None

    def run_plan(self, plan: Plan, params: Sequence[Any]) -> Result:
        """Start a statement: intercepted ones answer at once, DuckDB ones stream."""
        if self.tx_status == b"E" and plan.handler not in (_commit, _rollback, _rollback_to):
            raise StatementError("25P02", "current transaction is aborted, commands ignored until end of transaction block")
        if plan.handler is not None:
            assert plan.match is not None
            result = plan.handler(self, plan.match)
            assert result is not None
            return result
        return self._run_duckdb(plan.sql, list(params))

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
        self._deadline = time.monotonic() + self.statement_timeout()
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
        """Before DuckDB runs something else, buffer the rest of a suspended portal."""
        portal, self._open_portal = self._open_portal, None
        if portal is not None and not portal.done and portal.result is not None and portal.buffered is None:
            portal.buffered = list(portal.result.rows)
            portal.result.rows = iter(portal.buffered)

    def _columns(self, result: Result, formats: Sequence[int]) -> list[Column] | None:
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
                columns = self._columns(result, ())
                if columns is not None:
                    self.send(pgwire.row_description(columns))
                    sent, _ = self._send_rows(result, columns)
                else:
                    sent = 0
                self.send(pgwire.command_complete(result.tag or f"SELECT {sent}"))
        except StatementError as e:
            log.debug("statement failed: %s", e.message)
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
            portal.columns = self._columns(portal.result, portal.result_formats)

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
            if portal is None:
                raise StatementError("34000", f'portal "{name}" does not exist')
            columns = None
            if portal.prepared.plan is not None and portal.prepared.plan.returns_rows:
                self._start_portal(portal)
                columns = portal.columns
        self.send(pgwire.row_description(columns) if columns is not None else pgwire.no_data())

    def _describe_statement(self, prepared: Prepared) -> list[Column] | None:
        """Result columns of a statement before its parameters are known."""
        plan = prepared.plan
        if plan is None or not plan.returns_rows:
            return None
        if plan.handler is not None:
            return self._columns(self.run_plan(plan, ()), ())
        assert self.cursor is not None
        self._park_open_portal()
        try:
            relation = self.cursor.sql(plan.sql, params=[None] * plan.n_params) if plan.n_params else self.cursor.sql(plan.sql)
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
            self.send(pgwire.command_complete(portal.result.tag if portal.result and portal.result.tag else f"SELECT {portal.sent}"))
            return
        self._start_portal(portal)
        assert portal.result is not None
        if portal.columns is None:
            portal.done = True
            self.send(pgwire.command_complete(portal.result.tag or "SELECT 0"))
            return
        self._open_portal = portal
        sent, exhausted = self._send_rows(portal.result, portal.columns, max(limit, 0))
        portal.sent += sent
        if exhausted:
            portal.done = True
            if self._open_portal is portal:
                self._open_portal = None
            self.send(pgwire.command_complete(portal.result.tag or f"SELECT {portal.sent}"))
        else:
            self.send(pgwire.portal_suspended())

    def _on_close(self, body: bytes) -> None:
        r = pgwire.Reader(body)
        kind, name = r.byte(), r.cstr()
        if kind == b"S":
            self.prepared.pop(name, None)
        else:
            portal = self.portals.pop(name, None)
            if portal is not None and portal is self._open_portal:
                self._open_portal = None
        self.send(pgwire.close_complete())

    def _on_sync(self, body: bytes) -> None:
        self._skip_until_sync = False
        if self.tx_status == b"I":
            self.portals.clear()
            self._open_portal = None
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
        self._tcp: _TCPServer | None = None
        self._thread: threading.Thread | None = None
        self._serving = threading.Event()
        self._lock = threading.Lock()
        self._sessions: dict[int, Session] = {}
        self._next_pid = 1

    @property
    def port(self) -> int:
        """The port listened on (useful with ``ServeConfig(port=0)``); 0 before binding."""
        return self._tcp.server_address[1] if self._tcp is not None else 0

    def _bind(self) -> None:
        if self._tcp is not None:
            return
        self._db = open_catalog(self.catalog_path, self.warehouse)
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                Session(server, self.request).run()

        host = self.config.host
        family = socket.AF_INET
        try:
            family = socket.getaddrinfo(host or None, self.config.port, proto=socket.IPPROTO_TCP)[0][0]
        except socket.gaierror as e:
            raise ServeError(f"cannot resolve host {host!r}: {e}") from e
        _TCPServer.address_family = family
        try:
            self._tcp = _TCPServer((host, self.config.port), Handler)
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
        """Bind (if :meth:`start` did not) and serve in the calling thread until :meth:`stop`."""
        if self._thread is not None:
            self._thread.join()
            return
        self._bind()
        self._serve()

    def _serve(self) -> None:
        assert self._tcp is not None
        self._serving.set()
        try:
            self._tcp.serve_forever(poll_interval=0.2)
        finally:
            self._serving.clear()

    def stop(self) -> None:
        """Stop accepting, end every session, and close the catalog."""
        if self._tcp is not None:
            if self._serving.is_set():
                self._tcp.shutdown()
            self._tcp.server_close()
        with self._lock:
            sessions = list(self._sessions.values())
        for session in sessions:
            session.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._tcp = None
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

    def new_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of the shared, sandboxed database, with the compat macros."""
        assert self._db is not None
        cursor = self._db.cursor()
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
