"""Real traces captured with torch.profiler (2-rank gloo jobs on CPU)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

import tracedb
from conftest import load_json
from oracle import expected_counts, ts_ns


@pytest.fixture(scope="module")
def demo_wh(demo_runs: Path, tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("demo_wh") / "wh"
    report = tracedb.open(wh).ingest([demo_runs], jobs=2)
    assert not report.failed
    return wh


def test_mapping_from_distributed_info_and_names(demo_runs: Path, demo_wh: Path):
    db = tracedb.open(demo_wh)
    got = sorted(db.sql("SELECT run, rank, phase, rank_source FROM traces").fetchall())
    assert got == [
        ("infer", 0, "decode", "distributedInfo"), ("infer", 0, "prefill", "distributedInfo"),
        ("infer", 1, "decode", "distributedInfo"), ("infer", 1, "prefill", "distributedInfo"),
        ("v1", 0, "train", "distributedInfo"), ("v1", 1, "train", "distributedInfo"),
        ("v2", 0, "train", "distributedInfo"), ("v2", 1, "train", "distributedInfo"),
    ]


def test_counts_and_cpu_op_totals_match_the_json(demo_runs: Path, demo_wh: Path):
    db = tracedb.open(demo_wh)
    for path in sorted(demo_runs.rglob("*.json")):
        doc = load_json(path)
        events = doc["traceEvents"]
        rank = doc["distributedInfo"]["rank"]
        file_id, run, phase, counts = db.sql(
            "SELECT file_id, run, phase, [event_count, flow_count, counter_count] FROM traces "
            "WHERE source_path = ?", [str(path)]).fetchall()[0]
        exp = expected_counts(events)
        assert counts == [exp["events"], exp["flows"], exp["counters"]]
        # hotspots for the rank: cpu ops (a CPU-only run has no kernels, so it is the default kind)
        sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for e in events:
            if e.get("ph") == "X" and e.get("cat") == "cpu_op":
                sums[e["name"]][0] += 1
                sums[e["name"]][1] += ts_ns(e["dur"])
        rel = db.query("hotspots", run=run, rank=rank, phase=phase)
        rows = rel.fetchall()
        cols = rel.columns
        assert {r[cols.index("kind")] for r in rows} == {"cpu_op"}
        got = {r[cols.index("name")]: (r[cols.index("calls")], round(r[cols.index("total_us")] * 1000)) for r in rows}
        assert got == {k: (v[0], v[1]) for k, v in sums.items()}


def test_absolute_times_from_base_time(demo_runs: Path, demo_wh: Path):
    path = sorted(demo_runs.rglob("rank0.train.json"))[0]
    doc = load_json(path)
    base = doc["baseTimeNanoseconds"]
    first = min(ts_ns(e["ts"], base) for e in doc["traceEvents"] if e.get("ph") == "X")
    db = tracedb.open(demo_wh)
    got = db.sql("SELECT min(ts_ns) FROM events WHERE ph = 'X' AND file_id = "
                 "(SELECT file_id FROM traces WHERE source_path = ?)", [str(path)]).fetchall()[0][0]
    assert got == first
