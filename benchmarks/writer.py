"""A trace's final events file written by pyarrow's Parquet writer and by
the writer that encodes a row group's columns on Arrow's threads
(tracedb/_pqwriter.cpp), rounds alternating, in this process.

    python benchmarks/writer.py TRACE [--rounds 3]

TRACE is a trace file (ingested first into a warehouse in a temp folder)
or a published events file (``events/.../<file_id>.parquet``). Its row
groups are read into memory once; each round writes them, as finalize
does, one row group a call, with the options finalize gives both writers
(store._encodings). Prints each writer's wall and CPU seconds (the
process's, Arrow's threads included) per round and their medians, the
file sizes, and the Arrow CPU threads the threaded writer had: on more
cores it can go further below pyarrow's one-thread writer than on two.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This checkout's tracedb, not an installed one (as stages.py and timeline.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from tracedb import store  # noqa: E402
from tracedb.api import TraceDB  # noqa: E402


def events_file(trace: Path, tmp: Path) -> Path:
    if trace.suffix == ".parquet":
        return trace
    db = TraceDB(tmp / "wh")
    report = db.ingest([trace], run="bench", rank=0, jobs=1)
    if not report.ingested:
        sys.exit(f"writer.py: {trace}: not ingested ({report.summary()})")
    [path] = db.warehouse.glob("events/**/*.parquet")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if store._pqwriter is None:
        sys.exit("writer.py: tracedb/_pqwriter is not built (python setup.py build_ext --inplace)")
    with tempfile.TemporaryDirectory(prefix="tracedb-writer-") as tmp_name:
        tmp = Path(tmp_name)
        src = pq.ParquetFile(events_file(args.trace, tmp))
        groups = [src.read_row_group(i) for i in range(src.num_row_groups)]
        schema = store.FINAL_SCHEMAS["events"]
        rows = sum(g.num_rows for g in groups)
        print(f"{args.trace}: {rows:,} events in {len(groups)} row groups, {pa.cpu_count()} Arrow CPU threads",
              file=sys.stderr)
        writers = {"pyarrow": 1, "threads": 2}  # store._final_writer's ``threads``
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in writers}
        sizes: dict[str, int] = {}
        for r in range(args.rounds):
            for name, threads in (writers.items() if r % 2 == 0 else reversed(writers.items())):
                dst = tmp / f"{name}.parquet"
                w0, c0 = time.perf_counter(), time.process_time()
                with store._final_writer(dst, schema, threads) as write:
                    for g in groups:
                        write(g)
                runs[name].append((time.perf_counter() - w0, time.process_time() - c0))
                sizes[name] = dst.stat().st_size
                dst.unlink()
                print(f"round {r + 1} {name}: {runs[name][-1][0]:.2f} s, {runs[name][-1][1]:.2f} CPU-s",
                      file=sys.stderr)
    print("| writer | rounds | median s | runs s | median CPU-s | file MB |")
    print("|---|---:|---:|---|---:|---:|")
    for name, got in runs.items():
        print(f"| {name} | {len(got)} | {statistics.median(w for w, _ in got):.2f} | "
              f"{', '.join(f'{w:.2f}' for w, _ in got)} | {statistics.median(c for _, c in got):.2f} | "
              f"{sizes[name] / 1e6:.1f} |")


if __name__ == "__main__":
    main()
