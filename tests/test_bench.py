"""The benchmark script runs from a clone and refuses figures for an ingest
that lost events (benchmarks/bench.py). Its --smoke sizes take seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, corpus_file, trace_events, write_trace

sys.path.insert(0, str(ROOT / "benchmarks"))
import bench  # noqa: E402
import workloads  # noqa: E402

pytestmark = pytest.mark.slow

SOURCE = "hta/nccl_parser_config/nccl_data.json.gz"


def test_smoke_run_prints_and_writes_every_figure(tmp_path):
    source = corpus_file(SOURCE)
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench.py"), "--smoke", "--keep", "--query-repeats", "1",
         "--workdir", str(tmp_path / "work"), "--json", str(out), "--source", str(source)],
        capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("tracedb benchmark (smoke):")
    results = json.loads(out.read_text())

    # The rank files are kept: count their events with json.load.
    rank_files = sorted((tmp_path / "work" / "ranks").rglob("*.json"))
    assert len(rank_files) == 4
    events = sum(len(trace_events(f)) for f in rank_files)
    one_tile = len(trace_events(source))  # each rank file is one tile of the source
    assert events == 4 * one_tile

    small = sorted((tmp_path / "work" / "small").rglob("*.json"))
    assert len(small) == 4 and sum(len(trace_events(f)) for f in small) == 4 * one_tile

    tiny = sorted((tmp_path / "work" / "tiny").rglob("*.json"))
    assert len(tiny) == 8 and sum(len(trace_events(f)) for f in tiny) == 8 * 20

    ingest = {e["workload"]: e for e in results["ingest"]}
    assert [e.get("error") for e in ingest.values()] == [None] * 7  # every warehouse held every event
    assert ingest["8 traces of 20 events (default --jobs)"]["events"] == 8 * 20
    assert ingest["4 rank files (default --jobs)"]["events"] == events
    assert ingest["4 rank files of 10 MB (default --jobs)"]["events"] == 4 * one_tile
    assert results["warehouse"]["events"] == events
    big = ingest["1 trace, 0.0098 GiB"]
    assert big["events"] == one_tile and big["speedup"] > 0 and big["peak_rss_mib"] > 0
    assert ingest["1 trace, 0.0098 GiB, .json.gz"]["events"] == one_tile
    assert ingest["1 trace, 0.0098 GiB, on one line"]["events"] == one_tile
    assert ingest["1 trace, 0.039 GiB"]["events"] == len(trace_events(source)) * 4 - _meta_events(source) * 3

    assert results["scaling"][0]["jobs"] == 1 and results["scaling"][0]["speedup"] == 1.0
    assert [q["mart"] for q in results["queries"]] == ["hotspots", "comm_latency", "overlap", "regressions"]
    assert all("error" not in q and q["rows"] > 0 and q["warm_seconds"] > 0 for q in results["queries"])
    assert 0 < results["warehouse"]["ratio"] < 1
    for line in ("| hotspots |", "| 4 rank files (default --jobs) | 39 |", "Warehouse: "):
        assert line in r.stdout


def _meta_events(path) -> int:
    """Process/thread metadata events: written once, not per tile."""
    return sum(1 for e in trace_events(path) if e.get("ph") == "M")


def test_the_one_line_workload_holds_the_same_events(tmp_path):
    """bench.py's one-line trace is the pretty one's JSON without its line
    breaks: the same document by json.load, and no newline in it."""
    src = workloads.Source.load(corpus_file(SOURCE))
    pretty, one = tmp_path / "p.json", tmp_path / "o.json"
    assert workloads.write_tiled(src, pretty, 3)[1] == workloads.write_tiled(src, one, 3, one_line=True)[1]
    assert b"\n" in pretty.read_bytes() and b"\n" not in one.read_bytes()
    assert json.loads(one.read_bytes()) == json.loads(pretty.read_bytes())


def test_a_warehouse_short_of_the_workload_fails_the_run(tmp_path):
    trace = write_trace(tmp_path / "t.json", [
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 3},
        {"ph": "i", "name": "c", "pid": 1, "tid": 1, "ts": 4, "s": "t"},
    ])
    wh = tmp_path / "wh"
    subprocess.run(bench.tracedb_cmd(wh, "ingest", str(trace)), check=True, capture_output=True)
    bench.check_rows(wh, 3)
    with pytest.raises(RuntimeError, match="holds 3 rows for 4 events"):
        bench.check_rows(wh, 4)


def test_timeline_marks_each_step_and_its_times_add_up(tmp_path):
    """benchmarks/timeline.py over a real trace: one file of its size on
    disk, every step of a trace's ingest marked, and the steps' wall and CPU
    seconds summing to the totals it prints."""
    source = corpus_file(SOURCE)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "timeline.py"), str(source), "--interval", "0.05"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    head, table = r.stdout.split("\n\n", 1)
    assert head.startswith(f"{source}: 1 file(s), {source.stat().st_size / 1e6:,.0f} MB in ")
    rows = {cells[0]: [float(c) for c in cells[1:]]
            for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:])}
    assert {"parse", "finalize", "summaries", "commit", "total"} <= rows.keys()
    total = rows.pop("total")
    assert sum(wall for wall, _, _ in rows.values()) == pytest.approx(total[0], abs=0.01 * len(rows))
    assert sum(cpu for _, cpu, _ in rows.values()) == pytest.approx(total[1], abs=0.01 * len(rows))
    assert total[1] > 0


def test_stages_as_a_worker_prints_each_step_and_the_c_reader(tmp_path):
    """benchmarks/stages.py --as-worker over a real trace: the events it
    counts are the trace's (plain Python over the JSON), each step of a
    trace's ingest is in its table with the total their sum, and the C
    reader's own CPU seconds are printed, a part of the parse's."""
    source = corpus_file(SOURCE)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stages.py"), str(source), "--as-worker"],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    head, table, reader = r.stdout.split("\n\n")[:3]
    rows_of_events = [e for e in trace_events(source) if e.get("ph") not in ("s", "t", "f", "C")]  # not flows, counters
    assert head == f"{source}: {len(rows_of_events):,} events, 1 parse thread(s), as a --jobs worker"
    rows = {cells[0]: [float(c) for c in cells[1:3]]
            for cells in ([c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:])}
    assert list(rows) == ["hash", "parse", "finalize", "summaries", "total"]
    total = rows.pop("total")
    assert sum(wall for wall, _ in rows.values()) == pytest.approx(total[0], abs=0.01 * len(rows))
    assert sum(cpu for _, cpu in rows.values()) == pytest.approx(total[1], abs=0.01 * len(rows))
    assert reader.startswith(f"{source.stat().st_size / 1e6:.0f} MB in ")
    line = reader.splitlines()[1]
    assert line.startswith("of the parse, the C reader alone: ") and line.endswith(" CPU s")
    assert 0 < float(line.split(": ")[1].split()[0]) <= rows["parse"][1] + 0.05


def test_commits_grows_a_warehouse_and_ingests_into_it(tmp_path):
    """benchmarks/commits.py: a row per round of the warehouse it grows (the
    script checks each round's traces are all registered: each file's
    content is its own), then the ingest of more into it."""
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "commits.py"), "--traces", "250", "--add", "10",
                        "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    table, last = r.stdout.strip().split("\n\n")
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    assert [n for n, _ in rows] == ["125", "250"] and all(float(cpu) > 0 for _, cpu in rows)
    assert last.startswith("10 more traces into 250: ")
    assert list(tmp_path.iterdir()) == []  # its traces and warehouse are gone


def test_writer_writes_the_events_both_ways(tmp_path):
    """benchmarks/writer.py over a real trace: its events (counted by plain
    Python over the JSON) written by both writers, a row each with its
    rounds, the same size of file within a page header a column."""
    source = ROOT / "tests" / "fixtures" / "cuda" / "v1" / "rank0.train.json.gz"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "writer.py"), str(source), "--rounds", "2"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    rows_of_events = [e for e in trace_events(source) if e.get("ph") not in ("s", "t", "f", "C")]
    assert r.stderr.startswith(f"{source}: {len(rows_of_events):,} events in 1 row groups, ")
    rows = {cells[0]: cells[1:] for cells in ([c.strip() for c in line.strip("|").split("|")]
                                              for line in r.stdout.splitlines()[2:])}
    assert list(rows) == ["pyarrow", "threads"]
    assert all(row[0] == "2" and len(row[2].split(", ")) == 2 for row in rows.values())
    assert float(rows["pyarrow"][4]) == pytest.approx(float(rows["threads"][4]), abs=0.01)
    assert list(tmp_path.iterdir()) == []  # its warehouse is gone


@pytest.mark.parametrize("script", ["reader.py", "stages.py", "timeline.py", "declines.py", "commits.py", "writer.py"])
def test_a_script_measures_the_checkout_it_sits_in(tmp_path, script):
    """Where another tracedb comes first on the path (an editable install of
    another checkout, PYTHONPATH), a benchmark script still imports its own
    checkout's: here the other one is a decoy that fails on import."""
    decoy = tmp_path / "tracedb"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy tracedb was imported')\n")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage:")
