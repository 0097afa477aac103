"""BI clients through their real drivers against `tracedb serve`: Debian's pgjdbc
(what DBeaver, Metabase and Tableau's JDBC path call: ``DatabaseMetaData``) from
a Java program compiled here, and psqlODBC through pyodbc. The expected values
come from the warehouse's DuckDB catalog read directly (names, types, comments)
and from the fixture's layout (3 traces of run v1).

The schemas a client lists are checked against the files of queries/: the
marts beside the tables in main, staging and intermediate views in theirs, the
bookkeeping in tracedb_meta, each view's comment the header of its file.

A missing driver skips these tests locally and fails them in CI (env CI set):
.ci/run installs libpostgresql-jdbc-java, a JDK, odbc-postgresql and unixodbc.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import unquote_plus

import duckdb
import pytest

import tracedb

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cuda"
QUERIES = Path(__file__).resolve().parents[1] / "queries"
PGJDBC = Path("/usr/share/java/postgresql.jar")
PSQLODBC = Path("/usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so")
PASSWORD = "bi-s3cret"

#: DuckDB column type -> the PostgreSQL type name a client sees (as PostgreSQL 15 spells pg_type.typname).
PG_TYPENAMES = {"VARCHAR": "varchar", "BIGINT": "int8", "INTEGER": "int4", "DOUBLE": "float8", "BOOLEAN": "bool",
                "TIMESTAMP WITH TIME ZONE": "timestamptz", "TIMESTAMP": "timestamp", "HUGEINT": "numeric",
                "BIGINT[]": "text",  # lists are sent as JSON text
                "JSON": "varchar"}  # DuckDB lists JSON columns as VARCHAR in pg_attribute; values come as json


#: The relations the drivers are asked about, by schema.
RELATIONS = {"hotspots": "main", "traces": "main", "stg_kernels": "staging", "int_steps": "intermediate"}
_TAG_LINE = re.compile(r"^--\s*(requires|param\s+\w+|order by|default kind|materialize)\s*:", re.IGNORECASE)


def _views_of(layer: str) -> set[str]:
    """The views (not table macros) that the files of a layer of queries/ define."""
    return {p.stem for p in (QUERIES / layer).glob("*.sql")
            if re.search(rf"CREATE OR REPLACE VIEW {p.stem}\b", p.read_text())}


def _header(layer: str, name: str) -> str:
    """The header comment of queries/<layer>/<name>.sql, less its tag lines, on one line."""
    lines = []
    for line in (QUERIES / layer / f"{name}.sql").read_text().splitlines():
        if not line.startswith("--"):
            break
        if not _TAG_LINE.match(line) and line[2:].strip():
            lines.append(line[2:].strip())
    return " ".join(lines)


#: What a client lists in each schema: tables and marts first (main), then the layers, then the bookkeeping.
EXPECTED_SCHEMAS = {
    "main": {"events", "flows", "counters", "traces", "run_tags"} | _views_of("marts"),
    "staging": _views_of("staging"),
    "intermediate": _views_of("intermediate"),
    "tracedb_meta": {"catalog_info", "schema_version", "tracedb_views", "tracedb_view_columns", "user_comm_patterns"},
}


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing; .ci/run installs it")
    pytest.skip(f"{what} is not installed (CI installs it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("bi") / "wh"
    db = tracedb.open(wh)
    db.ingest([FIXTURES], jobs=1)
    db.close()
    return wh


@pytest.fixture(scope="module")
def catalog(warehouse: Path) -> dict:
    """Kind, comment and columns (name, type, comment) of each of RELATIONS, read from the catalog file."""
    con = duckdb.connect(str(warehouse / "tracedb.duckdb"), read_only=True)
    try:
        out = {}
        for name, schema in RELATIONS.items():
            out[name] = {
                "kind": "VIEW" if con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = ?",
                                              [name]).fetchone()[0] else "TABLE",
                "comment": con.execute(
                    "SELECT comment FROM duckdb_views() WHERE view_name = ? UNION ALL "
                    "SELECT comment FROM duckdb_tables() WHERE table_name = ?", [name, name]).fetchone()[0],
                "columns": con.execute(
                    "SELECT column_name, data_type, comment FROM duckdb_columns() WHERE table_name = ? "
                    "AND schema_name = ? ORDER BY column_index", [name, schema]).fetchall(),
            }
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def served(warehouse: Path):
    port = _free_port()
    env = {**os.environ, "TRACEDB_SERVE_PASSWORD": PASSWORD}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracedb.cli", "-w", str(warehouse), "serve", "--port", str(port)],
        stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    line = proc.stderr.readline()
    assert line.startswith(f"Serving {warehouse} on 127.0.0.1:{port}"), line
    yield port
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def hotspot_rows(warehouse: Path) -> int:
    db = tracedb.open(warehouse)
    try:
        return db.connect().execute("SELECT count(*) FROM hotspots").fetchone()[0]
    finally:
        db.close()


# Prints one block per call: "== <call>", then a row a line as tab-separated
# column=value with values URL-encoded ("~" for NULL), or "!! <error>".
PROBE = textwrap.dedent("""
    import java.net.URLEncoder;
    import java.nio.charset.StandardCharsets;
    import java.sql.*;
    import java.util.*;

    public class Probe {
        interface Call { ResultSet run() throws SQLException; }

        static void call(String name, Call c) {
            System.out.println("== " + name);
            try (ResultSet rs = c.run()) {
                ResultSetMetaData md = rs.getMetaData();
                while (rs.next()) {
                    StringBuilder sb = new StringBuilder();
                    for (int i = 1; i <= md.getColumnCount(); i++) {
                        String v = rs.getString(i);
                        if (i > 1) sb.append('\\t');
                        sb.append(md.getColumnLabel(i).toUpperCase()).append('=')
                          .append(v == null ? "~" : URLEncoder.encode(v, StandardCharsets.UTF_8));
                    }
                    System.out.println(sb);
                }
            } catch (Exception e) {
                System.out.println("!! " + e.toString().replace('\\n', ' '));
            }
        }

        public static void main(String[] args) throws Exception {
            Properties p = new Properties();
            p.setProperty("user", "tracedb");
            p.setProperty("password", args[1]);
            String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/tracedb";
            try (Connection con = DriverManager.getConnection(url, p)) {
                DatabaseMetaData md = con.getMetaData();
                call("getCatalogs", md::getCatalogs);
                call("getSchemas", md::getSchemas);
                call("getTables", () -> md.getTables(null, "main", "%", new String[] {"TABLE", "VIEW"}));
                call("getTables all", () -> md.getTables(null, null, "%", new String[] {"TABLE", "VIEW"}));
                call("getFunctions", () -> md.getFunctions(null, null, "%"));
                call("getClientInfoProperties", md::getClientInfoProperties);
                call("getTypeInfo", md::getTypeInfo);
                for (String t : new String[] {"hotspots", "traces"}) {
                    call("getColumns " + t, () -> md.getColumns(null, "main", t, "%"));
                    call("getPrimaryKeys " + t, () -> md.getPrimaryKeys(null, "main", t));
                    call("getIndexInfo " + t, () -> md.getIndexInfo(null, "main", t, false, true));
                    call("getBestRowIdentifier " + t,
                         () -> md.getBestRowIdentifier(null, "main", t, DatabaseMetaData.bestRowSession, true));
                    call("getImportedKeys " + t, () -> md.getImportedKeys(null, "main", t));
                    call("getExportedKeys " + t, () -> md.getExportedKeys(null, "main", t));
                    call("getTablePrivileges " + t, () -> md.getTablePrivileges(null, "main", t));
                    call("getColumnPrivileges " + t, () -> md.getColumnPrivileges(null, "main", t, "%"));
                }
                for (String t : new String[] {"stg_kernels", "int_steps"}) {
                    String schema = t.startsWith("stg_") ? "staging" : "intermediate";
                    call("getColumns " + t, () -> md.getColumns(null, schema, t, "%"));
                }
                call("unqualified", () -> con.createStatement().executeQuery(
                    "SELECT (SELECT count(*) FROM hotspots) AS hotspots, (SELECT count(*) FROM events) AS events,"
                    + " (SELECT count(*) FROM stg_kernels) AS stg_kernels"));
                PreparedStatement ps = con.prepareStatement("SELECT count(*) AS traces FROM traces WHERE run = ?");
                ps.setString(1, "v1");
                call("prepared", ps::executeQuery);
                con.setAutoCommit(false);  // setFetchSize only uses a cursor inside a transaction
                Statement st = con.createStatement();
                st.setFetchSize(7);
                call("fetchSize", () -> st.executeQuery("SELECT name FROM hotspots"));
                con.commit();
            }
        }
    }
