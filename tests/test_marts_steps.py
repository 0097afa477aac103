"""step_times, stragglers, annotations and latency: the round-number fixture
and real traces, against tests/marts_oracle.py."""

from __future__ import annotations

import statistics
from collections import defaultdict

import pytest

import tracedb
from conftest import write_trace
from marts_fixture import STEP_US, fixture_db, ingest_corpus, rank_events, rows  # noqa: F401 (fixture)
from marts_oracle import annotation_kernels, kernels, launch_calls, ns, percentile, slices, step_at, steps

CONTROL = "hta/trace_diff/control/control.json.gz"
DEEPSEEK = "deepseek/train.json"
NCCL_DATA = "hta/nccl_parser_config/nccl_data.json.gz"



def kernels_by_step(events: list[dict]) -> dict[int, list[dict]]:
    """Kernels by the step their launch call lies in."""
    calls, ranges = launch_calls(events), steps(events)
    out: dict[int, list[dict]] = defaultdict(list)
    for k in kernels(events):
        call = calls.get(k["args"].get("correlation"))
        step = step_at(ns(call["ts"]), ranges) if call else None
        if step is not None:
            out[step].append(k)
    return out


def check_step_times(got: list[dict], events: list[dict]) -> None:
    ranges, by_step = steps(events), kernels_by_step(events)
    assert [g["step"] for g in got] == sorted(ranges)
    for g in got:
        s, e = ranges[g["step"]]
        ks = by_step.get(g["step"], [])
        assert g["step_name"] == f"ProfilerStep#{g['step']}"
        assert g["dur_us"] == pytest.approx((e - s) / 1e3)
        assert g["kernel_count"] == len(ks)
        assert g["kernel_us"] == pytest.approx(sum(ns(k["dur"]) for k in ks) / 1e3)
        if ks:
            span = max(ns(k["ts"]) + ns(k["dur"]) for k in ks) - min(ns(k["ts"]) for k in ks)
            assert g["gpu_span_us"] == pytest.approx(span / 1e3)


def test_step_times_fixture(fixture_db):
    for rank in (0, 1):
        got = rows(fixture_db, "SELECT * FROM step_times WHERE rank = ? ORDER BY step", [rank])
        check_step_times(got, rank_events(rank))
        assert [g["dur_us"] for g in got] == [STEP_US[rank][1], STEP_US[rank][2]]
        assert [g["kernel_count"] for g in got] == [6, 6]  # the orphan kernel has no launch


def test_stragglers_fixture(fixture_db):
    got = rows(fixture_db, "SELECT * FROM stragglers ORDER BY step")
    assert len(got) == 2
    for g in got:
        durs = {r: STEP_US[r][g["step"]] for r in (0, 1)}
        slowest = min(r for r in durs if durs[r] == max(durs.values()))
        median = statistics.median(durs.values())
        assert (g["rank_count"], g["slowest_rank"], g["slowest_us"]) == (2, slowest, max(durs.values()))
        assert g["median_us"] == pytest.approx(median)
        assert g["excess_us"] == pytest.approx(max(durs.values()) - median)
    assert (got[1]["slowest_rank"], got[1]["excess_us"], got[1]["excess_pct"]) == (1, 50, pytest.approx(100 * 50 / 950))
    assert got[0]["excess_us"] == 0 and got[0]["slowest_rank"] == 0  # a tie: the lowest rank


def annotation_oracle(events_by_rank: dict[int, list[dict]]) -> dict[tuple, dict]:
    """(rank or None, name) -> calls, CPU total ns, kernels and kernel ns."""
    out: dict[tuple, dict] = defaultdict(lambda: {"calls": 0, "cpu_ns": 0, "kernels": 0, "kernel_ns": 0, "durs": []})
    for rank, events in events_by_rank.items():
        for a, n, kns in annotation_kernels(events):
            for key in ((rank, a["name"]), (None, a["name"])):
                o = out[key]
                o["calls"] += 1
                o["cpu_ns"] += ns(a["dur"])
                o["kernels"] += n
                o["kernel_ns"] += kns
                o["durs"].append(ns(a["dur"]))
    return out


