"""The warehouse owner (tracedb/warehouse.py): every layout name in one
module, its storage, its registry of traces on a real warehouse, and the
CLI's -w before or after the command."""

from __future__ import annotations

import ast
import json
import pkgutil
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import xxhash
from click.testing import CliRunner

import tracedb
from tracedb import warehouse as layout
from tracedb.cli import main
from tracedb.warehouse import LocalStorage, Warehouse
from conftest import write_trace

PACKAGE = Path(tracedb.__file__).resolve().parent

# TAGS_DIR is not among them: `run_tags` is also the catalog's view of the
# tags, which the query code names as a relation; the folder's paths carry
# `run=` and are caught by PARTITION.
NAMES = {layout.CATALOG_NAME, layout.LOCK_NAME, layout.INGEST_LOCK_NAME, layout.STAGING,
         layout.COMM_PATTERNS_CSV, layout.SUMMARY_DIR, layout.TAGS_FILE}
PARTITION = re.compile(r"(^|/)(run|rank|phase)=")

EVENTS = [  # round numbers: gemm 2 calls, 40 us; relu 1 call, 60 us
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 30},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 200, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "relu", "pid": 0, "tid": 7, "ts": 300, "dur": 60},
]


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if p.name != "warehouse.py")


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """String constants of the code: not docstrings, not dict keys or
    subscripts (a traces row's "summaries" column is not the folder)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            skip.add(id(body[0].value))
        if isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        if isinstance(node, ast.Dict):
            skip.update(id(k) for k in node.keys if k is not None)
    return [n for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def test_every_layout_name_and_path_is_built_in_warehouse_py_only():
    found = []
    for path in _modules():
        for node in _code_strings(ast.parse(path.read_text(encoding="utf-8"))):
            if node.value in NAMES or PARTITION.search(node.value):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert found == []


def test_the_check_sees_a_layout_literal():
    # the scan above would find a partition path or a name written anew
    code = 'p = root / "summaries" / f"run={run}"\nq = ".staging"\n'
    assert sorted(n.value for n in _code_strings(ast.parse(code)) if n.value in NAMES or PARTITION.search(n.value)) \
        == [".staging", "run=", "summaries"]


def test_sql_literals_are_quoted_in_one_place():
    quoting = [f"{p.name}:{i}" for p in _modules() if p.name != "sqltext.py"
               for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
               if """replace("'", "''")""" in line]
    assert quoting == []


def test_no_module_imports_back_up_from_the_package_root():
    submodules = {m.name for m in pkgutil.iter_modules([str(PACKAGE)])}  # the C reader too
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == PACKAGE:
            continue
        depth = len(path.relative_to(PACKAGE).parts)  # the level of `from .` that names the root
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (
                    (node.level == depth and node.module is None) or (node.level == 0 and node.module == "tracedb")):
                found += [f"{path.name}: {a.name}" for a in node.names if a.name not in submodules]
    assert found == []


def test_keys_of_the_layout():
    wh = Warehouse("/data/wh")
    assert wh.data_key("events", "v2", 3, "train", "abc") == "events/run=v2/rank=3/phase=train/abc.parquet"
    assert wh.summary_key("int_comm_ops", "v2", 3, "train", "abc") == \
        "summaries/int_comm_ops/run=v2/rank=3/phase=train/abc.parquet"
    assert wh.tags_key("v2") == "run_tags/run=v2/tags.parquet"
    assert wh.location("events/x.parquet") == "/data/wh/events/x.parquet"
    assert (wh.catalog_path, wh.staging, wh.comm_patterns) == (
        Path("/data/wh/tracedb.duckdb"), Path("/data/wh/.staging"), Path("/data/wh/comm_patterns.csv"))
    assert wh.catalog.path == Path("/data/wh/tracedb.duckdb")


def test_a_warehouse_under_a_folder_named_as_a_partition_is_refused(tmp_path: Path):
    # DuckDB reads run, rank and phase from every folder of a file's path, the
    # first of a name winning: under /data/run=old/ every trace read as run
    # "old", and `hotspots --run v1` found nothing.
    write_trace(tmp_path / "runs" / "v1" / "rank0.json",
                [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5}])
    for folder in ("run=old", "RANK=3", "phase="):
        res = CliRunner().invoke(main, ["-w", str(tmp_path / folder / "wh"), "ingest", str(tmp_path / "runs")])
        assert res.exit_code == 1
        assert res.output.strip().splitlines()[-1] == (
            f"Error: {tmp_path / folder / 'wh'}: a warehouse cannot be under a folder named {folder}: DuckDB "
            f"would read it as every trace's {folder.split('=')[0].lower()} (a Hive partition); choose a path "
            "without run=, rank= or phase= folders")
        assert not (tmp_path / folder).exists()
    assert str(Warehouse("s3://bucket/team=ml/wh")) == "s3://bucket/team=ml/wh"  # other names are no partition
    with pytest.raises(layout.WarehouseError, match="named run=2024"):
        Warehouse("s3://bucket/run=2024/wh")
    with tracedb.open(tmp_path / "xrun=1" / "wh") as db:
        assert not db.ingest([tmp_path / "runs"], jobs=1).failed
        assert db.sql("SELECT run, count(*) FROM events GROUP BY run").fetchall() == [("v1", 1)]


def test_local_storage(tmp_path: Path):
    store = LocalStorage(tmp_path)
    src = tmp_path / "new"
    src.write_bytes(b"one")
    store.put(src, "events/run=a/rank=0/x.parquet")
    assert not src.exists() and (tmp_path / "events/run=a/rank=0/x.parquet").read_bytes() == b"one"
    src.write_bytes(b"two")
    store.put(src, "events/run=a/rank=0/x.parquet")  # replaced whole
    with store.open("events/run=a/rank=0/x.parquet") as f:
        assert f.read() == b"two"
    (tmp_path / "events/run=b/rank=1").mkdir(parents=True)
    (tmp_path / "events/run=b/y.parquet").write_bytes(b"")
    assert store.list("events") == ["events/run=a/rank=0/x.parquet", "events/run=b/y.parquet"]
    assert store.list("flows") == []
    assert store.exists("events/run=b/y.parquet") and not store.exists("events/run=b")
    store.remove("events/run=a/rank=0/x.parquet")
    store.remove("events/run=a/rank=0/x.parquet")  # gone already: no error
    store.prune("events")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "events", "events/run=b", "events/run=b/y.parquet"]


def test_registry_on_a_real_warehouse(tmp_path: Path):
    trace = write_trace(tmp_path / "runs" / "v2" / "train" / "rank0.json", EVENTS)
    file_id = "xxh3-" + xxhash.xxh3_128(trace.read_bytes()).hexdigest()
    wh = Warehouse(tmp_path / "wh")
    assert wh.known() == (frozenset(), {})
    assert not wh.is_warehouse()

    report = tracedb.open(wh.root).ingest([tmp_path / "runs"])
    assert [(r.status, r.file_id) for r in report.results] == [("ok", file_id)]
    st = trace.stat()
    assert wh.known() == (frozenset({file_id}), {(str(trace), st.st_size, st.st_mtime_ns): file_id})
    events = tmp_path / "wh" / "events" / "run=v2" / "rank=0" / "phase=train" / f"{file_id}.parquet"
    assert pq.ParquetFile(events).metadata.num_rows == 3
    assert wh.find("v2") == [file_id] and wh.find("v2", rank=0, phase="train") == [file_id]
    assert wh.find("v2", rank=1) == [] and wh.find("v1") == []

    # a failed file's row: registered, listed by find, not known as ingested
    wh.register([{"file_id": "failed-1", "run": "v2", "rank": 1, "phase": "train", "status": "failed",
                  "source_path": str(tmp_path / "bad.json"), "error": "bad.json: at byte 0: empty file"}])
    assert wh.known()[0] == frozenset({file_id})
    assert sorted(wh.find("v2")) == sorted([file_id, "failed-1"])

    assert wh.unregister([file_id, "failed-1"]) == 2
    assert wh.known() == (frozenset(), {}) and wh.find("v2") == []
    left = sorted(p.relative_to(wh.root).as_posix() for p in wh.root.rglob("*") if not p.is_dir())
    assert [p for p in left if p.endswith(".parquet")] == []  # data and summaries gone
    assert not (wh.root / "events" / "run=v2").exists()  # empty partitions pruned
    assert wh.unregister([]) == 0


def test_a_copy_under_another_partition_is_not_kept(tmp_path: Path):
    # the same content registered once: the second publish's files go
    first = write_trace(tmp_path / "runs" / "v1" / "rank0.json", EVENTS)
    second = tmp_path / "runs" / "v2" / "rank0.json"
    second.parent.mkdir(parents=True)
    second.write_bytes(first.read_bytes())
    db = tracedb.open(tmp_path / "wh")
    db.ingest([tmp_path / "runs"], jobs=1)
    keys = Warehouse(tmp_path / "wh").data_keys()
    runs = {k.split("/")[1] for k in keys if k.startswith("events/")}
    assert len(runs) == 1 and db.sql("SELECT count(*) FROM traces").fetchall() == [(1,)]
    db.close()


# -- the CLI: -w before or after the command --------------------------------


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def test_every_command_that_opens_the_warehouse_takes_w_after_it():
    for name, command in main.commands.items():
        opts = {o for p in command.params for o in getattr(p, "opts", [])}
        assert ("-w" in opts and "--warehouse" in opts) == (name != "demo"), name


def test_w_after_the_command(tmp_path: Path):
    write_trace(tmp_path / "runs" / "v2" / "rank0.json", EVENTS)
    w = str(tmp_path / "wh")
    res = _cli("ingest", str(tmp_path / "runs"), "-w", w)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "wh" / "tracedb.duckdb").exists()

    res = _cli("query", "hotspots", "--run", "v2", "-w", w, "-f", "json")
    assert res.exit_code == 0, res.output
    assert [(r["name"], r["calls"], r["total_us"]) for r in json.loads(res.stdout)] == [
        ("relu", 1, 60.0), ("gemm", 2, 40.0)]

    # after the command wins over before it and over the environment
    res = CliRunner(env={"TRACEDB_WAREHOUSE": str(tmp_path / "elsewhere")}).invoke(
        main, ["-w", str(tmp_path / "nowhere"), "sql", "SELECT count(*) AS n FROM events", "--warehouse", w,
               "-f", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [{"n": 3}]
    res = _cli("-w", w, "runs", "-w", str(tmp_path / "nowhere"))
    assert res.exit_code == 1
    assert res.stderr.splitlines()[-1].startswith(f"Error: no tracedb warehouse at {tmp_path / 'nowhere'} ")

    res = _cli("check", "--warehouse", w)
    assert res.exit_code == 0 and res.stdout.endswith("OK.\n")
    res = _cli("remove", "--run", "v2", "-w", w)
    assert res.exit_code == 0 and res.stderr == "Removed 1 trace(s).\n"
