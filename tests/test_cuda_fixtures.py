"""Real CUDA traces: tests/fixtures/cuda, written by torch 2.11 + CUPTI on an
NVIDIA H200 (tests/fixtures/capture_cuda.py), the only real kernel traces CI
has. The whole folder is ingested once (runs v1 and v2; phases train,
prefill, decode from the file names) and the marts are checked against
plain-Python answers over the JSON (tests/oracle.py, tests/marts_oracle.py).

What the fixtures hold: train traces with ~600-700 kernels on two streams
(the gradient norm on a side stream), HtoD/DtoH/DtoD copies and memsets, 3
ProfilerStep#N and an nccl:all_reduce CPU op but no NCCL kernel (world size
1); v2 writes attention out (extra matmul/softmax kernels); decode replays
16 steps from a CUDA graph (kernels launched by cudaGraphLaunch).
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

import tracedb
from conftest import load_json
from marts_fixture import rows
from marts_oracle import DTYPE_BYTES, gpu_busy, kernels, launch_calls, ns, overlap, slices, step_at, steps
from oracle import expected_counts, kernel_sums

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cuda"
# (run, phase) -> file, as the discover rules map them
FILES = {
    ("v1", "train"): "v1/rank0.train.json.gz",
    ("v1", "prefill"): "v1/rank0.prefill.json.gz",
    ("v1", "decode"): "v1/rank0.decode.json.gz",
    ("v2", "train"): "v2/rank0.train.json.gz",
}
KEYS = list(FILES)
IDS = [f"{r}-{p}" for r, p in KEYS]
COPY_CATS = {"gpu_memcpy", "gpu_memset"}


@cache
def doc(run: str, phase: str) -> dict:
    return load_json(FIXTURES / FILES[(run, phase)])


def events(run: str, phase: str) -> list[dict]:
    return doc(run, phase)["traceEvents"]


def base_ns(run: str, phase: str) -> int:
    """tracedb stores times shifted by the trace's baseTimeNanoseconds."""
    return int(doc(run, phase)["baseTimeNanoseconds"])


def to_ns(us: float | None) -> int | None:
    """A mart's microseconds back to integer nanoseconds."""
    return None if us is None else round(us * 1000)


def launch_step(events_: list[dict]):
    """kernel -> the profiler step holding its launch call's start (None without one)."""
    calls, ranges = launch_calls(events_), steps(events_)

    def step_of(k: dict) -> int | None:
        call = calls.get(k["args"].get("correlation"))
        return step_at(ns(call["ts"]), ranges) if call else None
    return step_of


@pytest.fixture(scope="module")
def cuda_db(tmp_path_factory):
    db = tracedb.open(tmp_path_factory.mktemp("cuda") / "wh")
    report = db.ingest([FIXTURES], jobs=1)
    assert [(r.run, r.phase, r.rank, r.status) for r in sorted(report.results, key=lambda r: r.path)] == [
        ("v1", "decode", 0, "ok"), ("v1", "prefill", 0, "ok"), ("v1", "train", 0, "ok"), ("v2", "train", 0, "ok")]
    yield db
    db.close()