""")


def _blocks(out: str) -> dict[str, list[dict[str, str | None]] | str]:
    """Probe output -> call -> rows (column -> value) or the error text."""
    blocks: dict[str, list[dict[str, str | None]] | str] = {}
    current = ""
    for line in out.splitlines():
        if line.startswith("== "):
            current = line[3:]
            blocks[current] = []
        elif line.startswith("!! "):
            blocks[current] = line[3:]
        elif line:
            row = {}
            for cell in line.split("\t"):
                key, _, value = cell.partition("=")
                row[key] = None if value == "~" else unquote_plus(value)
            blocks[current].append(row)  # type: ignore[union-attr]
    return blocks


@pytest.fixture(scope="module")
def jdbc(served: int, tmp_path_factory) -> dict:
    if not PGJDBC.exists():
        _missing(f"pgjdbc ({PGJDBC}, Debian's libpostgresql-jdbc-java)")
    if shutil.which("javac") is None or shutil.which("java") is None:
        _missing("a JDK (javac, java)")
    work = tmp_path_factory.mktemp("probe")
    (work / "Probe.java").write_text(PROBE)
    subprocess.run(["javac", "-cp", str(PGJDBC), "Probe.java"], cwd=work, check=True, timeout=120)
    out = subprocess.run(["java", "-cp", f"{PGJDBC}:{work}", "Probe", str(served), PASSWORD],
                         cwd=work, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return _blocks(out.stdout)


def test_every_metadata_call_answers_without_error(jdbc: dict) -> None:
    errors = {call: rows for call, rows in jdbc.items() if isinstance(rows, str)}
    assert errors == {}
    assert len(jdbc) == 7 + 2 * 8 + 2 + 3


def test_jdbc_lists_the_view_and_the_table_with_their_comments(jdbc: dict, catalog: dict) -> None:
    assert jdbc["getCatalogs"] == [{"TABLE_CAT": "tracedb"}]
    assert "main" in [row["TABLE_SCHEM"] for row in jdbc["getSchemas"]]
    tables = {row["TABLE_NAME"]: row for row in jdbc["getTables"]}
    for name in ("hotspots", "traces"):
        assert tables[name]["TABLE_SCHEM"] == "main"
        assert tables[name]["TABLE_TYPE"] == catalog[name]["kind"]
        assert tables[name]["REMARKS"] == catalog[name]["comment"]
    assert catalog["hotspots"]["kind"] == "VIEW" and catalog["traces"]["kind"] == "TABLE"
    assert catalog["hotspots"]["comment"]  # the view library comments its marts


def test_jdbc_lists_marts_first_and_each_layer_in_its_schema(jdbc: dict) -> None:
    listed: dict[str, set[str]] = {}
    for row in jdbc["getTables all"]:
        listed.setdefault(row["TABLE_SCHEM"], set()).add(row["TABLE_NAME"])
    assert listed == EXPECTED_SCHEMAS
    assert {row["TABLE_SCHEM"] for row in jdbc["getSchemas"]} >= set(EXPECTED_SCHEMAS)
    remarks = {(row["TABLE_SCHEM"], row["TABLE_NAME"]): row["REMARKS"] for row in jdbc["getTables all"]}
    for layer, schema in (("marts", "main"), ("staging", "staging"), ("intermediate", "intermediate")):
        for name in EXPECTED_SCHEMAS[schema] & _views_of(layer):
            assert remarks[(schema, name)] == _header(layer, name), name
    assert remarks[("main", "hotspots")].startswith("Top kernels, CPU ops or annotations by total time")


def test_jdbc_runs_existing_sql_unqualified(jdbc: dict, warehouse: Path) -> None:
    con = duckdb.connect(str(warehouse / "tracedb.duckdb"), read_only=True)
    try:
        want = con.execute("SELECT (SELECT count(*) FROM main.hotspots), (SELECT count(*) FROM main.events),"
                           " (SELECT count(*) FROM staging.stg_kernels)").fetchone()
    finally:
        con.close()
    assert jdbc["unqualified"] == [{"HOTSPOTS": str(want[0]), "EVENTS": str(want[1]), "STG_KERNELS": str(want[2])}]
    assert min(want) > 0


@pytest.mark.parametrize("name", list(RELATIONS))
def test_jdbc_columns_have_postgresql_types_and_the_catalog_comments(jdbc: dict, catalog: dict, name: str) -> None:
    got = [(row["COLUMN_NAME"], row["TYPE_NAME"], row["ORDINAL_POSITION"], row["REMARKS"])
           for row in jdbc[f"getColumns {name}"]]
    want = [(column, PG_TYPENAMES[duck_type], str(i), comment)
            for i, (column, duck_type, comment) in enumerate(catalog[name]["columns"], start=1)]
    assert got == want


@pytest.mark.parametrize("name", ["hotspots", "traces"])
def test_jdbc_keys_and_indexes_are_empty_and_privileges_are_select(jdbc: dict, catalog: dict, name: str) -> None:
    for call in ("getPrimaryKeys", "getIndexInfo", "getBestRowIdentifier", "getImportedKeys", "getExportedKeys"):
        assert jdbc[f"{call} {name}"] == [], call
    assert [(r["TABLE_NAME"], r["GRANTEE"], r["PRIVILEGE"]) for r in jdbc[f"getTablePrivileges {name}"]] == [
        (name, "tracedb", "SELECT")]
    columns = jdbc[f"getColumnPrivileges {name}"]
    if catalog[name]["kind"] == "TABLE":  # PostgreSQL lists column privileges of tables only
        assert sorted((r["COLUMN_NAME"], r["PRIVILEGE"]) for r in columns) == sorted(
            (column, "SELECT") for column, _, _ in catalog[name]["columns"])
    else:
        assert columns == []


def test_jdbc_type_info_and_client_info(jdbc: dict) -> None:
    types = {row["TYPE_NAME"]: int(row["DATA_TYPE"]) for row in jdbc["getTypeInfo"]}
    # java.sql.Types: BIT -7, BIGINT -5, INTEGER 4, SMALLINT 5, DOUBLE 8, NUMERIC 2, VARCHAR 12, DATE 91,
    # TIMESTAMP 93, ARRAY 2003
    assert {name: types.get(name) for name in
            ("bool", "int2", "int4", "int8", "float8", "numeric", "text", "varchar", "date", "timestamp",
             "timestamptz", "_int4")} == {
        "bool": -7, "int2": 5, "int4": 4, "int8": -5, "float8": 8, "numeric": 2, "text": 12, "varchar": 12,
        "date": 91, "timestamp": 93, "timestamptz": 93, "_int4": 2003}
    assert [(r["NAME"], r["MAX_LEN"]) for r in jdbc["getClientInfoProperties"]] == [("ApplicationName", "63")]


def test_jdbc_prepared_query_and_fetch_size_cursor(jdbc: dict, hotspot_rows: int) -> None:
    assert jdbc["prepared"] == [{"TRACES": "3"}]  # v1 has decode, prefill and train traces
    assert len(jdbc["fetchSize"]) == hotspot_rows > 7


@pytest.fixture(scope="module")
def odbc(served: int):
    try:
        import pyodbc
    except ImportError:
        _missing("pyodbc (with unixodbc)")
    if not PSQLODBC.exists():
        _missing(f"psqlODBC ({PSQLODBC}, Debian's odbc-postgresql)")
    con = pyodbc.connect(f"Driver={PSQLODBC};Server=127.0.0.1;Port={served};Database=tracedb;"
                         f"Uid=tracedb;Pwd={PASSWORD}", autocommit=True)
    yield con
    con.close()


def test_odbc_catalog_calls_and_a_parameterised_query(odbc, catalog: dict) -> None:
    cur = odbc.cursor()
    tables = {row.table_name: row.table_type for row in cur.tables(schema="main").fetchall()}
    assert tables["hotspots"] == "VIEW" and tables["traces"] == "TABLE"
    for name in ("hotspots", "traces"):
        got = [(row.column_name, row.type_name) for row in cur.columns(table=name, schema="main").fetchall()]
        assert got == [(column, PG_TYPENAMES[duck_type]) for column, duck_type, _ in catalog[name]["columns"]]
    assert cur.primaryKeys("traces", schema="main").fetchall() == []
    assert [row for row in cur.statistics("traces", schema="main").fetchall() if row.index_name] == []
    assert cur.execute("SELECT count(*) FROM traces WHERE run = ?", "v1").fetchone()[0] == 3
    comment = cur.execute("SELECT obj_description(c.oid, 'pg_class') FROM pg_catalog.pg_class c "
                          "WHERE c.relname = ?", "hotspots").fetchone()[0]
    assert comment == catalog["hotspots"]["comment"]


def test_odbc_lists_each_layer_in_its_schema_with_comments_a_query_away(odbc, catalog: dict) -> None:
    """psqlODBC fills SQLTables' and SQLColumns' REMARKS with '' itself (it never asks the server:
    info.c), so an ODBC client reads the comments with obj_description / col_description."""
    cur = odbc.cursor()
    listed: dict[str, set[str]] = {}
    for row in cur.tables().fetchall():
        listed.setdefault(row.table_schem, set()).add(row.table_name)
    assert listed == EXPECTED_SCHEMAS
    assert cur.execute("SELECT count(*) FROM stg_kernels").fetchone()[0] > 0  # unqualified, from staging
    got = cur.execute(
        "SELECT n.nspname, obj_description(c.oid, 'pg_class'), col_description(c.oid, 1) FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.relname = ?", "stg_kernels").fetchall()
    assert [tuple(row) for row in got] == [("staging", _header("staging", "stg_kernels"),
                                            catalog["stg_kernels"]["columns"][0][2])]
    assert catalog["stg_kernels"]["columns"][0][2]


def test_catalog_queries_of_metabase_and_dbeaver_browsing(served: int, catalog: dict) -> None:
    """What Metabase's sync and DBeaver's navigator read beyond DatabaseMetaData: quoted catalog
    names, privileges, row estimates, inheritance and materialized views (none)."""
    import psycopg

    with psycopg.connect(f"host=127.0.0.1 port={served} dbname=tracedb user=tracedb password={PASSWORD}") as con:
        rows = con.execute(
            'SELECT "c"."relname", "d"."description", "stat"."n_live_tup",'
            " has_table_privilege(current_user, 'main.' || c.relname, 'SELECT'),"
            " has_table_privilege(current_user, 'main.' || c.relname, 'DELETE'),"
            " has_any_column_privilege('main.' || c.relname, 'update'),"
            " has_schema_privilege(current_user, n.nspname, 'USAGE'),"
            " (SELECT count(*) FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid)"
            ' FROM "pg_catalog"."pg_class" AS "c" JOIN "pg_catalog"."pg_namespace" AS "n" ON c.relnamespace = n.oid'
            ' LEFT JOIN "pg_catalog"."pg_description" AS "d" ON c.oid = d.objoid AND d.objsubid = 0'
            " AND d.classoid = 'pg_class'::regclass"
            ' LEFT JOIN "pg_stat_user_tables" AS "stat" ON n.nspname = stat.schemaname AND c.relname = stat.relname'
            " WHERE c.relname IN ('hotspots', 'traces') ORDER BY 1").fetchall()
        # 4 traces: v1's decode, prefill and train, v2's train; a view has no estimate
        assert rows == [("hotspots", catalog["hotspots"]["comment"], None, True, False, False, True, 0),
                        ("traces", catalog["traces"]["comment"], 4, True, False, False, True, 0)]
        assert con.execute("SELECT count(*) FROM pg_catalog.pg_matviews").fetchone() == (0,)
        assert con.execute("SELECT setting FROM pg_catalog.pg_settings WHERE name = 'max_index_keys'").fetchall() == [
            ("32",)]
        assert con.execute("SELECT rolname FROM pg_catalog.pg_roles r JOIN pg_catalog.pg_class c"
                           " ON c.relowner = r.oid WHERE c.relname = 'hotspots'").fetchall() == [("tracedb",)]


def _psql(port: int, *commands: str) -> list[list[str]]:
    if shutil.which("psql") is None:
        _missing("psql (Debian's postgresql-client)")
    args = ["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(port), "-U", "tracedb",
            "-d", "tracedb"]
    for command in commands:
        args += ["-c", command]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PGPASSWORD": PASSWORD, "PGCONNECT_TIMEOUT": "5"})
    assert out.returncode == 0, out.stderr
    return [line.split("|") for line in out.stdout.splitlines()]


def test_psql_lists_tables_and_views_by_schema(served: int) -> None:
    # \dt and \dv list what is on the search path (main, staging, intermediate), as PostgreSQL's psql does
    assert _psql(served, r"\dt") == [["main", "traces", "table", "tracedb"]]
    views: dict[str, set[str]] = {}
    for schema, name, kind, _owner in _psql(served, r"\dv"):
        assert kind == "view"
        views.setdefault(schema, set()).add(name)
    assert views == {"main": EXPECTED_SCHEMAS["main"] - {"traces"}, "staging": EXPECTED_SCHEMAS["staging"],
                     "intermediate": EXPECTED_SCHEMAS["intermediate"]}
    assert {name for _schema, name, *_ in _psql(served, r"\dt tracedb_meta.*")} == EXPECTED_SCHEMAS["tracedb_meta"]
    described = {row[1]: row[-1] for row in _psql(served, r"\dv+ hotspots", r"\dv+ stg_kernels")}
    assert described == {"hotspots": _header("marts", "hotspots"), "stg_kernels": _header("staging", "stg_kernels")}


def test_psql_runs_existing_sql_unqualified(served: int, hotspot_rows: int) -> None:
    rows = _psql(served, "SELECT count(*) FROM hotspots", "SELECT count(*) FROM main.hotspots",
                 "SELECT count(*) FROM int_steps", "SHOW search_path")
    assert rows == [[str(hotspot_rows)], [str(hotspot_rows)], rows[2], ["main, staging, intermediate"]]
    assert int(rows[2][0]) > 0
