"""The marts as a user meets them: listed with docs by `tracedb views`,
every column documented, the issue's columns present, and `tracedb query
NAME` working for each with its filters."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import tracedb
from conftest import write_trace
from marts_fixture import gloo_events, rows, write_ranks
from tracedb.cli import main

CONTRACT = {
    "collectives": {"run", "rank", "phase", "collective", "msg_bytes", "group_size", "dur_us", "algbw_gbps",
                    "busbw_gbps", "pg_name", "stream"},
    "comm_latency": {"run", "collective", "msg_bytes_bucket", "group_size", "calls", "p50_us", "p95_us", "p99_us",
                     "max_us", "busbw_gbps", "slowest_rank"},
    "comm_latency_by_rank": {"run", "rank", "collective", "calls", "p50_us", "p99_us"},
    "overlap": {"run", "rank", "phase", "compute_us", "comm_us", "overlap_us", "comm_hidden_pct"},
    "overlap_by_step": {"run", "rank", "phase", "step", "compute_us", "comm_us", "overlap_us", "comm_hidden_pct"},
    "gpu_utilization": {"run", "rank", "device", "stream", "busy_us", "span_us", "idle_us", "gap_count", "busy_pct"},
    "step_times": {"run", "rank", "phase", "step", "dur_us"},
    "stragglers": {"run", "phase", "step", "slowest_rank", "slowest_us", "median_us", "excess_us"},
    "kernel_launches": {"run", "rank", "name", "launch_name", "launch_latency_us", "cpu_op_name"},
    "annotations": {"run", "phase", "name", "calls", "cpu_total_us", "gpu_kernel_us"},
    "annotations_by_rank": {"run", "rank", "phase", "name", "calls", "cpu_total_us", "gpu_kernel_us"},
    "latency": {"run", "phase", "calls", "avg_us", "p50_us", "p95_us", "p99_us", "max_us"},
    "latency_by_rank": {"run", "rank", "phase", "calls", "avg_us", "p50_us", "p95_us", "p99_us", "max_us"},
    "regressions": {"kind", "name", "base_calls", "target_calls", "base_total_us", "target_total_us",
                    "base_p50_us", "target_p50_us", "change_pct", "status"},
}


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    root = tmp_path_factory.mktemp("cat")
    write_ranks(root / "runs", run="v1")
    write_ranks(root / "runs", run="v2")
    with tracedb.open(root / "wh") as db:
        db.ingest([root / "runs"], jobs=1)
    return root / "wh"


def test_every_view_and_column_is_documented(wh):
    with tracedb.open(wh) as db:
        views = rows(db, "SELECT name, layer, description FROM tracedb_meta.tracedb_views")
        cols = rows(db, "SELECT view_name, column_name, data_type, description FROM tracedb_meta.tracedb_view_columns")
    assert {v["name"] for v in views if v["layer"] == "marts"} >= set(CONTRACT)
    assert [v["name"] for v in views if not (v["description"] or "").strip()] == []
    assert [(c["view_name"], c["column_name"]) for c in cols if not (c["description"] or "").strip()] == []
    by_view: dict[str, set] = {}
    for c in cols:
        by_view.setdefault(c["view_name"], set()).add(c["column_name"])
    for name, contract in CONTRACT.items():
        assert contract <= by_view[name], (name, contract - by_view[name])
    # table macros list their real columns, with types
    assert all(c["data_type"] for c in cols if c["view_name"] in ("regressions", "latency"))


def test_tracedb_views_describes_each_mart(wh):
    res = CliRunner().invoke(main, ["-w", str(wh), "views"])
    assert res.exit_code == 0, res.output
    listed = {line.split()[0]: line for line in res.output.splitlines() if line.strip()}
    for name in CONTRACT:
        assert len(listed[name].split(maxsplit=1)[1]) > 40, name
    res = CliRunner().invoke(main, ["-w", str(wh), "views", "latency"])
    assert "param span:" in res.output and "p50_us" in res.output
    assert res.output.splitlines()[0] == "latency (marts macro; in the catalog: main.latency)"
    res = CliRunner().invoke(main, ["-w", str(wh), "views", "int_steps"])
    assert res.output.splitlines()[0] == "int_steps (intermediate view; in the catalog: intermediate.int_steps)"


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_tracedb_query_runs_every_mart(wh, name):
    extra = ["--base", "v1"] if name == "regressions" else []
    res = CliRunner().invoke(main, ["-w", str(wh), "query", name, "--run", "v2", *extra, "-f", "json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got, name
    if "run" in got[0]:
        assert {r["run"] for r in got} == {"v2"}
    assert CONTRACT[name] <= set(got[0])


@pytest.mark.parametrize("name", ["collectives", "overlap", "gpu_utilization", "step_times", "kernel_launches",
                                  "annotations", "comm_latency", "latency"])
def test_rank_and_phase_filters(wh, name):
    runner = CliRunner()
    res = runner.invoke(main, ["-w", str(wh), "query", name, "--run", "v1", "--rank", "1", "--phase", "train",
                               "-f", "json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got and {(r["run"], r["rank"], r["phase"]) for r in got} == {("v1", 1, "train")}
    res = runner.invoke(main, ["-w", str(wh), "query", name, "--phase", "nope", "-f", "json"])
    assert res.exit_code == 0 and json.loads(res.output) == []


def test_latency_span_option(wh):
    runner = CliRunner()
    res = runner.invoke(main, ["-w", str(wh), "query", "latency", "--run", "v1", "--span", "attn%", "-f", "json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)
    assert (row["span_pattern"], row["calls"], row["p50_us"]) == ("attn%", 4, 200)
    res = runner.invoke(main, ["-w", str(wh), "query", "overlap", "--span", "x"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1] == "Error: overlap takes no --span"


def test_without_kind_a_mart_answers_with_the_first_kind_the_asked_runs_have(tmp_path):
    # hotspots prefers kernels, then CPU ops: a GPU run answers with its
    # kernels, a CPU-only one (gloo) with its ops, also when the run is asked
    # for by a tag, not by name, beside a GPU run in the same warehouse.
    write_ranks(tmp_path / "runs", run="gpu", ranks=(0,))
    write_trace(tmp_path / "runs" / "cpu" / "train" / "rank0.json", gloo_events())
    for run, device in [("gpu", "h100"), ("cpu", "cpu")]:
        (tmp_path / "runs" / run / "run.json").write_text(json.dumps({"device": device}))
    ops = {e["name"] for e in gloo_events() if e["cat"] == "cpu_op"}
    with tracedb.open(tmp_path / "wh") as db:
        assert not db.ingest([tmp_path / "runs"], jobs=1).failed
        # (run, kind, name) of each row
        got = {label: {(r[0], r[2], r[3]) for r in db.query("hotspots", **ask).fetchall()}
               for label, ask in [("cpu", dict(run="cpu")), ("tag cpu", dict(tags={"device": "cpu"})),
                                  ("gpu", dict(run="gpu")), ("all", {})]}
    assert got["cpu"] == {("cpu", "cpu_op", name) for name in ops}
    assert got["tag cpu"] == got["cpu"]
    assert got["gpu"] and {kind for _, kind, _ in got["gpu"]} == {"kernel"}
    assert got["all"] == got["gpu"]
