"""Readers during an ingest never fail and see whole traces only; two
ingests into one warehouse at once lose nothing and duplicate nothing.
Real subprocesses and real read-only DuckDB connections."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

import tracedb
from synth import write_kineto_like
from test_crash import assert_exactly, assert_only_whole_traces, expected_for, ingest_cmd

pytestmark = pytest.mark.slow


def test_readers_never_fail_while_ingests_swap_the_catalog(tmp_path: Path):
    root = tmp_path / "runs"
    for i in range(6):
        write_kineto_like(root / f"v{i}" / "rank0.json", 1 << 20, seed=100 + i)
    wh = tmp_path / "wh"
    subprocess.run(ingest_cmd(wh, root / "v0"), check=True, capture_output=True)
    catalog = wh / "tracedb.duckdb"
    # Five more ingests, one after another: five catalog swaps while we poll.
    script = "; ".join(
        f"subprocess.run({ingest_cmd(wh, root / f'v{i}')!r}, check=True, capture_output=True)"
        for i in range(1, 6))
    writer = subprocess.Popen([sys.executable, "-c", "import subprocess; " + script])
    cli_readers = []
    polls, seen, errors = 0, set(), []
    while writer.poll() is None or polls < 20:
        try:  # as a BI tool would: a fresh read-only connection each time
            with duckdb.connect(str(catalog), read_only=True) as con:
                events, registered, traces = con.execute(
                    "SELECT (SELECT count(*) FROM events),"
                    " (SELECT sum(event_count) FROM traces WHERE status = 'ok'),"
                    " (SELECT count(*) FROM traces)").fetchone()
            assert events == registered  # whole traces only
            seen.add(traces)
        except Exception as e:  # noqa: BLE001 - any failure of a reader is the finding
            errors.append(repr(e))
        polls += 1
        if polls % 25 == 1 and len(cli_readers) < 4:
            cli_readers.append(subprocess.Popen(
                [sys.executable, "-m", "tracedb.cli", "-w", str(wh), "query", "hotspots", "-f", "csv"],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        time.sleep(0.01)
    assert writer.wait() == 0
    assert errors == []
    for p in cli_readers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert len(seen) > 1, "the polls never saw a swap"
    assert_exactly(wh, expected_for(root))


def test_two_ingests_at_once_on_overlapping_files(tmp_path: Path):
    root = tmp_path / "runs"
    files = [write_kineto_like(root / "v1" / f"rank{i}.json", 2 << 20, seed=200 + i, rank=i) for i in range(6)]
    wh = tmp_path / "wh"
    a = subprocess.Popen(ingest_cmd(wh, *files[:4], jobs=1), stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(ingest_cmd(wh, *files[2:], jobs=1), stderr=subprocess.PIPE, text=True)
    err_a, err_b = a.communicate(timeout=600)[1], b.communicate(timeout=600)[1]
    assert (a.returncode, b.returncode) == (0, 0), err_a + err_b
    assert "Error" not in err_a + err_b
    assert_exactly(wh, expected_for(root))  # each trace once, every row once
    assert assert_only_whole_traces(wh) == 6
    assert tracedb.open(wh).check().problems == []
