"""The C reader alone: a trace's first pieces parsed into Arrow batches on
one thread, then on two.

    python benchmarks/reader.py TRACE [--pieces 60] [--rounds 3]

Cuts the first N pieces (4 MB each) of TRACE, then parses them all with
the C reader into record batches (``pieces._convert_c``, as the parse of
an ingest does, without the staging), on 1 and on 2 threads, each piece
once per round; prints the best round's wall and CPU seconds (this
process: user and system) and MB/s. The threads' scaling is the point: the
GIL, allocation and page faults are what two threads share.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

# This checkout's tracedb, not an installed one (an editable install's may be
# another checkout's): a worktree's copy of this script measures the worktree.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Arrow's allocator as `tracedb ingest` sets it (cli.py), before pyarrow loads.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from tracedb.parse import pieces  # noqa: E402


def run(parts: list, threads: int) -> tuple[float, float, float]:
    """Every piece parsed once, on ``threads`` threads: wall, user and system seconds."""
    shares = [parts[i::threads] for i in range(threads)]

    def work(share: list) -> None:
        for piece in share:
            pieces._convert_c(pieces._events_text(piece), piece)

    t0, c0 = time.perf_counter(), os.times()
    workers = [threading.Thread(target=work, args=(share,)) for share in shares]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    c1 = os.times()
    return time.perf_counter() - t0, c1[0] - c0[0], c1[1] - c0[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--pieces", type=int, default=60, help="how many of the first pieces (default 60)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per thread count; the best is printed")
    args = ap.parse_args()
    if pieces._fastparse is None:
        raise SystemExit("the C reader is not built (pip install -e . builds it)")
    parts = []
    for piece in pieces.Splitter(args.trace).pieces():
        parts.append(piece)
        if len(parts) == args.pieces:
            break
    mb = sum(len(p.data) for p in parts) / 1e6
    print(f"{args.trace}: {len(parts)} pieces, {mb:.0f} MB\n")
    print("| threads | s | user s | system s | MB/s | MB per CPU-s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for threads in (1, 2):
        wall, user, system = min(run(parts, threads) for _ in range(args.rounds))
        print(f"| {threads} | {wall:.2f} | {user:.2f} | {system:.2f} | {mb / wall:.0f} | {mb / (user + system):.0f} |")


if __name__ == "__main__":
    main()
