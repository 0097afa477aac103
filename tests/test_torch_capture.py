"""tracedb.torch on CPU: trace_handler in a real 2-process gloo job,
ForwardTimer's wall clock against numpy and the JSON it writes, and the
latency marts over what it writes."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tracedb  # noqa: E402
from conftest import load_json  # noqa: E402
from oracle import expected_counts  # noqa: E402
from tracedb.capture import _free_port, inference_sweep, leave_job  # noqa: E402
from tracedb.parse.pieces import SplitParser  # noqa: E402
from tracedb.torch import ForwardTimer, trace_handler  # noqa: E402

pytestmark = pytest.mark.slow

SLEEP_S = 0.001


class Sleepy(torch.nn.Module):
    """A forward of a known least duration, counting its calls."""

    def __init__(self, sleep_s: float = SLEEP_S):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.sleep_s = sleep_s
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        time.sleep(self.sleep_s)
        return self.linear(x)


def _gloo_worker(rank: int, world_size: int, port: int, root: str) -> None:
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    # Two cycles of warmup 1 + active 2 in six steps: two traces per rank.
    sched = schedule(wait=0, warmup=1, active=2, repeat=2)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], schedule=sched,
                                  on_trace_ready=trace_handler(root, "tp2", "train", config={"tp": world_size})) as prof:
        for _ in range(6):
            y = model(x)
            dist.all_reduce(y)
            prof.step()
    leave_job()


def test_trace_handler_in_a_gloo_job(tmp_path: Path):
    import torch.multiprocessing as mp

    root = tmp_path / "runs"
    mp.start_processes(_gloo_worker, args=(2, _free_port(), str(root)), nprocs=2, join=True, start_method="spawn")
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert written == ["tp2", "tp2/run.json", "tp2/train",
                       "tp2/train/rank0.cycle1.pt.trace.json.gz", "tp2/train/rank0.pt.trace.json.gz",
                       "tp2/train/rank1.cycle1.pt.trace.json.gz", "tp2/train/rank1.pt.trace.json.gz"]
    for path in root.rglob("*.pt.trace.json.gz"):
        assert load_json(path)["distributedInfo"]["rank"] == int(path.name[4])
    wh = tmp_path / "wh"
    db = tracedb.open(wh)
    assert not db.ingest([root], jobs=1).failed
    rows = db.sql("SELECT source_path, run, rank, phase, event_count FROM traces ORDER BY source_path").fetchall()
    assert [(Path(p).name, run, rank, phase) for p, run, rank, phase, _ in rows] == [
        ("rank0.cycle1.pt.trace.json.gz", "tp2", 0, "train"), ("rank0.pt.trace.json.gz", "tp2", 0, "train"),
        ("rank1.cycle1.pt.trace.json.gz", "tp2", 1, "train"), ("rank1.pt.trace.json.gz", "tp2", 1, "train"),
    ]
    for path, *_, count in rows:
        assert count == expected_counts(load_json(Path(path))["traceEvents"])["events"]
    run = db.runs().fetchall()
    assert [(r[0], r[1], r[2], r[3], r[4], r[-1]) for r in run] == [("tp2", "train", 2, [0, 1], 4, "tp=2")]


def test_forward_timer_wall_clock_on_cpu():
    model = Sleepy()
    timer = ForwardTimer(model, clock="auto")
    assert timer.clock == "wall"
    x = torch.randn(4, 16)
    with torch.no_grad():
        for _ in range(37):
            model(x)
    stats = timer.stats()
    times = timer.times_ms()
    assert stats["count"] == len(times) == model.calls == 37
    arr = np.array(times)
    assert stats["avg_ms"] == pytest.approx(arr.mean())
    for q in (50, 95, 99):
        assert stats[f"p{q}_ms"] == pytest.approx(np.percentile(arr, q))
    assert (stats["min_ms"], stats["max_ms"]) == (arr.min(), arr.max())
    assert arr.min() >= SLEEP_S * 1e3  # each pass holds the forward's sleep
    assert timer.times_ms() == []  # times_ms() cleared them
    # A call timed by time() (as a CUDA graph replay is) counts once, though the hooks fire inside.
    timer.time(model, x)
    assert len(timer.times_ms()) == 1 and model.calls == 38
    timer.remove()
    model(x)
    assert timer.stats() == {"count": 0}


def test_clock_choices():
    with pytest.raises(ValueError, match="clock 'cuda_event' needs a model on a CUDA device"):
        ForwardTimer(Sleepy(), clock="cuda_event")
    with pytest.raises(ValueError, match="clock must be one of"):
        ForwardTimer(Sleepy(), clock="tsc")


def test_forward_spans_ingest_as_latency(tmp_path: Path):
    from torch.profiler import ProfilerActivity, profile

    model = Sleepy()
    timer = ForwardTimer(model, clock="wall")
    x = torch.randn(4, 16)
    with torch.no_grad():
        with profile(activities=[ProfilerActivity.CPU],
                     on_trace_ready=trace_handler(tmp_path / "runs", "bs4", "inference")):
            for _ in range(3):
                model(x)
            timer.time(model, x)  # a range too, and one pass
        for _ in range(21):
            model(x)
    stats = timer.stats()
    path = timer.write(tmp_path / "runs", "bs4", config={"batch_size": 4, "compiled": False})
    assert path == tmp_path / "runs" / "bs4" / "inference" / "rank0.forward.json.gz"
    spans = load_json(path)["traceEvents"]
    assert len(spans) == stats["count"] == 25
    # on one line, read by ingest's C reader in pieces, not by the streaming parser
    assert sum(piece.count for piece in SplitParser(path).pieces()) == 25
    assert {(e["ph"], e["cat"], e["name"], e["args"]["clock"]) for e in spans} == {("X", "latency", "forward", "wall")}
    kineto = load_json(tmp_path / "runs" / "bs4" / "inference" / "rank0.pt.trace.json.gz")["traceEvents"]
    assert sum(e.get("name") == "forward" and e.get("cat") == "user_annotation" for e in kineto) == 4

    db = tracedb.open(tmp_path / "wh")
    assert not db.ingest([tmp_path / "runs"], jobs=1).failed
    rel = db.query("latency", span="forward")
    row = dict(zip(rel.columns, rel.fetchall()[0]))
    assert (row["run"], row["phase"], row["kind"], row["clock"], row["calls"]) == ("bs4", "inference", "timer", "wall", 25)
    for key in ("avg", "p50", "p95", "p99", "min", "max"):
        assert row[f"{key}_us"] / 1e3 == pytest.approx(stats[f"{key}_ms"], rel=1e-9)
    # The profiler's record_function ranges are there too, under their own clock.
    rel = db.query("latency", span="forward", kind="annotation")
    assert [(r[rel.columns.index("clock")], r[rel.columns.index("calls")]) for r in rel.fetchall()] == [("trace", 4)]
    assert db.runs().fetchall()[0][-1] == "batch_size=4 compiled=false"
    # A second write is a new file, never the first rewritten.
    model(x)
    assert timer.write(tmp_path / "runs", "bs4").name == "rank0.forward.cycle1.json.gz"


def test_compare_flags_an_injected_sleep_and_not_a_rerun(tmp_path: Path):
    """Three models timed in turn (so the machine's drift touches all alike),
    in a shuffled order each round (in a fixed order, "a" always ran right
    after the longer sleep of "slower", and a loaded CI machine once told
    the two runs of one configuration apart at p < 0.001): two of one
    configuration, one with 2 ms more sleep per forward."""
    models = {"a": Sleepy(), "a_again": Sleepy(), "slower": Sleepy(SLEEP_S + 0.002)}
    timers = {run: ForwardTimer(m, clock="wall") for run, m in models.items()}
    x = torch.randn(4, 16)
    order = random.Random(0)
    with torch.no_grad():
        for _ in range(40):
            for m in order.sample(list(models.values()), len(models)):
                m(x)
    for run, timer in timers.items():
        timer.write(tmp_path / "runs", run, config={"extra_sleep_ms": 2 if run == "slower" else 0})
    db = tracedb.open(tmp_path / "wh")
    assert not db.ingest([tmp_path / "runs"], jobs=1).failed
    rel = db.query("latency", span="forward", base="a")
    got = {r[0]: dict(zip(rel.columns, r)) for r in rel.fetchall()}
    assert (got["slower"]["is_beyond_noise"], got["slower"]["change"]) == (True, "slower")
    assert got["slower"]["p50_ratio"] > 1.5
    assert (got["a_again"]["is_beyond_noise"], got["a_again"]["change"]) == (False, "same")


def test_demo_sweep_compares_batch_sizes(tmp_path: Path):
    runs = inference_sweep(tmp_path / "runs", batch_sizes=(1, 64), passes=30)
    assert runs == ["bs1", "bs64"]
    db = tracedb.open(tmp_path / "wh")
    assert not db.ingest([tmp_path / "runs"], jobs=1).failed
    tags = dict((r[0], r[-1]) for r in db.runs().fetchall())
    assert tags == {"bs1": "batch_size=1 device=cpu dtype=float32 threads=1",
                    "bs64": "batch_size=64 device=cpu dtype=float32 threads=1"}
    rel = db.query("latency", span="forward", base="bs1")
    (row,) = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert (row["run"], row["clock"], row["calls"], row["base_calls"]) == ("bs64", "wall", 30, 30)
    assert row["change"] == "slower"
