"""From a PyTorch job into the warehouse layout (the optional ``torch`` extra).

``trace_handler(root, run, phase)`` is an ``on_trace_ready`` for
``torch.profiler.profile``: each profiler cycle becomes
``root/<run>/<phase>/rank<R>[.cycle<K>].pt.trace.json.gz``, written to a
temp file and renamed, so that ``tracedb ingest root/`` maps run, rank and
phase with no flags.

``ForwardTimer(model, clock=...)`` times every forward pass of a model the
way DeepSpeed's ``profile_model_time()`` / ``model_times()`` do:

- ``cuda_event``: a CUDA event recorded on the current stream before and
  after each forward; the elapsed time is read once both completed (polled
  without blocking after each forward, waited for only by ``times_ms()``,
  ``stats()`` and ``write()``);
- ``wall``: the device synchronized, then a monotonic nanosecond clock,
  before and after each forward;
- ``auto``: ``cuda_event`` when the model is on a CUDA device, else ``wall``.

Forward hooks do not fire while a CUDA graph replays: ``timer.time(fn,
*args)`` times such a call with the synchronized wall clock (and the hooks
leave alone the forward captured into a graph). ``write()``
turns the passes into Chrome-trace spans (``cat: "latency"``, ``args.clock``)
in the same layout, and a ``run.json`` of the run's configuration that
``tracedb ingest`` reads as the run's tags.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

import torch

from .discover import RUN_CONFIG

CLOCKS = ("cuda_event", "wall", "auto")


def current_rank() -> int:
    """torch.distributed's rank when a process group is up, else ``RANK``, else 0."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _free_path(folder: Path, stem: str, suffix: str) -> Path:
    """``stem + suffix``, or ``stem.cycle<K> + suffix`` for the first K not
    taken: a second cycle (or a restarted job) never overwrites a trace
    that may already be ingested."""
    path, k = folder / f"{stem}{suffix}", 0
    while path.exists():
        k += 1
        path = folder / f"{stem}.cycle{k}{suffix}"
    return path


def _temp_for(path: Path) -> Path:
    """A hidden temp name beside ``path`` (ingest skips dot files), with the
    same ending (torch gzips an export whose name ends in .gz)."""
    return path.with_name(f".{os.getpid()}.tmp.{path.name}")


