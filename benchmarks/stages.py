"""Where one trace's ingest time goes: hash, parse, finalize, summaries.

    python benchmarks/stages.py TRACE [--workers 2] [--statements 3] [--as-worker]

Runs the steps of ``tracedb.ingest.ingest_file`` one after the other on a
throwaway warehouse and prints, per step, wall seconds, CPU seconds (this
process, parse threads included) and its peak RSS during the step
(Linux: /proc), then the CPU seconds of the C reader alone over the same
pieces (the part of the parse that is not Python, Arrow or staging).
bench.py measures the whole; this says which part to work on.
``--as-worker`` runs the steps as a ``--jobs`` worker runs them for one of
many rank files: the parse and finalize on one thread, its share of the
plain staging, and the summaries on one thread over a connection that has
already computed a trace's (a worker binds the library once, not per
trace). ``--statements N`` then computes
the summaries N more times over the same files and prints each statement's
median CPU seconds, largest first. ``--operators`` computes them once more
under DuckDB's profiler and prints the seconds of each kind of operator over
all the statements, then the costliest Parquet scans and what they read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This checkout's tracedb, not an installed one (an editable install's may be
# another checkout's): a worktree's copy of this script measures the worktree.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Arrow's allocator as `tracedb ingest` sets it (cli.py), before pyarrow loads.
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

from tracedb import fileid, ingest, store, summaries  # noqa: E402
from tracedb.catalog import resource_dir  # noqa: E402
from tracedb.parse import pieces  # noqa: E402
from tracedb.views import load_view_files  # noqa: E402
from tracedb.warehouse import Warehouse  # noqa: E402


def _peak_mib() -> int | None:
    """This process's peak RSS since the last reset, then reset it."""
    try:
        with open("/proc/self/status") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except (OSError, StopIteration):
        return None
    return kib // 1024


class Steps:
    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, int | None]] = []
        _peak_mib()

    def run(self, name: str, fn, *args, **kwargs):
        t0, c0 = time.perf_counter(), os.times()
        out = fn(*args, **kwargs)
        t1, c1 = time.perf_counter(), os.times()
        cpu = sum(c1[i] - c0[i] for i in range(4))  # user, system, children's user and system
        self.rows.append((name, t1 - t0, cpu, _peak_mib()))
        return out

    def table(self, nbytes: int) -> str:
        total = sum(r[1] for r in self.rows)
        lines = ["| step | s | CPU s | peak RSS MiB |", "|---|---:|---:|---:|"]
        lines += [f"| {n} | {s:.2f} | {c:.2f} | {m if m is not None else '-'} |" for n, s, c, m in self.rows]
        lines.append(f"| total | {total:.2f} | {sum(r[2] for r in self.rows):.2f} | "
                     f"{max((r[3] or 0) for r in self.rows) or '-'} |")
        lines.append(f"\n{nbytes / 1e6:.0f} MB in {total:.1f} s: {nbytes / 1e6 / total:.1f} MB/s")
        return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parse threads (default: cores)")
    ap.add_argument("--statements", type=int, default=0, metavar="N",
                    help="then compute the summaries N times more, CPU seconds per statement")
    ap.add_argument("--operators", action="store_true",
                    help="then compute the summaries once under DuckDB's profiler: seconds per operator")
    ap.add_argument("--as-worker", action="store_true",
                    help="as a --jobs worker ingests one of many rank files (one thread, a bound summarizer)")
    args = ap.parse_args()
    cores = max(1, os.cpu_count() or 1)
    threads = 1 if args.as_worker else cores
    workers = 1 if args.as_worker else args.workers
    plain_bytes = store.plain_staging_bytes() // (cores if args.as_worker else 1)
    with tempfile.TemporaryDirectory(prefix="tracedb-stages-") as tmp, contextlib.ExitStack() as stack:
        wh = Warehouse(tmp)
        steps = Steps()
        file_id = steps.run("hash", fileid.content_ids, args.trace)[0]
        # The fast path on threads, as ingest takes it for a large trace alone,
        # staging uncompressed what the kernel keeps in memory unwritten.
        # (Ingest overlaps the hash with the parse; here each is on its own.)
        meta, writer = steps.run("parse", ingest.stage, args.trace, wh, workers, plain_bytes=plain_bytes)
        writer.file_id = file_id
        steps.run("finalize", writer.finalize, meta.base_time_ns or 0, meta.json_event_count, threads=threads)
        info = json.dumps(meta.distributed_info) if meta.distributed_info is not None else None
        kwargs = dict(file_id=file_id, run="r", rank=0, phase="p", distributed_info=info)
        if args.as_worker:
            summarizer = stack.enter_context(ingest.new_summarizer(wh, threads=1))
            summarizer.compute(writer.final, writer.dir, **kwargs)  # the trace before, as it were
            summarize = (summarizer.compute, writer.final, writer.dir)
        else:
            defs = load_view_files(resource_dir("queries"))
            summarize = (summaries.compute, wh, defs, writer.final, writer.dir)
            kwargs["threads"] = threads
        steps.run("summaries", *summarize, **kwargs)
        per_statement = statements(summarize, kwargs, args.statements)
        per_operator = operators(summarize, kwargs, Path(tmp) / "profile.json") if args.operators else None
    reader = c_reader_cpu(args.trace)
    print(f"{args.trace}: {meta.event_count:,} events, {workers} parse thread(s)"
          f"{', as a --jobs worker' if args.as_worker else ''}\n")
    print(steps.table(args.trace.stat().st_size))
    if reader is not None:
        print(f"of the parse, the C reader alone: {reader:.2f} CPU s")
    if per_statement:
        print(f"\nsummaries, CPU s per statement (median of {args.statements}):")
        for cpu, sql in per_statement:
            print(f"{cpu:6.3f} {sql}")
        print(f"{sum(cpu for cpu, _ in per_statement):6.3f} all statements")
    if per_operator:
        kinds, scans = per_operator
        print("\nsummaries, seconds per kind of operator (DuckDB's profiler, threads summed):")
        for name, seconds in sorted(kinds.items(), key=lambda kv: -kv[1]):
            if seconds >= 0.005:
                print(f"{seconds:6.3f} {name}")
        print(f"\nthe {min(10, len(scans))} costliest of {len(scans)} Parquet scans (seconds, rows out, columns read):")
        for seconds, rows, columns in sorted(scans, reverse=True)[:10]:
            print(f"{seconds:6.3f} {rows:>10,} {columns}")


