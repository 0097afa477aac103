"""`tracedb serve` end to end: a real warehouse from `tracedb ingest`, the
server as a subprocess, psycopg and psql as clients, and an ingest while it
runs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import tracedb
from conftest import write_trace


def _kernels(names_durs: list[tuple[str, int]]) -> list[dict]:
    return [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 100 * i, "dur": d}
            for i, (n, d) in enumerate(names_durs)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path: Path):
    runs = tmp_path / "runs"
    write_trace(runs / "v1" / "rank0.json", _kernels([("gemm", 30), ("gemm", 10), ("relu", 5)]))
    wh = tmp_path / "wh"
    tracedb.open(wh).ingest([runs], jobs=1)
    port = _free_port()
    env = {**os.environ, "TRACEDB_SERVE_PASSWORD": "s3cret"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracedb.cli", "-w", str(wh), "serve", "--port", str(port)],
        stderr=subprocess.PIPE, text=True, env=env, cwd="/")
    line = proc.stderr.readline()
    assert line.startswith(f"Serving {wh} on 127.0.0.1:{port} (read-only, password required)"), line
    yield runs, wh, port
    proc.terminate()
    proc.wait(timeout=10)


def _dsn(port: int, password: str = "s3cret") -> str:
    return f"host=127.0.0.1 port={port} dbname=tracedb user=tracedb password={password}"


def test_serve_answers_views_and_sees_new_ingests(served):
    runs, wh, port = served
    with psycopg.connect(_dsn(port)) as con:
        rows = con.execute("SELECT name, calls, total_us FROM hotspots WHERE run = %s ORDER BY name",
                           ("v1",)).fetchall()
        assert rows == [("gemm", 2, 40.0), ("relu", 1, 5.0)]
    write_trace(runs / "v2" / "rank0.json", _kernels([("gemm", 50)]))
    tracedb.open(wh).ingest([runs], jobs=1)  # the catalog is swapped while the server runs
    with psycopg.connect(_dsn(port)) as con:
        assert con.execute("SELECT run, count(*) FROM events GROUP BY run ORDER BY run").fetchall() == [
            ("v1", 3), ("v2", 1)]
    assert not (wh / ".serve").exists() or not any((wh / ".serve").iterdir())


def test_serve_refuses_a_wrong_password_and_writes(served):
    _runs, _wh, port = served
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(_dsn(port, "wrong"))
    with psycopg.connect(_dsn(port)) as con:
        with pytest.raises(psycopg.Error):
            con.execute("CREATE TABLE x (i INT)")


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql not installed")
def test_psql_against_the_served_warehouse(served):
    _runs, _wh, port = served
    out = subprocess.run(
        ["psql", "-X", "-A", "-t", _dsn(port), "-c", "SELECT sum(calls) FROM hotspots WHERE kind = 'kernel'"],
        capture_output=True, text=True, timeout=30, env={**os.environ, "PGCONNECT_TIMEOUT": "10"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"


def test_serve_without_a_warehouse_is_one_error_line(tmp_path: Path):
    out = subprocess.run([sys.executable, "-m", "tracedb.cli", "-w", str(tmp_path / "none"), "serve"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert out.stderr.strip().startswith(f"Error: no tracedb warehouse at {tmp_path / 'none'}")


def test_duckdb_engine_reads_hotspots_read_only_from_root(served):
    _runs, wh, _port = served
    code = (
        "import sqlalchemy as sa\n"
        f"eng = sa.create_engine('duckdb:///{wh / 'tracedb.duckdb'}', connect_args={{'read_only': True}})\n"
        "with eng.connect() as c:\n"
        "    rows = c.execute(sa.text(\"SELECT name, calls FROM hotspots WHERE kind = 'kernel' ORDER BY name\")).fetchall()\n"
        "    print(sorted(sa.inspect(eng).get_view_names())[:3])\n"
        "print([tuple(r) for r in rows])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[('gemm', 2), ('relu', 1)]"
