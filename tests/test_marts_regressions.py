"""regressions(base, target): a round-number fixture against a plain-Python
oracle, and two real torch.profiler traces (tests/torch_traces.py: v2 makes
one region slower and adds one op)."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracedb
import torch_traces
from conftest import write_trace
from marts_fixture import rows
from tracedb.cli import main

# op -> per-step durations (us) in v1 and v2; None: absent
OPS = {
    "steady": ([100, 100, 100, 100], [200, 200, 200, 200]),   # slower: +100%, no spread
    "fast": ([200, 200, 200, 200], [100, 100, 100, 100]),     # faster
    "noisy": ([100, 300, 100, 300], [150, 350, 150, 350]),   # +25%, but within 3 standard errors
    "tiny": ([100, 100, 100, 100], [105, 105, 105, 105]),    # +5%: under the 10% floor
    "oldop": ([50, 50, 50, 50], None),
    "newop": (None, [70, 70, 70, 70]),
}


def version_events(v: int) -> list[dict]:
    ev = []
    for k in range(4):
        o = k * 1000
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k + 1}", "pid": 1, "tid": 1,
                   "ts": o, "dur": 900})
        t = o + 10
        for name, durs in OPS.items():
            if durs[v] is None:
                continue
            ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": t, "dur": durs[v][k]})
            t += durs[v][k] + 1
    return ev


def oracle(name: str, z: float = 3, min_pct: float = 10) -> dict:
    """Status and figures for one op, from per-step samples (absent = 0)."""
    b, t = ([d or 0 for d in (OPS[name][v] or [0] * 4)] for v in (0, 1))
    if OPS[name][0] is None:
        return {"status": "new", "delta": statistics.mean(t)}
    if OPS[name][1] is None:
        return {"status": "gone", "delta": -statistics.mean(b)}
    delta = statistics.mean(t) - statistics.mean(b)
    se = math.sqrt(statistics.variance(b) / 4 + statistics.variance(t) / 4)
    flagged = abs(delta) >= min_pct / 100 * statistics.mean(b) and abs(delta) > z * se
    status = ("slower" if delta > 0 else "faster") if flagged else "same"
    return {"status": status, "delta": delta, "se": se, "pct": 100 * delta / statistics.mean(b)}


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("regr")
    for v in (0, 1):
        write_trace(root / "runs" / f"v{v + 1}" / "train" / "rank0.json", version_events(v))
    db = tracedb.open(root / "wh")
    db.ingest([root / "runs"], jobs=1)
    yield db
    db.close()


def test_regressions_fixture(fixture_db):
    got = rows(fixture_db, "SELECT * FROM regressions('v1', 'v2') WHERE kind = 'cpu_op'")
    assert {g["name"] for g in got} == set(OPS)
    for g in got:
        w = oracle(g["name"])
        assert g["status"] == w["status"], g["name"]
        assert g["delta_per_step_us"] == pytest.approx(w["delta"])
        if "se" in w:
            assert g["noise_us"] == pytest.approx(w["se"])
            assert g["change_pct"] == pytest.approx(w["pct"])
        b, t = OPS[g["name"]]
        assert (g["base_calls"], g["target_calls"]) == (4 if b else 0, 4 if t else 0)
        assert g["base_total_us"] == sum(b or [])
        assert g["target_total_us"] == sum(t or [])
        assert g["base_p50_us"] == (statistics.median(b) if b else None)
    # steps compare as one name, and are the same length in both runs
    (step,) = rows(fixture_db, "SELECT * FROM regressions('v1', 'v2') WHERE kind = 'annotation'")
    assert (step["name"], step["status"], step["base_calls"]) == ("ProfilerStep#*", "same", 4)
    # looser thresholds flag the noisy op too
    (noisy,) = rows(fixture_db, "SELECT status FROM regressions('v1', 'v2', min_change_pct := 10, noise_z := 0.5)"
                                " WHERE name = 'noisy'")
    assert noisy["status"] == "slower"


def test_regressions_sorted_by_impact_from_the_cli(fixture_db):
    res = CliRunner().invoke(main, ["-w", str(fixture_db.warehouse), "query", "regressions",
                                    "--base", "v1", "--run", "v2", "--kind", "cpu_op", "-f", "json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    impacts = [abs(r["delta_per_step_us"]) for r in got]
    assert impacts == sorted(impacts, reverse=True)
    assert got[0]["name"] in {"steady", "fast"}
    res = CliRunner().invoke(main, ["-w", str(fixture_db.warehouse), "query", "regressions", "--run", "v2"])
    assert res.exit_code == 1
    assert res.output.strip().splitlines()[-1] == "Error: regressions needs --base (the run to compare against (--base))"


@pytest.fixture(scope="module")
def torch_db(tmp_path_factory):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (pip install torch==2.13.0)")
    root = tmp_path_factory.mktemp("torch")
    subprocess.run([sys.executable, str(Path(torch_traces.__file__)), str(root / "runs")],
                   check=True, capture_output=True, timeout=300)
    db = tracedb.open(root / "wh")
    db.ingest([root / "runs"], jobs=1)
    yield db
    db.close()


def test_regressions_on_torch_traces(torch_db):
    res = CliRunner().invoke(main, ["-w", str(torch_db.warehouse), "query", "regressions",
                                    "--base", "v1", "--run", "v2", "-f", "json"])
    assert res.exit_code == 0, res.output
    got = {(r["kind"], r["name"]): r for r in json.loads(res.output)}
    slow = got[("annotation", torch_traces.SLOW_REGION)]
    assert slow["status"] == "slower"
    ratio = torch_traces.SLOW_MS["v2"] / torch_traces.SLOW_MS["v1"]
    assert slow["target_p50_us"] > 0.5 * ratio * slow["base_p50_us"]
    assert got[("cpu_op", torch_traces.ADDED_OP)]["status"] == "new"
    assert got[("cpu_op", torch_traces.ADDED_OP)]["target_calls"] == torch_traces.STEPS
    assert not [k for k, r in got.items() if r["status"] == "gone"]
    # the slowed region is what changed step time most
    top = sorted(got.values(), key=lambda r: -abs(r["delta_per_step_us"]))[:2]
    assert torch_traces.SLOW_REGION in {r["name"] for r in top}
    assert got[("annotation", "ProfilerStep#*")]["base_calls"] == torch_traces.STEPS


def test_collectives_on_torch_traces(torch_db):
    got = rows(torch_db, "SELECT run, source, collective, msg_bytes, group_size, step FROM collectives"
                         " ORDER BY run, ts_ns")
    for run in ("v1", "v2"):
        ops = [g for g in got if g["run"] == run]
        # gloo:* annotations are the ops (their c10d:: callers are not counted again)
        assert [g["collective"] for g in ops] == ["allreduce", "broadcast"] * torch_traces.STEPS
        assert all(g["source"] == "annotation" and g["msg_bytes"] == 4096 and g["group_size"] == 1 for g in ops)
        assert [g["step"] for g in ops] == [s for s in range(1, torch_traces.STEPS + 1) for _ in (0, 1)]
