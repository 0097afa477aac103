"""latency by clock and latency_compare (the --base comparison of forward
latency) on hand-written timer traces with round numbers, against a
plain-Python Mann-Whitney oracle; run tags through ingest, runs and query."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import tracedb
from conftest import write_trace
from tracedb.cli import main
from tracedb.errors import IngestError

# Durations in microseconds. "same" interleaves with the base (a second run
# of one configuration), "slow" is the base plus 2 ms, "tied" shares values
# with the base (ties take their mean rank).
BASE = [1000 + 100 * i for i in range(20)]
RUNS = {
    "base": BASE,
    "same": [1050 + 100 * i for i in range(20)],
    "slow": [3000 + 100 * i for i in range(20)],
    "tied": [1000 + 200 * (i // 2) for i in range(16)],
}


def _timer_trace(root: Path, run: str, durs_us: list[float], clock: str = "wall", rank: int = 0) -> Path:
    events = [{"ph": "X", "cat": "latency", "name": "forward", "pid": 1, "tid": 0, "ts": 10_000 * i,
               "dur": d, "args": {"clock": clock, "pass": i}} for i, d in enumerate(durs_us)]
    return write_trace(root / run / "inference" / f"rank{rank}.forward.json", events)


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mann_whitney(run: list[float], base: list[float]) -> tuple[float, float]:
    """z of the run's U (normal approximation, tie-corrected) and the two-sided p."""
    pooled = sorted([(v, False) for v in base] + [(v, True) for v in run])
    ranks: dict[float, float] = {}
    i = 0
    while i < len(pooled):
        j = i
        while j < len(pooled) and pooled[j][0] == pooled[i][0]:
            j += 1
        ranks[pooled[i][0]] = (i + 1 + j) / 2  # mean of ranks i+1 .. j
        i = j
    n1, n2 = len(run), len(base)
    u = sum(ranks[v] for v in run) - n1 * (n1 + 1) / 2
    counts: dict[float, int] = {}
    for v, _ in pooled:
        counts[v] = counts.get(v, 0) + 1
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - sum(t ** 3 - t for t in counts.values()) / (n * (n - 1)))
    z = (u - n1 * n2 / 2) / math.sqrt(var)
    return z, math.erfc(abs(z) / math.sqrt(2))