def check_annotations(got: list[dict], want: dict[tuple, dict], rank_of=lambda g: None) -> None:
    assert len(got) == len([k for k in want if k[0] == (rank_of(got[0]) if got else None)])
    for g in got:
        w = want[(rank_of(g), g["name"])]
        assert g["calls"] == w["calls"]
        assert g["cpu_total_us"] == pytest.approx(w["cpu_ns"] / 1e3)
        assert g["cpu_p50_us"] == pytest.approx(percentile(w["durs"], 0.5) / 1e3)
        assert g["kernel_count"] == w["kernels"]
        assert g["gpu_kernel_us"] == pytest.approx(w["kernel_ns"] / 1e3)


def test_annotations_fixture(fixture_db):
    want = annotation_oracle({r: rank_events(r) for r in (0, 1)})
    got = rows(fixture_db, "SELECT * FROM annotations")
    check_annotations(got, want)
    # mlp(B) holds the autograd thread's gemm_bwd (100 us) and the allreduce launched in it
    mlp = next(g for g in got if g["name"] == "mlp(B)")
    assert (mlp["calls"], mlp["kernel_count"], mlp["gpu_kernel_us"]) == (4, 8, 4 * 100 + 2 * 200 + 2 * 300)
    by_rank = rows(fixture_db, "SELECT * FROM annotations_by_rank WHERE rank = 1")
    check_annotations(by_rank, want, rank_of=lambda g: g["rank"])


def test_latency_fixture(fixture_db):
    steps_ = [STEP_US[r][k] for r in (0, 1) for k in (1, 2)]
    (got,) = rows(fixture_db, "SELECT * FROM latency()")
    assert (got["kind"], got["calls"], got["name_count"], got["rank_count"]) == ("annotation", 4, 2, 2)
    assert got["p50_us"] == statistics.median(steps_) == 900
    assert got["avg_us"] == pytest.approx(statistics.mean(steps_))
    assert got["p95_us"] == pytest.approx(percentile(steps_, 0.95))
    assert got["p99_us"] == pytest.approx(percentile(steps_, 0.99))
    assert (got["min_us"], got["max_us"]) == (900, 1000)
    (mm,) = rows(fixture_db, "SELECT * FROM latency(span := 'aten::mm')")
    assert (mm["kind"], mm["calls"], mm["p50_us"]) == ("cpu_op", 8, 30)
    by_rank = rows(fixture_db, "SELECT rank, calls, p50_us FROM latency_by_rank(span := 'ProfilerStep#%') ORDER BY rank")
    assert by_rank == [{"rank": 0, "calls": 2, "p50_us": 900}, {"rank": 1, "calls": 2, "p50_us": 950}]


# -- real traces --------------------------------------------------------------


@pytest.mark.parametrize("rel", [CONTROL, NCCL_DATA])
def test_latency_and_step_times_on_real_traces(tmp_path, rel):
    db, events = ingest_corpus(tmp_path, rel, "r")
    with db:
        durs = [ns(e["dur"]) / 1e3 for e in slices(events, {"user_annotation"})
                if e["name"].startswith("ProfilerStep#")]
        (lat,) = rows(db, "SELECT * FROM latency()")
        assert lat["calls"] == len(durs) >= 3
        assert lat["p50_us"] == pytest.approx(statistics.median(durs))
        assert lat["avg_us"] == pytest.approx(statistics.mean(durs))
        assert lat["max_us"] == pytest.approx(max(durs))
        check_step_times(rows(db, "SELECT * FROM step_times ORDER BY step"), events)
        nccl = [ns(e["dur"]) / 1e3 for e in slices(events, {"user_annotation"}) if e["name"].startswith("nccl:")]
        (spans,) = rows(db, "SELECT * FROM latency(span := 'nccl:%')")
        assert spans["calls"] == len(nccl)
        assert spans["p50_us"] == pytest.approx(statistics.median(nccl))


def test_annotations_deepseek(tmp_path):
    db, events = ingest_corpus(tmp_path, DEEPSEEK, "ds")
    with db:
        got = rows(db, "SELECT * FROM annotations")
    check_annotations(got, annotation_oracle({0: events}))
    by_name = {g["name"]: g for g in got}
    assert {"attn(F)", "mlp(B)", "dispatch(F)", "combine(B)"} <= set(by_name)
    # the DualPipe regions inside the step hold all of its kernels between them
    leaves = [n for n in by_name if "(" in n]
    assert sum(by_name[n]["kernel_count"] for n in leaves) == by_name["ProfilerStep#1"]["kernel_count"] == len(kernels(events))


