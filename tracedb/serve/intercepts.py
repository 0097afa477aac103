"""Statements the server answers itself, and the plans and portals of a session.

:data:`INTERCEPTS` are tried in order on a statement's significant text
(:func:`tracedb.serve.lexer.significant`: no comments, blanks collapsed):
transaction control (accepted as no-ops: the session is read-only),
PostgreSQL client settings (SET/RESET/SHOW, remembered per session, never
passed to DuckDB), prepared statement housekeeping and SQL cursors
(DECLARE/FETCH/CLOSE, as psql's FETCH_COUNT and psycopg's server-side cursors
use them). The one query an intercept runs, ``DECLARE ... FOR <query>``,
goes through the statement gate like any other.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from tracedb.serve import wire
from tracedb.serve.gate import StatementError
from tracedb.serve.pgcompat import SETTINGS
from tracedb.serve.wire import Column, PgType

if TYPE_CHECKING:
    from tracedb.serve.session import Session


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
    rows_sent: int = 0  # over every Execute of a portal
    bytes_sent: int = 0  # of DataRow messages, counted against ServeConfig.max_result_bytes

    def command_tag(self, rows_sent: int) -> str:
        return self.tag if self.tag is not None else f"{self.row_tag} {rows_sent}"


def _command(tag: str) -> Result:
    return Result(None, iter(()), tag)


_NAME = r"(?:[A-Za-z_][\w.$]*|\"(?:[^\"]|\"\")+\")"


def unquote(name: str) -> str:
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


#: Statements the server answers itself, tried in order (see the module documentation).
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
    name = unquote(plan.match.group("name"))
    if name == "all":
        session.settings.clear()
    else:
        session.set_setting(name, "DEFAULT")
    return _command("RESET")


_SHOW_ALIASES = {"time zone": "timezone", "transaction isolation level": "transaction_isolation"}


def _show_name(m: re.Match[str]) -> str:
    name = re.sub(r"\s+", " ", unquote(m.group("name")))
    return _SHOW_ALIASES.get(name, name)


@intercept("show", rf"^SHOW\s+(?P<name>{_NAME}|TIME\s+ZONE|TRANSACTION\s+ISOLATION\s+LEVEL)$",
           returns_rows=True,
           # Other names are DuckDB's own SHOW (SHOW TABLES, SHOW events).
           applies=lambda m: _show_name(m) in SETTINGS or _show_name(m) == "all")
def _show(session: "Session", plan: "Plan", params: Sequence[Any]) -> Result:
    name = _show_name(plan.match)
    if name == "all":
        rows = [(s.name, session.setting(key), "") for key, s in sorted(SETTINGS.items())]
        columns = [("name", wire.TEXT), ("setting", wire.TEXT), ("description", wire.TEXT)]
        return Result(columns, iter(rows), "SHOW")
    return Result([(name, wire.TEXT)], iter([(session.setting(name),)]), "SHOW")


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
    name = unquote(plan.match.group("name"))
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
        session.close_cursor(unquote(name))
    return _command("CLOSE CURSOR")



@dataclass
class Plan:
    """One statement, ready to run: either intercepted or sent to DuckDB."""

    sql: str  # its text: the significant text of an intercepted one, the checked text of another
    statement: Any = None  # the checked DuckDB statement object that runs (None: intercepted)
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
