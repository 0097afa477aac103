"""The real traces in ../shared/corpus against plain-Python computations over
their JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xxhash
from click.testing import CliRunner

import tracedb
from tracedb.cli import main
from conftest import CORPUS, corpus_file, load_json
from oracle import expected_counts, kernel_sums, ts_ns


@pytest.fixture(scope="module")
def corpus_wh(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("corpus") / "wh"
    tracedb.open(wh).ingest([corpus_file()], jobs=2)
    return wh


def test_the_corpus_is_there():
    """The per-file tests below are made from the corpus's files: without
    it they would not exist, so this one says so (a failure in CI)."""
    assert len(_trace_files()) >= 30, corpus_file()


def _trace_files() -> list[Path]:
    if not CORPUS.exists():
        return []
    return sorted(p for p in CORPUS.rglob("*") if p.name.endswith((".json", ".json.gz")))


@pytest.mark.parametrize("path", _trace_files(), ids=lambda p: str(p.relative_to(CORPUS)))
def test_every_event_of_every_file(corpus_wh: Path, path: Path):
    doc = load_json(path)
    db = tracedb.open(corpus_wh)
    # Identical copies in the corpus (same bytes) are one trace: look it up by content.
    content = "xxh3-" + xxhash.xxh3_128(path.read_bytes()).hexdigest()
    row = db.sql("SELECT status, error, event_count, flow_count, counter_count, file_id FROM traces "
                 "WHERE file_id = ?", [content]).fetchall()
    assert len(row) == 1
    status, error, n_events, n_flows, n_counters, file_id = row[0]
    if isinstance(doc, dict) and "traceEvents" not in doc:
        # The execution trace (a different format) is refused, not guessed at.
        assert status == "failed" and "not a trace" in error
        return
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    expected = expected_counts(events)
    assert status == "ok", error
    assert (n_events, n_flows, n_counters) == (expected["events"], expected["flows"], expected["counters"])
    for table, count in expected.items():
        got = db.sql(f"SELECT count(*) FROM {table} WHERE file_id = ?", [file_id]).fetchall()[0][0]
        assert got == count, table


@pytest.mark.parametrize("rel,run", [
    ("deepseek/train.json", "deepseek"),
    ("hta/nccl_parser_config/nccl_data.json.gz", "nccl"),
])
def test_hotspots_kernel_totals_equal_json_sums(tmp_path: Path, rel: str, run: str):
    path = corpus_file(rel)
    wh = tmp_path / "wh"
    runner = CliRunner()
    res = runner.invoke(main, ["-w", str(wh), "ingest", "--run", run, str(path)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["-w", str(wh), "query", "hotspots", "--run", run,
                               "--kind", "kernel", "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    expected = kernel_sums(load_json(path)["traceEvents"])
    assert {r["name"]: r["calls"] for r in rows} == {k: v[0] for k, v in expected.items()}
    for r in rows:
        assert r["total_us"] == pytest.approx(expected[r["name"]][1] / 1e3, abs=1e-9)


def test_timestamps_are_exact_ns_with_base_time(tmp_path: Path):
    """nccl_data writes fractional microseconds relative to baseTimeNanoseconds."""
    path = corpus_file("hta/nccl_parser_config/nccl_data.json.gz")
    doc = load_json(path)
    base = doc["baseTimeNanoseconds"]
    db = tracedb.open(tmp_path / "wh")
    db.ingest([path], jobs=1)
    got = dict(db.sql("SELECT event_id, ts_ns FROM events WHERE ph = 'X'").fetchall())
    xs = [(i, e) for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X"]
    assert len(got) == len(xs)
    for i, e in xs:
        assert got[i] == ts_ns(e["ts"], base), i
    meta = db.sql("SELECT base_time_ns, trace_name, display_time_unit, distributed_info FROM traces").fetchall()[0]
    assert meta[:3] == (base, doc["traceName"], doc["displayTimeUnit"])
    assert json.loads(meta[3]) == doc["distributedInfo"]


def test_ranks_come_from_distributed_info(corpus_wh: Path):
    db = tracedb.open(corpus_wh)
    got = dict(db.sql("SELECT source_path, rank FROM traces WHERE status = 'ok'").fetchall())
    for path, rank in got.items():
        doc = load_json(Path(path))
        info = doc.get("distributedInfo") if isinstance(doc, dict) else None
        if info and isinstance(info.get("rank"), int):
            assert rank == info["rank"], path
