"""``tracedb serve`` against hostile clients (issue 21), through psql, psycopg
(simple and extended protocol) and raw sockets.

Every attack asserts that no file of the warehouse changed (a hash of the
tree before and after), not only that an error came back, and that the
session still answers. The warehouse is the round-number one of
test_serve.py.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_serve import ROWS, _libpq_results, _message, build_warehouse, connect, needs_psql, psql
from tracedb.serve import Server, ServeConfig
from tracedb.serve import gate, lexer
from tracedb.serve.gate import StatementError
from tracedb.serve.sandbox import Landlock


def tree_hash(root: Path) -> str:
    """A hash of every path under ``root`` and of every file's bytes."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def hostile_wh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_warehouse(tmp_path_factory.mktemp("hostile"))


@pytest.fixture(scope="module")
def server(hostile_wh: tuple[Path, Path]):
    catalog, wh = hostile_wh
    with Server(catalog, wh, ServeConfig(port=0)) as srv:
        yield srv


def parquet_file(wh: Path) -> Path:
    return next(wh.rglob("*.parquet"))


def write_attacks(wh: Path) -> list[str]:
    """The statements of issue 21 that wrote inside the warehouse on main, with their exact text."""
    f = parquet_file(wh)
    cat = wh / "tracedb.duckdb"
    writes = [
        f"COPY (SELECT 42 AS pwned) TO '{wh}/pwn.csv'",
        f"COPY (SELECT 42) TO '{cat}'",
        f"ATTACH '{cat}' AS w (READ_WRITE); CREATE OR REPLACE VIEW w.main.hotspots AS SELECT 1 AS pwned",
        f"EXPORT DATABASE '{wh}/dump'",
        f"COPY (SELECT * FROM read_parquet('{f}') LIMIT 0) TO '{f}'",
        "DETACH tracedb",
    ]
    hidden = [f"/* /* */ {w}; SELECT ' */ SELECT 1 --'" for w in writes]
    return (writes + hidden
            + [f"DECLARE c CURSOR FOR {h}" for h in hidden]
            + [f"DECLARE c CURSOR WITH HOLD FOR {w}" for w in writes]
            + [f"EXPLAIN ANALYZE {w}" for w in writes]
            + [f"EXPLAIN ANALYZE /* /* */ {writes[0]}; SELECT ' */ SELECT 1 --'",
               f"PREPARE p AS {writes[0]}", f"SELECT 1; {writes[0]}"])


def host_probes() -> list[str]:
    """Statements that showed the server's paths, PID or home folder on main."""
    return [
        "SELECT current_setting('temp_directory')",
        "SHOW temp_directory",
        "SHOW home_directory",
        "SELECT \"system\".main.current_setting('temp_directory')",
        "SELECT * FROM duckdb_databases()",
        "SELECT * FROM duckdb_databases",
        "PRAGMA database_list",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM pg_settings",
        "SELECT getenv('HOME')",
        "LOAD httpfs",
        "INSTALL httpfs",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM glob('/*')",
        "SELECT * FROM query('SELECT 1')",
        "SELECT sql FROM duckdb_views() WHERE view_name = 'events'",
        "SELECT file_name FROM parquet_metadata((SELECT list(file) FROM glob('/events/**/*.parquet')))",
        "SELECT * FROM read_parquet('/nonexistent/x.parquet')",
        "EXPLAIN SELECT * FROM events",
    ]


def host_secrets(wh: Path) -> list[str]:
    """Text that names the server's machine: no answer or error may hold it."""
    home = os.path.expanduser("~")
    return [str(wh), str(wh.resolve()), home + "/", os.path.join(tempfile.gettempdir(), "tracedb-serve-")]


def assert_no_host_path(text: str, wh: Path) -> None:
    for secret in host_secrets(wh):
        assert secret not in text, (secret, text)


# ---------------------------------------------------------------------------
# Writes
# ---------------------------------------------------------------------------


def test_writes_fail_through_psycopg_simple_protocol(server: Server, hostile_wh: tuple[Path, Path]) -> None:
    _, wh = hostile_wh
    before = tree_hash(wh)
    with connect(server.port) as conn:
        pgconn = conn.pgconn
        for statement in write_attacks(wh):
            pgconn.send_query(statement.encode())
            results = _libpq_results(pgconn)
            statuses = [r.status for r in results]
            # Either refused, or (the nested-comment forms) one SELECT 1, as DuckDB and PostgreSQL read it.
            if psycopg.pq.ExecStatus.FATAL_ERROR not in statuses:
                rows = [r.get_value(0, 0) for r in results if r.status == psycopg.pq.ExecStatus.TUPLES_OK]
                # [] for a DECLARE of that SELECT 1; its plan for EXPLAIN ANALYZE.
                assert rows in ([b"1"], [], [b"analyzed_plan"]), statement
            assert tree_hash(wh) == before, statement
            pgconn.send_query(b"CLOSE ALL")
            _libpq_results(pgconn)
            pgconn.send_query(b"SELECT count(*) FROM events")
            assert _libpq_results(pgconn)[0].get_value(0, 0) == str(len(ROWS)).encode(), statement