def test_steps_written_as_cpu_ops(tmp_path):
    """Older PyTorch wrote ProfilerStep#N with cat cpu_op."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{k}", "pid": 1, "tid": 1, "ts": k * 100, "dur": 90}
          for k in (7, 8)]
    ev += [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": k * 100 + 10, "dur": 5}
           for k in (7, 8)]
    write_trace(tmp_path / "runs" / "old" / "rank0.json", ev)
    with tracedb.open(tmp_path / "wh") as db:
        db.ingest([tmp_path / "runs"], jobs=1)
        assert rows(db, "SELECT step, dur_us FROM step_times ORDER BY step") == [
            {"step": 7, "dur_us": 90}, {"step": 8, "dur_us": 90}]
        assert rows(db, "SELECT step FROM int_op_steps WHERE name = 'aten::add' ORDER BY step") == [
            {"step": 7}, {"step": 8}]


def test_step_of_ops_at_the_edges(tmp_path):
    """An op is in the step with the latest start at or before its own
    start, if that step has not ended: int_step_buckets looks it up by an
    equality join on time buckets. Steps that overlap, a step that starts
    with another (the lower number keeps the range), a gap, and a step far
    later and long (so the buckets are wide and hold several steps)."""
    step_ranges = {1: (1000, 1000), 2: (1800, 1200), 3: (3500, 500), 4: (3500, 200), 5: (1_000_000, 9_000_000)}
    ev = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1, "ts": ts, "dur": dur}
          for n, (ts, dur) in step_ranges.items()]
    times = [999, 1000, 1799.999, 1800, 1999, 2999.999, 3000, 3499, 3600, 3800, 999_999, 1_000_000, 9_999_999.999,
             10_000_000, 20_000_000]
    ev += [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 2, "ts": t, "dur": 0.5}
           for i, t in enumerate(times)]
    # a kernel's step is its launch call's
    ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 3, "ts": t, "dur": 0.5,
            "args": {"correlation": i}} for i, t in enumerate(times)]
    ev += [{"ph": "X", "cat": "kernel", "name": f"kernel{i}", "pid": 0, "tid": 7, "ts": t + 1, "dur": 0.5,
            "args": {"correlation": i, "device": 0, "stream": 7}} for i, t in enumerate(times)]

    def expected(t) -> int | None:
        started = [(ns(ts), -n) for n, (ts, _dur) in step_ranges.items() if ns(ts) <= ns(t)]
        if not started:
            return None
        n = -max(started)[1]
        ts, dur = step_ranges[n]
        return n if ns(t) < ns(ts) + ns(dur) else None

    want = [expected(t) for t in times]
    assert want == [None, 1, 1, 2, 2, 2, None, None, 3, 3, None, 5, 5, None, None]  # the rule, by hand
    write_trace(tmp_path / "runs" / "r" / "rank0.json", ev)
    with tracedb.open(tmp_path / "wh") as db:
        db.ingest([tmp_path / "runs"], jobs=1)
        # from the events (int_op_steps), and from the per-trace summaries
        ops = {r["name"]: r["step"] for r in rows(db, "SELECT name, step FROM int_op_steps")}
        sums = {r["name"]: r["step"] for r in rows(db, "SELECT name, step FROM int_op_step_sums")}
        calls = {r["correlation"]: r["step"] for r in rows(db, "SELECT correlation, step FROM int_launch_calls")}
        for got in (ops, sums):
            assert [got[f"op{i}"] for i in range(len(times))] == want
            assert [got[f"kernel{i}"] for i in range(len(times))] == want
        assert [calls[i] for i in range(len(times))] == want


def test_steps_at_both_ends_of_the_time_range(tmp_path):
    """Steps about 2^62 ns before and after zero, one of them 1,000 s long:
    the buckets' width is taken without overflowing int64."""
    t = 4_611_686_018_427_000  # µs: just under 2^62 ns
    ev = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": -t, "dur": 1000},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": t - 2000,
           "dur": 1_000_000_000},
          {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 2, "ts": -t + 10, "dur": 1},
          {"ph": "X", "cat": "cpu_op", "name": "b", "pid": 1, "tid": 2, "ts": t - 1990, "dur": 1}]
    write_trace(tmp_path / "runs" / "r" / "rank0.json", ev)
    with tracedb.open(tmp_path / "wh") as db:
        report = db.ingest([tmp_path / "runs"], jobs=1)
        assert not report.failed
        assert rows(db, "SELECT name, step FROM int_op_steps WHERE kind = 'cpu_op' ORDER BY name") == [
            {"name": "a", "step": 1}, {"name": "b", "step": 2}]
