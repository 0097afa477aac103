"""The CLI: exit codes, exact error lines, results on stdout only."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracedb.cli import main
from conftest import write_trace

EVENTS = [
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 30},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 200, "dur": 10},
    {"ph": "X", "cat": "kernel", "name": "relu", "pid": 0, "tid": 7, "ts": 300, "dur": 60},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 90, "dur": 20},
]


@pytest.fixture
def wh(tmp_path: Path) -> str:
    write_trace(tmp_path / "runs" / "v1" / "rank0.json", EVENTS)
    w = str(tmp_path / "wh")
    res = CliRunner().invoke(main, ["-w", w, "ingest", str(tmp_path / "runs")])
    assert res.exit_code == 0, res.output
    return w


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_ingest_reports_on_stderr(tmp_path: Path):
    write_trace(tmp_path / "runs" / "v1" / "rank0.json", EVENTS)
    res = _run("-w", str(tmp_path / "wh"), "ingest", str(tmp_path / "runs"))
    assert res.exit_code == 0
    assert res.stdout == ""
    assert "run=v1 phase=default files=1" in res.stderr
    assert "Ingested 1 file(s): 4 events" in res.stderr
    res = _run("-w", str(tmp_path / "wh"), "ingest", str(tmp_path / "runs"))
    assert "skipped 1 already ingested" in res.stderr


def test_bad_file_exits_1_with_one_line(tmp_path: Path):
    write_trace(tmp_path / "runs" / "v1" / "rank0.json", EVENTS)
    (tmp_path / "runs" / "v1" / "rank1.json").write_text("")
    res = _run("-w", str(tmp_path / "wh"), "ingest", str(tmp_path / "runs"))
    assert res.exit_code == 1
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: {tmp_path / 'runs' / 'v1' / 'rank1.json'} at byte 0: empty file"]


def test_query_json_and_csv(wh: str):
    res = _run("-w", wh, "query", "hotspots", "--run", "v1", "--format", "json")
    assert res.exit_code == 0
    rows = json.loads(res.stdout)
    assert [(r["name"], r["calls"], r["total_us"]) for r in rows] == [("relu", 1, 60.0), ("gemm", 2, 40.0)]
    res = _run("-w", wh, "query", "hotspots", "--format", "csv", "--limit", "1")
    got = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [(r["name"], r["calls"]) for r in got] == [("relu", "1")]
    res = _run("-w", wh, "query", "hotspots", "--kind", "cpu_op", "--format", "json")
    assert [r["name"] for r in json.loads(res.stdout)] == ["aten::mm"]


def test_query_takes_the_first_kind_present_under_the_filters(tmp_path: Path):
    # hotspots prefers kernel, then cpu_op, then annotation: v1 has no kernels,
    # v2 only an annotation, so each run's answer is of another kind.
    write_trace(tmp_path / "runs" / "v1" / "rank0.json", [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 20},
        {"ph": "X", "cat": "user_annotation", "name": "forward", "pid": 1, "tid": 1, "ts": 0, "dur": 50}])
    write_trace(tmp_path / "runs" / "v2" / "rank0.json", [
        {"ph": "X", "cat": "user_annotation", "name": "backward", "pid": 1, "tid": 1, "ts": 0, "dur": 70}])
    wh = str(tmp_path / "wh")
    assert _run("-w", wh, "ingest", str(tmp_path / "runs")).exit_code == 0
    got = {run: [(r["kind"], r["name"], r["total_us"])
                 for r in json.loads(_run("-w", wh, "query", "hotspots", "--run", run, "--format", "json").stdout)]
           for run in ("v1", "v2")}
    assert got == {"v1": [("cpu_op", "aten::mm", 20.0)], "v2": [("annotation", "backward", 70.0)]}


def test_query_table(wh: str):
    res = _run("-w", wh, "query", "hotspots")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines[0].split()[:5] == ["run", "phase", "kind", "name", "rank_count"]
    assert lines[2].split()[:4] == ["v1", "default", "kernel", "relu"]


def test_unknown_view_is_one_error_line(wh: str):
    res = _run("-w", wh, "query", "nope")
    assert res.exit_code == 1
    assert res.stderr.startswith("Error: unknown view 'nope'; known views: ")
    assert len(res.stderr.strip().splitlines()) == 1


def test_wrong_option_for_a_view(wh: str):
    res = _run("-w", wh, "query", "hotspots", "--base", "v0")
    assert res.exit_code == 1
    assert res.stderr.strip() == "Error: hotspots takes no --base"


def test_missing_warehouse(tmp_path: Path):
    res = _run("-w", str(tmp_path / "none"), "query", "hotspots")
    assert res.exit_code == 1
    assert res.stderr.strip().startswith(f"Error: no tracedb warehouse at {tmp_path / 'none'}")


def test_usage_error_exits_2(wh: str):
    assert _run("-w", wh, "query").exit_code == 2
    assert _run("-w", wh, "query", "hotspots", "--format", "xml").exit_code == 2


def test_sql_runs_read_only(wh: str):
    res = _run("-w", wh, "sql", "SELECT name, dur_ns FROM events WHERE cat = 'kernel' ORDER BY ts_ns", "-f", "csv")
    assert res.exit_code == 0
    assert res.stdout == "name,dur_ns\ngemm,30000\ngemm,10000\nrelu,60000\n"
    res = _run("-w", wh, "sql", "CREATE TABLE x (i INT)")
    assert res.exit_code == 1
    assert res.stderr.startswith("Error: ")
    assert "read-only" in res.stderr


def test_views_and_runs(wh: str):
    res = _run("-w", wh, "views")
    assert res.exit_code == 0
    assert any(line.startswith("hotspots ") for line in res.stdout.splitlines())
    res = _run("-w", wh, "views", "hotspots")
    assert "total_us" in res.stdout and "microseconds" in res.stdout
    res = _run("-w", wh, "runs", "-f", "json")
    assert [(r["run"], r["phase"], r["file_count"], r["event_count"]) for r in json.loads(res.stdout)] == [
        ("v1", "default", 1, 4)]


# In a fresh interpreter: the reading commands, then which of the writing
# side's libraries they loaded (none: a query starts with DuckDB alone).
_READ_ONLY = """
import json, sys
from click.testing import CliRunner
from tracedb.cli import main
out = [CliRunner().invoke(main, ["-w", sys.argv[1], *args]).stdout for args in (
    ["query", "hotspots", "--format", "csv"], ["sql", "SELECT count(*) AS n FROM events", "-f", "csv"],
    ["runs", "-f", "csv"], ["views", "hotspots"])]
