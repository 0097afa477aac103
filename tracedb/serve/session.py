"""One client connection: start-up, authentication, then the query loop.

Every statement a client sends goes the same way (:meth:`Session.plan_all`):
compatibility rewrites (linear, :mod:`tracedb.serve.pgcompat`), cut into
statements, then either answered by the server itself
(:mod:`tracedb.serve.intercepts`) or split and typed by DuckDB and passed
through the gate (:mod:`tracedb.serve.gate`), whose checked statement object
is exactly what runs. Rows are fetched in batches and encoded and sent under
the statement's deadline, counting rows and bytes.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import secrets
import socket
import struct
import threading
import time
import zoneinfo
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import duckdb

from tracedb.serve import gate, lexer, pgcompat, wire
from tracedb.serve.config import STARTUP_MESSAGE_BYTES
from tracedb.serve.gate import StatementError, sqlstate_for
from tracedb.serve.intercepts import INTERCEPTS, Plan, Portal, Prepared, Result, unquote
from tracedb.serve.pgcompat import SETTINGS
from tracedb.serve.wire import Column, ProtocolError

if TYPE_CHECKING:
    from tracedb.serve.server import Server

log = logging.getLogger(__name__)



_BATCH_ROWS = 1000  # rows fetched from DuckDB at once, fewer when rows are wide
_BATCH_BYTES = 1024 * 1024  # the aim for a batch's encoded size
_FLUSH_BYTES = 64 * 1024
_PARKED_ROWS = 10_000  # rows of a suspended portal kept in memory while another statement runs


def _replay(rows: list[Sequence[Any]], error: StatementError | None) -> Iterator[Sequence[Any]]:
    yield from rows
    if error is not None:
        raise error


class Session:
    """One client connection: start-up, authentication, then the query loop."""

    def __init__(self, server: "Server", sock: socket.socket, address: str) -> None:
        self.server = server
        self.sock = sock
        self.address = address
        self.rfile = sock.makefile("rb")
        self.started = time.monotonic()
        self.authenticated = False
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
        self._batch_rows = _BATCH_ROWS

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
            self.send(wire.parameter_status(known.name, value))

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
        """Send what is buffered; within a statement, before its deadline (else the
        connection is dropped: a half-sent message cannot be taken back)."""
        if self.out:
            remaining = self._deadline - time.monotonic()
            self.sock.settimeout(max(remaining, 0.001) if remaining > 0 else self.server.config.statement_timeout_s)
            try:
                self.sock.sendall(self.out)
            except TimeoutError as e:
                raise ConnectionAbortedError("the client did not read the answer before the statement deadline") from e
            finally:
                self.sock.settimeout(None)
            self.out.clear()

    def send_error(self, error: StatementError) -> None:
        redact = self.server.redactor.text
        self.send(wire.error_response(error.sqlstate, redact(error.message),
                                      hint=redact(error.hint) if error.hint else None))
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
            self._fatal(e.sqlstate, str(e))
        except TimeoutError:
            if self.authenticated:
                self._fatal("57P05", "terminating connection due to idle-session timeout")
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

    def _fatal(self, sqlstate: str, message: str) -> None:
        """Tell the client why its connection ends, where it still listens."""
        try:
            self.out.clear()
            self.send(wire.error_response(sqlstate, message, severity="FATAL"))
            self.flush()
        except OSError:
            pass

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
            first = wire.read_startup(self.rfile)
            if first is None:
                return False
            if isinstance(first, (wire.SSLRequest, wire.GSSENCRequest)):
                self.sock.sendall(b"N")
                continue
            if isinstance(first, wire.CancelRequest):
                self.server.cancel(first.process_id, first.secret_key)
                return False
            break
        params = first.parameters
        self.user = params.get("user", "")
        if "replication" in params and params["replication"].lower() not in ("false", "off", "no", "0"):
            self._fatal("0A000", "replication is not supported")
            return False
        if not self._authenticate():
            return False
        self.process_id = self.server.register(self)
        if not self.process_id:
            self._fatal("53300", "sorry, too many clients already")
            return False
        self.authenticated = True
        self.cursor = self.server.new_cursor()
        self.send(wire.authentication_ok())
        for key in ("application_name", "datestyle", "timezone", "extra_float_digits", "search_path",
                    "intervalstyle", "client_encoding", "statement_timeout"):
            for given, value in params.items():
                if given.lower() == key:
                    try:
                        self.set_setting(key, value)
                    except StatementError as e:
                        self.send(wire.notice_response(e.sqlstate, e.message, severity="WARNING"))
        for key, s in SETTINGS.items():
            if s.reported and key not in self.settings:
                self.send(wire.parameter_status(s.name, self.setting(key)))
        self.send(wire.backend_key_data(self.process_id, self.secret_key))
        self.send(wire.ready_for_query(self.tx_status))
        self.flush()
        return True

    def _read_password_message(self) -> bytes:
        self.flush()
        msg = wire.read_message(self.rfile, STARTUP_MESSAGE_BYTES)
        if msg is None:
            raise ConnectionError("client left during authentication")
        tag, body = msg
        if tag != b"p":
            raise ProtocolError(f"expected a password message, got {tag!r}")
        return body

    def _authenticate(self) -> bool:
        """Check the password (if one is set). Attempts from one address wait in
        line, and each failure lengthens the wait (see :class:`AuthThrottle`)."""
        config = self.server.config
        if config.password is None:
            return True
        ok = False
        if config.auth_method == "password":
            self.send(wire.authentication_cleartext())
            given = wire.Reader(self._read_password_message()).cstr()
            self.server.throttle.wait_turn(self.address, self.started + self.server.config.auth_timeout_s)
            ok = secrets.compare_digest(given.encode("utf-8"), config.password.encode("utf-8"))
        elif config.auth_method == "md5":
            salt = secrets.token_bytes(4)
            self.send(wire.authentication_md5(salt))
            given = wire.Reader(self._read_password_message()).cstr()
            self.server.throttle.wait_turn(self.address, self.started + self.server.config.auth_timeout_s)
            expected = wire.md5_password_hash(self.user, config.password, salt)
            ok = secrets.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
        else:
            verifier = self.server.scram
            assert verifier is not None
            self.send(wire.authentication_sasl([verifier.MECHANISM]))
            r = wire.Reader(self._read_password_message())
            mechanism = r.cstr()
            if mechanism != verifier.MECHANISM:
                raise ProtocolError(f"unsupported SASL mechanism {mechanism!r}")
            length = r.int32()
            client_first = r.bytes(length) if length >= 0 else b""

            def continue_(server_first: bytes) -> bytes:
                self.send(wire.authentication_sasl_continue(server_first))
                response = self._read_password_message()
                self.server.throttle.wait_turn(self.address, self.started + self.server.config.auth_timeout_s)
                return response

            server_final = verifier.exchange(client_first, continue_)
            ok = server_final is not None
            if ok:
                self.send(wire.authentication_sasl_final(server_final))  # type: ignore[arg-type]
        if not ok:
            self.server.throttle.failed(self.address)
            self._fatal("28P01", f'password authentication failed for user "{self.user}"')
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
        config = self.server.config
        max_bytes = 2 * config.max_statement_bytes + STARTUP_MESSAGE_BYTES  # text, or text and parameters
        while True:
            self.sock.settimeout(config.idle_timeout_s or None)
            msg = wire.read_message(self.rfile, max_bytes)
            self.sock.settimeout(None)
            if msg is None or msg[0] == b"X":
                return
            tag, body = msg
            handler = handlers.get(tag)
            if handler is None:
                if tag in (b"d", b"c", b"f"):  # COPY data: never asked for, ignore
                    continue
                if tag == b"F":
                    self.send(wire.error_response("0A000", "function call messages are not supported"))
                    self.send(wire.ready_for_query(self.tx_status))
                    self.flush()
                    continue
                raise ProtocolError(f"unexpected message type {tag!r}")
            if self._skip_until_sync and tag not in (b"S", b"Q"):
                continue
            try:
                try:
                    handler(body)
                finally:
                    self._deadline = 0.0
            except MemoryError:
                self.out.clear()
                e = StatementError("53200", "out of memory: the statement needs more than tracedb serve allows")
                self.send_error(e)
                self._after_error(tag)
            except (StatementError, ProtocolError, ValueError, ArithmeticError, struct.error) as e:
                if not isinstance(e, StatementError):
                    # A message that does not parse (a field past its end, a bad number):
                    # this message fails, the session goes on.
                    sqlstate = e.sqlstate if isinstance(e, ProtocolError) else "08P01"
                    e = StatementError(sqlstate, f"invalid message: {e}")
                log.debug("statement failed (%s): %s", e.sqlstate, e.message)
                self.send_error(e)
                self._after_error(tag)

    def _after_error(self, tag: bytes) -> None:
        """A simple query is over; an extended one skips to the next Sync."""
        if tag == b"Q":
            self.send(wire.ready_for_query(self.tx_status))
            self.flush()
        else:
            self._skip_until_sync = True

    # -- planning and running ----------------------------------------------

    def plan_all(self, sql: str) -> list[Plan]:
        """Split ``sql`` into statements and decide, for each, who answers it."""
        limit = self.server.config.max_statement_bytes
        if len(sql) > limit:
            raise StatementError("54000", f"statement text longer than {limit} bytes, the tracedb serve limit")
        return self._plan(pgcompat.rewrite(sql))

    def _plan(self, text: str) -> list[Plan]:
        plans = []
        for piece in lexer.split_statements(text):
            plan = self._intercepted(lexer.significant(piece))
            if plan is not None:
                plans.append(plan)
            else:
                plans.extend(self._gated(statement) for statement in self._parse(piece))
        return plans

    @staticmethod
    def _parse(text: str) -> list[Any]:
        try:
            return duckdb.extract_statements(text)
        except duckdb.Error as e:
            raise StatementError(sqlstate_for(e), str(e)) from e

    def _gated(self, statement: Any) -> Plan:
        """The plan that runs ``statement`` as the gate allows it (or StatementError)."""
        assert self.cursor is not None
        if statement.type == duckdb.StatementType.SELECT:
            # The compatibility CTEs go in before the check, which sees the final text.
            with_ctes = pgcompat.add_compat_relations(lexer.significant(statement.query))
            reparsed = self._parse(with_ctes)
            if len(reparsed) != 1:
                raise StatementError("42601", "cannot parse the statement as one SELECT")
            statement = reparsed[0]
        final = gate.checked(self.cursor, statement)
        params = [int(p) for p in final.named_parameters if p.isdigit()]
        return Plan(final.query, statement=final, n_params=max(params, default=0))

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
        return self._run_duckdb(plan.statement, list(params))

    def end_transaction(self) -> None:
        """COMMIT or ROLLBACK: back to idle; cursors without HOLD close."""
        self.tx_status = b"I"
        for name in [n for n, c in self.cursors.items() if not c.with_hold]:
            self.close_cursor(name)

    def sql_cursor(self, name: str) -> Portal:
        cursor = self.cursors.get(unquote(name))
        if cursor is None:
            raise StatementError("34000", f'cursor "{unquote(name)}" does not exist')
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
            raise StatementError(sqlstate_for(e), str(e)) from e
        except (ValueError, OverflowError, TypeError) as e:  # a value Python cannot hold (TIME '24:00')
            raise StatementError("22008", f"a value cannot be converted: {e}") from e
        except MemoryError as e:
            raise StatementError("53200", "out of memory: the result is too large for tracedb serve") from e
        finally:
            timer.cancel()
            with self._call_lock:
                self._in_call = False

    def _run_duckdb(self, statement: Any, params: list[Any]) -> Result:
        assert self.cursor is not None
        self._park_open_portal()
        cursor = self.cursor
        self._duckdb_call(cursor.execute, statement, params)
        description = cursor.description or []
        columns = [(d[0], wire.pg_type_for_duckdb(d[1])) for d in description]
        max_rows = self.server.config.max_rows

        def rows() -> Iterator[Sequence[Any]]:
            count = 0
            while True:
                batch = self._duckdb_call(cursor.fetchmany, self._batch_rows)
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

        At most :data:`_PARKED_ROWS` rows are kept: a longer rest fails the
        portal. An error met while buffering (row limit, timeout) is kept for
        the portal's next read instead of failing the statement about to run.
        """
        portal, self.open_portal = self.open_portal, None
        if portal is None or portal.done or portal.result is None or portal.buffered is not None:
            return
        buffered: list[Sequence[Any]] = []
        error: StatementError | None = None
        try:
            for row in portal.result.rows:
                if len(buffered) >= _PARKED_ROWS:
                    raise StatementError(
                        "54000", f"a suspended cursor keeps at most {_PARKED_ROWS} rows while another statement"
                        " runs", hint="read the cursor to its end first")
                buffered.append(row)
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
            if fmt == 1 and pg_type.oid not in wire.BINARY_RESULT_OIDS:
                raise StatementError("0A000", f"binary format is not supported for column {name} ({pg_type.name})")
            out.append(Column(name, pg_type, fmt))
        return out

    def _send_rows(self, result: Result, columns: list[Column], limit: int = 0) -> tuple[int, bool]:
        """Send up to ``limit`` rows (0: all); returns (rows sent, exhausted).

        Encoding and sending run under the statement's deadline, and the
        bytes sent count against ``max_result_bytes``; text values have host
        paths redacted.
        """
        tz = self._zone()
        redact = self.server.redactor.data
        textual = (wire.TEXT.oid, wire.VARCHAR.oid, wire.JSON.oid)

        def encoder(c: Column) -> Callable[[Any], bytes]:
            if c.format == 1:
                if c.pg_type.oid in textual:
                    return lambda v, t=c.pg_type: redact(wire.encode_binary(v, t))
                return lambda v, t=c.pg_type: wire.encode_binary(v, t)
            return lambda v, t=c.pg_type: redact(wire.encode_text(v, t, tz))

        encoders = [encoder(c) for c in columns]
        max_bytes = self.server.config.max_result_bytes
        sent = 0
        for row in result.rows:
            try:
                message = wire.data_row([None if v is None else enc(v) for enc, v in zip(encoders, row)])
            except (ValueError, OverflowError, TypeError, AttributeError, struct.error, ArithmeticError) as e:
                raise StatementError("22P03", f"a value cannot be encoded: {e}") from e
            result.bytes_sent += len(message)
            if result.bytes_sent > max_bytes:
                raise StatementError("54000", f"result is larger than {max_bytes} bytes, the tracedb serve limit",
                                     hint="select fewer or narrower columns, add a LIMIT, or aggregate")
            if time.monotonic() > self._deadline:
                raise StatementError("57014", "canceling statement due to statement timeout")
            self.send(message)
            sent += 1
            result.rows_sent += 1
            # Fewer rows per fetch when rows are wide: about _BATCH_BYTES a batch.
            self._batch_rows = max(1, min(_BATCH_ROWS, _BATCH_BYTES * result.rows_sent // result.bytes_sent))
            if limit and sent >= limit:
                return sent, False
        return sent, True

    # -- simple query protocol ---------------------------------------------

    def _on_query(self, body: bytes) -> None:
        sql = wire.Reader(body).cstr()
        log.debug("query: %s", sql)
        self.portals.pop("", None)
        try:
            plans = self.plan_all(sql)
            if not plans:
                self.send(wire.empty_query_response())
            for plan in plans:
                result = self.run_plan(plan, ())
                columns = self.columns(result, ())
                if columns is not None:
                    self.send(wire.row_description(columns))
                    sent, _ = self._send_rows(result, columns)
                else:
                    sent = 0
                self.send(wire.command_complete(result.command_tag(sent)))
        except StatementError as e:
            log.debug("statement failed (%s): %s", e.sqlstate, e.message)
            self.send_error(e)
        self.send(wire.ready_for_query(self.tx_status))
        self.flush()

    # -- extended query protocol -------------------------------------------

    def _on_parse(self, body: bytes) -> None:
        r = wire.Reader(body)
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
        self.send(wire.parse_complete())

    def _on_bind(self, body: bytes) -> None:
        r = wire.Reader(body)
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
                params.append(wire.decode_parameter(raw, oids[i], fmt))
            except (ValueError, ArithmeticError, struct.error) as e:
                raise StatementError("22P02", f"invalid value for parameter ${i + 1}: {e}") from e
        self.portals[portal_name] = Portal(prepared, params, result_formats)
        self.send(wire.bind_complete())

    def _start_portal(self, portal: Portal) -> None:
        if portal.result is None:
            plan = portal.prepared.plan
            assert plan is not None
            portal.result = self.run_plan(plan, portal.params)
            portal.columns = self.columns(portal.result, portal.result_formats)

    def _on_describe(self, body: bytes) -> None:
        r = wire.Reader(body)
        kind, name = r.byte(), r.cstr()
        if kind == b"S":
            prepared = self.prepared.get(name)
            if prepared is None:
                raise StatementError("26000", f'prepared statement "{name}" does not exist')
            self.send(wire.parameter_description([o or wire.TEXT.oid for o in prepared.param_oids]))
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
        self.send(wire.row_description(columns) if columns is not None else wire.no_data())

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
            raise StatementError(sqlstate_for(e), str(e)) from e
        if relation is None:
            return None
        return [Column(name, wire.pg_type_for_duckdb(t)) for name, t in zip(relation.columns, relation.types)]

    def _on_execute(self, body: bytes) -> None:
        r = wire.Reader(body)
        name, limit = r.cstr(), r.int32()
        portal = self.portals.get(name)
        if portal is None:
            raise StatementError("34000", f'portal "{name}" does not exist')
        if portal.prepared.plan is None:
            self.send(wire.empty_query_response())
            return
        if portal.done:
            assert portal.result is not None
            self.send(wire.command_complete(portal.result.command_tag(portal.sent)))
            return
        self._start_portal(portal)
        assert portal.result is not None
        if portal.columns is None:
            portal.done = True
            self.send(wire.command_complete(portal.result.command_tag(0)))
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
            self.send(wire.command_complete(portal.result.command_tag(portal.sent)))
        else:
            self.send(wire.portal_suspended())

    def _on_close(self, body: bytes) -> None:
        r = wire.Reader(body)
        kind, name = r.byte(), r.cstr()
        if kind == b"S":
            self.prepared.pop(name, None)
        else:
            portal = self.portals.pop(name, None)
            if portal is not None and portal is self.open_portal:
                self.open_portal = None
        self.send(wire.close_complete())

    def _on_sync(self, body: bytes) -> None:
        self._skip_until_sync = False
        if self.tx_status == b"I":
            # The implicit transaction ends: portals close (SQL cursors WITH HOLD stay).
            self.portals.clear()
            if not any(c is self.open_portal for c in self.cursors.values()):
                self.open_portal = None
        self.send(wire.ready_for_query(self.tx_status))
        self.flush()

