"""How busy the cores are through one ingest, step by step.

    python benchmarks/timeline.py TRACE [--interval 0.25]

Ingests TRACE (a file, or a folder) into a new warehouse in a temp folder,
in this process as `tracedb ingest` would, while a thread samples the CPU
time of the process tree (its threads, and its child processes: the first
commit's, --jobs workers) every interval from /proc (Linux), and again as
each step starts and ends. The steps of a trace (parse, finalize,
summaries) and the commits of traces are marked so, however short;
"start" is this process's imports and set-up,
"other" the rest. A new warehouse's first commit runs beside the parse (in
a process or on a thread) and counts in the step it overlaps.

Prints each interval (stderr, with --verbose) and, per step, its wall
seconds, CPU seconds and the cores it kept busy on average (stdout). A step
that keeps every core busy goes faster only with less work; one below the
machine's cores has room that overlap could use. stages.py says what each
step costs alone; this says where, in the whole ingest, the cores wait.
With --jobs workers (a folder of traces), the steps run in the workers and
are not marked.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

T0 = time.perf_counter()

# This checkout's tracedb, not an installed one (an editable install's may be
# another checkout's): a worktree's copy of this script measures the worktree.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tracedb import cli  # noqa: E402  (loads neither pyarrow nor numpy)

# The process settings of `tracedb ingest` (allocators, no BLAS threads),
# before what reads them loads.
cli._settings_for_ingest()

from tracedb import api, ingest, store, summaries, warehouse  # noqa: E402

_HZ = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid``, all its threads, its children waited
    for, and the live ones: user and system."""
    def fields(p: int) -> list[str]:
        with open(f"/proc/{p}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()

    own = fields(pid)
    ticks = sum(int(own[i]) for i in (11, 12, 13, 14))
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                st = fields(int(entry.name))
            except OSError:  # gone since the listing
                continue
            if int(st[1]) == pid:
                ticks += int(st[11]) + int(st[12])
    return ticks / _HZ


class Timeline:
    """The CPU seconds of the process tree, taken every interval (a thread)
    and as each marked step starts and ends, so that a step shorter than
    the interval shows too; each sample is charged to the step under way
    (the innermost of those begun and not ended)."""

    def __init__(self) -> None:
        self.stack: list[str] = ["start"]
        self.samples: list[tuple[float, float, str]] = []  # (end, CPU seconds since the sample before, step)
        self._last = 0.0  # what this process used before (interpreter, imports) is the first sample's
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            cpu = tree_cpu(os.getpid())
            self.samples.append((time.perf_counter() - T0, cpu - self._last, self.stack[-1]))
            self._last = cpu

    def wrap(self, owner: object, attr: str, step: str) -> None:
        fn = getattr(owner, attr)

        def marked(*args, **kwargs):
            self.take()
            self.stack.append(step)
            try:
                return fn(*args, **kwargs)
            finally:
                self.take()
                self.stack.pop()

        setattr(owner, attr, marked)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("trace", type=Path, help="a trace file or a folder of them")
    ap.add_argument("--interval", type=float, default=0.25, help="seconds between samples (default 0.25)")
    ap.add_argument("--verbose", action="store_true", help="print each interval on stderr")
    args = ap.parse_args()
    timeline = Timeline()
    timeline.wrap(ingest, "_stage_while_hashing", "parse")
    timeline.wrap(store.TraceWriter, "finalize", "finalize")
    timeline.wrap(summaries.Summarizer, "compute", "summaries")
    timeline.wrap(warehouse.Warehouse, "register", "commit")
    done = threading.Event()

    def sample() -> None:
        while not done.wait(args.interval):
            timeline.take()

    timeline.take()  # "start"
    timeline.stack[0] = "other"
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with tempfile.TemporaryDirectory(prefix="tracedb-timeline-") as tmp:
        report = api.open(Path(tmp) / "wh").ingest([args.trace])
        done.set()
        sampler.join()
    timeline.take()
    at = 0.0
    steps: dict[str, list[float]] = {}
    for end, cpu, step in timeline.samples:
        wall = end - at
        at = end
        s = steps.setdefault(step, [0.0, 0.0])
        s[0] += wall
        s[1] += cpu
        if args.verbose:
            print(f"{end:6.2f} {cpu / wall:4.2f} {'#' * round(10 * cpu / wall):<25} {step}", file=sys.stderr)
    nbytes = sum(r.bytes for r in report.results)
    print(f"{args.trace}: {len(report.results)} file(s), {nbytes / 1e6:,.0f} MB in {at:.1f} s "
          f"({nbytes / 1e6 / at:.1f} MB/s), {os.cpu_count()} cores\n")
    print("| step | wall s | CPU s | cores busy |")
    print("|---|---:|---:|---:|")
    for step, (wall, cpu) in steps.items():
        print(f"| {step} | {wall:.2f} | {cpu:.2f} | {cpu / wall:.2f} |")
    total_cpu = sum(cpu for _, cpu in steps.values())
    print(f"| total | {at:.2f} | {total_cpu:.2f} | {total_cpu / at:.2f} |")


if __name__ == "__main__":
    main()