def test_runs_phases_and_ranks_follow_the_discover_rules(cuda_db):
    rel = cuda_db.runs()
    got = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert [(r["run"], r["phase"], r["ranks"], r["file_count"]) for r in got] == [
        ("v1", "decode", [0], 1), ("v1", "prefill", [0], 1), ("v1", "train", [0], 1), ("v2", "train", [0], 1)]
    # the rank comes from distributedInfo (world size 1, rank 0), not the file name
    traces = rows(cuda_db, "SELECT run, phase, rank, rank_source FROM traces")
    for t in traces:
        assert t["rank"] == doc(t["run"], t["phase"])["distributedInfo"]["rank"] == 0
        assert t["rank_source"] == "distributedInfo"


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_rows_per_table(cuda_db, key):
    run, phase = key
    want = expected_counts(events(run, phase))
    for table in ("events", "flows", "counters"):
        (got,) = cuda_db.sql(f"SELECT count(*) FROM {table} WHERE run = ? AND phase = ?", [run, phase]).fetchall()[0]
        assert got == want[table], table
    assert want["flows"] > 0 and want["counters"] == 0  # ac2g / fwdbwd flows, no counter tracks


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_hotspots_kernels(cuda_db, key):
    run, phase = key
    got = {r["name"]: (r["calls"], to_ns(r["total_us"])) for r in rows(
        cuda_db, "SELECT name, calls, total_us FROM hotspots WHERE run = ? AND phase = ? AND kind = 'kernel'",
        [run, phase])}
    want = kernel_sums(events(run, phase))
    assert got == want
    assert sum(c for c, _ in want.values()) == len(kernels(events(run, phase)))


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_gpu_utilization(cuda_db, key):
    run, phase = key
    want = gpu_busy(events(run, phase))
    got = rows(cuda_db, "SELECT * FROM gpu_utilization WHERE run = ? AND phase = ?", [run, phase])
    assert {(g["device"], g["stream"]) for g in got} == set(want)
    if phase == "train":  # the main stream and the grad-norm side stream
        assert len([s for _d, s in want if s is not None]) == 2
    for g in got:
        w = want[(g["device"], g["stream"])]
        assert g["scope"] == ("device" if g["stream"] is None else "stream")
        assert (g["activity_count"], g["gap_count"]) == (w["count"], w["gap_count"])
        assert to_ns(g["busy_us"]) == w["busy_ns"]
        assert to_ns(g["span_us"]) == w["span_ns"]
        assert to_ns(g["idle_us"]) == w["span_ns"] - w["busy_ns"]
        assert to_ns(g["max_gap_us"]) == w["max_gap_ns"]
        assert g["busy_pct"] == pytest.approx(100 * w["busy_ns"] / w["span_ns"])


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_copies_and_sets(cuda_db, key):
    run, phase = key
    want: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in slices(events(run, phase), COPY_CATS):
        w = want[(e["name"], "memset" if e["cat"] == "gpu_memset" else "memcpy")]
        w[0] += 1
        w[1] += e["args"]["bytes"]
        w[2] += ns(e["dur"])
    got = {(r["name"], r["kind"]): [r["n"], r["bytes"], r["dur_ns"]] for r in rows(
        cuda_db, "SELECT name, kind, count(*) AS n, sum(bytes) AS bytes, sum(dur_ns) AS dur_ns FROM stg_memcpy"
                 " WHERE run = ? AND phase = ? GROUP BY name, kind", [run, phase])}
    assert got == dict(want)
    if phase == "train":
        assert {name.split(" (")[0] for name, _ in want} == {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD", "Memset"}


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_kernel_launches_match_every_kernel_to_its_launch(cuda_db, key):
    run, phase = key
    ev, base = events(run, phase), base_ns(run, phase)
    calls, step_of = launch_calls(ev), launch_step(ev)
    ops = {e["args"]["External id"]: e["name"] for e in slices(ev, {"cpu_op"})}
    want = []
    for k in kernels(ev):
        c = calls[k["args"]["correlation"]]  # KeyError: a kernel without its launch in the trace
        want.append((ns(k["ts"]) + base, k["args"]["correlation"], k["name"], k["args"]["stream"], c["name"],
                     ns(c["ts"]) + base, ns(k["ts"]) - ns(c["ts"]), step_of(k), ops.get(c["args"].get("External id"))))
    got = [tuple(r) for r in cuda_db.sql(
        "SELECT kernel_ts_ns, correlation, name, stream, launch_name, launch_ts_ns,"
        " CAST(round(launch_latency_us * 1000) AS BIGINT), step, cpu_op_name"
        " FROM kernel_launches WHERE run = ? AND phase = ?", [run, phase]).fetchall()]
    assert sorted(got, key=str) == sorted(want, key=str)
    assert all(w[4] is not None and w[7] is not None for w in want)  # every kernel launched inside a step
    if phase == "decode":
        graph = [w for w in want if w[4] == "cudaGraphLaunch"]
        replays = [e for e in slices(ev, {"cuda_runtime"}) if e["name"] == "cudaGraphLaunch"]
        per_replay = defaultdict(int)
        for w in graph:
            per_replay[w[1]] += 1  # the graph's kernels share their replay's correlation
        assert len(replays) == len(per_replay) == 16
        assert len(set(per_replay.values())) == 1 and min(per_replay.values()) > 1


def test_kernel_launches_mark_graph_launches(cuda_db):
    # v1 decode replays a CUDA graph: one cudaGraphLaunch starts many kernels
    ev, base = events("v1", "decode"), base_ns("v1", "decode")
    calls = launch_calls(ev)
    by_launch: dict[int, list[dict]] = defaultdict(list)
    for k in kernels(ev):
        by_launch[k["args"]["correlation"]].append(k)
    want = {}
    for corr, ks in by_launch.items():
        graph = calls[corr]["name"] == "cudaGraphLaunch"
        for pos, k in enumerate(sorted(ks, key=lambda k: ns(k["ts"])), start=1):
            want[(ns(k["ts"]) + base, corr)] = ("graph", pos) if graph else ("kernel", None)
    got = {(r[0], r[1]): (r[2], r[3]) for r in cuda_db.sql(
        "SELECT kernel_ts_ns, correlation, launch_kind, graph_position FROM kernel_launches"
        " WHERE run = 'v1' AND phase = 'decode'").fetchall()}
    assert got == want
    kinds = [w[0] for w in want.values()]
    assert (len(kinds), kinds.count("graph")) == (304, 272)
    # 16 graph launches, each with its first kernel at position 1
    assert sorted(p for _, p in want.values() if p == 1) == [1] * 16
    # the other traces launch kernel by kernel
    assert cuda_db.sql("SELECT DISTINCT launch_kind FROM kernel_launches WHERE phase <> 'decode'").fetchall() == [
        ("kernel",)]


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_step_times(cuda_db, key):
    run, phase = key
    ev, base = events(run, phase), base_ns(run, phase)
    ranges, step_of = steps(ev), launch_step(ev)
    per_step: dict[int, list[int]] = defaultdict(list)
    for k in kernels(ev):
        per_step[step_of(k)].append(ns(k["dur"]))
    got = rows(cuda_db, "SELECT * FROM step_times WHERE run = ? AND phase = ? ORDER BY step", [run, phase])
    assert [g["step"] for g in got] == sorted(ranges)
    assert len(ranges) == {"train": 3, "prefill": 3, "decode": 16}[phase]
    for g in got:
        start, end = ranges[g["step"]]
        assert (g["step_name"], g["ts_ns"], to_ns(g["dur_us"])) == (f"ProfilerStep#{g['step']}", start + base, end - start)
        assert (g["kernel_count"], to_ns(g["kernel_us"])) == (len(per_step[g["step"]]), sum(per_step[g["step"]]))


def _check_overlap(got: dict, want: dict) -> None:
    assert (got["compute_kernel_count"], got["comm_kernel_count"]) == (want["compute_kernel_count"],
                                                                       want["comm_kernel_count"])
    assert to_ns(got["compute_us"]) == want["compute_ns"]
    assert to_ns(got["comm_us"]) == want["comm_ns"]
    assert to_ns(got["overlap_us"]) == want["overlap_ns"]
    assert to_ns(got["kernel_busy_us"]) == want["kernel_ns"]
    assert to_ns(got["exposed_comm_us"]) == want["comm_ns"] - want["overlap_ns"]
    assert got["comm_hidden_pct"] == want["comm_hidden_pct"]  # None: no communication kernel


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_overlap(cuda_db, key):
    run, phase = key
    (got,) = rows(cuda_db, "SELECT * FROM overlap WHERE run = ? AND phase = ?", [run, phase])
    want = overlap(events(run, phase))
    # nccl:all_reduce is a CPU annotation here: world size 1 runs no NCCL kernel
    assert want["comm_kernel_count"] == 0 and want["compute_kernel_count"] == len(kernels(events(run, phase)))
    _check_overlap(got, want)


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_overlap_by_step(cuda_db, key):
    run, phase = key
    ev = events(run, phase)
    got = rows(cuda_db, "SELECT * FROM overlap_by_step WHERE run = ? AND phase = ? ORDER BY step NULLS LAST",
               [run, phase])
    step_of = launch_step(ev)
    assert [g["step"] for g in got] == sorted({step_of(k) for k in kernels(ev)}, key=lambda s: (s is None, s))
    for g in got:
        _check_overlap(g, overlap(ev, step=g["step"], by_step=True))


# -- regressions(v1, v2), phase train -------------------------------------------


def samples(run: str) -> dict[tuple[str, str], dict[int, list[int]]]:
    """(kind, name) -> step -> durations (ns) in the run's train trace: kernels
    by the step of their launch, CPU ops and annotations by their start;
    ProfilerStep#N as one name."""
    ev = events(run, "train")
    ranges, step_of = steps(ev), launch_step(ev)
    out: dict[tuple[str, str], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for k in kernels(ev):
        out[("kernel", k["name"])][step_of(k)].append(ns(k["dur"]))
    for kind, cat in (("cpu_op", "cpu_op"), ("annotation", "user_annotation")):
        for e in slices(ev, {cat}):
            name = "ProfilerStep#*" if re.fullmatch(r"ProfilerStep#\d+", e["name"]) else e["name"]
            out[(kind, name)][step_at(ns(e["ts"]), ranges)].append(ns(e["dur"]))
    assert not any(None in per_step for per_step in out.values())  # everything lies inside a step
    return out


def judge(b: list[int] | None, t: list[int] | None, min_pct: float = 10, z: float = 3) -> dict:
    """regressions' rule over per-step totals (a step without the name counts 0)."""
    if b is None:
        return {"status": "new", "delta": statistics.mean(t)}
    if t is None:
        return {"status": "gone", "delta": -statistics.mean(b)}
    delta = statistics.mean(t) - statistics.mean(b)
    se = math.sqrt(statistics.variance(b) / len(b) + statistics.variance(t) / len(t))
    flagged = abs(delta) >= min_pct / 100 * statistics.mean(b) and abs(delta) > z * se
    return {"status": ("slower" if delta > 0 else "faster") if flagged else "same", "delta": delta, "se": se}


def test_regressions_v1_to_v2(cuda_db):
    sv1, sv2 = samples("v1"), samples("v2")
    steps1, steps2 = sorted(steps(events("v1", "train"))), sorted(steps(events("v2", "train")))
    got = {(g["kind"], g["name"]): g for g in rows(
        cuda_db, "SELECT * FROM regressions('v1', 'v2') WHERE phase = 'train'")}
    assert set(got) == set(sv1) | set(sv2)
    for key, g in got.items():
        b = [sum(sv1[key].get(s, [])) for s in steps1] if key in sv1 else None
        t = [sum(sv2[key].get(s, [])) for s in steps2] if key in sv2 else None
        w = judge(b, t)
        assert g["status"] == w["status"], key
        assert g["delta_per_step_us"] == pytest.approx(w["delta"] / 1e3, abs=1e-6), key
        if "se" in w:
            assert g["noise_us"] == pytest.approx(w["se"] / 1e3, rel=1e-6, abs=1e-6), key
        calls = [sum(len(d) for d in s[key].values()) if key in s else 0 for s in (sv1, sv2)]
        assert [g["base_calls"], g["target_calls"]] == calls, key
        assert [to_ns(g["base_total_us"]), to_ns(g["target_total_us"])] == [sum(b or []), sum(t or [])], key
        p50 = [statistics.median(d for ds in s[key].values() for d in ds) / 1e3 if key in s else None
               for s in (sv1, sv2)]
        assert [g["base_p50_us"], g["target_p50_us"]] == pytest.approx(p50), key

    # what the unfused attention did, from the JSON: kernels only v2 runs ...
    new = {n for kind, n in set(sv2) - set(sv1) if kind == "kernel"}
    assert new and {n for (kind, n), g in got.items() if kind == "kernel" and g["status"] == "new"} == new
    assert any("softmax" in n.lower() for n in new)
    # ... (and v1's fused attention kernels are gone) ...
    gone = {n for kind, n in set(sv1) - set(sv2) if kind == "kernel"}
    assert gone and {n for (kind, n), g in got.items() if kind == "kernel" and g["status"] == "gone"} == gone
    # ... more kernel time in all (v2 over v1, summed over the 3 steps) ...
    totals = [sum(ns(k["dur"]) for k in kernels(events(run, "train"))) for run in ("v1", "v2")]
    kern = [g for (kind, _n), g in got.items() if kind == "kernel"]
    assert [to_ns(sum(g["base_total_us"] for g in kern)), to_ns(sum(g["target_total_us"] for g in kern))] == totals
    assert totals[1] > 1.2 * totals[0]
    # ... and slower attention regions and steps
    assert got[("annotation", "attn(F)")]["status"] == "slower"
    step = got[("annotation", "ProfilerStep#*")]
    assert step["status"] == "slower" and step["base_calls"] == step["target_calls"] == 3


# -- collectives: NCCL at world size 1 runs no kernel ----------------------------


def c10d_ops(run: str) -> list[tuple[dict, dict]]:
    """Each c10d::* CPU op of the run's train trace with the record_param_comms
    op nested in it (same thread, inside its range)."""
    ev = events(run, "train")
    params = [e for e in slices(ev, {"cpu_op"}) if e["name"] == "record_param_comms"]
    out = []
    for op in slices(ev, {"cpu_op"}):
        if op["name"].startswith("c10d::"):
            s, e = ns(op["ts"]), ns(op["ts"]) + ns(op["dur"])
            (p,) = [p for p in params if (p["pid"], p["tid"]) == (op["pid"], op["tid"]) and s <= ns(p["ts"]) < e]
            out.append((op, p))
    return out


@pytest.mark.parametrize("run", ["v1", "v2"])
def test_collectives_fall_back_to_the_c10d_op(cuda_db, run):
    got = rows(cuda_db, "SELECT * FROM collectives WHERE run = ? AND phase = 'train' ORDER BY ts_ns", [run])
    want = c10d_ops(run)
    ranges, world = steps(events(run, "train")), doc(run, "train")["distributedInfo"]["world_size"]
    assert len(got) == len(want) == 3  # one gradient all_reduce per step
    for g, (op, p) in zip(got, want):
        assert (g["source"], g["library"], g["name"], g["collective"]) == ("cpu_op", "c10d", op["name"], "allreduce")
        assert (g["ts_ns"], to_ns(g["dur_us"])) == (ns(op["ts"]) + base_ns(run, "train"), ns(op["dur"]))
        assert g["step"] == step_at(ns(op["ts"]), ranges)
        assert g["msg_nelems"] == max(p["args"]["In msg nelems"], p["args"]["Out msg nelems"])
        assert g["group_size"] == p["args"]["Group size"] == world == 1


def test_collectives_size_the_c10d_op_from_record_param_comms(cuda_db):
    got = rows(cuda_db, "SELECT dtype, msg_bytes FROM collectives WHERE run = 'v1' AND phase = 'train' ORDER BY ts_ns")
    want = [(p["args"]["dtype"], max(p["args"]["In msg nelems"], p["args"]["Out msg nelems"])
             * DTYPE_BYTES[p["args"]["dtype"].lower()]) for _op, p in c10d_ops("v1")]
    assert [(g["dtype"], g["msg_bytes"]) for g in got] == want


# Marts whose views key their windows and joins on run, rank and phase as
# well as file_id (docs/warehouse.md): a query's filter on run reaches the
# scans, so a query of v1 never opens v2's files.
RUN_PRUNED = ["idle_breakdown", "idle_breakdown_by_rank", "queue_length_summary", "gpu_annotations",
              "memory_bandwidth", "kernel_sequences"]


def test_a_query_of_one_run_reads_that_run_only(tmp_path):
    db = tracedb.open(tmp_path / "wh")
    db.ingest([FIXTURES], jobs=1)
    want = {mart: db.query(mart, run="v1").fetchall() for mart in RUN_PRUNED}
    v2 = [db.warehouse / db.wh.data_key("events", *trace)
          for trace in db.sql("SELECT run, rank, phase, file_id FROM traces WHERE run = 'v2'").fetchall()]
    db.close()
    assert all(want.values()) and v2
    # v2's events made unreadable: a query that opened them would fail
    for path in v2:
        path.write_bytes(b"not parquet")
    db = tracedb.open(tmp_path / "wh")
    try:
        assert {mart: db.query(mart, run="v1").fetchall() for mart in RUN_PRUNED} == want
    finally:
        db.close()
