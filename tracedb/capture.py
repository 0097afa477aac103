"""Capture real Kineto traces with torch.profiler (the optional ``torch`` extra).

``profile_job`` runs a small data-parallel training job on CPU with the gloo
backend, one process per rank, and writes one Chrome-trace JSON per rank,
the way PyTorch users capture them. ``python -m tracedb.capture OUT`` makes a
demo folder of runs: ``v1`` and ``v2`` (v2 has a slower ``attn`` region and
one extra op) with 2 ranks each, and ``infer/prefill`` / ``infer/decode``;
then ``inference_sweep`` times the forward passes of a small model at batch
sizes 1, 8 and 32 with ``tracedb.torch.ForwardTimer(clock="wall")`` (runs
``bs1``, ``bs8``, ``bs32``, tagged with their configuration), so that
``tracedb query latency --span forward --base bs1`` compares them.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

ATTN_SLEEP_S = 0.01  # per attn(F) iteration: v1 (slow_factor 1) 10 ms, v2 (4) 40 ms


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, out_dir: str, steps: int,
            slow_factor: int, extra_op: bool, phase: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64)
    attn_w = torch.randn(64, 64)
    sched = schedule(wait=0, warmup=1, active=steps, repeat=1)
    path = Path(out_dir) / f"rank{rank}.{phase}.json"

    def trace_ready(prof) -> None:
        prof.export_chrome_trace(str(path))

    with profile(activities=[ProfilerActivity.CPU], schedule=sched, record_shapes=True,
                 on_trace_ready=trace_ready) as prof:
        for _ in range(steps + 1):
            with record_function("attn(F)"):
                h = x
                for _ in range(slow_factor):
                    h = torch.tanh(h @ attn_w)
                    time.sleep(ATTN_SLEEP_S)  # a steady cost, so v2's slowdown stands well above noise
            if extra_op:
                with record_function("extra(F)"):
                    h = torch.nn.functional.layer_norm(h, (64,))
            if phase == "train":
                with record_function("mlp(F)"):
                    loss = model(h).pow(2).mean()
                with record_function("mlp(B)"):
                    opt.zero_grad()
                    loss.backward()
                with record_function("allreduce(B)"):
                    for p in model.parameters():
                        dist.all_reduce(p.grad)
                opt.step()
            else:
                with torch.no_grad(), record_function("forward"):
                    model(h)
                    dist.all_reduce(h)
            prof.step()
    leave_job()


def leave_job() -> None:
    """The end of a gloo rank's process, once its trace is written: wait for
    the other ranks, destroy the process group, and exit at once, without
    the interpreter's teardown. A rank of the demo capture once aborted
    after it had stopped its profiler ("terminate called without an active
    exception", SIGABRT: a C++ thread destroyed while still joinable), and
    the spawn failed the whole job; the log does not say whether in the
    barrier, the destroy or the teardown, and the teardown is the part a
    rank can leave out."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def profile_job(out_dir: str | Path, world_size: int = 2, steps: int = 3, slow_factor: int = 1,
                extra_op: bool = False, phase: str = "train") -> list[Path]:
    """Run a ``world_size``-rank gloo job under torch.profiler; returns the
    trace files (``rank<N>.<phase>.json``)."""
    import torch.multiprocessing as mp

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mp.start_processes(
        _worker, args=(world_size, _free_port(), str(out), steps, slow_factor, extra_op, phase),
        nprocs=world_size, join=True, start_method="spawn",
    )
    return sorted(out.glob(f"rank*.{phase}.json"))


def make_demo(out: str | Path, world_size: int = 2, steps: int = 3) -> Path:
    """A folder of runs to ingest: v1, v2 (slower attn, one extra op),
    infer/prefill and infer/decode."""
    out = Path(out)
    profile_job(out / "v1", world_size, steps)
    profile_job(out / "v2", world_size, steps, slow_factor=4, extra_op=True)
    profile_job(out / "infer" / "prefill", world_size, steps, phase="prefill")
    profile_job(out / "infer" / "decode", world_size, steps, phase="decode")
    return out


SWEEP_BATCH_SIZES = (1, 8, 32)


def inference_sweep(out: str | Path, batch_sizes: tuple[int, ...] = SWEEP_BATCH_SIZES,
                    passes: int = 50, warmup: int = 5) -> list[str]:
    """One run per batch size, ``bs<N>/inference/``: a Kineto trace of a few
    profiled passes (``trace_handler``) and the wall-clock latency of
    ``passes`` unprofiled ones (``ForwardTimer``), with the configuration in
    ``bs<N>/run.json``. Returns the run names."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from .torch import ForwardTimer, trace_handler

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).eval()
    runs = []
    for bs in batch_sizes:
        run = f"bs{bs}"
        config = {"batch_size": bs, "dtype": "float32", "device": "cpu", "threads": 1}
        x = torch.randn(bs, 256)
        timer = ForwardTimer(model, clock="wall")
        with torch.no_grad():
            for _ in range(warmup):
                model(x)
            with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                         on_trace_ready=trace_handler(out, run, "inference", config=config)) as prof:
                for _ in range(4):
                    model(x)
                    prof.step()
            timer.times_ms()  # the warm-up and profiled passes: not the latency measured
            for _ in range(passes):
                model(x)
        timer.write(out, run, "inference", config=config)
        timer.remove()
        runs.append(run)
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tracedb.capture", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="folder to write the demo runs into")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("Error: capturing traces needs torch: pip install 'tracedb[torch]'", file=sys.stderr)
        return 1
    make_demo(args.out, args.ranks, args.steps)
    inference_sweep(args.out)
    print(f"Wrote demo traces under {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
