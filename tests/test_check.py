"""`tracedb check [--repair]`: each kind of damage, found and repaired, on a
real warehouse in tmp_path (files removed, copied and truncated for real)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tracedb
from conftest import write_trace
from tracedb.cli import main


def _events(n: int) -> list[dict]:
    return ([{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
             for i in range(n)]
            + [{"ph": "C", "name": "mem", "pid": 1, "ts": 1, "args": {"a": 1, "b": 2}},
               {"ph": "s", "name": "f", "id": 1, "pid": 1, "tid": 1, "ts": 1}])


@pytest.fixture
def wh(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    write_trace(root / "v1" / "rank0.json", _events(3))
    write_trace(root / "v1" / "rank1.json", _events(4))
    warehouse = tmp_path / "wh"
    report = tracedb.open(warehouse).ingest([root])
    assert len(report.ingested) == 2
    return warehouse


def _files(wh: Path) -> dict[str, dict[str, str]]:
    """source file name -> table -> Parquet path, from the catalog."""
    rows = tracedb.open(wh).sql("SELECT source_path, files FROM traces").fetchall()
    return {Path(src).name: {t: str(wh / rel) for t, rel in json.loads(files).items()} for src, files in rows}


def _cli(wh: Path, *args: str):
    return CliRunner().invoke(main, ["-w", str(wh), "check", *args])


def test_a_fresh_warehouse_is_ok(wh: Path):
    report = tracedb.open(wh).check()
    assert report.problems == [] and report.ok
    # per trace: events, flows, counters and the 2 summaries with rows
    # (int_op_step_sums, int_op_dur_counts: CPU ops); no kernels, collectives,
    # steps or annotations, so no file for the 5 other per-trace views
    assert (report.trace_count, report.file_count) == (2, 2 * (3 + 2))
    res = _cli(wh)
    assert res.exit_code == 0
    assert res.output == "Checked 2 trace(s), 10 Parquet file(s): OK.\n"


def test_orphans_and_leftovers_are_found_and_removed(wh: Path):
    src = Path(_files(wh)["rank0.json"]["events"])
    orphan = wh / "events" / "run=v9" / "rank=0" / "phase=default" / src.name
    orphan.parent.mkdir(parents=True)
    shutil.copy(src, orphan)
    (wh / ".staging" / "abc.12345678").mkdir(parents=True)
    (wh / ".staging" / "abc.12345678" / "events.staged.parquet").write_bytes(b"x")
    (wh / ".tracedb.duckdb.4242.tmp").write_bytes(b"partial catalog")

    res = _cli(wh)
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert lines[:-1] == [
        f"orphan_file: {orphan}: not part of any registered trace (left by an interrupted ingest)",
        f"staging_leftover: {wh / '.staging' / 'abc.12345678'}: left by an interrupted ingest",
        f"temp_catalog: {wh / '.tracedb.duckdb.4242.tmp'}: catalog copy left by an interrupted writer",
    ]
    assert lines[-1] == "Checked 2 trace(s), 11 Parquet file(s): 3 problem(s), 0 repaired."
    assert "tracedb check --repair" in res.stderr

    res = _cli(wh, "--repair")
    assert res.exit_code == 0, res.output
    assert res.stdout.count("[repaired: removed]") == 3
    assert not orphan.exists() and not (wh / "events" / "run=v9").exists()
    assert not any((wh / ".staging").iterdir())
    assert not (wh / ".tracedb.duckdb.4242.tmp").exists()
    assert tracedb.open(wh).check().problems == []
    assert tracedb.open(wh).sql("SELECT count(*) FROM events").fetchall() == [(7,)]


@pytest.mark.parametrize("damage", ["missing", "truncated_rows", "garbage"])
def test_a_broken_registered_trace_is_unregistered_then_reingested(wh: Path, tmp_path: Path, damage: str):
    files = _files(wh)["rank1.json"]
    events = Path(files["events"])
    if damage == "missing":
        events.unlink()
        kind = "missing_file"
    elif damage == "truncated_rows":  # a valid Parquet file with fewer rows
        table = pq.read_table(events)
        pq.write_table(table.slice(0, 2), events)
        kind = "row_count"
    else:
        events.write_bytes(b"not parquet at all")
        kind = "unreadable_file"
    report = tracedb.open(wh).check()
    assert [(p.kind, p.path) for p in report.problems] == [(kind, str(events))]
    if damage == "truncated_rows":
        assert report.problems[0].detail.endswith("holds 2 row(s), 4 registered")

    report = tracedb.open(wh).check(repair=True)
    assert report.ok and "ingest its file again" in report.problems[0].repaired
    db = tracedb.open(wh)
    assert db.sql("SELECT count(*) FROM traces").fetchall() == [(1,)]
    assert not any(Path(p).exists() for p in files.values())  # its other files went too
    assert db.check().problems == []

    report = db.ingest([tmp_path / "runs"])
    assert [Path(r.path).name for r in report.ingested] == ["rank1.json"]
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(3 + 4,)]
    assert db.check().problems == []


def test_check_of_no_warehouse_is_an_error(tmp_path: Path):
    res = _cli(tmp_path / "nothing")
    assert res.exit_code == 1
    assert res.output == f"Error: no tracedb warehouse at {tmp_path / 'nothing'}\n"


def test_copies_of_one_trace_in_one_ingest_leave_no_orphans(tmp_path: Path):
    # the same content under two phases (HTA's corpus has such copies): one trace,
    # and the copy's published files go rather than stay as orphans
    a = write_trace(tmp_path / "runs" / "v1" / "eval" / "rank0.json", _events(4))
    (tmp_path / "runs" / "v1" / "train").mkdir()
    shutil.copy(a, tmp_path / "runs" / "v1" / "train" / "rank0.json")
    db = tracedb.open(tmp_path / "wh")
    db.ingest([tmp_path / "runs"], jobs=1)
    assert db.sql("SELECT count(*) FROM traces").fetchall() == [(1,)]
    report = db.check()
    assert report.problems == [] and report.file_count == 3 + 2  # events, flows, counters; 2 summaries
