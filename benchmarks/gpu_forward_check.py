"""The GPU check of tracedb.torch (issue 25), for a machine with a CUDA device.

    python benchmarks/gpu_forward_check.py OUT

A small bf16 MLP's forwards, timed four ways over the same kind of pass:
ForwardTimer(clock="cuda_event"), ForwardTimer(clock="wall"), an
independent torch.cuda.Event pair recorded around each call by this script,
and ForwardTimer.time() around CUDA graph replays. Writes the runs
(``eager_cuda_event``, ``eager_wall``, ``graphs``, each tagged, and a Kineto
trace of the eager model by trace_handler) under OUT/runs, prints the
checks as JSON, and exits 1 when one fails:

- the cuda_event p50 is within 5% of the independent events' p50;
- the wall-clock p50 is at least the cuda_event p50;
- every graph replay was timed (count equals replays).

OUT/runs is small enough to keep as test fixtures. Not yet run: no GPU was
lent when it was written (docs/torch.md, "GPU: pending check").
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from tracedb.torch import ForwardTimer, trace_handler

PASSES = 200
WARMUP = 20


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024),
    ).to("cuda", torch.bfloat16).eval()


def main(out: Path) -> int:
    if not torch.cuda.is_available():
        print("Error: this check needs a CUDA device", file=sys.stderr)
        return 2
    root = out / "runs"
    model = _model()
    x = torch.randn(16, 1024, device="cuda", dtype=torch.bfloat16)
    base = {"dtype": "bf16", "batch_size": 16, "device": torch.cuda.get_device_name()}
    checks: dict[str, object] = {}
    with torch.no_grad():
        for _ in range(WARMUP):
            model(x)
        torch.cuda.synchronize()

        # cuda_event timer, with an independent event pair around each call.
        timer = ForwardTimer(model, clock="cuda_event")
        outer = []
        for _ in range(PASSES):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            model(x)
            b.record()
            outer.append((a, b))
        torch.cuda.synchronize()
        independent = statistics.median(a.elapsed_time(b) for a, b in outer)
        event_p50 = timer.stats()["p50_ms"]
        timer.write(root, "eager_cuda_event", config={**base, "cuda_graphs": "off", "clock": "cuda_event"})
        timer.remove()
        checks["cuda_event_p50_ms"] = event_p50
        checks["independent_event_p50_ms"] = independent
        checks["cuda_event_within_5pct"] = abs(event_p50 - independent) <= 0.05 * independent

        # wall timer over the same kind of pass; a profiled window first, by trace_handler.
        timer = ForwardTimer(model, clock="wall")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                     on_trace_ready=trace_handler(root, "eager_wall", "inference")) as prof:
            for _ in range(4):
                model(x)
                prof.step()
        timer.times_ms()
        for _ in range(PASSES):
            model(x)
        wall_p50 = timer.stats()["p50_ms"]
        timer.write(root, "eager_wall", config={**base, "cuda_graphs": "off", "clock": "wall"})
        checks["wall_p50_ms"] = wall_p50
        checks["wall_at_least_cuda_event"] = wall_p50 >= event_p50

        # CUDA graph replays: the hooks do not fire, time() does.
        static_x = x.clone()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(static_x)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(static_x)
        timer.times_ms()
        for _ in range(PASSES):
            timer.time(graph.replay)
        graph_stats = timer.stats()
        timer.write(root, "graphs", config={**base, "cuda_graphs": "on", "clock": "wall"})
        checks["graph_replays_timed"] = graph_stats["count"] == PASSES
        checks["graph_p50_ms"] = graph_stats["p50_ms"]
    print(json.dumps(checks, indent=1))
    return 0 if all(v for k, v in checks.items() if not k.endswith("_ms")) else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
