"""What a catalog commit costs as the warehouse grows, and what an ingest into
a large warehouse costs.

    python benchmarks/commits.py [--traces 2000] [--add 500] [--workdir DIR]

Makes a warehouse of small traces (20 events each, each file's content its
own), ingested with `tracedb ingest` in rounds that double it (125, 250, ...
up to --traces), and after each round prints the CPU seconds of an empty
commit (`Warehouse.commit_empty`: the catalog copied, every trace's files
listed in its views again, swapped in; median of 3). Then ingests --add more
such traces into it and prints the wall and CPU seconds of that ingest
(this process's children: the CLI and its workers). A commit costs more
with every trace in the warehouse; an ingest into a large warehouse spends
that cost once per commit (ingest.COMMIT_SPACING). 10,000 traces take
about 7 minutes to make on two cores.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This checkout's tracedb, not an installed one (an editable install's may be
# another checkout's): a worktree's copy of this script measures the worktree.
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import run_measured, tracedb_cmd  # noqa: E402
from workloads import write_tiny_traces  # noqa: E402
from tracedb.warehouse import Warehouse  # noqa: E402


def ingest(wh: Path, folder: Path, run: str) -> dict:
    """`tracedb ingest` of this checkout (PYTHONPATH: the CLI's process and its workers)."""
    return run_measured(tracedb_cmd(wh, "ingest", str(folder), "--run", run), env={"PYTHONPATH": str(ROOT)})


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def commit_cpu(wh: Path, traces: int) -> float:
    """An empty commit's CPU seconds (median of 3) in a warehouse that must
    hold ``traces`` traces (else RuntimeError: a trace was not ingested)."""
    w = Warehouse(wh)
    registered = len(w.known()[0])
    if registered != traces:
        raise RuntimeError(f"{wh}: {registered} traces registered, not {traces}")
    times = []
    for _ in range(3):
        c0 = time.process_time()
        w.commit_empty()
        times.append(time.process_time() - c0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", type=int, default=2000, help="traces in the warehouse (default 2000)")
    ap.add_argument("--add", type=int, default=500, help="traces ingested into it at the end (default 500)")
    ap.add_argument("--workdir", help="where the traces and the warehouse go (default: the system's temp folder)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tracedb-commits-", dir=args.workdir))
    wh = work / "wh"
    try:
        print("| traces | commit CPU-s |")
        print("|---:|---:|")
        have, step = 0, 0
        while have < args.traces:
            target = min(args.traces, 125 << step)
            # A run per round: up to 1,000 rank files each (the ranks' names repeat across runs).
            for first in range(have, target, 1000):
                count = min(1000, target - first)
                folder = work / "traces" / f"r{first}"
                write_tiny_traces(folder, first, count)
                ingest(wh, folder, f"r{first}")
                shutil.rmtree(folder)
            have, step = target, step + 1
            print(f"| {have:,} | {commit_cpu(wh, have):.3f} |", flush=True)
        folder = work / "traces" / "added"
        write_tiny_traces(folder, args.traces, args.add)
        c0 = children_cpu()
        r = ingest(wh, folder, "added")
        print(f"\n{args.add:,} more traces into {args.traces:,}: {r['seconds']:.1f} s, "
              f"{children_cpu() - c0:.1f} CPU-s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
