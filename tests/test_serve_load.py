"""``tracedb serve`` under load (issue 21): silent sockets, pathological text,
huge results. The server runs as its own process (``tracedb serve``) so that
its peak memory (``VmHWM``) can be read from /proc."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

import tracedb
from conftest import write_trace

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status_mb(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("load")
    write_trace(root / "runs" / "v1" / "rank0.json",
                [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5}
                 for i in range(10)])
    wh = root / "wh"
    tracedb.open(wh).ingest([root / "runs"], jobs=1)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracedb.cli", "-w", str(wh), "serve", "--port", str(port), "--auth-timeout", "5",
         "--statement-timeout", "60"],
        stderr=subprocess.PIPE, text=True, cwd="/")
    assert proc.stderr.readline().startswith("Serving"), proc.stderr.read()
    yield proc, port
    proc.terminate()
    proc.wait(timeout=20)


def _connect(port: int) -> psycopg.Connection:
    return psycopg.connect(f"host=127.0.0.1 port={port} user=tracedb dbname=tracedb connect_timeout=10",
                           autocommit=True)


def test_300_silent_connections_are_closed_and_others_served(served) -> None:
    proc, port = served
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    try:
        started = time.monotonic()
        with _connect(port) as conn:
            assert conn.execute("SELECT count(*) FROM events").fetchone() == (10,)
        assert time.monotonic() - started < 3
        for s in silent:
            s.settimeout(70)
            assert s.recv(1) == b""  # closed by the server after the 5 s auth timeout
        assert time.monotonic() - started < 70
    finally:
        for s in silent:
            s.close()
    assert proc.poll() is None


def test_pathological_text_does_not_stall_another_client(served) -> None:
    proc, port = served
    done = threading.Event()
    errors: list[BaseException] = []

    def hostile() -> None:
        try:
            with _connect(port) as conn:
                while not done.is_set():
                    conn.execute("SELECT 1" + " " * 40_000 + "AS x").fetchall()
                    conn.execute("SELECT 1" + " \n" * 400_000 + "AS x").fetchall()
        except BaseException as e:  # reported below
            errors.append(e)

    thread = threading.Thread(target=hostile)
    thread.start()
    try:
        with _connect(port) as conn:
            for _ in range(10):
                started = time.monotonic()
                assert conn.execute("SELECT 1").fetchone() == (1,)
                assert time.monotonic() - started < 2
                time.sleep(0.2)
    finally:
        done.set()
        thread.join(timeout=60)
    assert errors == []


def test_three_huge_results_leave_the_server_up_with_bounded_memory(served) -> None:
    proc, port = served
    baseline = _status_mb(proc.pid, "VmRSS")
    outcomes: list[str] = []

    def huge(sql: str) -> None:
        try:
            with _connect(port) as conn:
                conn.execute(sql).fetchall()
                outcomes.append("rows")
        except psycopg.Error as e:
            outcomes.append(e.sqlstate or "closed")

    statements = ("SELECT repeat('x', 3e8::BIGINT)", "SELECT list(range(1e8::BIGINT))",
                  "SELECT repeat('x', 3e8::BIGINT)")
    threads = [threading.Thread(target=huge, args=(sql,)) for sql in statements]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert proc.poll() is None
    with _connect(port) as conn:
        assert conn.execute("SELECT count(*) FROM events").fetchone() == (10,)
    assert all(o in ("53200", "54000", "57014") for o in outcomes), outcomes
    assert _status_mb(proc.pid, "VmHWM") - baseline < 1024
