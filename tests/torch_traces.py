"""Real PyTorch Profiler traces, made on the CPU in a few seconds: two
versions of one small training loop for the regressions tests and demos.

    python tests/torch_traces.py OUT        # OUT/v1/train/rank0.json, OUT/v2/train/rank0.json

Each version profiles STEPS steps (ProfilerStep#1..N) of: a `forward`
region (matmuls), a `slow_region` (a sleep and an add), and a gloo
all_reduce and broadcast on a one-rank process group (c10d::* ops and gloo:*
annotations, as CPU-only distributed runs record them). v2 differs from v1
in exactly two ways: `slow_region` sleeps SLOW_MS[v2] instead of
SLOW_MS[v1], and `forward` adds one op, aten::sigmoid.

Needs torch (torch==2.13.0, CPU build). Imports nothing from tracedb.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

STEPS = 5
SLOW_MS = {"v1": 2.0, "v2": 12.0}
ADDED_OP = "aten::sigmoid"
SLOW_REGION = "slow_region"


def profile_version(path: Path, version: str, steps: int = STEPS) -> Path:
    """Profile `steps` steps of the loop as `version` (v1 or v2) to path."""
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # no thread-pool wake-ups after the sleep: steadier timings
    torch.manual_seed(0)
    x = torch.randn(64, 64)
    w = torch.randn(64, 64)
    t = torch.ones(1024)
    with tempfile.TemporaryDirectory() as store:
        dist.init_process_group("gloo", init_method=f"file://{store}/store", rank=0, world_size=1)
        try:
            with profile(
                activities=[ProfilerActivity.CPU],
                record_shapes=True,
                schedule=schedule(wait=0, warmup=1, active=steps),
                on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
            ) as prof:
                for _ in range(steps + 1):
                    with record_function("forward"):
                        y = torch.relu(x @ w) @ w
                        if version == "v2":
                            y = torch.sigmoid(y)
                    with record_function(SLOW_REGION):
                        time.sleep(SLOW_MS[version] / 1e3)
                        y = y + 1
                    dist.all_reduce(t)
                    dist.broadcast(t, 0)
                    prof.step()
        finally:
            dist.destroy_process_group()
    return path


def generate(out: Path, steps: int = STEPS) -> dict[str, Path]:
    """Both versions under out/<version>/train/rank0.json."""
    return {v: profile_version(Path(out) / v / "train" / "rank0.json", v, steps) for v in SLOW_MS}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tests/torch_traces.py OUT_DIR")
    for version, p in generate(Path(sys.argv[1])).items():
        print(f"{version}\t{p}")