def test_writes_fail_through_psycopg_extended_protocol(server: Server, hostile_wh: tuple[Path, Path]) -> None:
    _, wh = hostile_wh
    before = tree_hash(wh)
    with connect(server.port) as conn:
        for statement in write_attacks(wh):
            try:
                cursor = conn.execute(statement)
                rows = cursor.fetchall() if cursor.description else []
            except psycopg.Error:
                pass
            else:
                assert rows in ([(1,)], []) or rows[0][0] == "analyzed_plan", statement
            assert tree_hash(wh) == before, statement
            conn.execute("CLOSE ALL")
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (len(ROWS),), statement


@needs_psql
def test_writes_fail_through_psql(server: Server, hostile_wh: tuple[Path, Path]) -> None:
    _, wh = hostile_wh
    before = tree_hash(wh)
    for statement in write_attacks(wh):
        out = psql(server.port, statement)
        answer = out.stdout.strip()
        assert out.returncode != 0 or answer in ("1", "DECLARE CURSOR") or answer.startswith("analyzed_plan"), \
            (statement, out.stdout)
        assert tree_hash(wh) == before, statement
    assert psql(server.port, "SELECT count(*) FROM events").stdout.strip() == str(len(ROWS))


def test_landlock_alone_stops_a_write_that_slipped_through(hostile_wh: tuple[Path, Path], tmp_path: Path) -> None:
    """Without the gate and DuckDB's sandbox: a confined thread's DuckDB cannot write into the warehouse."""
    _, wh = hostile_wh
    private = tmp_path / "private"
    private.mkdir()
    landlock = Landlock(private)
    if not landlock.available:
        pytest.skip("the kernel has no Landlock")
    before = tree_hash(wh)
    outcome: list[BaseException | None] = []

    def confined() -> None:
        landlock.restrict_thread()
        con = duckdb.connect()
        try:
            con.execute(f"COPY (SELECT 42 AS pwned) TO '{wh}/pwn.csv'")
            outcome.append(None)
        except duckdb.Error as e:
            outcome.append(e)
        con.execute(f"COPY (SELECT 42 AS ok) TO '{private}/ok.csv'")  # its own folder stays writable
        con.close()

    thread = threading.Thread(target=confined)
    thread.start()
    thread.join()
    landlock.close()
    assert isinstance(outcome[0], duckdb.IOException)
    assert tree_hash(wh) == before
    assert (private / "ok.csv").read_text().split() == ["ok", "42"]
    with open(tmp_path / "unconfined.txt", "w") as f:  # this (the test's) thread keeps its rights
        f.write("x")


# ---------------------------------------------------------------------------
# What clients learn of the host
# ---------------------------------------------------------------------------


def test_no_answer_or_error_names_a_host_path(server: Server, hostile_wh: tuple[Path, Path]) -> None:
    _, wh = hostile_wh
    refused = 0
    with connect(server.port) as conn:
        for statement in host_probes():
            try:
                text = repr(conn.execute(statement).fetchall())
            except psycopg.Error as e:
                text = str(e) + repr(e.diag.message_hint)
                refused += 1
            assert_no_host_path(text, wh)
            assert f"/{parquet_file(wh).name}" not in text or str(wh) not in text
        # The views' own files show from the warehouse's root.
        plan = repr(conn.execute("SELECT sql FROM duckdb_views() WHERE view_name = 'events'").fetchall())
        assert f"'/{parquet_file(wh).relative_to(wh)}'" in plan
    assert refused >= 14


# ---------------------------------------------------------------------------
# Bad values: an ErrorResponse, and the session goes on
# ---------------------------------------------------------------------------


def _startup(s: socket.socket, user: bytes = b"x") -> None:
    body = struct.pack("!i", 196608) + b"user\0" + user + b"\0database\0tracedb\0\0"
    s.sendall(struct.pack("!i", len(body) + 4) + body)


