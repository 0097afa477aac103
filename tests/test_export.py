"""`tracedb export`: a window of one rank back to Chrome-trace JSON. The
export is read with plain json.load and checked against the source trace's
JSON; ingesting it gives back the window's rows."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracedb
from conftest import ROOT, corpus_file, load_json
from tracedb.cli import main
from tracedb.export import BASE_PID_START, export

CUDA = ROOT / "tests" / "fixtures" / "cuda"
# Columns that say what an event is (file_id, event_id and self_ns depend on the file it sits in).
SAME = ("ts_ns, dur_ns, ph, cat, name, pid, tid, id, correlation, external_id, device, stream, grid, block,"
        " bytes, collective_name, in_msg_nelems, group_size, dtype, CAST(args AS VARCHAR) AS args")


def _rows(db, table: str, cols: str, where: str, params: list) -> list[tuple]:
    """Rows as tuples, args (the last column of events) parsed: 1.000000 and 1.0 are one value."""
    rows = db.sql(f"SELECT {cols} FROM {table} WHERE {where}", params).fetchall()
    if table == "events":
        rows = [(*r[:-1], None if r[-1] is None else json.loads(r[-1])) for r in rows]
    return sorted(rows, key=repr)


def _window_rows(db, run, rank, phase, start, end) -> dict[str, list[tuple]]:
    where = "run = ? AND rank = ? AND phase = ? AND ts_ns >= ? AND ts_ns < ?"
    p = [run, rank, phase, start, end]
    return {
        "events": _rows(db, "events", SAME, where + " AND ph <> 'M'", p),
        "flows": _rows(db, "flows", "ts_ns, ph, id, cat, name, pid, tid, bp", where, p),
        "counters": _rows(db, "counters", "ts_ns, cat, name, pid, tid, series, value", where, p),
    }


def _round_trip(tmp_path: Path, db, out: Path, run: str, rank: int, phase: str, start: int, end: int):
    again = tracedb.open(tmp_path / "again")
    report = again.ingest([out], run="back", rank=rank, phase=phase, jobs=1)
    assert not report.failed
    want = _window_rows(db, run, rank, phase, start, end)
    got = _window_rows(again, "back", rank, phase, start, end)
    assert got == want
    # nothing outside the window came along
    n = again.sql("SELECT count(*) FROM events WHERE ph <> 'M'").fetchall()[0][0]
    assert n == len(want["events"]) > 0
    again.close()


@pytest.fixture(scope="module")
def cuda_db(tmp_path_factory):
    db = tracedb.open(tmp_path_factory.mktemp("cuda") / "wh")
    for run in ("v1", "v2"):
        db.ingest([CUDA / run], run=run, jobs=2)
    yield db
    db.close()


def _ns(us) -> int:
    return int(Decimal(str(us)) * 1000)


def test_step_export_is_chrome_trace_json_with_the_steps_events(cuda_db, tmp_path: Path):
    out = tmp_path / "step2.json"
    res = CliRunner().invoke(main, ["-w", str(cuda_db.warehouse), "export", "--run", "v2", "--rank", "0",
                                    "--step", "2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["displayTimeUnit"] == "ns"
    src = load_json(CUDA / "v2" / "rank0.train.json.gz")
    assert doc["baseTimeNanoseconds"] == src["baseTimeNanoseconds"]
    assert doc["distributedInfo"] == src["distributedInfo"]
    # The step's range, from the source JSON: ProfilerStep#2 on the CPU.
    (step,) = [e for e in src["traceEvents"] if e.get("name") == "ProfilerStep#2" and e.get("cat") == "user_annotation"]
    start = _ns(step["ts"])
    # ... extended to the end of the last kernel launched inside it (ac2g correlation).
    launched = {e["args"]["correlation"] for e in src["traceEvents"]
                if e.get("cat") == "cuda_runtime" and start <= _ns(e["ts"]) < start + _ns(step["dur"])}
    kernel_ends = [_ns(e["ts"]) + _ns(e["dur"]) for e in src["traceEvents"]
                   if e.get("cat") == "kernel" and e["args"].get("correlation") in launched]
    end = max(start + _ns(step["dur"]), *kernel_ends)
    assert doc["tracedbExport"]["start_ns"] - src["baseTimeNanoseconds"] == start
    assert doc["tracedbExport"]["end_ns"] - src["baseTimeNanoseconds"] == end
    want = sorted((e["ph"], e["name"], _ns(e["ts"]), _ns(e.get("dur", 0))) for e in src["traceEvents"]
                  if e.get("ph") in ("X", "i") and start <= _ns(e["ts"]) < end)
    got = [e for e in doc["traceEvents"] if e["ph"] not in ("M", "s", "f", "t", "C")]
    assert sorted((e["ph"], e["name"], _ns(e["ts"]), _ns(e.get("dur", 0))) for e in got) == want
    for e in got:
        assert {"ph", "ts", "pid", "tid"} <= set(e) and ("dur" in e or e["ph"] != "X")
    # every kernel keeps its original args, and the process / thread names come along
    by_key = {(e["name"], _ns(e["ts"])): e for e in src["traceEvents"] if e.get("cat") == "kernel"}
    for e in got:
        if e.get("cat") == "kernel":
            assert e["args"] == by_key[(e["name"], _ns(e["ts"]))]["args"]
    names = {e["name"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert {"process_name", "thread_name"} <= names
    # flows as s/f pairs with ids, the launch -> kernel arrows
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    assert flows and all("id" in e for e in flows)
    assert {e["id"] for e in flows if e["ph"] == "s"} & {e["id"] for e in flows if e["ph"] == "f"}
    _round_trip(tmp_path, cuda_db, out, "v2", 0, "train", doc["tracedbExport"]["start_ns"],
                doc["tracedbExport"]["end_ns"])


def test_compare_puts_the_base_step_beside_it_aligned(cuda_db, tmp_path: Path):
    out = tmp_path / "cmp.json.gz"
    r = export(cuda_db, out, "v2", 0, phase="train", step=3, compare="v1")
    doc = json.loads(gzip.decompress(out.read_bytes()))
    base_pids = {e["pid"] for e in doc["traceEvents"] if isinstance(e["pid"], int) and e["pid"] >= BASE_PID_START}
    target = [e for e in doc["traceEvents"] if e["pid"] not in base_pids and e["ph"] != "M"]
    base = [e for e in doc["traceEvents"] if e["pid"] in base_pids and e["ph"] != "M"]
    assert len(target) == r.event_count + r.flow_count + r.counter_count
    step = {e["pid"] in base_pids: e for e in doc["traceEvents"]
            if e.get("name") == "ProfilerStep#3" and e.get("cat") == "user_annotation"}
    assert step[True]["ts"] == step[False]["ts"]  # aligned at the step's start
    src = load_json(CUDA / "v1" / "rank0.train.json.gz")
    (v1_step,) = [e for e in src["traceEvents"] if e.get("name") == "ProfilerStep#3" and e.get("cat") == "user_annotation"]
    assert _ns(step[True]["dur"]) == _ns(v1_step["dur"])
    assert len([e for e in base if e["ph"] == "X"]) > 100
    labels = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"
              and e["pid"] in base_pids}
    assert labels and all(n.startswith("v1 (base): ") for n in labels)
    # base flow ids never join the target's
    assert all(str(e["id"]).startswith("v1 (base):") for e in base if e["ph"] in ("s", "f"))


def test_corpus_window_round_trips(tmp_path: Path):
    path = corpus_file("deepseek/train.json")
    db = tracedb.open(tmp_path / "wh")
    db.ingest([path], run="ds", jobs=1)
    rank, phase, lo, hi = db.sql("SELECT rank, phase, ts_min_ns, ts_max_ns FROM traces").fetchall()[0]
    start, end = lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3
    out = tmp_path / "slice.json.gz"
    res = CliRunner().invoke(main, ["-w", str(db.warehouse), "export", "--run", "ds", "--rank", str(rank),
                                    "--start-ns", str(start), "--end-ns", str(end), "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(gzip.decompress(out.read_bytes()))
    assert all({"ph", "pid", "tid"} <= set(e) for e in doc["traceEvents"])
    _round_trip(tmp_path, db, out, "ds", rank, phase, start, end)
    db.close()


def test_export_errors_are_one_line(cuda_db, tmp_path: Path):
    w = str(cuda_db.warehouse)
    cases = [
        (["--run", "v1", "--rank", "0", "--step", "2"], "Error: run 'v1' rank 0 has phases decode, prefill, train; choose one with --phase"),
        (["--run", "v2", "--rank", "0", "--step", "9"], "Error: run 'v2' rank 0 phase 'train' has no step 9 (steps: 2, 3, 4)"),
        (["--run", "v2", "--rank", "5", "--step", "2"], "Error: run 'v2' has no rank 5 in the warehouse"),
        (["--run", "v2", "--rank", "0"], "Error: give --step K or --start-ns A and --end-ns B"),
    ]
    for args, line in cases:
        res = CliRunner().invoke(main, ["-w", w, "export", *args, "-o", str(tmp_path / "x.json")])
        assert res.exit_code == 1 and res.output.strip().splitlines()[-1] == line, res.output
    assert not (tmp_path / "x.json").exists()