def c_reader_cpu(trace: Path) -> float | None:
    """CPU seconds of the C reader alone over the trace's pieces, one after
    the other; None where it is not built or declines a piece."""
    if pieces._fastparse is None:
        return None
    cpu = 0.0
    try:
        for piece in pieces.SplitParser(trace).pieces():
            c0 = os.times()
            out = pieces._fastparse.parse(pieces._events_text(piece), piece.base)
            c1 = os.times()
            if isinstance(out, str):
                return None
            cpu += c1[0] + c1[1] - c0[0] - c0[1]
    except pieces.NotSplittable:
        return None
    return cpu


_FROM_RE = re.compile(r"FROM (\w+)")


def statements(summarize: tuple, kwargs: dict, runs: int) -> list[tuple[float, str]]:
    """``summarize`` run ``runs`` times, each statement's CPU seconds timed
    (summaries._run runs them all): (median, statement and view), largest first."""
    cpu: dict[str, list[float]] = {}
    run = summaries._run

    def timed(con, sql, threads):
        c0 = os.times()
        rows = run(con, sql, threads)
        c1 = os.times()
        label = sql.split()[0] + " " + _FROM_RE.search(sql).group(1)  # CREATE or COPY, and the view
        cpu.setdefault(label, []).append(c1[0] + c1[1] - c0[0] - c0[1])
        return rows

    summaries._run = timed
    try:
        for _ in range(runs):
            summarize[0](*summarize[1:], **kwargs)
    finally:
        summaries._run = run
    return sorted(((statistics.median(v), k) for k, v in cpu.items()), reverse=True)


def operators(summarize: tuple, kwargs: dict, profile: Path) -> tuple[dict[str, float], list[tuple]]:
    """``summarize`` run once with DuckDB's profiler on for each statement:
    seconds per operator name over all of them, and each Parquet scan as
    (seconds, rows out, columns read)."""
    kinds: dict[str, float] = {}
    scans: list[tuple[float, int, str]] = []
    run = summaries._run

    def walk(node: dict) -> None:
        kinds[node["name"]] = kinds.get(node["name"], 0.0) + node.get("timing", 0.0)
        if node["name"] == "READ_PARQUET":
            columns = node.get("extra_info", {}).get("Projections", "")
            scans.append((node.get("timing", 0.0), node.get("intermediate_rows", 0),
                          ", ".join(columns) if isinstance(columns, list) else columns))
        for child in node.get("children", []):
            walk(child)

    def profiled(con, sql, threads):
        con.execute("PRAGMA enable_profiling = 'json'")
        con.execute(f"PRAGMA profiling_output = '{profile}'")
        try:
            rows = run(con, sql, threads)
        finally:
            con.execute("PRAGMA disable_profiling")
        for node in json.loads(profile.read_text())["operator"]:
            walk(node)
        return rows

    summaries._run = profiled
    try:
        summarize[0](*summarize[1:], **kwargs)
    finally:
        summaries._run = run
    return kinds, scans


if __name__ == "__main__":
    main()