def _read_until(s: socket.socket, last: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    stream = s.makefile("rb")
    while True:
        tag = stream.read(1)
        if not tag:
            return out
        (length,) = struct.unpack("!i", stream.read(4))
        out.append((tag, stream.read(length - 4)))
        if tag == last:
            return out


def _sqlstates(messages: list[tuple[bytes, bytes]]) -> list[str]:
    states = []
    for tag, body in messages:
        if tag == b"E":
            fields = dict((f[:1], f[1:]) for f in body.split(b"\0") if f)
            states.append(fields[b"C"].decode())
    return states


def _bind_one(param_oid: int, value: bytes, sql: bytes = b"SELECT $1") -> bytes:
    parse = _message(b"P", b"\0" + sql + b"\0" + struct.pack("!hi", 1, param_oid))
    bind = _message(b"B", b"\0\0" + struct.pack("!hh", 1, 1) + struct.pack("!h", 1)
                    + struct.pack("!i", len(value)) + value + struct.pack("!h", 0))
    return parse + bind + _message(b"E", b"\0" + struct.pack("!i", 0)) + _message(b"S", b"")


@pytest.mark.parametrize("oid, value", [
    (23, b"\x00\x00\x01"),  # int4 of 3 bytes
    (1700, struct.pack("!hhHh", -1, 0, 0, 0)),  # numeric with ndigits = -1
    (1700, struct.pack("!hhHh", 3, 0, 0, 0) + b"\x00\x01"),  # numeric shorter than its digits
    (2950, b"\x01\x02"),  # uuid of 2 bytes
    (1082, b"\x7f\xff\xff\xff"),  # date past Python's range
], ids=["int4-size", "numeric-ndigits", "numeric-short", "uuid-size", "date-range"])
def test_bad_binary_parameter_is_an_error_response(server: Server, oid: int, value: bytes) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        _startup(s)
        _read_until(s, b"Z")
        s.sendall(_bind_one(oid, value))
        messages = _read_until(s, b"Z")
        assert _sqlstates(messages) == ["22P02"]
        s.sendall(_message(b"Q", b"SELECT 41 + 1\0"))
        answer = _read_until(s, b"Z")
        assert [body[6:] for tag, body in answer if tag == b"D"] == [b"42"]


def test_time_24_00_in_binary(server: Server) -> None:
    """DuckDB hands TIME '24:00' over as text (Python's time stops at 23:59:59); PostgreSQL's binary
    time holds it as 86,400,000,000 microseconds."""
    with connect(server.port) as conn:
        pgconn = conn.pgconn
        pgconn.send_query_params(b"SELECT TIME '24:00' AS t, TIME '23:59:59.5' AS u", [], result_format=1)
        (result,) = _libpq_results(pgconn)
        assert result.status == psycopg.pq.ExecStatus.TUPLES_OK
        assert result.get_value(0, 0) == struct.pack("!q", 86_400_000_000)
        assert result.get_value(0, 1) == struct.pack("!q", 86_399_500_000)
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_field_past_the_message_end_fails_that_message_only(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        _startup(s)
        _read_until(s, b"Z")
        s.sendall(_message(b"B", b"\0\0" + struct.pack("!h", 5)) + _message(b"S", b""))
        assert _sqlstates(_read_until(s, b"Z")) == ["08P01"]
        s.sendall(_message(b"Q", b"SELECT 1\0"))
        assert [body[6:] for tag, body in _read_until(s, b"Z") if tag == b"D"] == [b"1"]


# ---------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tight(hostile_wh: tuple[Path, Path]):
    catalog, wh = hostile_wh
    config = ServeConfig(port=0, max_connections=2, auth_timeout_s=1.0, idle_timeout_s=1.5,
                         max_statement_bytes=2000, max_result_bytes=10_000, password="s3cret")
    with Server(catalog, wh, config) as srv:
        yield srv


def test_connections_past_the_limit_are_refused_with_53300(tight: Server) -> None:
    with connect(tight.port, password="s3cret"), connect(tight.port, password="s3cret"):
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            connect(tight.port, password="s3cret")
    with connect(tight.port, password="s3cret") as conn:  # a slot is free again
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_silent_connection_is_closed_after_the_auth_timeout(tight: Server) -> None:
    with socket.create_connection(("127.0.0.1", tight.port), timeout=10) as s:
        started = time.monotonic()
        assert s.recv(1) == b""
        assert 0.9 < time.monotonic() - started < 3


def test_oversized_messages_before_authentication_are_refused_unread(tight: Server) -> None:
    with socket.create_connection(("127.0.0.1", tight.port), timeout=10) as s:  # a 60 MB start-up packet
        s.sendall(struct.pack("!ii", 60_000_000, 196608))
        assert s.recv(1) in (b"", b"E")
    with socket.create_connection(("127.0.0.1", tight.port), timeout=10) as s:  # a 60 MB password message
        _startup(s)
        assert _read_until(s, b"R")[-1][0] == b"R"
        s.sendall(b"p" + struct.pack("!i", 60_000_000) + b"x" * 1000)
        messages = _read_until(s, b"E")
        assert _sqlstates(messages) == ["54000"]


def test_statement_text_and_result_bytes_are_limited(tight: Server) -> None:
    with connect(tight.port, password="s3cret") as conn:
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="statement text"):
            conn.execute("SELECT 1" + " " * 3000)
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="larger than 10000 bytes"):
            conn.execute("SELECT repeat('x', 20000)").fetchall()
        assert conn.execute("SELECT repeat('x', 5000)").fetchone() == ("x" * 5000,)


