"""tracedb on Spark (local[2]): every mart of the library on Spark equals
DuckDB's answer on the same warehouse, and `ingest --engine spark` gives the
same traces rows as a local ingest.

One SparkSession for the module. Marked slow as a whole (Spark's start and a Spark ingest take minutes on a
busy machine). The warehouse: the torch-captured demo runs
v1 and v2 (2 ranks each, CPU, gloo) and the H200 fixtures as runs cuda_v1
(train, prefill, decode) and cuda_v2, plus one truncated rank file."""

from __future__ import annotations

import json
import math
import re
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
import xxhash
from click.testing import CliRunner

pytest.importorskip("pyspark")
pytest.importorskip("sqlglot")
if shutil.which("java") is None:
    pytest.skip("Spark needs a Java runtime (java not on PATH)", allow_module_level=True)

import tracedb  # noqa: E402
from tracedb.cli import main  # noqa: E402
from tracedb.errors import QueryError  # noqa: E402
from tracedb.spark import query, register  # noqa: E402
from tracedb.spark.dialect import translate  # noqa: E402
from tracedb.spark.ingest import session  # noqa: E402
from tracedb.spark.dialect import library  # noqa: E402

# Spark's start, a Spark ingest and the library's views: minutes, not seconds.
pytestmark = pytest.mark.slow

CUDA = Path(__file__).parent / "fixtures" / "cuda"
BAD = "v2/rank2.train.json"


@pytest.fixture(scope="module")
def spark():
    s = session("local[2]", app_name="tracedb-tests")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def runs(demo_runs, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("spark") / "runs"
    for run in ("v1", "v2"):
        shutil.copytree(demo_runs / run, root / run)
    shutil.copytree(CUDA / "v1", root / "cuda_v1")
    shutil.copytree(CUDA / "v2", root / "cuda_v2")
    (root / BAD).write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": ')
    for run, device in [("v1", "cpu"), ("cuda_v1", "h100")]:  # tags: a CPU-only run and a GPU one
        (root / run / "run.json").write_text(json.dumps({"device": device}))
    return root


@pytest.fixture(scope="module")
def spark_ingest(spark, runs):
    """`tracedb ingest --engine spark` of the runs folder: (warehouse, result)."""
    wh = runs.parent / "wh_spark"
    result = CliRunner().invoke(main, ["-w", str(wh), "ingest", "--engine", "spark",
                                       "--spark-master", "local[2]", str(runs)])
    return wh, result


@pytest.fixture(scope="module")
def wh_local(runs) -> Path:
    wh = runs.parent / "wh_local"
    tracedb.open(wh).ingest([runs], jobs=1)
    return wh


@pytest.fixture(scope="module")
def registered(spark, spark_ingest):
    return register(spark, spark_ingest[0])


# -- comparing answers -----------------------------------------------------------


def _num(v):
    return float(v) if isinstance(v, Decimal) else v


def _key(row: tuple) -> tuple:
    return tuple((0, "") if v is None else (1, round(_num(v), 6)) if isinstance(_num(v), float)
                 else (2, str(v)) for v in row)


def _same_rows(duck: list[tuple], spark_rows: list[tuple]) -> bool:
    """Same rows, in any order; floats within 1e-9 relative."""
    if len(duck) != len(spark_rows):
        return False
    for a, b in zip(sorted(duck, key=_key), sorted(spark_rows, key=_key)):
        if len(a) != len(b):
            return False
        for x, y in zip(map(_num, a), map(_num, b)):
            if isinstance(x, float) or isinstance(y, float):
                if x is None or y is None:
                    if x is not y:
                        return False
                elif not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9):
                    return False
            elif x != y:
                return False
    return True


def _cases() -> list[tuple[str, dict]]:
    """Every mart of the library, with the parameters it needs, and the
    variants by rank, against a base and by span."""
    cases = []
    for v in library():
        if v.layer != "marts":
            continue
        required = [p for p, doc in v.params.items() if "default" not in doc]
        if "base" in required:
            cases += [(v.name, {"base": "v1", "run": "v2"}), (v.name, {"base": "cuda_v1", "run": "cuda_v2"})]
        else:
            cases.append((v.name, {}))
        if "span" in v.params:
            cases.append((v.name, {"span": "ProfilerStep%", "run": "v2",
                                   **({"base": "v1"} if "base" in required else {})}))
    cases += [("hotspots", {"rank": 1, "run": "v2"}), ("comm_latency", {"rank": 0}),
              ("latency", {"base": "v1", "span": "ProfilerStep%"}), ("hotspots", {"run": "cuda_v1", "limit": 5}),
              # the CPU-only run by its tag: its CPU ops, not the kernels of the other runs
              ("hotspots", {"tags": {"device": "cpu"}})]
    return cases


