"""Catalog: migrations with checksums, the view loader, comments."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import tracedb
from tracedb.catalog import load_migrations, migrate
from tracedb.errors import MigrationError, ViewError
from tracedb.views import load_view_files
from conftest import write_trace


def _ingest_one(tmp_path: Path) -> Path:
    f = write_trace(tmp_path / "runs" / "v1" / "rank0.json", [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5},
    ])
    wh = tmp_path / "wh"
    tracedb.open(wh).ingest([f], jobs=1)
    return wh


def test_migrations_recorded_with_checksums(tmp_path: Path):
    wh = _ingest_one(tmp_path)
    con = duckdb.connect(str(wh / "tracedb.duckdb"), read_only=True)
    rows = con.execute("SELECT version, name, checksum FROM tracedb_meta.schema_version ORDER BY version").fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [(m.version, m.name, m.checksum) for m in load_migrations()]


@pytest.mark.parametrize("tamper,message", [
    ("UPDATE tracedb_meta.schema_version SET checksum = 'x' WHERE version = 1", "checksum mismatch"),
    ("INSERT INTO tracedb_meta.schema_version VALUES (999, 'future', 'x', now())", "newer than this tracedb"),
])
def test_tampered_or_newer_catalog_is_an_error(tmp_path: Path, tamper: str, message: str):
    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    migrations = load_migrations()
    assert migrate(con, migrations) == [m.version for m in migrations]
    assert migrate(con, migrations) == []  # applied once
    con.execute(tamper)
    with pytest.raises(MigrationError, match=message):
        migrate(con, migrations)


def test_migration_numbers_are_gapless(tmp_path: Path):
    (tmp_path / "0001_a.sql").write_text("CREATE TABLE a (i INT);")
    (tmp_path / "0003_c.sql").write_text("CREATE TABLE c (i INT);")
    with pytest.raises(MigrationError, match="gapless"):
        load_migrations(tmp_path)


def _view(root: Path, layer: str, name: str, body: str,
          header: str = "-- Something useful.\n-- Grain: one row per x.\n") -> None:
    (root / layer).mkdir(parents=True, exist_ok=True)
    (root / layer / f"{name}.sql").write_text(header + body)


def test_view_dependency_cycle_is_an_error(tmp_path: Path):
    _view(tmp_path, "staging", "a", "CREATE OR REPLACE VIEW a AS SELECT * FROM b;", "-- A.\n-- Grain: one row.\n-- requires: b\n")
    _view(tmp_path, "staging", "b", "CREATE OR REPLACE VIEW b AS SELECT * FROM a;", "-- B.\n-- Grain: one row.\n-- requires: a\n")
    with pytest.raises(ViewError, match="cycle"):
        load_view_files(tmp_path)


def test_views_are_ordered_by_requires(tmp_path: Path):
    _view(tmp_path, "marts", "m", "CREATE OR REPLACE VIEW m AS SELECT * FROM s;", "-- M.\n-- Grain: one row.\n-- requires: s\n")
    _view(tmp_path, "staging", "s", "CREATE OR REPLACE VIEW s AS SELECT 1 AS x;")
    assert [v.name for v in load_view_files(tmp_path)] == ["s", "m"]


def test_view_needs_a_header_and_matching_name(tmp_path: Path):
    _view(tmp_path, "staging", "s", "CREATE OR REPLACE VIEW s AS SELECT 1 AS x;", header="")
    with pytest.raises(ViewError, match="missing header"):
        load_view_files(tmp_path)
    _view(tmp_path, "staging", "s", "CREATE OR REPLACE VIEW t AS SELECT 1 AS x;")
    with pytest.raises(ViewError, match="file name says s"):
        load_view_files(tmp_path)


def test_view_without_a_grain_is_refused(tmp_path: Path):
    _view(tmp_path, "staging", "s", "CREATE OR REPLACE VIEW s AS SELECT 1 AS x;", header="-- Something useful.\n")
    with pytest.raises(ViewError, match=r"staging/s\.sql: the header states no grain"):
        load_view_files(tmp_path)


def test_view_reading_a_higher_layer_is_refused(tmp_path: Path):
    _view(tmp_path, "staging", "s", "CREATE OR REPLACE VIEW s AS SELECT 1 AS x;")
    _view(tmp_path, "marts", "m", "CREATE OR REPLACE VIEW m AS SELECT x FROM s;",
          "-- M.\n-- Grain: one row.\n-- requires: s\n")
    _view(tmp_path, "intermediate", "i", "CREATE OR REPLACE VIEW i AS SELECT x FROM m;",
          "-- I.\n-- Grain: one row.\n-- requires: m\n")
    with pytest.raises(ViewError, match=r"intermediate/i\.sql: intermediate view i reads m, a view of the higher"
                                        r" layer marts"):
        load_view_files(tmp_path)


def test_requires_must_match_what_the_sql_reads(tmp_path: Path):
    _view(tmp_path, "staging", "s", "CREATE OR REPLACE VIEW s AS SELECT 1 AS x;")
    _view(tmp_path, "staging", "t", "CREATE OR REPLACE VIEW t AS SELECT 2 AS x;")
    # a read the header does not declare (a mart, here: also a higher layer)
    _view(tmp_path, "marts", "m", "CREATE OR REPLACE VIEW m AS SELECT 1 AS x;")
    _view(tmp_path, "intermediate", "i",
          "CREATE OR REPLACE VIEW i AS\n-- from s\nWITH t AS (SELECT x FROM s) SELECT x FROM t JOIN m USING (x);",
          "-- I.\n-- Grain: one row.\n-- requires: s\n")
    with pytest.raises(ViewError, match=r"intermediate/i\.sql: reads m without declaring it"):
        load_view_files(tmp_path)
    # a declared view it never reads (comments, strings and its own CTE names do not count)
    _view(tmp_path, "intermediate", "i",
          "CREATE OR REPLACE VIEW i AS\n-- not m\nWITH t AS (SELECT 'm' AS x FROM s) SELECT x FROM t;",
          "-- I.\n-- Grain: one row.\n-- requires: s, t\n")
    with pytest.raises(ViewError, match=r"intermediate/i\.sql: requires t but does not read it"):
        load_view_files(tmp_path)
    # declared and read, all below: accepted
    _view(tmp_path, "intermediate", "i", "CREATE OR REPLACE VIEW i AS SELECT x FROM s UNION ALL SELECT x FROM t;",
          "-- I.\n-- Grain: one row.\n-- requires: s, t\n")
    assert [v.name for v in load_view_files(tmp_path)].index("i") > 1


def test_the_library_states_grains_and_reads_down():
    from tracedb.catalog import resource_dir
    from tracedb.views import LAYERS, reads

    defs = load_view_files(resource_dir("queries"))
    layer = {v.name: LAYERS.index(v.layer) for v in defs}
    for v in defs:
        assert "Grain: one row per" in v.description, v.name
        assert all(layer[r] <= layer[v.name] for r in reads(v, set(layer))), v.name
    assert {"int_timed_ops", "int_step_buckets", "int_collectives", "int_step_sums"} <= set(layer)
    assert "stg_timed_ops" not in layer


def test_comments_land_in_the_catalog(tmp_path: Path):
    wh = _ingest_one(tmp_path)
    con = duckdb.connect(str(wh / "tracedb.duckdb"), read_only=True)
    view_comment = con.execute("SELECT comment FROM duckdb_views() WHERE view_name = 'hotspots'").fetchone()[0]
    assert "kernels" in view_comment
    col = con.execute("SELECT comment FROM duckdb_columns() WHERE table_name = 'hotspots' "
                      "AND column_name = 'total_us'").fetchone()[0]
    assert "microseconds" in col
    undocumented = con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE table_name IN "
        "(SELECT name FROM tracedb_meta.tracedb_views WHERE kind = 'view') AND comment IS NULL").fetchall()
    assert undocumented == []


def test_views_bound_once_have_the_columns_duckdb_binds_them_with(tmp_path: Path):
    """create_views binds each view over empty tables standing in for the
    views it reads: every view of a catalog has the columns and types the
    library's SQL, run statement by statement, gives it, and binds when
    read (no stand-in left, none in its SQL)."""
    from tracedb.catalog import resource_dir
    from tracedb.views import LAYER_SCHEMAS, catalog_sql, load_view_files, relation_schemas

    wh = _ingest_one(tmp_path)
    catalog = duckdb.connect(str(wh / "tracedb.duckdb"), read_only=True)
    plain = duckdb.connect()
    plain.execute(f"ATTACH '{wh / 'tracedb.duckdb'}' AS c (READ_ONLY)")
    for schema in sorted(set(LAYER_SCHEMAS.values()) - {"main"}):
        plain.execute(f"CREATE SCHEMA {schema}")
    for table in ("events", "flows", "counters", "traces", "tracedb_meta.user_comm_patterns"):
        if "." in table:
            plain.execute(f"CREATE SCHEMA IF NOT EXISTS {table.split('.')[0]}")
        plain.execute(f"CREATE TABLE {table} AS SELECT * FROM c.{table} LIMIT 0")
    defs = load_view_files(resource_dir("queries"))
    schemas = relation_schemas(defs)
    for v in defs:
        plain.execute(catalog_sql(v, schemas))
    query = ("SELECT schema_name, view_name, column_name, data_type FROM duckdb_views() JOIN duckdb_columns() "
             "USING (database_name, schema_name) WHERE table_name = view_name AND NOT duckdb_views.internal "
             "AND database_name = current_database() ORDER BY ALL")
    library = {v.name for v in defs if v.kind == "view"}
    expected = plain.execute(query).fetchall()
    assert {row[1] for row in expected} == library
    assert [row for row in catalog.execute(query).fetchall() if row[1] in library] == expected
    assert catalog.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE '%__bound'").fetchone() == (0,)
    for v in defs:
        if v.kind == "view":
            catalog.execute(f"SELECT * FROM {v.qualified_name} LIMIT 0").fetchall()


def test_a_readers_connection_draws_no_progress_bar(tmp_path: Path):
    # DuckDB draws its progress bar on stdout for a query past 2 s, where it
    # lands between the rows of `tracedb query -f csv > out.csv` (seen with
    # regressions over 2,000 rank files). Its default depends on how Python
    # runs (on in the CLI, off under pytest): asked of the CLI itself.
    wh = _ingest_one(tmp_path)
    out = subprocess.run([sys.executable, "-m", "tracedb.cli", "-w", str(wh), "sql",
                          "SELECT current_setting('enable_progress_bar') AS shown", "-f", "csv"],
                         capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout == "shown\nFalse\n"


def test_moved_warehouse_is_repointed(tmp_path: Path):
    wh = _ingest_one(tmp_path)
    moved = tmp_path / "moved"
    wh.rename(moved)
    db = tracedb.open(moved)
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(1,)]


def test_raw_views_over_files_have_the_columns_of_the_empty_ones(tmp_path: Path, monkeypatch):
    """The library is bound over empty raw views (binding it over a trace's
    files read their footers once per view): they must have the columns and
    types the raw views over files have, flows and counters included. The
    commit here is the one with the files (no early empty commit)."""
    import tracedb.ingest as ingest
    from tracedb.views import raw_columns

    monkeypatch.setattr(ingest, "_early_commit", lambda *args: None)
    f = write_trace(tmp_path / "runs" / "v1" / "rank0.json", [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
         "args": {"grid": [1, 2, 3], "memory bandwidth (GB/s)": 1.5, "External id": 3}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 10},
        {"ph": "C", "name": "memory", "pid": 0, "ts": 10, "args": {"allocated": 1}},
    ])
    wh = tmp_path / "wh"
    tracedb.open(wh).ingest([f], jobs=1)
    con = duckdb.connect(str(wh / "tracedb.duckdb"), read_only=True)
    for table in ("events", "flows", "counters"):
        assert con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 1
        described = [(name, typ) for name, typ, *_ in con.execute(f"DESCRIBE {table}").fetchall()]
        assert described == raw_columns(table), table
    assert con.execute("SELECT name, calls FROM hotspots").fetchall() == [("k", 1)]


def test_catalog_sql_names_other_schemas_relations_and_leaves_comments_literals_and_ctes():
    from tracedb.views import ViewDef, catalog_sql

    sql = ("-- Reads events.\n-- Grain: one row.\nCREATE OR REPLACE VIEW int_x AS\n"
           "-- from stg_a, not FROM stg_a\n"
           "WITH stg_b AS (SELECT 1 AS x) SELECT 'FROM stg_a' AS s, x FROM stg_a JOIN stg_b USING (x)\n"
           "JOIN events e ON true JOIN main.traces USING (run) JOIN int_y USING (x);")
    v = ViewDef(name="int_x", layer="intermediate", kind="view", path=Path("int_x.sql"), sql=sql, description="")
    schemas = {"stg_a": "staging", "stg_b": "staging", "events": "main", "traces": "main", "int_y": "intermediate"}
    assert catalog_sql(v, schemas) == (
        "-- Reads events.\n-- Grain: one row.\nCREATE OR REPLACE VIEW intermediate.int_x AS\n"
        "-- from stg_a, not FROM stg_a\n"
        "WITH stg_b AS (SELECT 1 AS x) SELECT 'FROM stg_a' AS s, x FROM staging.stg_a JOIN stg_b USING (x)\n"
        "JOIN main.events e ON true JOIN main.traces USING (run) JOIN intermediate.int_y USING (x);")


def _schemas_of(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for schema, name in con.execute(
            "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal AND database_name = 'tracedb'"
            " UNION ALL SELECT schema_name, table_name FROM duckdb_tables() WHERE database_name = 'tracedb'"
    ).fetchall():
        out.setdefault(schema, set()).add(name)
    return out


def _files(layer: str) -> set[str]:
    """The views (not table macros) the files of a layer of queries/ define."""
    root = Path(__file__).resolve().parents[1] / "queries" / layer
    return {p.stem for p in root.glob("*.sql") if re.search(rf"CREATE OR REPLACE VIEW {p.stem}\b", p.read_text())}


def test_catalog_file_opened_with_duckdb_alone_or_attached_under_another_name(tmp_path: Path):
    wh = _ingest_one(tmp_path)
    con = duckdb.connect(str(wh / "tracedb.duckdb"), read_only=True)
    layout = _schemas_of(con)
    assert layout == {
        "main": {"events", "flows", "counters", "traces", "run_tags"} | _files("marts"),
        "staging": _files("staging"), "intermediate": _files("intermediate"),
        "tracedb_meta": {"catalog_info", "schema_version", "tracedb_views", "tracedb_view_columns",
                         "user_comm_patterns"}}
    # existing SQL, unqualified, on a connection with DuckDB's own search path (main)
    assert con.execute("SELECT name, calls FROM hotspots").fetchall() == [("k", 1)]
    assert con.execute("SELECT count(*) FROM events").fetchall() == [(1,)]
    assert con.execute("SELECT name, dur_ns FROM staging.stg_kernels").fetchall() == [("k", 5000)]
    con.close()
    other = duckdb.connect()
    other.execute(f"ATTACH '{wh / 'tracedb.duckdb'}' AS warehouse (READ_ONLY)")
    assert other.execute("SELECT name, calls FROM warehouse.hotspots").fetchall() == [("k", 1)]
    for schema, names in layout.items():
        for name in names:  # every view binds where the catalog is not the connection's database
            other.execute(f"SELECT * FROM warehouse.{schema}.{name} LIMIT 0")


def test_a_catalog_of_the_flat_layout_moves_into_the_schemas(tmp_path: Path):
    """A catalog an older tracedb made (everything in main) is re-laid on first use, its history kept."""
    wh = _ingest_one(tmp_path)
    catalog = wh / "tracedb.duckdb"
    catalog.unlink()
    old = load_migrations()[:2]
    con = duckdb.connect(str(catalog))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name VARCHAR, checksum VARCHAR,"
                " applied_at TIMESTAMPTZ)")
    for m in old:
        con.execute(m.sql)
        con.execute("INSERT INTO schema_version VALUES (?, ?, ?, TIMESTAMPTZ '2025-01-02 03:04:05+00')",
                    [m.version, m.name, m.checksum])
    con.execute("INSERT INTO catalog_info VALUES ('warehouse', '/somewhere/else')")
    con.execute("CREATE TABLE tracedb_views (name VARCHAR)")
    con.execute("CREATE TABLE user_comm_patterns (priority BIGINT)")
    con.execute("CREATE VIEW stg_kernels AS SELECT 1 AS old")
    con.execute("CREATE MACRO int_latency(span) AS TABLE SELECT 1 AS old")
    con.execute("CREATE VIEW events AS SELECT 1 AS old")
    con.close()

    db = tracedb.open(wh)
    assert db.sql("SELECT count(*) FROM traces").fetchall() == [(0,)]  # the traces table was re-made empty
    db.close()
    con = duckdb.connect(str(catalog), read_only=True)
    assert "stg_kernels" not in _schemas_of(con)["main"]
    assert {"tracedb_views", "user_comm_patterns", "catalog_info", "schema_version"}.isdisjoint(
        _schemas_of(con)["main"])
    history = con.execute("SELECT version, name, checksum, applied_at = TIMESTAMPTZ '2025-01-02 03:04:05+00'"
                          " FROM tracedb_meta.schema_version ORDER BY version").fetchall()
    assert history == [(m.version, m.name, m.checksum, m.version <= 2) for m in load_migrations()]
    assert con.execute("SELECT value FROM tracedb_meta.catalog_info WHERE key = 'warehouse'").fetchall() == [
        (str(wh),)]
    assert con.execute("SELECT count(*) FROM staging.stg_kernels").fetchall() == [(0,)]
    assert con.execute("SELECT DISTINCT schema_name FROM duckdb_functions() WHERE function_name = 'int_latency'"
                       ).fetchall() == [("intermediate",)]


def test_a_view_the_library_no_longer_has_is_dropped_from_its_schema(tmp_path: Path):
    """An upgrade that removes an intermediate view (int_event_steps went so) drops it from the
    catalog: it may read what is gone. main keeps what the library does not own."""
    wh = _ingest_one(tmp_path)
    con = duckdb.connect(str(wh / "tracedb.duckdb"))
    con.execute("CREATE VIEW intermediate.int_gone AS SELECT 1 AS x")
    con.execute("CREATE VIEW staging.stg_gone AS SELECT 1 AS x")
    con.execute("CREATE VIEW main.mine AS SELECT 1 AS x")
    con.execute("UPDATE tracedb_meta.catalog_info SET value = 'an older library' WHERE key = 'views_fingerprint'")
    con.close()
    tracedb.open(wh).rebuild_views()  # what `tracedb migrate` runs
    con = duckdb.connect(str(wh / "tracedb.duckdb"), read_only=True)
    layout = _schemas_of(con)
    assert "int_gone" not in layout["intermediate"] and "stg_gone" not in layout["staging"]
    assert "mine" in layout["main"]
    assert "int_steps" in layout["intermediate"]


def test_duckdb_engine_reflects_each_layer_in_its_schema(tmp_path: Path):
    """SQLAlchemy's duckdb-engine (Superset; DBeaver's and Metabase's DuckDB drivers list the same
    duckdb_views()) on the catalog file: the marts in main, the layers in theirs, with comments."""
    sa = pytest.importorskip("sqlalchemy")
    pytest.importorskip("duckdb_engine")
    wh = _ingest_one(tmp_path)
    engine = sa.create_engine(f"duckdb:///{wh / 'tracedb.duckdb'}?access_mode=read_only")
    try:
        inspector = sa.inspect(engine)
        assert {f"tracedb.{schema}" for schema in ("main", "staging", "intermediate", "tracedb_meta")} <= set(
            inspector.get_schema_names())
        assert set(inspector.get_view_names()) == {"events", "flows", "counters", "run_tags"} | _files("marts")
        assert set(inspector.get_view_names(schema="staging")) == _files("staging")
        assert set(inspector.get_view_names(schema="intermediate")) == _files("intermediate")
        assert inspector.get_table_names(schema="main") == ["traces"]
        assert inspector.get_table_comment("stg_kernels", schema="staging")["text"].startswith(
            "GPU kernels (CUDA, ROCm; MTIA device ops), typed and renamed.")
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT name, calls FROM hotspots")).fetchall() == [("k", 1)]
    finally:
        engine.dispose()


def _catalog_dump(path: Path, home: Path) -> dict[str, list]:
    """Everything a catalog holds: its views, macros and columns with their
    SQL and comments, and every table's rows (the migrations' times left
    out, the warehouse's own folder written as WH)."""
    con = duckdb.connect(str(path), read_only=True)
    here = "current_database()"
    dump = {
        "views": con.execute(f"SELECT schema_name, view_name, sql, comment FROM duckdb_views() "
                             f"WHERE NOT internal AND database_name = {here}").fetchall(),
        "macros": con.execute(f"SELECT schema_name, function_name, macro_definition, comment FROM duckdb_functions() "
                              f"WHERE function_type = 'table_macro' AND database_name = {here}").fetchall(),
        "columns": con.execute(f"SELECT schema_name, table_name, column_name, data_type, comment "
                               f"FROM duckdb_columns() WHERE database_name = {here}").fetchall(),
    }
    for schema, table in con.execute(f"SELECT schema_name, table_name FROM duckdb_tables() "
                                     f"WHERE database_name = {here}").fetchall():
        rows = con.execute(f"SELECT * EXCLUDE (applied_at) FROM {schema}.{table}" if table == "schema_version"
                           else f"SELECT * FROM {schema}.{table}").fetchall()
        dump[f"{schema}.{table}"] = [tuple(str(v).replace(str(home), "WH") for v in row) for row in rows]
    con.close()
    return {k: sorted(v, key=repr) for k, v in dump.items()}


