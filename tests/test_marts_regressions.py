"""regressions(base, target): a round-number fixture against a plain-Python
oracle, and real torch.profiler traces (conftest's demo_runs: v2 makes one
region slower and adds one)."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracedb
from conftest import load_json, write_trace
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
def demo_db(demo_runs: Path, tmp_path_factory):
    """The torch.profiler demo (tracedb.capture): v2 = v1 with attn(F) 4x
    slower and one region added, extra(F) (aten::layer_norm)."""
    db = tracedb.open(tmp_path_factory.mktemp("demo") / "wh")
    db.ingest([demo_runs], jobs=2)
    yield db
    db.close()


def test_regressions_on_torch_traces(demo_db):
    res = CliRunner().invoke(main, ["-w", str(demo_db.warehouse), "query", "regressions",
                                    "--base", "v1", "--run", "v2", "-f", "json"])
    assert res.exit_code == 0, res.output
    got = {(r["kind"], r["name"]): r for r in json.loads(res.output)}
    slow = got[("annotation", "attn(F)")]
    assert slow["status"] == "slower", slow
    assert slow["target_p50_us"] > 2 * slow["base_p50_us"]
    for added in [("annotation", "extra(F)"), ("cpu_op", "aten::layer_norm")]:
        assert got[added]["status"] == "new" and got[added]["base_calls"] == 0
    assert not [k for k, r in got.items() if r["status"] == "gone"]
    assert got[("annotation", "ProfilerStep#*")]["base_calls"] == 2 * 3  # 2 ranks x 3 steps
    # attn(F) changed the time per step more than anything but noisy communication
    steady = [r for r in got.values() if "all_reduce" not in r["name"] and "allreduce" not in r["name"]
              and r["name"] != "ProfilerStep#*"]
    assert max(steady, key=lambda r: abs(r["delta_per_step_us"]))["name"] == "attn(F)"


def test_collectives_on_torch_traces(demo_runs: Path, demo_db):
    got = rows(demo_db, "SELECT run, rank, source, collective, dur_us, msg_bytes, group_size, busbw_gbps, step"
                        " FROM collectives WHERE phase = 'train' ORDER BY run, rank, ts_ns")
    for path in sorted(demo_runs.glob("v*/rank*.train.json")):
        doc = load_json(path)
        rank = doc["distributedInfo"]["rank"]
        gloo = sorted((e for e in doc["traceEvents"] if e.get("name") == "gloo:all_reduce"), key=lambda e: e["ts"])
        ops = [g for g in got if g["run"] == path.parent.name and g["rank"] == rank]
        # gloo:* annotations are the ops (their c10d::allreduce_ callers are not counted again)
        assert len(ops) == len(gloo) == 3 * 4  # 3 steps x 4 parameters
        for g, e in zip(ops, gloo):
            nbytes = math.prod(e["args"]["Input Dims"][0]) * 4  # float
            assert (g["source"], g["collective"], g["msg_bytes"], g["group_size"]) == ("annotation", "allreduce", nbytes, 2)
            assert g["dur_us"] == pytest.approx(float(e["dur"]))
            assert g["busbw_gbps"] == pytest.approx(nbytes / (float(e["dur"]) * 1e3) * 2 * (2 - 1) / 2)
            assert g["step"] in (1, 2, 3)


# -- time outside the profiler steps is no sample --------------------------------


def test_one_step_and_ops_outside_it_is_one_sample(tmp_path):
    # hta's distributed_info_not_found: one ProfilerStep#1009 and CPU ops outside it
    from marts_fixture import ingest_corpus

    db, events = ingest_corpus(tmp_path, "hta/distributed_info_unavailable/distributed_info_not_found.json.gz", "dinf")
    (step,) = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    start, end = step["ts"], step["ts"] + step["dur"]
    outside = [e for e in events if e.get("cat") == "cpu_op" and not start <= e["ts"] < end]
    assert step["dur"] == 75473 and outside  # ops outside the one step
    got = {(g["kind"], g["name"]): g for g in rows(db, "SELECT * FROM regressions('dinf', 'dinf')")}
    s = got[("annotation", "ProfilerStep#*")]
    assert (s["base_per_step_us"], s["target_per_step_us"], s["status"]) == (75473, 75473, "same")
    # an op only outside the step: in the totals and apart, in no sample
    by_name: dict[str, list[dict]] = {}
    for e in outside:
        by_name.setdefault(e["name"], []).append(e)
    for name, evs in by_name.items():
        if all(not start <= e["ts"] < end for e in events if e.get("cat") == "cpu_op" and e["name"] == name):
            g = got[("cpu_op", name)]
            assert g["base_outside_steps_us"] == pytest.approx(sum(e["dur"] for e in evs))
            assert g["base_total_us"] == pytest.approx(sum(e["dur"] for e in evs))
            assert g["base_per_step_us"] == 0
    db.close()


def _steady_rank(rank: int, with_item: bool) -> list[dict]:
    """5 steps of 100 us, each an aten::mm launching one kernel; with_item:
    one 3 us aten::item after the last step."""
    ev = []
    for k in range(5):
        o, c = k * 100, rank * 100 + k
        ev += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": o, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": o + 10, "dur": 50,
             "args": {"External id": c}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": o + 20, "dur": 5,
             "args": {"correlation": c, "External id": c}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": o + 40, "dur": 30,
             "args": {"correlation": c, "External id": c, "device": 0, "stream": 7}},
        ]
    if with_item:
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::item", "pid": 1, "tid": 1, "ts": 510, "dur": 3})
    return ev


def test_an_op_after_the_last_step_changes_no_step_time(tmp_path):
    for run, with_item in (("base", True), ("target", False)):
        for rank in range(8):
            write_trace(tmp_path / "runs" / run / f"rank{rank}.json", _steady_rank(rank, with_item))
    db = tracedb.open(tmp_path / "wh")
    db.ingest([tmp_path / "runs"], jobs=1)
    got = {(g["kind"], g["name"]): g for g in rows(db, "SELECT * FROM regressions('base', 'target')")}
    per_step = {("annotation", "ProfilerStep#*"): 100, ("cpu_op", "aten::mm"): 50, ("kernel", "gemm"): 30}
    for key, us in per_step.items():
        g = got[key]
        assert g["status"] == "same", key
        assert (g["base_per_step_us"], g["target_per_step_us"], g["delta_per_step_us"]) == (us, us, 0), key
        assert (g["base_calls"], g["target_calls"]) == (40, 40), key
    item = got[("cpu_op", "aten::item")]
    assert (item["status"], item["base_calls"], item["base_outside_steps_us"], item["base_per_step_us"]) == \
        ("gone", 8, 24, 0)
    db.close()