def test_idle_session_is_closed(tight: Server) -> None:
    with connect(tight.port, password="s3cret") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        time.sleep(2.5)
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")


def test_password_guessing_slows_down(tight: Server) -> None:
    started = time.monotonic()
    for _ in range(30):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            connect(tight.port, password="wrong")
    assert time.monotonic() - started >= 3


def test_whitespace_statement_is_answered_at_once(server: Server) -> None:
    """The rewrite of 40 KB of blanks is linear: the statement answers in well under a second."""
    with connect(server.port) as conn:
        for blanks in (40_000, 100_000):
            started = time.monotonic()
            assert conn.execute("SELECT 1" + " " * blanks + "AS x").fetchone() == (1,)
            assert time.monotonic() - started < 1.0
            started = time.monotonic()
            collated = "SELECT 'a'" + " \n" * blanks + "COLLATE pg_catalog.default AS x"
            assert conn.execute(collated).fetchone() == ("a",)
            assert time.monotonic() - started < 1.0


# ---------------------------------------------------------------------------
# The gate, as a property
# ---------------------------------------------------------------------------

ALLOWED_TYPES = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN, duckdb.StatementType.PRAGMA}
FORBIDDEN = ["COPY (SELECT 1) TO '/tmp/x.csv'", "ATTACH 'x.db'", "EXPORT DATABASE 'd'", "CREATE TABLE t(i INT)",
             "DETACH tracedb", "INSTALL httpfs", "SET threads = 1", "CALL pragma_version()", "DROP VIEW v"]
PIECES = st.sampled_from([
    "/*", "*/", "/* /* */", "--", "\n", "'", "''", "' */ '", "$$", "$x$", "E'\\''", "\"", ";", " ", "SELECT 1",
    "SELECT ' */ '", "$$ ; $$", "EXPLAIN ANALYZE", "PRAGMA version", "DECLARE c CURSOR FOR", "(", ")",
] + FORBIDDEN)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(PIECES, min_size=1, max_size=12))
def test_whatever_the_gate_lets_through_parses_as_allowed_statements(pieces: list[str]) -> None:
    text = " ".join(pieces)
    con = duckdb.connect()
    try:
        for piece in lexer.split_statements(text):
            try:
                statements = duckdb.extract_statements(piece)
            except duckdb.Error:
                continue
            for statement in statements:
                try:
                    final = gate.checked(con, statement)
                except StatementError:
                    continue
                # What would run, parsed again by DuckDB, is one allowed statement.
                again = duckdb.extract_statements(final.query)
                assert [s.type for s in again] == [final.type] and final.type in ALLOWED_TYPES, final.query
                if final.type == duckdb.StatementType.EXPLAIN:  # built by the gate around a checked SELECT
                    inner = lexer.significant(final.query).upper().removeprefix("EXPLAIN ").removeprefix("ANALYZE ")
                    assert [x.type for x in duckdb.extract_statements(inner)] == [duckdb.StatementType.SELECT]
    finally:
        con.close()


def test_lexer_nests_comments_like_duckdb() -> None:
    text = "/* /* */ COPY x TO 'y'; SELECT ' */ SELECT 1 --'"
    assert lexer.split_statements(text) == [text]
    assert lexer.significant(text) == "SELECT 1"
    assert [s.type for s in duckdb.extract_statements(text)] == [duckdb.StatementType.SELECT]
    assert lexer.split_statements("SELECT $$;$$; SELECT E'\\';'; SELECT \"a;b\"") == [
        "SELECT $$;$$", " SELECT E'\\';'", " SELECT \"a;b\""]


def test_gate_refuses_named_host_functions() -> None:
    con = duckdb.connect()
    try:
        for sql in ("SELECT getenv('HOME')", "SELECT * FROM duckdb_settings()", "FROM pg_settings",
                    "SELECT \"system\".main.current_setting('temp_directory')", "SELECT * FROM query('SELECT 1')",
                    "SELECT (SELECT max(x) FROM read_text('/etc/passwd') t(x))", "SHOW temp_directory"):
            with pytest.raises(StatementError) as err:
                gate.checked(con, duckdb.extract_statements(sql)[0])
            assert err.value.sqlstate == "42501", sql
        ok = duckdb.extract_statements("SELECT current_setting('search_path'), count(*) FROM range(3)")[0]
        assert gate.checked(con, ok) is ok
    finally:
        con.close()