def test_a_new_warehouse_starts_from_the_template_and_keeps_nothing_of_another(tmp_path: Path, monkeypatch):
    """A new warehouse's catalog is a copy of the one an earlier new warehouse left in the cache
    folder, which then holds the same as one made from nothing; none of the earlier warehouse's
    own (its folder, its comm_patterns.csv) stays in it."""
    from tracedb.warehouse import Warehouse

    def new_warehouse(path: Path) -> Path:
        wh = Warehouse.of(path)
        wh.create()
        wh.commit_empty()
        return path / "tracedb.duckdb"

    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "comm_patterns.csv").write_text(
        "source,pattern,library,collective\nkernel,^myAllReduce,mylib,all_reduce\n")
    first = new_warehouse(tmp_path / "first")
    templates = list((cache / "tracedb").glob("empty-catalog-*.duckdb"))
    assert len(templates) == 1
    second = new_warehouse(tmp_path / "second")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another cache"))
    from_nothing = new_warehouse(tmp_path / "third")

    assert _catalog_dump(first, tmp_path / "first")["tracedb_meta.user_comm_patterns"] == [
        ("1", "kernel", "^myAllReduce", "mylib", "all_reduce")]
    assert _catalog_dump(second, tmp_path / "second") == _catalog_dump(from_nothing, tmp_path / "third")

    # It is the template's copy: what the template holds, the next new warehouse has.
    con = duckdb.connect(str(templates[0]))
    con.execute("CREATE TABLE main.from_the_template AS SELECT 42 AS answer")
    con.close()
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    fourth = new_warehouse(tmp_path / "fourth")
    assert duckdb.connect(str(fourth), read_only=True).execute(
        "SELECT answer FROM main.from_the_template").fetchall() == [(42,)]


