"""kill -9 at any moment of an ingest: the warehouse shows whole traces only,
and the next ingest completes it with exact counts and no duplicates.

Real `tracedb ingest` subprocesses (with their worker processes, killed as a
group with SIGKILL) at fractions of an uninterrupted run's time, measured
first. Six 3 MB traces keep it quick; benchmarks/kill_ingest.py runs the
same with six 35 MB traces."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

import tracedb
from conftest import write_trace
from oracle import expected_counts
from synth import write_kineto_like

pytestmark = pytest.mark.slow

TRACE_BYTES = 3 << 20
TABLES = {"events": "event_count", "flows": "flow_count", "counters": "counter_count"}


def ingest_cmd(wh: Path, *paths: Path, jobs: int = 2) -> list[str]:
    return [sys.executable, "-m", "tracedb.cli", "-w", str(wh), "ingest", "--jobs", str(jobs),
            *map(str, paths)]


def expected_for(root: Path) -> dict[str, dict[str, int]]:
    """source path -> rows per table, from plain json."""
    out = {}
    for p in sorted(root.rglob("*.json")):
        with open(p) as f:
            out[str(p)] = expected_counts(json.load(f)["traceEvents"])
    return out


def assert_only_whole_traces(wh: Path) -> int:
    """What a reader sees now: every registered trace has all its rows and
    no row belongs to an unregistered trace. Returns the number of traces."""
    catalog = wh / "tracedb.duckdb"
    if not catalog.exists():
        return 0
    with duckdb.connect(str(catalog), read_only=True) as con:
        registered = dict(con.execute(
            "SELECT file_id, [event_count, flow_count, counter_count] FROM traces WHERE status = 'ok'"
        ).fetchall())
        for i, table in enumerate(TABLES):
            seen = dict(con.execute(f"SELECT file_id, count(*) FROM {table} GROUP BY file_id").fetchall())
            assert seen == {f: c[i] for f, c in registered.items() if c[i]}, table
    return len(registered)


def assert_exactly(wh: Path, expected: dict[str, dict[str, int]]) -> None:
    with duckdb.connect(str(wh / "tracedb.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT source_path, status, event_count, flow_count, counter_count FROM traces"
                           " ORDER BY source_path").fetchall()
        assert rows == [(src, "ok", c["events"], c["flows"], c["counters"]) for src, c in expected.items()]
        for table in TABLES:
            total, distinct = con.execute(
                f"SELECT count(*), count(DISTINCT (file_id, event_id{', series' if table == 'counters' else ''}))"
                f" FROM {table}").fetchone()
            assert total == distinct == sum(c[table] for c in expected.values()), table
    assert tracedb.open(wh).check().problems == []


def kill_at(cmd: list[str], seconds: float) -> int | None:
    """Start cmd, SIGKILL it and its workers after `seconds`; its exit code
    when it finished first."""
    p = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return p.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return None


def kill_midway(cmd: list[str], wh: Path, seconds: float) -> None:
    """SIGKILL cmd after `seconds`. The reference run's time was taken on a
    machine that may have been busier (tests run in parallel): when the
    ingest ends first, empty the warehouse and start over with half the time."""
    for _ in range(4):
        if kill_at(cmd, seconds) is None:
            return
        shutil.rmtree(wh, ignore_errors=True)
        seconds /= 2
    pytest.fail(f"the ingest ended before {seconds * 2:.2f} s four times")


@pytest.fixture(scope="module")
def six(tmp_path_factory) -> tuple[Path, dict, float]:
    """Six traces, their expected counts, and the time of an uninterrupted ingest."""
    root = tmp_path_factory.mktemp("crash") / "runs"
    for i in range(6):
        write_kineto_like(root / "v1" / f"rank{i}.json", TRACE_BYTES, seed=i, rank=i)
    expected = expected_for(root)
    # The faster of two runs: the first pays for cold imports (and, in a new
    # venv, compiling them), and a kill at 80% of it can come after the end.
    times = []
    for name in ("reference-wh", "reference-wh-2"):
        wh = root.parent / name
        t0 = time.monotonic()
        subprocess.run(ingest_cmd(wh, root), check=True, capture_output=True)
        times.append(time.monotonic() - t0)
        assert_exactly(wh, expected)
    return root, expected, min(times)


@pytest.mark.parametrize("fraction", [0.2, 0.5, 0.8])
def test_kill_9_then_ingest_again(six, tmp_path: Path, fraction: float):
    root, expected, seconds = six
    wh = tmp_path / "wh"
    kill_midway(ingest_cmd(wh, root), wh, fraction * seconds)
    visible = assert_only_whole_traces(wh)
    if wh.exists():
        # nothing registered is broken; what the kill left is invisible debris
        kinds = {p.kind for p in tracedb.open(wh).check().problems}
        assert kinds <= {"orphan_file", "staging_leftover", "temp_catalog"}
    res = subprocess.run(ingest_cmd(wh, root), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert f"Ingested {6 - visible} file(s)" in res.stderr
    assert_exactly(wh, expected)


def test_kill_9_between_catalog_swaps(tmp_path: Path):
    # 66 small files register in groups of 64 (a swap before the last):
    # kills land in and between swaps; each group is all or nothing.
    root = tmp_path / "runs"
    for i in range(66):
        write_trace(root / "v1" / f"rank{i}.json",
                    [{"ph": "X", "name": f"op{j}", "pid": 1, "tid": 1, "ts": j, "dur": 1} for j in range(i + 1)])
    expected = expected_for(root)
    wh = tmp_path / "wh"
    t0 = time.monotonic()
    subprocess.run(ingest_cmd(tmp_path / "ref", root, jobs=1), check=True, capture_output=True)
    seconds = time.monotonic() - t0
    counts = []
    for fraction in (0.6, 0.9):
        kill_at(ingest_cmd(wh, root, jobs=1), fraction * seconds)
        counts.append(assert_only_whole_traces(wh))
    assert counts == sorted(counts)
    subprocess.run(ingest_cmd(wh, root, jobs=1), check=True, capture_output=True)
    assert_exactly(wh, expected)
