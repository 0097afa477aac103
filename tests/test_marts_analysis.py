"""The analysis marts (docs/analysis.md) on a hand-made trace with round
numbers, the CUDA fixtures and the corpus, against tests/analysis_oracle.py."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import tracedb
from tracedb.cli import main
from analysis_oracle import (cupti_counters, gpu_annotations, gpu_intervals, idle_breakdown, kernel_sequences,
                             memory_bandwidth, memory_peaks, memory_series, memory_timeline, queue_series,
                             queue_summary, step_window)
from conftest import write_trace
from marts_fixture import ingest_corpus, rows
from test_cuda_fixtures import FIXTURES as CUDA, IDS, KEYS, base_ns
from test_cuda_fixtures import events as cuda_events


def _x(cat, name, ts, dur, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(ts, corr, name="cudaLaunchKernel", dur=5):
    return _x("cuda_runtime", name, ts, dur, 1, 1, correlation=corr)


def _gpu(name, ts, dur, corr, stream=7, cat="kernel", **args):
    return _x(cat, name, ts, dur, 0, stream, device=0, stream=stream, correlation=corr, **args)


def small_events() -> list[dict]:
    """One step of 1000 us on GPU 0, stream 7 (microseconds):

        launches  a@0  b@10  c@20  copy@400  a@700  b@710
        stream 7  a [100, 200)  b [200, 300)  c [350, 400)  copy [450, 550)
                  a [800, 900)  b [900.02, 1000)

    Gaps: b after a 0 (none), c after b 50 (launched at 20 < 300: other),
    copy after c 50 (launched at 400, not after 400: other), a after copy
    250 (launched at 700 > 550: host wait), b after a 20 ns (kernel wait).

    Stream 9, with no launch calls: Memcpy DtoH of 2 MB [100, 300) and of
    1 MB [300, 350), a memset of 500 bytes at 600 lasting 0 us.

    Annotations fwd [0, 30) (launches a, b, c) and bwd [690, 720) (a, b;
    with a GPU-side bwd [800, 1000)). Memory on GPU 0: +1000 bytes at 50,
    +3000 at 120 inside aten::empty [110, 130) (4000 allocated, 4096
    reserved: the peak), -3000 at 500.
    """
    return [
        _x("user_annotation", "ProfilerStep#1", 0, 1000, 1, 1),
        _x("user_annotation", "fwd", 0, 30, 1, 1),
        _launch(0, 1), _launch(10, 2), _launch(20, 3),
        _launch(400, 4, name="cudaMemcpyAsync"),
        _x("user_annotation", "bwd", 690, 30, 1, 1),
        _launch(700, 5), _launch(710, 6),
        _gpu("a", 100, 100, 1), _gpu("b", 200, 100, 2), _gpu("c", 350, 50, 3),
        _gpu("Memcpy HtoD (Pageable -> Device)", 450, 100, 4, cat="gpu_memcpy", bytes=1_000_000),
        _gpu("a", 800, 100, 5), _gpu("b", 900.02, 99.98, 6),
        _gpu("Memcpy DtoH (Device -> Pageable)", 100, 200, 90, stream=9, cat="gpu_memcpy", bytes=2_000_000),
        _gpu("Memcpy DtoH (Device -> Pageable)", 300, 50, 91, stream=9, cat="gpu_memcpy", bytes=1_000_000),
        _gpu("Memset (Device)", 600, 0, 92, stream=9, cat="gpu_memset", bytes=500),
        _x("gpu_user_annotation", "bwd", 800, 200, 0, 7),
        _x("cpu_op", "aten::empty", 110, 20, 1, 1),
        _memory(50, 1000, 1000, 2048), _memory(120, 3000, 4000, 4096), _memory(500, -3000, 1000, 4096),
    ]


def _memory(ts, nbytes, allocated, reserved):
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
            "args": {"Device Type": 1, "Device Id": 0, "Bytes": nbytes, "Total Allocated": allocated,
                     "Total Reserved": reserved}}


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("analysis")
    write_trace(root / "runs" / "s" / "train" / "rank0.json", small_events())
    db = tracedb.open(root / "wh")
    db.ingest([root / "runs"], jobs=1)
    yield db
    db.close()


@pytest.fixture(scope="module")
def cuda_db(tmp_path_factory):
    db = tracedb.open(tmp_path_factory.mktemp("cuda") / "wh")
    db.ingest([CUDA], jobs=1)
    yield db
    db.close()


# -- idle_breakdown -----------------------------------------------------------


def _check_idle(got: list[dict], want: dict) -> None:
    assert {(g["device"], g["stream"], g["category"]) for g in got} == set(want)
    for g in got:
        w = want[(g["device"], g["stream"], g["category"])]
        assert g["gap_count"] == w["count"]
        assert round(g["idle_us"] * 1000) == w["idle_ns"]
        assert round(g["max_gap_us"] * 1000) == w["max_ns"]
    totals = {}
    for g in got:
        totals[(g["device"], g["stream"])] = totals.get((g["device"], g["stream"]), 0) + g["idle_pct"]
    assert all(t == pytest.approx(100) for t in totals.values())


def test_idle_breakdown_small(small_db):
    got = rows(small_db, "SELECT * FROM idle_breakdown_by_rank ORDER BY stream, category")
    _check_idle(got, idle_breakdown(small_events()))
    assert [(g["stream"], g["category"], g["gap_count"], g["idle_us"]) for g in got] == [
        (7, "host_wait", 1, 250), (7, "kernel_wait", 1, 0.02), (7, "other", 2, 100), (9, "other", 1, 250)]
    agg = rows(small_db, "SELECT * FROM idle_breakdown WHERE stream = 7 ORDER BY category")
    assert [(g["category"], g["rank_count"], g["idle_us"], g["idle_pct"]) for g in agg] == [
        ("host_wait", 1, 250, pytest.approx(100 * 250 / 350.02)), ("kernel_wait", 1, 0.02, pytest.approx(100 * 0.02 / 350.02)),
        ("other", 1, 100, pytest.approx(100 * 100 / 350.02))]


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_idle_breakdown_cuda(cuda_db, key):
    run, phase = key
    got = rows(cuda_db, "SELECT * FROM idle_breakdown_by_rank WHERE run = ? AND phase = ?", [run, phase])
    want = idle_breakdown(cuda_events(run, phase))
    assert any(c == "host_wait" for _, _, c in want)
    _check_idle(got, want)


def test_idle_breakdown_corpus(tmp_path):
    db, events = ingest_corpus(tmp_path, "hta/nccl_parser_config/nccl_data.json.gz", "n")
    with db:
        _check_idle(rows(db, "SELECT * FROM idle_breakdown_by_rank"), idle_breakdown(events))


# -- queue_length -------------------------------------------------------------


def _check_queue(db, where: str, params: list, events: list[dict], resolution_us: int) -> None:
    want = queue_summary(events)
    got = rows(db, f"SELECT * FROM queue_length_summary WHERE {where}", params)
    assert {(g["device"], g["stream"]) for g in got} == set(want)
    for g in got:
        w = want[(g["device"], g["stream"])]
        assert round(g["span_us"] * 1000) == w["span_ns"]
        assert g["mean_queue_length"] == pytest.approx(w["mean"])
        assert g["max_queue_length"] == w["max"]
        assert round(g["time_at_max_us"] * 1000) == w["at_max_ns"]
        assert round(g["empty_us"] * 1000) == w["empty_ns"]
        assert g["full_queue_us"] == w["full_ns"] / 1e3
    want_series = queue_series(events, resolution_us * 1000)
    got = rows(db, f"SELECT * FROM queue_length(resolution_us := ?) WHERE {where}", [resolution_us] + params)
    assert len(got) == len(want_series)
    for g in got:
        w = want_series[(g["device"], g["stream"], round(g["bucket_start_us"] / resolution_us))]
        assert g["mean_queue_length"] == pytest.approx(w["mean"])
        assert g["max_queue_length"] == w["max"]


def test_queue_length_small(small_db):
    _check_queue(small_db, "true", [], small_events(), 100)
    # by hand: 3 launched by 20 us, a ends at 200, b at 300, c at 400; the copy
    # from 400 to 550; a and b from 700, a ends at 900, b at 1000
    (g,) = rows(small_db, "SELECT * FROM queue_length_summary")
    assert (g["span_us"], g["max_queue_length"], g["time_at_max_us"], g["empty_us"]) == (1000, 3, 180, 150)
    assert g["mean_queue_length"] == pytest.approx((10 + 2 * 10 + 3 * 180 + 2 * 100 + 100 + 150 + 10 + 2 * 190 + 100) / 1000)
    got = rows(small_db, "SELECT bucket_start_us, mean_queue_length, max_queue_length FROM queue_length(resolution_us := 500)"
                     " ORDER BY bucket_start_us")
    assert got == [
        {"bucket_start_us": 0, "mean_queue_length": pytest.approx((10 + 20 + 540 + 200 + 100 + 100) / 500),
         "max_queue_length": 3},
        {"bucket_start_us": 500, "mean_queue_length": pytest.approx((50 + 10 + 380 + 100) / 500), "max_queue_length": 2}]


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_queue_length_cuda(cuda_db, key):
    run, phase = key
    _check_queue(cuda_db, "run = ? AND phase = ?", [run, phase], cuda_events(run, phase), 1000)


def test_queue_length_through_query(cuda_db):
    got = cuda_db.query("queue_length", run="v1", phase="decode", rank=0, resolution_us=500).fetchall()
    assert len(got) == len(queue_series(cuda_events("v1", "decode"), 500_000))
    with pytest.raises(tracedb.QueryError, match="takes no --resolution-us"):
        cuda_db.query("idle_breakdown", resolution_us=5)


# -- memory_bandwidth ---------------------------------------------------------


def _check_memory(db, where: str, params: list, events: list[dict], resolution_us: int) -> None:
    want = memory_bandwidth(events)
    got = rows(db, f"SELECT * FROM memory_bandwidth_by_rank WHERE {where}", params)
    assert {g["kind"] for g in got} == set(want)
    for g in got:
        w = want[g["kind"]]
        assert (g["op_count"], g["total_bytes"], round(g["total_us"] * 1000)) == (w["count"], w["bytes"], w["dur_ns"])
        assert g["gbps"] == (pytest.approx(w["gbps"]) if w["gbps"] is not None else None)
        assert g["max_gbps"] == (pytest.approx(w["max_gbps"]) if w["max_gbps"] is not None else None)
    want_series = memory_series(events, resolution_us * 1000)
    got = rows(db, f"SELECT * FROM memory_bandwidth_series(resolution_us := ?) WHERE {where}", [resolution_us] + params)
    assert len(got) == len(want_series)
    for g in got:
        w = want_series[(g["device"], g["kind"], round(g["bucket_start_us"] / resolution_us))]
        assert g["bytes"] == pytest.approx(w)
        assert g["gbps"] == pytest.approx(w / (resolution_us * 1000))


def test_memory_bandwidth_small(small_db):
    _check_memory(small_db, "true", [], small_events(), 100)
    got = {g["kind"]: g for g in rows(small_db, "SELECT * FROM memory_bandwidth")}
    assert {k: (g["op_count"], g["total_bytes"], g["total_us"], g["gbps"], g["p50_gbps"], g["max_gbps"])
            for k, g in got.items()} == {
        "HtoD": (1, 1_000_000, 100, 10, 10, 10), "DtoH": (2, 3_000_000, 250, 12, 15, 20),
        "memset": (1, 500, 0, None, None, None)}
    series = [(g["kind"], g["bucket_start_us"], g["gbps"]) for g in rows(
        small_db, "SELECT * FROM memory_bandwidth_series(resolution_us := 100) ORDER BY bucket_start_us, kind")]
    assert series == [("DtoH", 0, 10), ("DtoH", 100, 10), ("DtoH", 200, 10), ("HtoD", 300, 5), ("HtoD", 400, 5),
                      ("memset", 500, 0.005)]


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_memory_bandwidth_cuda(cuda_db, key):
    run, phase = key
    _check_memory(cuda_db, "run = ? AND phase = ?", [run, phase], cuda_events(run, phase), 1000)
    assert cuda_db.query("memory_bandwidth", run=run, phase=phase).fetchall()


def test_memory_bandwidth_corpus(tmp_path):
    db, events = ingest_corpus(tmp_path, "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz", "a")
    with db:
        _check_memory(db, "true", [], events, 1000)


# -- kernel_sequences ---------------------------------------------------------


def _check_sequences(db, where: str, params: list, events: list[dict], k: int) -> None:
    want = kernel_sequences(events, k)
    got = rows(db, f"SELECT * FROM kernel_sequences_by_rank(k := ?) WHERE {where}", [k] + params)
    assert {(g["device"], g["stream"], tuple(g["kernel_names"])) for g in got} == set(want)
    for g in got:
        w = want[(g["device"], g["stream"], tuple(g["kernel_names"]))]
        assert g["sequence"] == " -> ".join(g["kernel_names"])
        assert g["occurrences"] == w["count"]
        assert round(g["total_us"] * 1000) == w["kernel_ns"]
        assert round(g["span_us"] * 1000) == w["span_ns"]


def test_kernel_sequences_small(small_db):
    for k in (1, 2, 3, 6):
        _check_sequences(small_db, "true", [], small_events(), k)
    got = [(g["sequence"], g["occurrences"], g["total_us"], g["span_us"]) for g in rows(
        small_db, "SELECT * FROM kernel_sequences(k := 2) ORDER BY occurrences DESC, sequence")]
    assert got == [("a -> b", 2, pytest.approx(399.98), 400), ("b -> c", 1, 150, 200), ("c -> a", 1, 150, 550)]
    assert rows(small_db, "SELECT * FROM kernel_sequences(k := 6)") == []


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_kernel_sequences_cuda(cuda_db, key):
    run, phase = key
    for k in (2, 4):
        _check_sequences(cuda_db, "run = ? AND phase = ?", [run, phase], cuda_events(run, phase), k)
    top = cuda_db.query("kernel_sequences", run=run, phase=phase, k=3, limit=1).fetchall()
    assert top and top[0][7] == max(w["count"] for w in kernel_sequences(cuda_events(run, phase), 3).values())


# -- critical_path ------------------------------------------------------------

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def path_events(k3_us: int) -> list[dict]:
    """One step [0, 1000) on thread 1 (microseconds):

        aten::mm [100, 200)   launch [150, 160) -> K1 [300, 600) on stream 7
        aten::add [250, 300)  launch [260, 270) -> K2 [600, 650) (queued behind K1)
        cudaDeviceSynchronize [400, 660)          waits for K2
        aten::relu [700, 750) launch [710, 720) -> allreduce [800, 800 + k3_us)

    By hand, the path: step 0-100, aten::mm 100-150, launch 150-300, K1
    300-600, K2 600-650, sync 650-660, step 660-700, aten::relu 700-710,
    launch 710-800, allreduce 800-(800 + k3_us).
    """
    return [
        _x("user_annotation", "ProfilerStep#1", 0, 1000, 1, 1),
        _x("cpu_op", "aten::mm", 100, 100, 1, 1), _launch(150, 1, dur=10),
        _x("cpu_op", "aten::add", 250, 50, 1, 1), _launch(260, 2, dur=10),
        _x("cuda_runtime", "cudaDeviceSynchronize", 400, 260, 1, 1),
        _x("cpu_op", "aten::relu", 700, 50, 1, 1), _launch(710, 3, dur=10),
        _gpu("K1", 300, 300, 1), _gpu("K2", 600, 50, 2), _gpu(NCCL, 800, k3_us, 3, stream=20),
    ]


@pytest.fixture(scope="module")
def path_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("path")
    write_trace(root / "runs" / "base" / "train" / "rank0.json", path_events(250))
    write_trace(root / "runs" / "target" / "train" / "rank0.json", path_events(300))
    write_trace(root / "runs" / "threads" / "train" / "rank0.json", [
        _x("user_annotation", "ProfilerStep#1", 0, 500, 1, 1),
        _x("cpu_op", "backward", 0, 400, 1, 1),
        _x("cpu_op", "autograd::engine", 100, 200, 1, 2),
        _x("cuda_runtime", "cudaLaunchKernel", 200, 10, 1, 2, correlation=1),
        _gpu("K", 250, 350, 1)])
    db = tracedb.open(root / "wh")
    db.ingest([root / "runs"], jobs=1)
    yield db
    db.close()


def _records(rel) -> list[dict]:
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def test_critical_path_small(path_db):
    got = _records(path_db.query("critical_path", run="target", rank=0, step=1))
    assert [(g["kind"], g["name"], g["offset_us"], g["dur_us"]) for g in got] == [
        ("cpu", "ProfilerStep#1", 0, 100), ("cpu", "aten::mm", 100, 50),
        ("launch", "cudaLaunchKernel", 150, 150), ("kernel", "K1", 300, 300), ("kernel", "K2", 600, 50),
        ("sync", "cudaDeviceSynchronize", 650, 10), ("cpu", "ProfilerStep#1", 660, 40),
        ("cpu", "aten::relu", 700, 10), ("launch", "cudaLaunchKernel", 710, 90), ("comm", NCCL, 800, 300)]
    assert [g["seq"] for g in got] == list(range(1, 11))
    assert got[3]["lane"] == "gpu 0/7" and got[1]["lane"] == "cpu 1/1"
    summary = {g["kind"]: (g["piece_count"], g["path_us"], g["path_pct"])
               for g in _records(path_db.query("critical_path_summary", run="target", rank=0, step=1))}
    assert summary == {"cpu": (4, 200, pytest.approx(200 / 11)), "launch": (2, 240, pytest.approx(240 / 11)),
                       "kernel": (2, 350, pytest.approx(350 / 11)), "sync": (1, 10, pytest.approx(10 / 11)),
                       "comm": (1, 300, pytest.approx(300 / 11))}
    diff = _records(path_db.query("critical_path", base="base", run="target", rank=0, step=1))
    assert (diff[0]["kind"], diff[0]["name"], diff[0]["base_us"], diff[0]["target_us"], diff[0]["change_us"],
            diff[0]["status"]) == ("comm", NCCL, 250, 300, 50, "changed")
    assert all(d["change_us"] == 0 for d in diff[1:])
    only_kernels = _records(path_db.query("critical_path", run="target", rank=0, step=1, kind="kernel"))
    assert [g["name"] for g in only_kernels] == ["K1", "K2"]


def test_critical_path_follows_the_launching_thread(path_db):
    """K is launched from thread 2 at 200 and ends at 600, after the step
    (500): the path runs back through the launch to thread 2, whose gap
    before 100 hands it to the main thread."""
    got = _records(path_db.query("critical_path", run="threads", rank=0, step=1))
    assert [(g["kind"], g["name"], g["lane"], g["offset_us"], g["dur_us"]) for g in got] == [
        ("cpu", "backward", "cpu 1/1", 0, 100), ("cpu", "autograd::engine", "cpu 1/2", 100, 100),
        ("launch", "cudaLaunchKernel", "gpu 0/7", 200, 50), ("kernel", "K", "gpu 0/7", 250, 350)]


def test_critical_path_errors(path_db):
    with pytest.raises(tracedb.QueryError, match=r"critical_path needs --step"):
        path_db.query("critical_path", run="target", rank=0)
    with pytest.raises(tracedb.QueryError, match=r"no ProfilerStep#7 in run 'target', rank 0"):
        path_db.query("critical_path", run="target", rank=0, step=7)
    with pytest.raises(tracedb.QueryError, match=r"critical_path_summary takes no --base"):
        path_db.query("critical_path_summary", run="target", rank=0, step=1, base="base")


def test_critical_path_cli(path_db):
    w = str(path_db.warehouse)
    res = CliRunner().invoke(main, ["-w", w, "views"])
    listed = {line.split()[0] for line in res.stdout.splitlines() if line.strip()}
    assert {"idle_breakdown", "queue_length", "queue_length_summary", "memory_bandwidth", "kernel_sequences",
            "critical_path", "critical_path_summary", "gpu_annotations", "memory_timeline", "memory_peak",
            "cupti_counters"} <= listed
    res = CliRunner().invoke(main, ["-w", w, "views", "critical_path"])
    assert res.exit_code == 0 and "offset_us" in res.stdout and "Piece start from the step's start" in res.stdout
    res = CliRunner().invoke(main, ["-w", w, "query", "critical_path_summary", "--run", "target", "--rank", "0",
                                    "--step", "1", "-f", "csv"])
    assert res.exit_code == 0
    got = [line.split(",")[4:7] for line in res.stdout.splitlines()[1:]]
    assert got == [["kernel", "2", "350.0"], ["comm", "1", "300.0"], ["launch", "2", "240.0"], ["cpu", "4", "200.0"],
                   ["sync", "1", "10.0"]]
    res = CliRunner().invoke(main, ["-w", w, "query", "critical_path", "--run", "target", "--rank", "0"])
    assert res.exit_code == 1
    assert res.stderr.strip() == "Error: critical_path needs --step (profiler step N (with span: the instance, from 0))"


def _check_path(db, events: list[dict], run: str, step: int, phase: str | None = None, shift_ns: int = 0,
                span: str | None = None) -> list[dict]:
    """The path covers the step's window without gap or overlap, and its GPU
    pieces are whole kernels, copies and sets of the trace (times shifted by
    the trace's baseTimeNanoseconds)."""
    got = _records(db.query("critical_path", run=run, rank=0, step=step, phase=phase, span=span))
    start, end = (t + shift_ns for t in step_window(events, step, span))
    assert got[0]["ts_ns"] == start
    ends = [g["ts_ns"] + round(g["dur_us"] * 1000) for g in got]
    assert [g["ts_ns"] for g in got[1:]] == ends[:-1]
    assert ends[-1] == end
    gpu = {(name, a + shift_ns, b + shift_ns) for name, a, b in gpu_intervals(events)}
    for g, e in zip(got, ends):
        if g["kind"] in ("kernel", "comm", "memcpy", "memset"):
            assert (g["name"], g["ts_ns"], e) in gpu
    summary = _records(db.query("critical_path_summary", run=run, rank=0, step=step, phase=phase, span=span))
    assert round(sum(s["path_us"] for s in summary) * 1000) == end - start
    return got


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_critical_path_cuda(cuda_db, key):
    run, phase = key
    got = _check_path(cuda_db, cuda_events(run, phase), run, 2, phase, base_ns(run, phase))
    assert {"cpu", "launch"} <= {g["kind"] for g in got}


@pytest.mark.parametrize("rel, kinds", [
    ("simple_add/benchmark_result_493459_1694039959_trace.json.gz", {"cpu", "launch", "sync"}),
    ("alexnet/benchmark_result_2869224_1695835535_trace.json.gz", {"cpu", "launch", "sync", "kernel", "idle"})])
def test_critical_path_corpus(tmp_path, rel, kinds):
    db, events = ingest_corpus(tmp_path, f"hta/critical_path/{rel}", "cp")
    with db:
        span = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"  # no ProfilerStep in these traces
        for instance in (0, 1):
            assert kinds <= {g["kind"] for g in _check_path(db, events, "cp", instance, span=span)}


# -- memory_timeline, memory_peak ---------------------------------------------


def _check_memory_timeline(db, events: list[dict], resolution_us: int) -> None:
    want = memory_peaks(events)
    got = rows(db, "SELECT * FROM memory_peak")
    assert {(g["device_type"], g["device"]) for g in got} == set(want)
    for g in got:
        w = want[(g["device_type"], g["device"])]
        assert (g["peak_allocated_bytes"], g["reserved_bytes"], g["peak_allocation_bytes"], g["op_name"]) == (
            w["allocated"], w["reserved"], w["bytes"], w["op"])
        assert g["max_reserved_bytes"] == w["max_reserved"]
    want_series = memory_timeline(events, resolution_us * 1000)
    got = rows(db, "SELECT * FROM memory_timeline(resolution_us := ?)", [resolution_us])
    assert len(got) == len(want_series)
    for g in got:
        w = want_series[(g["device_type"], g["device"], round(g["bucket_start_us"] / resolution_us))]
        assert (g["event_count"], g["max_allocated_bytes"], g["allocated_bytes"]) == (w["count"], w["max"], w["last"])


def test_memory_timeline_small(small_db):
    _check_memory_timeline(small_db, small_events(), 100)
    (peak,) = rows(small_db, "SELECT * FROM memory_peak")
    assert (peak["device_type"], peak["device"], peak["peak_allocated_bytes"], peak["reserved_bytes"],
            peak["op_name"], peak["step"]) == ("cuda", 0, 4000, 4096, "aten::empty", 1)
    got = [(g["bucket_start_us"], g["max_allocated_bytes"], g["allocated_bytes"]) for g in rows(
        small_db, "SELECT * FROM memory_timeline(resolution_us := 100) ORDER BY bucket_start_us")]
    assert got == [(0, 4000, 4000), (400, 1000, 1000)]


def test_memory_timeline_corpus(tmp_path):
    db, events = ingest_corpus(tmp_path, "hta/df_index_resolver/df_index_resolver.json.gz", "m")
    with db:
        _check_memory_timeline(db, events, 10_000)
        assert db.query("memory_timeline", resolution_us=10_000, rank=1).fetchall()


# -- cupti_counters -----------------------------------------------------------


def test_cupti_counters_corpus(tmp_path):
    db, events = ingest_corpus(tmp_path, "hta/cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz", "c")
    with db:
        want = cupti_counters(events)
        got = rows(db, "SELECT * FROM cupti_counters_by_rank")
        assert len(want) > 100 and len(got) == len(want)
        for g in got:
            w = want[(g["name"], g["counter"])]
            assert (g["kernel_count"], g["total_value"]) == (w["count"], pytest.approx(w["total"]))
        agg = rows(db, "SELECT name, counter, kernel_count, total_value FROM cupti_counters")
        assert {(a["name"], a["counter"]): (a["kernel_count"], a["total_value"]) for a in agg} == {
            (g["name"], g["counter"]): (g["kernel_count"], g["total_value"]) for g in got}


# -- gpu_annotations ----------------------------------------------------------


def _check_gpu_annotations(db, where: str, params: list, events: list[dict]) -> None:
    want = gpu_annotations(events)
    got = rows(db, f"SELECT * FROM gpu_annotations_by_rank WHERE {where}", params)
    assert {g["name"] for g in got} == set(want)
    for g in got:
        w = want[g["name"]]
        assert (g["calls"], round(g["cpu_us"] * 1000), round(g["gpu_us"] * 1000)) == (w["calls"], w["cpu_ns"], w["gpu_ns"])


def test_gpu_annotations_small(small_db):
    _check_gpu_annotations(small_db, "true", [], small_events())
    got = {g["name"]: (g["calls"], g["cpu_us"], g["gpu_us"], g["gpu_source"])
           for g in rows(small_db, "SELECT * FROM gpu_annotations")}
    assert got == {"ProfilerStep#1": (1, 1000, pytest.approx(549.98), "kernels"), "fwd": (1, 30, 250, "kernels"),
                   "bwd": (1, 30, 200, "gpu_annotation")}


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_gpu_annotations_cuda(cuda_db, key):
    run, phase = key
    _check_gpu_annotations(cuda_db, "run = ? AND phase = ?", [run, phase], cuda_events(run, phase))