@pytest.fixture(scope="module")
def compare_wh(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("timer") / "runs"
    for run, durs in RUNS.items():
        _timer_trace(root, run, durs)
    # A CUDA-event run: another quantity, never compared with wall-clock ones.
    _timer_trace(root, "gpu", [500.0] * 10, clock="cuda_event")
    _timer_trace(root, "gpu_again", [500.0] * 5, clock="cuda_event")
    wh = root.parent / "wh"
    report = tracedb.open(wh).ingest([root], jobs=1)
    assert not report.failed
    return wh


def test_latency_keeps_clocks_apart(compare_wh: Path):
    rel = tracedb.open(compare_wh).query("latency", span="forward")
    rows = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    assert sorted(rows) == ["base", "gpu", "gpu_again", "same", "slow", "tied"]
    assert {r["kind"] for r in rows.values()} == {"timer"}
    assert rows["gpu"]["clock"] == "cuda_event" and rows["base"]["clock"] == "wall"
    for run, durs in RUNS.items():
        r = rows[run]
        assert r["calls"] == len(durs)
        assert r["avg_us"] == pytest.approx(sum(durs) / len(durs))
        for q in (50, 95, 99):
            assert r[f"p{q}_us"] == pytest.approx(_percentile(durs, q / 100))
        assert (r["min_us"], r["max_us"]) == (min(durs), max(durs))


def test_compare_against_the_oracle(compare_wh: Path):
    rel = tracedb.open(compare_wh).query("latency", span="forward", base="base")
    rows = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    # gpu (cuda_event) has no wall-clock base to compare with; the base is not compared to itself.
    assert sorted(rows) == ["same", "slow", "tied"]
    for run, row in rows.items():
        durs = RUNS[run]
        z, p = _mann_whitney(durs, BASE)
        assert row["rank_test_z"] == pytest.approx(z)
        assert row["p_value"] == pytest.approx(p, abs=1e-6)
        assert (row["base_calls"], row["calls"]) == (len(BASE), len(durs))
        for q in (50, 95, 99):
            assert row[f"base_p{q}_us"] == pytest.approx(_percentile(BASE, q / 100))
            assert row[f"p{q}_us"] == pytest.approx(_percentile(durs, q / 100))
            assert row[f"p{q}_ratio"] == pytest.approx(_percentile(durs, q / 100) / _percentile(BASE, q / 100))
    # By hand: slow ranks above every base span (U = 400 of 400): z = 200 / sqrt(400 * 41 / 12).
    assert rows["slow"]["rank_test_z"] == pytest.approx(200 / math.sqrt(400 * 41 / 12))
    assert (rows["slow"]["is_beyond_noise"], rows["slow"]["change"]) == (True, "slower")
    assert (rows["same"]["is_beyond_noise"], rows["same"]["change"]) == (False, "same")
    assert rows["tied"]["is_beyond_noise"] is False


def test_compare_of_identical_samples_has_no_test(compare_wh: Path):
    rel = tracedb.open(compare_wh).query("latency", span="forward", base="gpu")
    rows = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert [(r["run"], r["clock"], r["p50_ratio"], r["p_value"], r["is_beyond_noise"], r["change"]) for r in rows] == [
        ("gpu_again", "cuda_event", 1.0, None, False, "same")]


def test_compare_alpha_and_the_cli(compare_wh: Path):
    # same's p is about 0.79: an alpha above it calls even that beyond noise.
    rel = tracedb.open(compare_wh).query("latency_compare", base="base", span="forward", alpha=0.99, run="same")
    assert [r[rel.columns.index("change")] for r in rel.fetchall()] == ["slower"]
    res = CliRunner().invoke(main, ["-w", str(compare_wh), "query", "latency", "--span", "forward",
                                    "--base", "base", "-f", "json"])
    assert res.exit_code == 0, res.output
    got = {r["run"]: r["change"] for r in json.loads(res.stdout)}
    assert got == {"same": "same", "slow": "slower", "tied": "same"}


def test_tags_round_trip(tmp_path: Path):
    root = tmp_path / "runs"
    _timer_trace(root, "bs1", [1000.0, 1100.0])
    _timer_trace(root, "bs8", [2000.0, 2100.0])
    (root / "bs1" / "run.json").write_text(json.dumps({"batch_size": 1, "cuda_graphs": True}))
    (root / "bs8" / "run.json").write_text(json.dumps({"batch_size": 8, "cuda_graphs": False}))
    wh = tmp_path / "wh"
    cli = CliRunner()
    res = cli.invoke(main, ["-w", str(wh), "ingest", str(root), "--tag", "dtype=fp32", "--tag", "host=ci"])
    assert res.exit_code == 0, res.output
    res = cli.invoke(main, ["-w", str(wh), "runs", "-f", "json"])
    assert {r["run"]: r["tags"] for r in json.loads(res.stdout)} == {
        "bs1": "batch_size=1 cuda_graphs=true dtype=fp32 host=ci",
        "bs8": "batch_size=8 cuda_graphs=false dtype=fp32 host=ci",
    }
    res = cli.invoke(main, ["-w", str(wh), "query", "latency", "--span", "forward", "--tag", "batch_size=8",
                            "--tag", "dtype=fp32", "-f", "json"])
    assert [(r["run"], r["calls"]) for r in json.loads(res.stdout)] == [("bs8", 2)]
    res = cli.invoke(main, ["-w", str(wh), "query", "latency", "--span", "forward", "--tag", "batch_size=2",
                            "-f", "json"])
    assert json.loads(res.stdout) == []
    # A second ingest of the same files (all skipped) still re-tags: a key given again is replaced.
    res = cli.invoke(main, ["-w", str(wh), "ingest", str(root / "bs1"), "--run", "bs1", "--tag", "host=lab"])
    assert res.exit_code == 0, res.output
    db = tracedb.open(wh)
    assert dict(db.sql("SELECT key, value FROM run_tags WHERE run = 'bs1'").fetchall())["host"] == "lab"
    db.close()
    # The tags are Parquet in the warehouse: a rebuilt catalog lists them again.
    on_disk = pq.read_table(wh / "run_tags" / "run=bs8" / "tags.parquet").to_pylist()
    assert {r["key"]: r["value"] for r in on_disk} == {
        "batch_size": "8", "cuda_graphs": "false", "dtype": "fp32", "host": "ci"}
    tracedb.open(wh).catalog.rebuild()
    db = tracedb.open(wh)
    assert db.sql("SELECT count(*) FROM run_tags").fetchall() == [(8,)]
    db.close()
    # Removing a whole run removes its tags; removing a phase of one keeps them.
    tracedb.open(wh).remove("bs1", phase="train")
    tracedb.open(wh).remove("bs8")
    db = tracedb.open(wh)
    assert db.sql("SELECT DISTINCT run FROM run_tags").fetchall() == [("bs1",)]
    assert not (wh / "run_tags" / "run=bs8").exists()
    db.close()


def test_tag_errors(tmp_path: Path):
    root = tmp_path / "runs"
    _timer_trace(root, "bs1", [1000.0])
    res = CliRunner().invoke(main, ["-w", str(tmp_path / "wh"), "ingest", str(root), "--tag", "novalue"])
    assert res.exit_code == 2
    assert "'novalue': expected KEY=VALUE" in res.output
    (root / "bs1" / "run.json").write_text("[1, 2]")
    with pytest.raises(IngestError, match="run.json: a run's configuration is a JSON object"):
        tracedb.open(tmp_path / "wh").ingest([root])
    res = CliRunner().invoke(main, ["-w", str(tmp_path / "wh"), "ingest", str(root)])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1].startswith("Error: ")