heavy = sorted({m.split(".")[0] for m in sys.modules} & {"pyarrow", "numpy", "ijson"})
print(json.dumps({"out": out, "heavy": heavy}))
"""


def test_reading_commands_do_not_load_the_writing_side(wh: str):
    res = subprocess.run([sys.executable, "-c", _READ_ONLY, wh], capture_output=True, text=True, check=True)
    got = json.loads(res.stdout)
    assert got["heavy"] == []
    hotspots, count, runs, view = got["out"]
    assert [(r["name"], r["calls"], r["total_us"]) for r in csv.DictReader(io.StringIO(hotspots))][:2] == [
        ("relu", "1", "60.0"), ("gemm", "2", "40.0")]
    assert count == "n\n4\n"
    assert runs.splitlines()[1].startswith("v1,default,1,")
    assert "total_us" in view


# In a fresh interpreter: ingest, then the allocator pyarrow took, and how
# many heaps glibc has once eight more threads have each allocated (glibc's
# own report, malloc_info); without a limit each thread would get its own.
_INGEST_ALLOCATOR = """
import ctypes, json, os, re, sys, threading
from click.testing import CliRunner
from tracedb.cli import main
res = CliRunner().invoke(main, ["-w", sys.argv[1], "ingest", sys.argv[2]])
import pyarrow
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
start = threading.Barrier(8)
def allocate():
    start.wait()
    libc.malloc(1 << 16)
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
report = sys.argv[3]
fp = libc.fopen(report.encode(), b"w")
libc.malloc_info(0, fp)
libc.fclose(fp)
print(json.dumps({"code": res.exit_code, "pool": pyarrow.default_memory_pool().backend_name,
                  "env": os.environ.get("ARROW_DEFAULT_MEMORY_POOL"),
                  "arenas_env": os.environ.get("MALLOC_ARENA_MAX"),
                  "tunables_env": os.environ.get("GLIBC_TUNABLES"),
                  "blas_env": os.environ.get("OPENBLAS_NUM_THREADS"),
                  "heaps": len(re.findall(r'<heap nr=', open(report).read()))}))
