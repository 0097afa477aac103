"""The first run: a warehouse made from real traces that ship with tracedb.

``tracedb demo [DIR]`` ingests the H200 CUDA traces kept in the repository
(``tests/fixtures/cuda``: run ``v1`` trains, prefills and decodes, ``v2``
trains with a real regression) and, when torch is installed, captures and
ingests the 2-rank CPU demo jobs of :mod:`tracedb.capture` as runs
``cpu-v1``, ``cpu-v2`` and ``cpu-infer``. It needs no network and nothing
outside the installed package.

    DIR/warehouse/   the warehouse (``tracedb -w DIR/warehouse ...``)
    DIR/runs/cpu/    the captured CPU traces (made once, kept for reruns)
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .api import TraceDB
from .discover import TraceFile, discover
from .errors import WarehouseError
from .ingest import IngestReport

# The CUDA sample runs and the prefix of the captured CPU ones.
SAMPLE_RUNS = ("v1", "v2")
CPU_PREFIX = "cpu-"


def sample_traces() -> Path:
    """The folder of CUDA sample runs: inside an installed wheel
    (``tracedb/samples/cuda``, copied there by setup.py) or in a checkout
    (``tests/fixtures/cuda``)."""
    pkg = Path(__file__).resolve().parent
    for cand in (pkg / "samples" / "cuda", pkg.parent / "tests" / "fixtures" / "cuda"):
        if all((cand / run).is_dir() for run in SAMPLE_RUNS):
            return cand
    raise WarehouseError("tracedb is installed without its sample traces (tracedb/samples/cuda)")


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


@dataclass
class Demo:
    """What ``prepare`` made: the warehouse and the runs it holds."""

    db: TraceDB
    runs: list[str]
    captured: bool
    report: IngestReport


def _captured_runs(root: Path, on_progress: Callable[[str], None]) -> Path:
    """The CPU demo runs under ``root``, captured with torch once."""
    from .capture import make_demo

    if not any(root.rglob("*.json")):
        on_progress("Capturing 2-rank CPU jobs with torch.profiler (about 20 s)")
        make_demo(root)
    return root


def prepare(folder: str | Path, capture: bool | None = None,
            on_progress: Callable[[str], None] = lambda _m: None) -> Demo:
    """Build (or bring up to date) the demo warehouse under ``folder``.

    ``capture``: also capture the CPU demo runs with torch; by default when
    torch is installed. Content already ingested is skipped, so a rerun is
    quick."""
    root = Path(folder)
    capture = torch_available() if capture is None else capture
    samples = sample_traces()
    files: list[TraceFile] = [tf for run in SAMPLE_RUNS for tf in discover([samples / run], run=run)]
    runs = list(SAMPLE_RUNS)
    if capture:
        cpu = _captured_runs(root / "runs" / "cpu", on_progress)
        for run_dir in sorted(p for p in cpu.iterdir() if p.is_dir()):
            files += discover([run_dir], run=CPU_PREFIX + run_dir.name)
            runs.append(CPU_PREFIX + run_dir.name)
    db = TraceDB(root / "warehouse")
    on_progress(f"Ingesting {len(files)} trace file(s) into {db.warehouse}")
    report = db.ingest(files=files, jobs=2)
    return Demo(db=db, runs=runs, captured=capture, report=report)