def test_the_views_fingerprint_is_the_librarys_text_not_where_it_is_installed(tmp_path: Path):
    """The same library installed in two places (two virtual environments) makes the same views:
    one's template serves the other without applying the views again. A view's changed SQL does not."""
    import shutil

    from tracedb.catalog import resource_dir, views_fingerprint

    a, b = tmp_path / "a" / "queries", tmp_path / "b" / "queries"
    shutil.copytree(resource_dir("queries"), a)
    shutil.copytree(resource_dir("queries"), b)
    assert views_fingerprint(load_view_files(a), {}) == views_fingerprint(load_view_files(b), {})
    mart = b / "marts" / "hotspots.sql"
    mart.write_text(mart.read_text().replace("SELECT", "SELECT  ", 1))
    assert views_fingerprint(load_view_files(a), {}) != views_fingerprint(load_view_files(b), {})


def test_a_template_duckdb_cannot_open_goes_and_fails_no_warehouse(tmp_path: Path, monkeypatch):
    """A damaged template in the cache folder: the new warehouse is made from nothing, with every
    view, and a good template takes the damaged one's place."""
    from tracedb.warehouse import Warehouse

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = Warehouse.of(tmp_path / "first")
    first.create()
    first.commit_empty()
    [template] = (tmp_path / "cache" / "tracedb").glob("empty-catalog-*.duckdb")
    template.write_bytes(b"not a DuckDB file" * 1000)

    f = write_trace(tmp_path / "runs" / "v1" / "rank0.json", [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5},
    ])
    report = tracedb.open(tmp_path / "second").ingest([f], jobs=1)
    assert [r.status for r in report.results] == ["ok"]
    con = duckdb.connect(str(tmp_path / "second" / "tracedb.duckdb"), read_only=True)
    assert con.execute("SELECT name, calls FROM hotspots").fetchall() == [("k", 1)]
    assert duckdb.connect(str(template), read_only=True).execute(
        "SELECT count(*) FROM tracedb_meta.tracedb_views").fetchone()[0] > 50