@pytest.mark.parametrize("name,params", _cases(), ids=lambda x: x if isinstance(x, str) else
                         ",".join(f"{k}={v}" for k, v in x.items()))
def test_mart_on_spark_equals_duckdb(spark, spark_ingest, registered, name, params):
    wh = spark_ingest[0]
    with tracedb.open(wh) as db:
        rel = db.query(name, **params)
        duck_cols, duck = list(rel.columns), rel.fetchall()
    if name in registered.unsupported:
        with pytest.raises(QueryError, match=f"{name} cannot run on Spark"):
            query(spark, wh, name, registered=registered, **params)
        return
    df = query(spark, wh, name, registered=registered, **params)
    rows = [tuple(r) for r in df.collect()]
    assert df.columns == duck_cols
    assert _same_rows(duck, rows), f"{name} {params}: {len(duck)} DuckDB rows, {len(rows)} Spark rows"
    if "tags" in params:
        assert duck
    if "limit" in params:
        assert len(rows) == params["limit"] == len(duck)


def test_marts_have_rows(spark_ingest):
    """The comparison is over answers with rows: hotspots, regressions and
    latency are not empty on these runs."""
    with tracedb.open(spark_ingest[0]) as db:
        assert len(db.query("hotspots", run="cuda_v1").fetchall()) > 10
        assert len(db.query("regressions", base="v1", run="v2").fetchall()) > 10
        assert db.query("latency", run="v2").fetchall()


# -- ingest on Spark ------------------------------------------------------------------


_ROW_COLUMNS = ("file_id, run, rank, phase, status, error, source_path, source_bytes, event_count, flow_count, "
                "counter_count, json_event_count, ts_min_ns, ts_max_ns, files, summaries, summaries_fingerprint")


def test_spark_ingest_names_and_records_bad_file(spark_ingest, runs):
    wh, result = spark_ingest
    assert result.exit_code == 1, result.output
    bad = runs / BAD
    assert f"Error: {bad} at byte" in result.output
    with tracedb.open(wh) as db:
        rows = db.sql("SELECT source_path, status FROM traces WHERE status = 'failed'").fetchall()
    assert rows == [(str(bad), "failed")]


def test_spark_ingest_same_rows_as_local(spark_ingest, wh_local, runs):
    wh, _ = spark_ingest
    with tracedb.open(wh) as db:
        on_spark = db.sql(f"SELECT {_ROW_COLUMNS} FROM traces ORDER BY file_id").fetchall()
    with tracedb.open(wh_local) as db:
        local = db.sql(f"SELECT {_ROW_COLUMNS} FROM traces ORDER BY file_id").fetchall()
    assert on_spark == local
    # The file ids are the files' content hashes (computed here, apart).
    expected = {"xxh3-" + xxhash.xxh3_128(p.read_bytes()).hexdigest()
                for p in runs.rglob("*.json*") if p.name not in (Path(BAD).name, "run.json")}
    assert {r[0] for r in on_spark if r[4] == "ok"} == expected


def test_spark_ingest_same_marts_as_local(spark_ingest, wh_local):
    wh, _ = spark_ingest
    for name, params in [("hotspots", {}), ("regressions", {"base": "v1", "run": "v2"}), ("step_times", {}),
                         ("collectives", {}), ("latency", {})]:
        with tracedb.open(wh) as a, tracedb.open(wh_local) as b:
            assert _same_rows(a.query(name, **params).fetchall(), b.query(name, **params).fetchall()), name


def test_spark_ingest_skips_known_content(spark, spark_ingest, runs):
    wh, _ = spark_ingest
    result = CliRunner().invoke(main, ["-w", str(wh), "ingest", "--engine", "spark", str(runs / "v1")])
    assert result.exit_code == 0, result.output
    assert "Ingested 0 file(s)" in result.output and "skipped 2 already ingested" in result.output


# -- what Spark reads --------------------------------------------------------------------