def write_run_config(root: str | os.PathLike, run: str, config: dict[str, Any]) -> Path:
    """``root/<run>/run.json``: the run's configuration, merged into the one
    there (a key given now wins), written atomically."""
    path = Path(root) / run / RUN_CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    merged: dict[str, Any] = {}
    if path.exists():
        merged = json.loads(path.read_text(encoding="utf-8"))
    merged.update(config)
    tmp = _temp_for(path)
    tmp.write_text(json.dumps(merged, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def trace_handler(root: str | os.PathLike, run: str, phase: str = "train",
                  config: dict[str, Any] | None = None) -> Callable[[Any], None]:
    """An ``on_trace_ready`` that writes each cycle of the profiler to
    ``root/<run>/<phase>/rank<R>[.cycle<K>].pt.trace.json.gz`` (rank from
    torch.distributed, else ``RANK``, else 0) atomically; with ``config``,
    ``root/<run>/run.json`` too.

        with torch.profiler.profile(schedule=..., on_trace_ready=trace_handler("runs", "v2")) as p:
    """
    folder = Path(root) / run / phase
    if config:
        write_run_config(root, run, config)

    def handler(prof) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        path = _free_path(folder, f"rank{current_rank()}", ".pt.trace.json.gz")
        tmp = _temp_for(path)
        try:
            prof.export_chrome_trace(str(tmp))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    return handler


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


class ForwardTimer:
    """Time every forward pass of ``model`` (see the module docstring).

        timer = ForwardTimer(model, clock="auto")
        for batch in batches:
            model(batch)
        print(timer.stats())
        timer.write("runs", "bs8", config={"batch_size": 8})
    """

    def __init__(self, model: torch.nn.Module, clock: str = "auto", name: str = "forward",
                 device: torch.device | str | None = None):
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
        if device is None:
            first = next(model.parameters(), None)
            device = first.device if first is not None else torch.device("cpu")
        self.device = torch.device(device)
        if clock == "auto":
            clock = "cuda_event" if self.device.type == "cuda" else "wall"
        if clock == "cuda_event" and self.device.type != "cuda":
            raise ValueError(f"clock 'cuda_event' needs a model on a CUDA device, not {self.device}")
        self.clock = clock
        self.name = name
        # (clock, start in epoch ns, duration ns) of each finished pass.
        self._done: list[tuple[str, int, int]] = []
        # cuda_event passes whose end event may not have completed yet.
        self._pending: deque[tuple[torch.cuda.Event, torch.cuda.Event, int]] = deque()
        self._open: list[tuple[Any, int, Any]] = []  # (record_function, start, start event) per open forward
        self._timing_call = False
        self._epoch_minus_mono = time.time_ns() - time.perf_counter_ns()
        self._handles = [
            model.register_forward_pre_hook(self._before),
            model.register_forward_hook(self._after, always_call=True),
        ]

    def remove(self) -> None:
        """Take the hooks off the model."""
        for h in self._handles:
            h.remove()
        self._handles = []

    # -- the hooks ------------------------------------------------------

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elif self.device.type != "cpu":
            module = getattr(torch, self.device.type, None)
            if module is not None and hasattr(module, "synchronize"):
                module.synchronize()

    def _enter_range(self) -> Any:
        """A ``record_function(name)`` range, entered, while a profiler records; else None."""
        if not torch.autograd.profiler._is_profiler_enabled:
            return None
        rf = torch.profiler.record_function(self.name)
        rf.__enter__()
        return rf

    def _skipped(self) -> bool:
        """Inside ``time()``, or while a CUDA graph is captured (nothing runs
        then, and synchronizing would break the capture)."""
        return self._timing_call or (self.device.type == "cuda" and torch.cuda.is_current_stream_capturing())

    def _before(self, module, args) -> None:
        if self._skipped():
            return
        rf = self._enter_range()
        if self.clock == "cuda_event":
            start = torch.cuda.Event(enable_timing=True)
            start.record(torch.cuda.current_stream(self.device))
            self._open.append((rf, time.time_ns(), start))
        else:
            self._sync()
            self._open.append((rf, time.perf_counter_ns(), None))

    def _after(self, module, args, output) -> None:
        if self._skipped() or not self._open:
            return
        rf, t0, start = self._open.pop()
        if self.clock == "cuda_event":
            end = torch.cuda.Event(enable_timing=True)
            end.record(torch.cuda.current_stream(self.device))
            self._pending.append((start, end, t0))
            self._collect(block=False)
        else:
            self._sync()
            t1 = time.perf_counter_ns()
            self._done.append(("wall", t0 + self._epoch_minus_mono, t1 - t0))
        if rf is not None:
            rf.__exit__(None, None, None)

    def _collect(self, block: bool) -> None:
        """Move the completed cuda_event passes, in order, to the finished
        ones; ``block`` waits for the rest."""
        while self._pending:
            start, end, t0 = self._pending[0]
            if block:
                end.synchronize()
            elif not end.query():
                return
            self._pending.popleft()
            self._done.append(("cuda_event", t0, round(start.elapsed_time(end) * 1e6)))

    # -- CUDA graphs and other calls the hooks miss ---------------------

    def time(self, fn: Callable, *args, **kwargs):
        """Call ``fn(*args, **kwargs)`` timed with the synchronized wall
        clock (a CUDA graph's ``replay``, or a captured callable); returns
        what it returns. Hooks the call fires are not counted twice; under
        a profiler the call is a ``record_function(name)`` range too."""
        rf = self._enter_range()
        self._timing_call = True
        try:
            self._sync()
            t0 = time.perf_counter_ns()
            out = fn(*args, **kwargs)
            self._sync()
            t1 = time.perf_counter_ns()
        finally:
            self._timing_call = False
            if rf is not None:
                rf.__exit__(None, None, None)
        self._done.append(("wall", t0 + self._epoch_minus_mono, t1 - t0))
        return out

    # -- results --------------------------------------------------------

    def _take(self, clock: str | None, clear: bool) -> list[tuple[str, int, int]]:
        self._collect(block=True)
        clocks = {c for c, _, _ in self._done}
        if clock is None and len(clocks) > 1:
            raise ValueError(f"the timer holds passes of clocks {sorted(clocks)}: pass clock= to keep them apart")
        picked = [p for p in self._done if clock is None or p[0] == clock]
        if clear:
            self._done = [p for p in self._done if not (clock is None or p[0] == clock)]
        return picked

    def times_ms(self, clock: str | None = None) -> list[float]:
        """The recorded forward latencies in milliseconds, in call order;
        they are cleared (DeepSpeed's ``model_times()``)."""
        return [ns / 1e6 for _, _, ns in self._take(clock, clear=True)]

    def stats(self, clock: str | None = None) -> dict[str, float]:
        """count, avg_ms, p50_ms, p95_ms, p99_ms, min_ms, max_ms of the
        recorded passes (percentiles interpolated linearly, as numpy and the
        ``latency`` view do); the passes are kept."""
        ms = sorted(ns / 1e6 for _, _, ns in self._take(clock, clear=False))
        if not ms:
            return {"count": 0}
        return {
            "count": len(ms), "avg_ms": sum(ms) / len(ms),
            "p50_ms": _percentile(ms, 50), "p95_ms": _percentile(ms, 95), "p99_ms": _percentile(ms, 99),
            "min_ms": ms[0], "max_ms": ms[-1],
        }

    def write(self, root: str | os.PathLike, run: str, phase: str = "inference",
              config: dict[str, Any] | None = None) -> Path:
        """Write the recorded passes as Chrome-trace spans to
        ``root/<run>/<phase>/rank<R>.<name>[.cycle<K>].json.gz``, each span
        with its clock (``time()``'s passes: wall), and ``config`` to
        ``root/<run>/run.json``; then clear them. Returns the trace's path."""
        self._collect(block=True)
        passes, self._done = self._done, []
        rank = current_rank()
        base = min((t for _, t, _ in passes), default=time.time_ns())
        events = [
            {"ph": "X", "cat": "latency", "name": self.name, "pid": os.getpid(), "tid": 0,
             "ts": (t - base) / 1e3, "dur": ns / 1e3, "args": {"clock": clock, "pass": i}}
            for i, (clock, t, ns) in enumerate(passes)
        ]
        doc = {
            "traceEvents": events, "baseTimeNanoseconds": base, "displayTimeUnit": "ms",
            "distributedInfo": {"rank": rank}, "traceName": f"tracedb.torch.ForwardTimer {self.name}",
            "runConfig": config or {},
        }
        if config:
            write_run_config(root, run, config)
        folder = Path(root) / run / phase
        folder.mkdir(parents=True, exist_ok=True)
        path = _free_path(folder, f"rank{rank}.{self.name}", ".json.gz")
        tmp = _temp_for(path)
        try:
            with gzip.open(tmp, "wt", encoding="utf-8") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path