"""


def _ingest_allocators(tmp_path: Path, env: dict[str, str]) -> dict:
    """_INGEST_ALLOCATOR's answer, in a fresh interpreter with ``env``."""
    write_trace(tmp_path / "runs" / "v1" / "rank0.json", EVENTS)
    res = subprocess.run([sys.executable, "-c", _INGEST_ALLOCATOR, str(tmp_path / "wh"), str(tmp_path / "runs"),
                          str(tmp_path / "malloc_info.xml")], capture_output=True, text=True, check=True, env=env)
    return json.loads(res.stdout)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's arenas")
@pytest.mark.parametrize("user_value, expected", [(None, "system"), ("mimalloc", "mimalloc")])
def test_ingest_gives_arrow_the_c_allocator_unless_the_user_chose(tmp_path: Path, user_value, expected):
    env = {k: v for k, v in os.environ.items()
           if k not in ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "OPENBLAS_NUM_THREADS")}
    if user_value:
        env["ARROW_DEFAULT_MEMORY_POOL"] = user_value
    # set in the environment, so the worker processes it spawns take them too
    got = _ingest_allocators(tmp_path, env)
    assert (got["code"], got["pool"], got["env"]) == (0, expected, expected)
    assert got["arenas_env"] == "2"
    assert got["tunables_env"] == "glibc.malloc.hugetlb=1"
    assert got["blas_env"] == "1"  # numpy's OpenBLAS starts no threads
    # this process read its environment before the ingest set it: told through mallopt
    assert got["heaps"] == 2


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's arenas")
def test_ingest_leaves_a_users_own_arena_count_and_blas_threads(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    got = _ingest_allocators(tmp_path, {**env, "MALLOC_ARENA_MAX": "5", "OPENBLAS_NUM_THREADS": "4"})
    assert (got["code"], got["arenas_env"], got["heaps"], got["blas_env"]) == (0, "5", 5, "4")
    assert got["tunables_env"] == "glibc.malloc.hugetlb=1"  # huge pages all the same


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's tunables")
@pytest.mark.parametrize("user_value, expected", [
    ("glibc.malloc.tcache_count=0", "glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1"),  # added to
    ("glibc.malloc.hugetlb=0", "glibc.malloc.hugetlb=0"),  # the user's choice stands
])
def test_ingest_adds_huge_pages_to_a_users_glibc_tunables(tmp_path: Path, user_value, expected):
    got = _ingest_allocators(tmp_path, {**os.environ, "GLIBC_TUNABLES": user_value})
    assert (got["code"], got["tunables_env"]) == (0, expected)


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_has_help_with_an_example(command: str):
    res = _run(command, "--help")
    assert res.exit_code == 0
    assert "Example" in res.output


def test_remove_a_run(tmp_path: Path):
    write_trace(tmp_path / "runs" / "v1" / "rank0.json", EVENTS)
    write_trace(tmp_path / "runs" / "v2" / "rank0.json", EVENTS[:2])
    w = str(tmp_path / "wh")
    assert _run("-w", w, "ingest", str(tmp_path / "runs")).exit_code == 0
    res = _run("-w", w, "remove", "--run", "v1")
    assert res.exit_code == 0 and res.stderr.strip() == "Removed 1 trace(s)."
    res = _run("-w", w, "sql", "SELECT run, count(*) AS n FROM events GROUP BY run", "-f", "csv")
    assert res.stdout == "run,n\nv2,2\n"
    assert not (tmp_path / "wh" / "events" / "run=v1").exists()
    assert _run("-w", w, "check").exit_code == 0
    # ingesting it again brings it back
    res = _run("-w", w, "ingest", str(tmp_path / "runs"))
    assert "Ingested 1 file(s)" in res.stderr
