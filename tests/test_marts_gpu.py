"""overlap, overlap_by_step, gpu_utilization and kernel_launches: the
round-number fixture and real traces, against tests/marts_oracle.py."""

from __future__ import annotations

import pytest

from marts_fixture import fixture_db, ingest_corpus, rank_events, rows  # noqa: F401 (fixture)
from marts_oracle import gpu_busy, kernels, launch_calls, ns, overlap, slices, steps

CONTROL = "hta/trace_diff/control/control.json.gz"
DEEPSEEK = "deepseek/train.json"
NCCL_DATA = "hta/nccl_parser_config/nccl_data.json.gz"



def _check_overlap(got: dict, want: dict) -> None:
    assert got["compute_us"] == pytest.approx(want["compute_ns"] / 1e3)
    assert got["comm_us"] == pytest.approx(want["comm_ns"] / 1e3)
    assert got["overlap_us"] == pytest.approx(want["overlap_ns"] / 1e3)
    assert got["kernel_busy_us"] == pytest.approx(want["kernel_ns"] / 1e3)
    assert got["exposed_comm_us"] == pytest.approx((want["comm_ns"] - want["overlap_ns"]) / 1e3)
    assert got["compute_kernel_count"] == want["compute_kernel_count"]
    assert got["comm_kernel_count"] == want["comm_kernel_count"]
    if want["comm_hidden_pct"] is None:
        assert got["comm_hidden_pct"] is None
    else:
        assert got["comm_hidden_pct"] == pytest.approx(want["comm_hidden_pct"])


def test_overlap_fixture(fixture_db):
    got = rows(fixture_db, "SELECT * FROM overlap ORDER BY rank")
    assert [g["rank"] for g in got] == [0, 1]
    for g in got:
        _check_overlap(g, overlap(rank_events(g["rank"])))
    # by hand, rank 0: compute 2 x (200 + 100 + 80 + 10), comm 2 x (200 + 50 + 50),
    # overlap 2 x (30 under gemm_bwd + 30 under elementwise)
    assert (got[0]["compute_us"], got[0]["comm_us"], got[0]["overlap_us"]) == (780, 600, 120)
    assert got[0]["comm_hidden_pct"] == pytest.approx(20.0)


def test_overlap_by_step_fixture(fixture_db):
    got = rows(fixture_db, "SELECT * FROM overlap_by_step ORDER BY rank, step NULLS LAST")
    assert [(g["rank"], g["step"]) for g in got] == [(0, 1), (0, 2), (0, None), (1, 1), (1, 2), (1, None)]
    for g in got:
        _check_overlap(g, overlap(rank_events(g["rank"]), step=g["step"], by_step=True))
    # the orphan kernels (no launch in the trace) have no step
    assert got[2]["compute_kernel_count"] == 2 and got[2]["comm_us"] == 0


def test_gpu_utilization_fixture(fixture_db):
    got = rows(fixture_db, "SELECT * FROM gpu_utilization ORDER BY rank, scope, stream")
    assert len(got) == 2 * 3  # per rank: the device and streams 7 and 20
    for g in got:
        want = gpu_busy(rank_events(g["rank"]))[(g["device"], g["stream"])]
        assert g["scope"] == ("device" if g["stream"] is None else "stream")
        assert g["activity_count"] == want["count"]
        assert g["busy_us"] == pytest.approx(want["busy_ns"] / 1e3)
        assert g["span_us"] == pytest.approx(want["span_ns"] / 1e3)
        assert g["idle_us"] == pytest.approx((want["span_ns"] - want["busy_ns"]) / 1e3)
        assert g["busy_pct"] == pytest.approx(100 * want["busy_ns"] / want["span_ns"])
        assert g["gap_count"] == want["gap_count"]
        assert g["max_gap_us"] == pytest.approx(want["max_gap_ns"] / 1e3)
    # by hand, rank 0 stream 7: copy 30 + gemm 200 + gemm_bwd 100 + elementwise 80 + orphan 10, twice,
    # from 150 to 1960
    s7 = next(g for g in got if g["rank"] == 0 and g["stream"] == 7)
    assert (s7["busy_us"], s7["span_us"], s7["activity_count"]) == (840, 1810, 10)


