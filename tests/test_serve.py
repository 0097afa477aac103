"""``tracedb serve`` with real clients: psql, psycopg, SQLAlchemy, duckdb-engine.

A tiny warehouse with round numbers is built in a temporary folder: one Parquet
file of five events, a catalog with an ``events`` view over it and a
``hotspots`` view on top. Expected answers are computed here in plain Python
from the same rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import uuid
from collections import defaultdict
from pathlib import Path

import duckdb
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from tracedb.serve import Server, ServeConfig, ServeError, open_catalog
from tracedb.serve.sandbox import data_directories

# (file_id, ts_ns, dur_ns, ph, cat, name)
ROWS = [
    ("f1", 0, 1_000, "X", "kernel", "gemm"),
    ("f1", 1_000, 2_000, "X", "kernel", "gemm"),
    ("f1", 3_000, 500, "X", "kernel", "relu"),
    ("f1", 4_000, 3_000, "X", "kernel", "gemm"),
    ("f1", 8_000, 1_500, "X", "cpu_op", "aten::copy_"),
]
HOTSPOTS_COMMENT = "One row per event name: calls and total time in microseconds."


def expected_hotspots() -> dict[str, tuple[int, float]]:
    """Plain-Python oracle for the hotspots view: name -> (calls, total_us)."""
    calls: dict[str, int] = defaultdict(int)
    total_ns: dict[str, int] = defaultdict(int)
    for _file_id, _ts, dur, _ph, _cat, name in ROWS:
        calls[name] += 1
        total_ns[name] += dur
    return {name: (calls[name], total_ns[name] / 1000) for name in calls}


def build_warehouse(root: Path) -> tuple[Path, Path]:
    warehouse = root / "wh"
    part = warehouse / "events" / "run=v1" / "rank=0" / "phase=train"
    part.mkdir(parents=True)
    parquet = part / "abc.parquet"
    columns = list(zip(*ROWS))
    table = pa.table({
        "file_id": pa.array(columns[0], pa.string()),
        "ts_ns": pa.array(columns[1], pa.int64()),
        "dur_ns": pa.array(columns[2], pa.int64()),
        "ph": pa.array(columns[3], pa.string()),
        "cat": pa.array(columns[4], pa.string()),
        "name": pa.array(columns[5], pa.string()),
    })
    pq.write_table(table, parquet)
    catalog = warehouse / "tracedb.duckdb"
    with duckdb.connect(str(catalog)) as con:
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet(['{parquet}'], hive_partitioning=true)")
        con.execute(
            "CREATE VIEW hotspots AS SELECT name, count(*) AS calls, sum(dur_ns)/1000.0 AS total_us"
            " FROM events GROUP BY name"
        )
        con.execute(f"COMMENT ON VIEW hotspots IS '{HOTSPOTS_COMMENT}'")
    return catalog, warehouse


@pytest.fixture(scope="module")
def tiny_wh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_warehouse(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(tiny_wh: tuple[Path, Path]):
    catalog, wh = tiny_wh
    srv = Server(catalog, wh, ServeConfig(port=0))
    srv.start()
    yield srv
    srv.stop()


def dsn(port: int, password: str | None = None) -> str:
    out = f"host=127.0.0.1 port={port} user=analyst dbname=tracedb connect_timeout=5"
    return out + (f" password={password}" if password is not None else "")


def connect(port: int, **kwargs) -> psycopg.Connection:
    return psycopg.connect(dsn(port, kwargs.pop("password", None)), autocommit=True, **kwargs)


needs_psql = pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")


def psql(port: int, *commands: str, password: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PGCONNECT_TIMEOUT": "5"}
    env.pop("PGPASSWORD", None)
    if password is not None:
        env["PGPASSWORD"] = password
    args = ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port),
            "-U", "analyst", "-d", "tracedb"]
    for command in commands:
        args += ["-c", command]
    return subprocess.run(args, capture_output=True, text=True, timeout=30, env=env)


# ---------------------------------------------------------------------------
# psql
# ---------------------------------------------------------------------------


@needs_psql
def test_psql_select_matches_oracle(server: Server) -> None:
    out = psql(server.port, "SELECT name, calls, total_us FROM hotspots ORDER BY name")
    assert out.returncode == 0, out.stderr
    expected = expected_hotspots()
    assert out.stdout.splitlines() == [
        f"{name}|{calls}|{total_us:g}" for name, (calls, total_us) in sorted(expected.items())
    ]


@needs_psql
def test_psql_lists_views_and_no_tables(server: Server) -> None:
    dt_ = psql(server.port, r"\dt")
    assert dt_.returncode == 0, dt_.stderr
    assert dt_.stdout == "" and "Did not find any relations." in dt_.stderr

    dv = psql(server.port, r"\dv")
    assert dv.returncode == 0, dv.stderr
    assert dv.stdout.splitlines() == ["main|events|view|tracedb", "main|hotspots|view|tracedb"]


@needs_psql
def test_psql_describes_a_view(server: Server) -> None:
    out = psql(server.port, r"\d events")
    assert out.returncode == 0, out.stderr
    columns = [line.split("|")[:2] for line in out.stdout.splitlines()]
    assert columns == [
        ["file_id", "character varying"], ["ts_ns", "bigint"], ["dur_ns", "bigint"],
        ["ph", "character varying"], ["cat", "character varying"], ["name", "character varying"],
        ["phase", "character varying"], ["rank", "bigint"], ["run", "character varying"],
    ]
    plus = psql(server.port, r"\dv+ hotspots")
    assert plus.returncode == 0, plus.stderr
    assert plus.stdout.strip().endswith(HOTSPOTS_COMMENT)


@needs_psql
def test_psql_fetch_count_uses_a_cursor(server: Server) -> None:
    out = psql(server.port, r"\set FETCH_COUNT 2", "SELECT ts_ns FROM events ORDER BY ts_ns")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(r[1]) for r in sorted(ROWS, key=lambda r: r[1])]


@needs_psql
def test_psql_reports_an_error_and_the_server_goes_on(server: Server) -> None:
    out = psql(server.port, "SELECT * FROM no_such_view")
    assert out.returncode != 0
    assert "no_such_view" in out.stderr
    assert psql(server.port, "SELECT count(*) FROM events").stdout.strip() == str(len(ROWS))


# ---------------------------------------------------------------------------
# psycopg
# ---------------------------------------------------------------------------


def test_psycopg_parameterised_query(server: Server) -> None:
    expected = expected_hotspots()
    with connect(server.port) as conn:
        rows = conn.execute("SELECT name, calls FROM hotspots WHERE calls >= %s ORDER BY name", (2,)).fetchall()
        assert rows == [(n, c) for n, (c, _) in sorted(expected.items()) if c >= 2]
        rows = conn.execute(
            "SELECT name, total_us FROM hotspots WHERE name = %s AND total_us > %s", ("gemm", 0.5)
        ).fetchall()
        assert rows == [("gemm", pytest.approx(expected["gemm"][1]))]
        # psycopg prepares a statement server-side from the 5th execution on.
        for _ in range(7):
            count = conn.execute("SELECT count(*) FROM events WHERE dur_ns >= %s", (1_000,)).fetchone()
            assert count == (sum(1 for r in ROWS if r[2] >= 1_000),)


def _libpq_results(pgconn: psycopg.pq.abc.PGconn) -> list[psycopg.pq.abc.PGresult]:
    """Wait for libpq's answer without blocking calls: those would hold the GIL
    that the server, in this same process, needs to answer."""
    while True:
        pgconn.consume_input()
        if not pgconn.is_busy():
            break
        select.select([pgconn.socket], [], [], 5)
    results = []
    while (result := pgconn.get_result()) is not None:
        results.append(result)
    return results


def test_libpq_describes_a_prepared_statement(server: Server) -> None:
    """Describe before Bind, as JDBC does: parameter and result types without running."""
    with connect(server.port) as conn:
        pgconn = conn.pgconn
        pgconn.send_prepare(b"by_calls", b"SELECT name, calls, total_us FROM hotspots WHERE calls >= $1")
        assert [r.status for r in _libpq_results(pgconn)] == [psycopg.pq.ExecStatus.COMMAND_OK]
        pgconn.send_describe_prepared(b"by_calls")
        (described,) = _libpq_results(pgconn)
        assert described.nparams == 1
        assert [described.fname(i) for i in range(3)] == [b"name", b"calls", b"total_us"]
        assert [described.ftype(i) for i in range(3)] == [1043, 20, 701]  # varchar, int8, float8
        pgconn.send_query_prepared(b"by_calls", [b"2"])
        (result,) = _libpq_results(pgconn)
        assert [result.get_value(0, i) for i in range(2)] == [b"gemm", b"3"]


def test_psycopg_transactions_are_accepted(server: Server) -> None:
    with psycopg.connect(dsn(server.port)) as conn:  # not autocommit: psycopg sends BEGIN
        assert conn.execute("SELECT sum(dur_ns) FROM events").fetchone() == (sum(r[2] for r in ROWS),)
        conn.commit()
        with pytest.raises(psycopg.errors.UndefinedColumn):
            conn.execute("SELECT no_such_column FROM events")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            conn.execute("SELECT 1")
        conn.rollback()
        assert conn.execute("SELECT 1").fetchone() == (1,)


TYPES_QUERY = """
SELECT 1::SMALLINT AS i2, 2::INTEGER AS i4, 3::BIGINT AS i8, 1.5::REAL AS f4, 2.25::DOUBLE AS f8,
       12.345::DECIMAL(10,3) AS num, true AS b, 'héllo' AS t, DATE '2024-01-02' AS d,
       TIMESTAMP '2024-01-02 03:04:05.5' AS ts, TIMESTAMPTZ '2024-01-02 03:04:05+00' AS tstz,
       '\\x01\\x02'::BLOB AS bytes, INTERVAL '1 day 2 hours' AS iv,
       '12345678-1234-5678-1234-567812345678'::UUID AS u, TIME '01:02:03' AS tm,
       170141183460469231731687303715884105727::HUGEINT AS huge, -0.0001::DECIMAL(9,4) AS small,
       NULL::INTEGER AS nothing