def test_registered_files_only(spark, registered, spark_ingest, wh_local):
    """Spark reads the files the catalog lists: a stray Parquet file in the
    tree (a killed ingest's orphan) and .staging are never read."""
    wh, _ = spark_ingest
    with tracedb.open(wh) as db:
        expected = db.sql("SELECT count(*) FROM events").fetchall()[0][0]
    stray_dir = wh / "events" / "run=v1" / "rank=0" / "phase=train"
    stray = stray_dir / "00000000000000000000000000000000.parquet"
    shutil.copy(next(stray_dir.glob("*.parquet")), stray)
    try:
        reg = register(spark, wh)
        assert spark.table("events").count() == expected
        files = spark.table("events").inputFiles()
        assert not any(".staging" in f or f.endswith(stray.name) for f in files)
    finally:
        stray.unlink()
        register(spark, wh)  # the module's views again
    assert reg.unsupported == registered.unsupported


def test_partition_pruning_one_run(spark, registered):
    """A query for one run scans that run's partitions only: the Parquet
    scans carry the run as a partition filter, and the files listed for
    the scan are that run's."""
    df = spark.table("events").where("run = 'v1'").groupBy("rank").count()
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert re.search(r"PartitionFilters: \[.*\(run#\d+ = v1\)", plan), plan
    rows = df.collect()
    assert sorted(r["rank"] for r in rows) == [0, 1]
    scanned = spark.table("events").where("run = 'v1'").select("run").distinct().collect()
    assert [r["run"] for r in scanned] == ["v1"]
    # A mart reads the summaries of that run: the run filter reaches its
    # scan through the views (not the scan inside Spark's dynamic-pruning
    # subquery of a GROUPING SETS view, which Spark does not push it into).
    # Scans show their file location cut at maxMetadataStringLength (100):
    # past pytest-99 of the temp folders, "summaries" no longer showed.
    spark.conf.set("spark.sql.maxMetadataStringLength", "1000")
    try:
        mart = query(spark, None, "hotspots", run="v2", registered=registered)
        mart_plan = mart._jdf.queryExecution().executedPlan().toString()
    finally:
        spark.conf.unset("spark.sql.maxMetadataStringLength")
    scans = re.findall(r"FileScan parquet [^\n]*summaries[^\n]*", mart_plan)
    assert any(re.search(r"PartitionFilters: \[[^\]]*\(run#\d+ = v2\)", s) for s in scans), mart_plan


# -- what cannot run on Spark ----------------------------------------------------------------


def test_unsupported_views_are_listed_with_why(spark_ingest, registered):
    """What `register` could not make is exactly what the generator says it
    cannot express, and what `tracedb views` marks."""
    wh, _ = spark_ingest
    static = translate(library())[1]
    assert registered.unsupported == static
    assert all(why for why in static.values())
    out = CliRunner().invoke(main, ["-w", str(wh), "views", "--all"]).output
    marked = {line.split()[0] for line in out.splitlines() if "[not on Spark:" in line}
    assert marked == set(static)


# -- CLI --------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["hotspots", "--run", "v2"], ["regressions", "--base", "v1", "--run", "v2"],
                                  ["latency", "--run", "v2", "--span", "ProfilerStep%"]])
def test_cli_engine_spark_prints_the_same(spark, spark_ingest, args):
    wh, _ = spark_ingest
    duck = CliRunner().invoke(main, ["-w", str(wh), "query", *args])
    on_spark = CliRunner().invoke(main, ["-w", str(wh), "query", *args, "--engine", "spark",
                                         "--spark-master", "local[2]"])
    assert duck.exit_code == 0 and on_spark.exit_code == 0, on_spark.output
    assert on_spark.stdout == duck.stdout
    assert len(duck.stdout.splitlines()) >= 3  # a header, its rule and rows


def test_cli_spark_master_needs_engine(spark_ingest):
    result = CliRunner().invoke(main, ["-w", str(spark_ingest[0]), "query", "hotspots", "--spark-master", "yarn"])
    assert result.exit_code == 2
    assert "--spark-master goes with --engine spark" in result.output


def test_views_export(tmp_path):
    result = CliRunner().invoke(main, ["views", "export", "--dialect", "spark", "-o", str(tmp_path / "sql")])
    assert result.exit_code == 0, result.output
    defs = library()
    static = translate(defs)[1]
    files = sorted((tmp_path / "sql").glob("*.sql"))
    assert [re.sub(r"^\d+_", "", f.stem) for f in files] == [v.name for v in defs if v.name not in static]
    by_view = {re.sub(r"^\d+_", "", f.stem): f for f in files}
    hotspots = by_view["hotspots"].read_text()
    assert "CREATE OR REPLACE VIEW hotspots AS" in hotspots
    regressions = by_view["regressions"].read_text()
    assert ":base" in regressions and ":target" in regressions
    stragglers = by_view["stragglers"].read_text()
    assert "percentile(" in stragglers.lower() and "quantile_cont" not in stragglers.lower()
