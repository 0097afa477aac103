"""How long `tracedb report` takes on a warehouse of millions of events.

Two runs (v1, v2) of ``--ranks`` ranks each are made from a real Kineto
trace tiled in time (benchmarks/workloads.py: NCCL collectives, kernels,
profiler steps), ingested once, then the report of v2 against v1 is made
through the CLI, as a user would, ``--repeat`` times; the figure is the
median wall time (the process's start and Plotly's import included).

    python benchmarks/report_bench.py                          # 2 runs x 4 ranks x 500k events
    python benchmarks/report_bench.py --events-per-rank 2000000 --workdir /big/tmp
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tracedb  # noqa: E402
from workloads import DEFAULT_SOURCE, Source, tiles_for_events, write_tiled  # noqa: E402

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events-per-rank", type=int, default=500_000)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", type=Path, default=CORPUS / DEFAULT_SOURCE)
    ap.add_argument("--workdir", type=Path, default=None, help="Keep the traces and warehouse here.")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="report-bench-"))
    wh = work / "wh"
    src = Source.load(args.source)
    tiles = tiles_for_events(src, args.events_per_rank)
    db = tracedb.open(wh)
    if not (wh / "tracedb.duckdb").exists():
        for i, run in enumerate(("v1", "v2")):
            for rank in range(args.ranks):
                write_tiled(src, work / "runs" / run / f"rank{rank}.train.json", tiles, rank=rank,
                            tile_offset=i * tiles)
        start = time.perf_counter()
        db.ingest([work / "runs"], jobs=2)
        print(f"ingest: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    events = db.sql("SELECT sum(event_count) FROM traces WHERE status = 'ok'").fetchall()[0][0]
    db.close()
    out = work / "report.html"
    cmd = [sys.executable, "-m", "tracedb.cli", "-w", str(wh), "report", "--run", "v2", "--base", "v1", "-o", str(out)]
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    print(f"report of {events:,} events (2 runs x {args.ranks} ranks): median {statistics.median(times):.2f} s "
          f"of {args.repeat} (min {min(times):.2f}, max {max(times):.2f}); {out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
