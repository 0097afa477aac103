"""Two (or more) checkouts of tracedb against each other on one trace.

    git worktree add /tmp/before <commit>     # and build its C readers:
    (cd /tmp/before && python setup.py build_ext --inplace)
    python benchmarks/ab.py TRACE --rounds 6 /tmp/before .

Each round runs `tracedb ingest TRACE` into a new warehouse once from each
checkout, in a shuffled order, so that the machine's drift falls on all of
them alike; wall time and the process tree's peak RSS are polled as
bench.py polls them, and its CPU seconds (user and system, of every process
waited for) taken from the kernel: on a shared machine whose speed drifts,
CPU seconds say more of a change in the work than wall time does. Prints each run as it ends (stderr) and the medians
(stdout). A checkout may carry environment settings: `DIR+NAME=VALUE`.
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench import checkout_cmd, run_measured


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="the trace (or folder) to ingest")
    ap.add_argument("checkouts", nargs="+", help="checkout folders, each DIR or DIR+NAME=VALUE...")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each checkout (default 5)")
    ap.add_argument("--workdir", help="where the warehouses go (default: the system's temp folder)")
    args = ap.parse_args(argv)
    runs: dict[str, list[tuple[float, float, float]]] = {c: [] for c in args.checkouts}
    for _ in range(args.rounds):
        for spec in random.sample(args.checkouts, len(args.checkouts)):
            folder, *settings = spec.split("+")
            env = {"PYTHONPATH": str(Path(folder).resolve()), **dict(s.split("=", 1) for s in settings)}
            work = Path(tempfile.mkdtemp(prefix="tracedb-ab-", dir=args.workdir))
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            try:
                r = run_measured(checkout_cmd(work / "wh", "ingest", args.trace, "--run", "ab"), env=env)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            runs[spec].append((r["seconds"], r["peak_rss_bytes"] / 2**20, cpu))
            print(f"{spec}: {r['seconds']:.2f} s, {cpu:.2f} CPU-s, peak {r['peak_rss_bytes'] / 2**20:.0f} MiB",
                  file=sys.stderr)
    print("| checkout | runs | median s | runs s | median CPU-s | median peak MiB | max peak MiB |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for spec, rs in runs.items():
        secs = sorted(s for s, _, _ in rs)
        peaks = [p for _, p, _ in rs]
        print(f"| {spec} | {len(rs)} | {statistics.median(secs):.2f} | {', '.join(f'{s:.2f}' for s in secs)} | "
              f"{statistics.median(c for _, _, c in rs):.2f} | {statistics.median(peaks):.0f} | {max(peaks):.0f} |")


if __name__ == "__main__":
    main()