def test_kernel_launches_fixture(fixture_db):
    got = rows(fixture_db, "SELECT * FROM kernel_launches WHERE rank = 0 ORDER BY kernel_ts_ns")
    events = rank_events(0)
    calls = launch_calls(events)
    ops = {e["args"]["External id"]: e["name"] for e in slices(events, {"cpu_op"})}
    want = sorted(kernels(events), key=lambda k: k["ts"])
    assert len(got) == len(want) == 14
    for g, k in zip(got, want):
        call = calls.get(k["args"]["correlation"])
        assert g["name"] == k["name"] and g["correlation"] == k["args"]["correlation"]
        if call is None:
            assert g["launch_name"] is None and g["launch_latency_us"] is None and g["step"] is None
            continue
        assert g["launch_name"] == call["name"]
        assert g["launch_ts_ns"] == ns(call["ts"])
        assert g["launch_latency_us"] == pytest.approx((ns(k["ts"]) - ns(call["ts"])) / 1e3)
        assert g["launch_tid"] == str(call["tid"])
        assert g["cpu_op_name"] == ops.get(call["args"]["External id"])
    gemm = got[0]
    assert (gemm["name"], gemm["launch_latency_us"], gemm["cpu_op_name"], gemm["step"]) == ("gemm", 80, "aten::mm", 1)
    # the DeepEP kernel's launch has no CPU op with its External id
    assert next(g for g in got if "dispatch" in g["name"])["cpu_op_name"] is None


# -- real traces --------------------------------------------------------------


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    db, events = ingest_corpus(tmp_path_factory.mktemp("control"), CONTROL, "control")
    yield db, events
    db.close()


def test_overlap_control_within_a_point_of_a_union_of_intervals(control):
    db, events = control
    (got,) = rows(db, "SELECT * FROM overlap")
    want = overlap(events)
    assert want["comm_kernel_count"] > 0 and want["compute_kernel_count"] > 0
    assert abs(got["comm_hidden_pct"] - want["comm_hidden_pct"]) <= 1.0
    _check_overlap(got, want)  # in fact exact


def test_overlap_by_step_control(control):
    db, events = control
    got = rows(db, "SELECT * FROM overlap_by_step WHERE step IS NOT NULL ORDER BY step")
    assert [g["step"] for g in got] == sorted(steps(events))
    for g in got:
        _check_overlap(g, overlap(events, step=g["step"], by_step=True))


def test_gpu_utilization_control(control):
    db, events = control
    want = gpu_busy(events)
    got = rows(db, "SELECT * FROM gpu_utilization")
    assert {(g["device"], g["stream"]) for g in got} == set(want)
    for g in got:
        w = want[(g["device"], g["stream"])]
        assert (g["activity_count"], g["gap_count"]) == (w["count"], w["gap_count"])
        assert g["busy_us"] == pytest.approx(w["busy_ns"] / 1e3)
        assert g["span_us"] == pytest.approx(w["span_ns"] / 1e3)
        assert g["max_gap_us"] == pytest.approx(w["max_gap_ns"] / 1e3)


@pytest.mark.parametrize("rel", [CONTROL, NCCL_DATA, DEEPSEEK, "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"])
def test_kernel_launches_match_every_kernel_to_its_launch(tmp_path, rel):
    db, events = ingest_corpus(tmp_path, rel, "r")
    with db:
        calls = launch_calls(events)
        want = {}
        for k in kernels(events):
            call = calls.get(k["args"].get("correlation"))
            want[k["args"].get("correlation")] = (call["name"], ns(k["ts"]) - ns(call["ts"])) if call else (None, None)
        got = {r["correlation"]: (r["launch_name"], r["latency_ns"]) for r in rows(
            db, "SELECT correlation, launch_name, CAST(round(launch_latency_us * 1000) AS BIGINT) AS latency_ns"
                " FROM kernel_launches")}
        assert len(got) == len(want) == len(kernels(events))
        assert got == want
        assert all(name is not None for name, _ in got.values())  # every kernel of these traces has its launch


def test_overlap_deepseek_counts_deepep_as_communication(tmp_path):
    db, events = ingest_corpus(tmp_path, DEEPSEEK, "ds")
    with db:
        (got,) = rows(db, "SELECT * FROM overlap")
        names = {r["name"] for r in rows(db, "SELECT DISTINCT name FROM collectives")}
    want = overlap(events)
    assert want["comm_kernel_count"] == 32  # DeepEP notify, dispatch and combine kernels
    assert names and all("dpsk::ep::" in n for n in names)
    _check_overlap(got, want)
    assert 90 < got["comm_hidden_pct"] < 100  # DualPipe hides nearly all of it