"""
TYPES_EXPECTED = (
    1, 2, 3, 1.5, 2.25, decimal.Decimal("12.345"), True, "héllo", dt.date(2024, 1, 2),
    dt.datetime(2024, 1, 2, 3, 4, 5, 500000), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
    b"\x01\x02", dt.timedelta(days=1, hours=2), uuid.UUID("12345678-1234-5678-1234-567812345678"),
    dt.time(1, 2, 3), decimal.Decimal("170141183460469231731687303715884105727"), decimal.Decimal("-0.0001"),
    None,
)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_psycopg_decodes_every_scalar_type(server: Server, binary: bool) -> None:
    with connect(server.port) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        row = conn.cursor(binary=binary).execute(TYPES_QUERY).fetchone()
    assert row == TYPES_EXPECTED


def test_psycopg_server_side_cursors(server: Server) -> None:
    durations = sorted(r[2] for r in ROWS)
    with psycopg.connect(dsn(server.port)) as conn:
        with conn.cursor("by_duration") as cur:
            cur.itersize = 2
            cur.execute("SELECT dur_ns FROM events WHERE dur_ns >= %s ORDER BY dur_ns", (0,))
            assert [c.name for c in cur.description] == ["dur_ns"]
            assert cur.fetchmany(2) == [(d,) for d in durations[:2]]
            # Another statement in between: the rest of the cursor is kept.
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (len(ROWS),)
            assert cur.fetchall() == [(d,) for d in durations[2:]]
        conn.commit()
    with connect(server.port) as conn:  # autocommit needs WITH HOLD
        with conn.cursor("names", withhold=True, binary=True) as cur:
            cur.execute("SELECT DISTINCT name FROM events ORDER BY name")
            assert [r[0] for r in cur] == sorted({r[5] for r in ROWS})


def test_duckdb_read_statements_are_allowed(server: Server) -> None:
    with connect(server.port) as conn:
        assert [r[0] for r in conn.execute("DESCRIBE hotspots").fetchall()] == ["name", "calls", "total_us"]
        assert conn.execute("FROM hotspots SELECT sum(calls)").fetchone() == (len(ROWS),)
        kind, plan = conn.execute("EXPLAIN SELECT * FROM hotspots").fetchone()
        assert kind == "physical_plan" and "PARQUET" in plan.upper()
        assert conn.execute("EXPLAIN ANALYZE SELECT count(*) FROM events").fetchone()[0] == "analyzed_plan"
        assert conn.execute("PRAGMA version").fetchone()[0] == f"v{duckdb.__version__}"
        assert len(conn.execute("SUMMARIZE events").fetchall()) == 9


def test_binary_parameters(server: Server) -> None:
    values = (7, 2**40, 2.5, decimal.Decimal("-12.50"), True, "gemm", b"\x00\xff",
              dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5), uuid.UUID(int=1))
    with connect(server.port) as conn:
        row = conn.execute("SELECT " + ", ".join(["%b"] * len(values)), values, binary=True).fetchone()
        assert row == values
        count = conn.execute("SELECT calls FROM hotspots WHERE name = %b", ("gemm",), binary=True).fetchone()
        assert count == (expected_hotspots()["gemm"][0],)


def test_nested_values_are_json_text(server: Server) -> None:
    with connect(server.port) as conn:
        cur = conn.execute("SELECT [1, 2] AS l, {'a': 'x'} AS s, '{\"k\": [1]}'::JSON AS j")
        assert cur.fetchone() == ("[1, 2]", '{"a": "x"}', {"k": [1]})
        assert [c.type_code for c in cur.description] == [25, 25, 114]


def test_session_commands(server: Server) -> None:
    with connect(server.port) as conn:
        for statement in ("SET datestyle TO 'ISO, MDY'", "SET extra_float_digits = 3",
                          "SET application_name = 'grafana'", "BEGIN", "COMMIT", "ROLLBACK",
                          "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "DISCARD ALL"):
            conn.execute(statement)
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
        assert conn.execute("SHOW standard_conforming_strings").fetchone() == ("on",)
        assert conn.execute("SHOW application_name").fetchone() == ("",)  # DISCARD ALL reset it
        assert conn.execute("SELECT version()").fetchone()[0].startswith("PostgreSQL 15")
        assert conn.execute("SELECT current_schema()").fetchone() == ("main",)
        assert conn.pgconn.parameter_status(b"server_version") == b"15.0"
        assert conn.execute("SHOW TABLES").fetchall() == [("events",), ("hotspots",)]


def test_information_schema_as_grafana_reads_it(server: Server) -> None:
    with connect(server.port) as conn:
        tables = conn.execute(
            "SELECT quote_ident(table_name) FROM information_schema.tables"
            " WHERE quote_ident(table_schema) NOT IN ('information_schema', 'pg_catalog') ORDER BY 1"
        ).fetchall()
        assert tables == [("events",), ("hotspots",)]
        columns = conn.execute(
            "SELECT quote_ident(column_name) AS \"column\", data_type AS \"type\" FROM information_schema.columns"
            " WHERE table_name = %s ORDER BY ordinal_position", ("hotspots",)
        ).fetchall()
        assert columns == [("name", "character varying"), ("calls", "bigint"), ("total_us", "double precision")]


def test_concurrent_clients(server: Server) -> None:
    expected = sorted((n, c) for n, (c, _) in expected_hotspots().items())
    errors: list[BaseException] = []

    def work() -> None:
        try:
            with connect(server.port) as conn:
                for _ in range(5):
                    assert conn.execute("SELECT name, calls FROM hotspots ORDER BY name").fetchall() == expected
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []


def test_dropped_and_broken_clients_do_not_stop_the_server(server: Server) -> None:
    # Leaves in the middle of the start-up packet.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"\x00\x00")
    # Sends garbage.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(b"GET / HTTP/1.1\r\n\r\n")
    # Sends a query and leaves without reading the answer.
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        startup = struct.pack("!i", 196608) + b"user\0x\0database\0tracedb\0\0"
        s.sendall(struct.pack("!i", len(startup) + 4) + startup)
        query = b"SELECT * FROM range(100000)\0"
        s.sendall(b"Q" + struct.pack("!i", len(query) + 4) + query)
    with connect(server.port) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (len(ROWS),)


def _message(tag: bytes, payload: bytes) -> bytes:
    return tag + struct.pack("!i", len(payload) + 4) + payload


def _read_messages_until(sock: socket.socket, last: bytes) -> list[tuple[bytes, bytes]]:
    stream = sock.makefile("rb")
    out = []
    while True:
        tag = stream.read(1)
        (length,) = struct.unpack("!i", stream.read(4))
        out.append((tag, stream.read(length - 4)))
        if tag == last:
            return out


def test_execute_with_a_row_limit_suspends_the_portal(server: Server) -> None:
    """What JDBC does with setFetchSize: Execute(max_rows) -> PortalSuspended, repeatedly."""
    with socket.create_connection(("127.0.0.1", server.port)) as s:
        startup = struct.pack("!i", 196608) + b"user\0x\0database\0tracedb\0\0"
        s.sendall(struct.pack("!i", len(startup) + 4) + startup)
        _read_messages_until(s, b"Z")
        s.sendall(
            _message(b"P", b"\0SELECT ts_ns FROM events ORDER BY ts_ns\0\0\0")
            + _message(b"B", b"\0\0\0\0\0\0\0\0")
            + _message(b"E", b"\0" + struct.pack("!i", 2))
            + _message(b"E", b"\0" + struct.pack("!i", 2))
            + _message(b"E", b"\0" + struct.pack("!i", 2))
            + _message(b"S", b"")
        )
        messages = _read_messages_until(s, b"Z")
    tags = b"".join(tag for tag, _ in messages)
    assert tags == b"12DDsDDsDCZ"
    values = [int(body[6:]) for tag, body in messages if tag == b"D"]
    assert values == sorted(r[1] for r in ROWS)
    assert messages[-2][1] == b"SELECT 5\0"


# ---------------------------------------------------------------------------
# SQLAlchemy (postgresql dialect, as Superset uses it) and duckdb-engine
# ---------------------------------------------------------------------------


def test_sqlalchemy_postgresql_inspector(server: Server) -> None:
    engine = sa.create_engine(f"postgresql+psycopg://analyst@127.0.0.1:{server.port}/tracedb")
    try:
        inspector = sa.inspect(engine)
        assert inspector.get_schema_names() == ["main"]
        assert inspector.get_table_names() == []
        assert inspector.get_view_names() == ["events", "hotspots"]
        columns = {c["name"]: type(c["type"]) for c in inspector.get_columns("events")}
        assert columns == {
            "file_id": sa.VARCHAR, "ts_ns": sa.BIGINT, "dur_ns": sa.BIGINT, "ph": sa.VARCHAR,
            "cat": sa.VARCHAR, "name": sa.VARCHAR, "phase": sa.VARCHAR, "rank": sa.BIGINT, "run": sa.VARCHAR,
        }
        assert [c["name"] for c in inspector.get_columns("hotspots")] == ["name", "calls", "total_us"]
        assert inspector.get_table_comment("hotspots") == {"text": HOTSPOTS_COMMENT}
        assert inspector.get_pk_constraint("events")["constrained_columns"] == []
        assert inspector.get_indexes("events") == []
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT name, calls FROM hotspots WHERE calls >= :n"), {"n": 2}).fetchall()
        assert [tuple(r) for r in rows] == [("gemm", 3)]
    finally:
        engine.dispose()


def test_duckdb_engine_reads_the_catalog_directly_from_any_cwd(tiny_wh: tuple[Path, Path]) -> None:
    """A separate process (as Superset or Metabase would be) opens the catalog file read-only."""
    catalog, _ = tiny_wh
    script = textwrap.dedent(f"""
        import json, sqlalchemy as sa
        engine = sa.create_engine("duckdb:///{catalog}?access_mode=read_only")
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT name, calls, total_us FROM hotspots ORDER BY name")).fetchall()
        views = sa.inspect(engine).get_view_names()
        print(json.dumps({{"rows": [list(r) for r in rows], "views": views}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd="/", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    import json

    result = json.loads(out.stdout)
    expected = expected_hotspots()
    assert result["rows"] == [[n, c, pytest.approx(us)] for n, (c, us) in sorted(expected.items())]
    assert result["views"] == ["events", "hotspots"]


# ---------------------------------------------------------------------------
# Security
# ---------------------------------------------------------------------------


def attacks(warehouse: Path) -> list[tuple[str, str]]:
    """(statement, SQLSTATE) pairs that must be refused."""
    return [
        ("SELECT * FROM read_text('/etc/passwd')", "42501"),
        ("SELECT * FROM read_csv('/etc/passwd')", "42501"),
        (f"SELECT * FROM read_parquet('{warehouse}/../../etc/passwd')", "42501"),
        (f"COPY (SELECT 1) TO '{warehouse}/x.csv'", "25006"),
        (f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{warehouse}/x.csv'", "42501"),
        (f"SELECT 1; COPY (SELECT 1) TO '{warehouse}/x.csv'", "25006"),
        ("CREATE TABLE t(i INT)", "25006"),
        ("CREATE TEMP TABLE t(i INT)", "25006"),
        ("INSERT INTO events VALUES (1)", "25006"),
        ("DROP VIEW hotspots", "25006"),
        ("ATTACH '/tmp/x.duckdb'", "42501"),
        ("DETACH tracedb", "42501"),
        ("INSTALL httpfs", "42501"),
        ("LOAD httpfs", "42501"),
        ("SET enable_external_access = true", "42501"),
        ("SET threads = 1", "42501"),
        ("RESET lock_configuration", "42501"),
        ("PRAGMA enable_profiling", "42501"),
        ("CALL pragma_version()", "42501"),
        (f"EXPORT DATABASE '{warehouse}/dump'", "25006"),
        (f"DECLARE c CURSOR FOR COPY (SELECT 1) TO '{warehouse}/x.csv'", "25006"),
        (f"PREPARE p AS COPY (SELECT 1) TO '{warehouse}/x.csv'", "42501"),
    ]


def test_attacks_are_refused_and_the_session_goes_on(server: Server, tiny_wh: tuple[Path, Path]) -> None:
    _, wh = tiny_wh
    before = sorted(p.relative_to(wh) for p in wh.rglob("*"))
    with connect(server.port) as conn:
        for statement, sqlstate in attacks(wh):
            with pytest.raises(psycopg.Error) as err:
                conn.execute(statement)
            assert err.value.sqlstate == sqlstate, statement
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (len(ROWS),), statement
    assert sorted(p.relative_to(wh) for p in wh.rglob("*")) == before
    assert not Path("/tmp/x.duckdb").exists() or Path("/tmp/x.duckdb").stat().st_size == 0


def test_duckdb_itself_is_sandboxed(tiny_wh: tuple[Path, Path]) -> None:
    """DuckDB's sandbox alone, without the gate: it refuses files outside the data folders."""
    catalog, wh = tiny_wh
    db = open_catalog(catalog, data_directories(wh))
    try:
        cursor = db.cursor()
        assert cursor.execute("SELECT count(*) FROM events").fetchone() == (len(ROWS),)
        with pytest.raises(duckdb.PermissionException):
            cursor.execute("SELECT * FROM read_text('/etc/passwd')")
        with pytest.raises(duckdb.PermissionException):
            cursor.execute(f"SELECT * FROM read_parquet('{wh}/../../etc/passwd')")
        assert data_directories(wh) == [f"{wh}/events/"]  # not the warehouse's root
        with pytest.raises(duckdb.Error):
            cursor.execute("SET enable_external_access = true")
        with pytest.raises(duckdb.Error):
            cursor.execute("CREATE TABLE t(i INT)")
    finally:
        db.close()


@pytest.mark.parametrize("method", ["scram-sha-256", "md5", "password"])
def test_password(tiny_wh: tuple[Path, Path], method: str) -> None:
    catalog, wh = tiny_wh
    with Server(catalog, wh, ServeConfig(port=0, password="s3cret", auth_method=method)) as srv:
        with connect(srv.port, password="s3cret") as conn:
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (len(ROWS),)
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            connect(srv.port, password="wrong")
        with pytest.raises(psycopg.OperationalError):
            connect(srv.port)  # no password at all
        with connect(srv.port, password="s3cret") as conn:  # still serving
            assert conn.execute("SELECT 1").fetchone() == (1,)


@needs_psql
def test_psql_with_password(tiny_wh: tuple[Path, Path]) -> None:
    catalog, wh = tiny_wh
    with Server(catalog, wh, ServeConfig(port=0, password="s3cret")) as srv:
        ok = psql(srv.port, "SELECT count(*) FROM events", password="s3cret")
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.strip() == str(len(ROWS))
        bad = psql(srv.port, "SELECT 1", password="wrong")
        assert bad.returncode != 0
        assert 'password authentication failed for user "analyst"' in bad.stderr


def test_non_loopback_without_password_is_refused(tiny_wh: tuple[Path, Path]) -> None:
    catalog, wh = tiny_wh
    with pytest.raises(ServeError, match="non-loopback"):
        Server(catalog, wh, ServeConfig(host="0.0.0.0", port=0))
    Server(catalog, wh, ServeConfig(host="0.0.0.0", port=0, password="s3cret"))  # allowed, not started


def test_serve_forever_returns_after_stop(tiny_wh: tuple[Path, Path]) -> None:
    catalog, wh = tiny_wh
    srv = Server(catalog, wh, ServeConfig(port=0))
    thread = threading.Thread(target=srv.serve_forever)
    thread.start()
    for _ in range(500):
        if srv.port:
            break
        threading.Event().wait(0.01)
    with connect(srv.port) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (len(ROWS),)
        srv.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")


def test_missing_catalog_is_a_serve_error(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="does not exist"):
        Server(tmp_path / "tracedb.duckdb", tmp_path, ServeConfig(port=0))


# ---------------------------------------------------------------------------
# Limits
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited_server(tiny_wh: tuple[Path, Path]):
    catalog, wh = tiny_wh
    srv = Server(catalog, wh, ServeConfig(port=0, statement_timeout_s=0.5, max_rows=10))
    srv.start()
    yield srv
    srv.stop()


SLOW_QUERY = "SELECT count(*) FROM range(1000000000000) a WHERE a.range % 7 = 3"


def test_statement_timeout(limited_server: Server) -> None:
    with connect(limited_server.port) as conn:
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            conn.execute(SLOW_QUERY)
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (len(ROWS),)


def test_cancel_request(server: Server) -> None:
    with connect(server.port) as conn:
        timer = threading.Timer(0.3, conn.cancel_safe)  # cancel() would hold the GIL in this process
        timer.start()
        try:
            with pytest.raises(psycopg.errors.QueryCanceled, match="user request"):
                conn.execute(SLOW_QUERY)
        finally:
            timer.cancel()
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_row_limit(limited_server: Server) -> None:
    with connect(limited_server.port) as conn:
        assert len(conn.execute("SELECT * FROM range(10)").fetchall()) == 10
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="more than 10 rows"):
            conn.execute("SELECT * FROM range(11)").fetchall()
        assert conn.execute("SELECT count(*) FROM range(1000)").fetchone() == (1000,)
