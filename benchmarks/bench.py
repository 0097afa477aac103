"""tracedb benchmark: ingest speed and memory, query latency, warehouse size.

Makes its workloads deterministically from a real Kineto trace of the corpus
(benchmarks/workloads.py: the trace tiled in time, unique ids, Kineto's own
pretty-printing), runs them through the CLI in subprocesses, and prints a
table (``--json`` also writes the figures).

    python benchmarks/bench.py --quick                 # a couple of minutes
    python benchmarks/bench.py --workdir /big/tmp      # the issue's sizes
    python benchmarks/bench.py --smoke                 # seconds: does it work? (tests run it)

In the same run, the "afternoon baseline" (benchmarks/baseline.py:
json.load, build columns, write one Parquet file) reads the same input, so
the ratio holds on a noisy machine. Peak RSS is that of the whole process
tree (workers included), polled from /proc. After each ingest, the warehouse
must hold every event the workload was made with: a fast ingest that lost
events is not a figure (a workload of the ingest table is reported as
failed; the rank files' stops the run). The workloads the targets compare
(the 1 GiB trace, plain, gzip and on one line, and the 4 GiB trace) run in
rounds, one of each a round, so that a slow spell falls on all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from workloads import (DEFAULT_SOURCE, TINY_TRACE_EVENTS, Source, tiles_for_bytes, tiles_for_events,  # noqa: E402
                       write_tiled, write_tiny_traces)

CORPUS = ROOT.parent / "shared" / "corpus"
MARTS = ("hotspots", "comm_latency", "overlap", "regressions")


@dataclass
class Workload:
    """A row of the ingest table: a trace, or a folder of them."""

    label: str
    path: Path
    json_bytes: int
    events: int
    file_bytes: int
    baseline: bool  # run the afternoon baseline on it too


SIZES = {
    # name: big file bytes, 4x file bytes, rank files, their total events, small rank files (one tile each),
    # tiny traces (20 events each)
    "smoke": dict(big=10 << 20, huge=40 << 20, ranks=4, rank_events=160_000, small=4, tiny=8, repeats=1),
    "quick": dict(big=64 << 20, huge=256 << 20, ranks=8, rank_events=2_000_000, small=16, tiny=200, repeats=1),
    "full": dict(big=1 << 30, huge=4 << 30, ranks=128, rank_events=100_000_000, small=64, tiny=1000, repeats=3),
}


# -- measuring -------------------------------------------------------------


def _tree_rss(root: int) -> int:
    """RSS (bytes) of a process and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(d), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, ()))
    return total


def run_measured(cmd: list[str], env: dict | None = None, poll_s: float = 0.05) -> dict:
    """Run a command; wall seconds, peak RSS of its process tree, output.
    Output goes to files, not pipes: a full pipe would stall the command."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(poll_s)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{stderr[-3000:]}")
    return {"seconds": seconds, "peak_rss_bytes": peak, "stdout": stdout, "stderr": stderr}


def tracedb_cmd(wh: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tracedb.cli", "-w", str(wh), *args]


def checkout_cmd(wh: Path, *args: str) -> list[str]:
    """`tracedb` of the checkout that PYTHONPATH names (ab.py, abq.py). -P:
    without it Python puts the current folder first on its path, and run
    from inside a checkout, every side ran that checkout's code."""
    return [sys.executable, "-P", "-m", "tracedb.cli", "-w", str(wh), *args]


def check_rows(wh: Path, events: int) -> None:
    """Raise RuntimeError unless the warehouse's events, flows and counters
    hold ``events`` rows: every event the workload was made with (it has
    no B/E pairs, which would become one row each)."""
    out = run_measured(tracedb_cmd(wh, "sql", "--format", "csv", (
        "SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM flows)"
        " + (SELECT count(*) FROM counters)")))["stdout"]
    rows = int(out.splitlines()[-1])
    if rows != events:
        raise RuntimeError(f"{wh}: the warehouse holds {rows:,} rows for {events:,} events of the workload")


def drop_caches() -> bool:
    """Drop the OS page cache for a truly cold query (needs root; else False)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# -- the benchmark ---------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        mode = "smoke" if args.smoke else "quick" if args.quick else "full"
        self.size = SIZES[mode]
        self.repeats = args.repeats or self.size["repeats"]
        self.work = Path(args.workdir)
        self.results: dict = {"mode": mode, "machine": machine(),
                               "ingest": [], "scaling": [], "queries": [], "warehouse": {}}
        src = CORPUS / args.source if not Path(args.source).is_absolute() else Path(args.source)
        if not src.exists():
            sys.exit(f"bench: source trace {src} not found (the corpus lives in ../shared/corpus)")
        self.source = Source.load(src)
        self.results["source"] = str(args.source)

    def log(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def check_space(self, only: set[str] | None) -> None:
        """Room for the workloads that run (``only``; None: all)."""
        s = self.size
        # single: its four files at once, and the staging and warehouse of the largest
        need = {"single": 2.2 * s["big"] + 1.4 * s["huge"], "ranks": 300 * s["rank_events"] * 1.3,
                "small": 12e6 * s["small"], "tiny": 1e5 * s["tiny"]}
        need = sum(v for k, v in need.items() if not only or k in only)
        free = shutil.disk_usage(self.work).free
        self.log(f"workdir {self.work}: {free / 1e9:.1f} GB free, about {need / 1e9:.1f} GB needed")
        if free < need:
            sys.exit(f"bench: not enough free space in {self.work} "
                     f"({free / 1e9:.1f} GB free, {need / 1e9:.1f} GB needed); use --workdir")

    # one large trace ------------------------------------------------------

    def big_file(self, name: str, nbytes: int, gz: bool = False, one_line: bool = False) -> Path:
        path = self.work / "single" / f"{name}{'-one-line' if one_line else ''}.json{'.gz' if gz else ''}"
        tiles = tiles_for_bytes(self.source, nbytes)
        t0 = time.perf_counter()
        raw, events = write_tiled(self.source, path, tiles, gz=gz, one_line=one_line)
        self.log(f"made {path.name}: {raw / 1e6:.0f} MB JSON, {events:,} events "
                 f"({path.stat().st_size / 1e6:.0f} MB on disk) in {time.perf_counter() - t0:.0f} s")
        path.with_suffix(path.suffix + ".meta").write_text(json.dumps({"json_bytes": raw, "events": events}))
        return path

    def ingest_once(self, path: Path, events: int) -> dict:
        wh = self.work / "wh-single"
        shutil.rmtree(wh, ignore_errors=True)
        r = run_measured(tracedb_cmd(wh, "ingest", "--run", "bench", str(path)))
        r["warehouse_bytes"] = dir_bytes(wh)
        check_rows(wh, events)
        shutil.rmtree(wh, ignore_errors=True)
        return r

    def baseline_once(self, path: Path) -> dict:
        out = self.work / "baseline.parquet"
        r = run_measured([sys.executable, str(HERE / "baseline.py"), str(path), str(out)])
        out.unlink(missing_ok=True)
        return r

    def single(self, label: str, path: Path, baseline: bool) -> Workload:
        meta = json.loads(path.with_suffix(path.suffix + ".meta").read_text())
        return Workload(label, path, meta["json_bytes"], meta["events"], path.stat().st_size, baseline)

    def bench_rounds(self, workloads: list[Workload], repeats: int) -> None:
        """Ingest each workload ``repeats`` times, with its baseline before
        each ingest where asked, a round at a time: a round runs every
        workload once, so that a slow spell of a shared machine (minutes
        long) falls on all of them, not on one workload's runs. The targets
        compare workloads: .json.gz with the plain file, the 4 GiB trace with
        the 1 GiB one; run one after the other, three runs of each, a spell
        made the .json.gz 22% slower than the plain file, alternating 4%.
        The medians go in the ingest table; a workload whose warehouse lacks
        events is reported as failed, and the others go on."""
        runs: dict[str, list[tuple[dict, dict | None]]] = {w.label: [] for w in workloads}
        failed: dict[str, str] = {}
        for i in range(repeats):
            for w in workloads:
                if w.label in failed:
                    continue
                try:
                    runs[w.label].append(self._run_once(w, i))
                except RuntimeError as e:
                    self.log(f"{w.label}: failed: {str(e).strip().splitlines()[-1]}")
                    failed[w.label] = str(e)[-2000:]
        for w in workloads:
            self.results["ingest"].append(
                {"workload": w.label, "file": w.path.name, "error": failed[w.label]} if w.label in failed
                else self._entry(w, runs[w.label]))

    def _run_once(self, w: Workload, i: int) -> tuple[dict, dict | None]:
        mb = w.json_bytes / 1e6
        b = None
        if w.baseline:
            b = self.baseline_once(w.path)
            self.log(f"{w.label} baseline #{i + 1}: {b['seconds']:.1f} s, {mb / b['seconds']:.1f} MB/s, "
                     f"peak {b['peak_rss_bytes'] / 2**20:.0f} MiB")
        r = self.ingest_once(w.path, w.events)
        self.log(f"{w.label} tracedb #{i + 1}: {r['seconds']:.1f} s, {mb / r['seconds']:.1f} MB/s, "
                 f"peak {r['peak_rss_bytes'] / 2**20:.0f} MiB")
        return r, b

    @staticmethod
    def _entry(w: Workload, rows: list[tuple[dict, dict | None]]) -> dict:
        mb = w.json_bytes / 1e6
        med = lambda xs: median([x for x in xs if x is not None])  # noqa: E731
        entry = {
            "workload": w.label, "file": w.path.name, "json_mb": mb, "events": w.events,
            "file_mb": w.file_bytes / 1e6, "runs": len(rows),
            "seconds": med([r["seconds"] for r, _ in rows]),
            "peak_rss_mib": med([r["peak_rss_bytes"] / 2**20 for r, _ in rows]),
            "warehouse_mb": med([r["warehouse_bytes"] / 1e6 for r, _ in rows]),
        }
        entry["mb_per_s"] = mb / entry["seconds"]
        entry["events_per_s"] = w.events / entry["seconds"]
        if w.baseline:
            entry["baseline_seconds"] = med([b["seconds"] for _, b in rows])
            entry["baseline_mb_per_s"] = mb / entry["baseline_seconds"]
            entry["baseline_peak_rss_mib"] = med([b["peak_rss_bytes"] / 2**20 for _, b in rows])
            entry["speedup"] = entry["mb_per_s"] / entry["baseline_mb_per_s"]
        return entry

    # many small rank files -------------------------------------------------

    def bench_small(self) -> None:
        """Rank files of one tile of the source each (about 10 MB for the
        default one), as small inference captures or HTA's test traces are:
        what each trace costs besides its events shows here."""
        n = self.size["small"]
        root = self.work / "small"
        nbytes = events = 0
        for i in range(n):
            raw, ev = write_tiled(self.source, root / "v1" / f"rank-{i}.json", 1, rank=i)
            nbytes += raw
            events += ev
        label = f"{n} rank files of {nbytes / n / 1e6:.0f} MB (default --jobs)"
        self.bench_rounds([Workload(label, root, nbytes, events, nbytes, False)], self.repeats)
        if not self.args.keep:
            shutil.rmtree(root, ignore_errors=True)

    # a thousand-rank job's tiny traces ---------------------------------------

    def bench_tiny(self) -> None:
        """Traces of 20 events, one a rank (a ForwardTimer's spans, a test's
        trace): all they cost is what a trace costs besides its events."""
        n = self.size["tiny"]
        root = self.work / "tiny"
        shutil.rmtree(root, ignore_errors=True)  # what a --keep run left: made again
        nbytes = write_tiny_traces(root / "v1", 0, n)
        self.bench_rounds([Workload(f"{n} traces of {TINY_TRACE_EVENTS} events (default --jobs)", root, nbytes,
                                    n * TINY_TRACE_EVENTS, nbytes, False)], self.repeats)
        if not self.args.keep:
            shutil.rmtree(root, ignore_errors=True)

    # many rank files -------------------------------------------------------

    def rank_files(self) -> tuple[Path, int, dict[Path, int]]:
        """Two runs (v1, v2) of ranks/2 rank files each, rank_events in all;
        returns their folder, JSON bytes and events per file."""
        root = self.work / "ranks"
        n = self.size["ranks"]
        per_file = self.size["rank_events"] // n
        tiles = tiles_for_events(self.source, per_file)
        total_bytes = 0
        events: dict[Path, int] = {}
        t0 = time.perf_counter()
        for i in range(n):
            run, rank = ("v1", i) if i < n // 2 else ("v2", i - n // 2)
            # v2 is v1 a little later in time (other ids, other steps)
            path = root / run / f"rank-{rank}.json"
            if self.args.reuse and path.exists():  # made by an earlier run with --keep
                raw = path.stat().st_size
                ev = len(self.source.meta_events) + tiles * len(self.source.body_events)
            else:
                raw, ev = write_tiled(self.source, path, tiles, rank=rank,
                                      tile_offset=(tiles if run == "v2" else 0))
            total_bytes += raw
            events[path] = ev
        self.log(f"made {n} rank files: {total_bytes / 1e9:.2f} GB, {sum(events.values()):,} events "
                 f"in {time.perf_counter() - t0:.0f} s")
        return root, total_bytes, events

    def bench_scaling(self, root: Path, events: dict[Path, int]) -> None:
        """--jobs 1..cores on a subset of the rank files."""
        cores = os.cpu_count() or 1
        subset = self.work / "subset"
        shutil.rmtree(subset, ignore_errors=True)
        files = sorted((root / "v1").glob("*.json"), key=lambda p: int(p.stem.split("-")[1]))[: max(2, 2 * cores)]
        (subset / "v1").mkdir(parents=True)
        for f in files:
            os.link(f, subset / "v1" / f.name)
        nbytes = sum(f.stat().st_size for f in files)
        jobs_list = sorted({1, *[j for j in (2, 4, 8, 16) if j <= cores], cores})
        for jobs in jobs_list:
            wh = self.work / "wh-scaling"
            shutil.rmtree(wh, ignore_errors=True)
            r = run_measured(tracedb_cmd(wh, "ingest", "-j", str(jobs), str(subset)))
            check_rows(wh, sum(events[f] for f in files))
            shutil.rmtree(wh, ignore_errors=True)
            self.log(f"{len(files)} files, --jobs {jobs}: {r['seconds']:.1f} s, "
                     f"{nbytes / 1e6 / r['seconds']:.1f} MB/s, peak {r['peak_rss_bytes'] / 2**20:.0f} MiB")
            self.results["scaling"].append({
                "files": len(files), "json_mb": nbytes / 1e6, "jobs": jobs, "seconds": r["seconds"],
                "mb_per_s": nbytes / 1e6 / r["seconds"], "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
            })
        base = self.results["scaling"][0]["seconds"]
        for s in self.results["scaling"]:
            s["speedup"] = base / s["seconds"]
        shutil.rmtree(subset, ignore_errors=True)

    def bench_warehouse(self, root: Path, json_bytes: int, events: int) -> Path:
        wh = self.work / "wh-ranks"
        shutil.rmtree(wh, ignore_errors=True)
        r = run_measured(tracedb_cmd(wh, "ingest", str(root)))
        check_rows(wh, events)
        self.log(f"ingested {root}: {r['seconds']:.0f} s, {json_bytes / 1e6 / r['seconds']:.1f} MB/s, "
                 f"peak {r['peak_rss_bytes'] / 2**20:.0f} MiB")
        self.results["ingest"].append({
            "workload": f"{self.size['ranks']} rank files (default --jobs)", "file": str(root.name),
            "json_mb": json_bytes / 1e6, "events": events, "file_mb": json_bytes / 1e6, "runs": 1,
            "seconds": r["seconds"], "mb_per_s": json_bytes / 1e6 / r["seconds"],
            "events_per_s": events / r["seconds"], "peak_rss_mib": r["peak_rss_bytes"] / 2**20,
            "warehouse_mb": dir_bytes(wh) / 1e6,
        })
        parquet = sum(p.stat().st_size for p in wh.rglob("*.parquet"))
        tables = {t: sum(p.stat().st_size for p in (wh / t).rglob("*.parquet")) for t in ("events", "flows", "counters")
                  if (wh / t).exists()}
        self.results["warehouse"] = {
            "json_bytes": json_bytes, "events": events, "warehouse_bytes": dir_bytes(wh),
            "parquet_bytes": parquet, "parquet_bytes_by_table": tables,
            "ratio": dir_bytes(wh) / json_bytes,
        }
        return wh

    def bench_queries(self, wh: Path) -> None:
        args_for = {"regressions": ["--base", "v1", "--run", "v2"]}
        for mart in self.args.marts.split(","):
            cmd = tracedb_cmd(wh, "query", mart, *args_for.get(mart, ["--run", "v2"]),
                              "--limit", "20", "--format", "csv")
            # --smoke runs in the tests: it leaves the machine's page cache alone.
            cold_dropped = self.results["mode"] != "smoke" and drop_caches()
            try:
                cold = run_measured(cmd)
            except RuntimeError as e:
                self.log(f"query {mart}: failed: {str(e).splitlines()[-1]}")
                self.results["queries"].append({"mart": mart, "error": str(e)[-500:]})
                continue
            # A query far past its target gets one warm run, not several.
            repeats = self.args.query_repeats if cold["seconds"] < 30 else 1
            warm = [run_measured(cmd)["seconds"] for _ in range(repeats)]
            rows = max(0, len(cold["stdout"].splitlines()) - 1)
            self.log(f"query {mart}: cold {cold['seconds']:.2f} s, warm {median(warm):.2f} s ({rows} rows)")
            self.results["queries"].append({
                "mart": mart, "cold_seconds": cold["seconds"], "cold_cache_dropped": cold_dropped,
                "warm_seconds": median(warm), "warm_runs": warm, "rows": rows,
                "peak_rss_mib": cold["peak_rss_bytes"] / 2**20,
            })
        # the floor: a CLI process that runs no query
        t = [run_measured(tracedb_cmd(wh, "--version"))["seconds"] for _ in range(3)]
        self.results["cli_startup_seconds"] = median(t)

    def run(self) -> dict:
        self.work.mkdir(parents=True, exist_ok=True)
        only = set(self.args.only.split(",")) if self.args.only else None
        self.check_space(only)
        s = self.size
        if not only or "single" in only:
            big, huge = s["big"], s["huge"]
            name = f"1 trace, {big / 2**30:.2g} GiB"
            files = [self.big_file("big", big), self.big_file("big", big, gz=True),
                     # the same events as json.dumps writes them (a trace a script loaded and wrote back)
                     self.big_file("big", big, one_line=True), self.big_file("huge", huge)]
            # The baseline needs about 5x the file in memory: only where that fits.
            fits = 6 * huge < _mem_available()
            self.bench_rounds([self.single(name, files[0], True), self.single(f"{name}, .json.gz", files[1], True),
                               self.single(f"{name}, on one line", files[2], False),
                               self.single(f"1 trace, {huge / 2**30:.2g} GiB", files[3], fits)], self.repeats)
            if not fits:
                self.results["notes"] = self.results.get("notes", []) + [
                    "baseline skipped on the 4x trace: json.load would need ~5x the file in memory"]
            for f in files:
                f.unlink()
        if not only or "small" in only:
            self.bench_small()
        if not only or "tiny" in only:
            self.bench_tiny()
        if not only or "ranks" in only:
            root, nbytes, events = self.rank_files()
            self.bench_scaling(root, events)
            wh = self.bench_warehouse(root, nbytes, sum(events.values()))
            if not self.args.keep:
                shutil.rmtree(root, ignore_errors=True)
            self.bench_queries(wh)
            if not self.args.keep:
                shutil.rmtree(wh, ignore_errors=True)
        return self.results


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def machine() -> dict:
    return {"cpus": os.cpu_count(), "memory_gib": round(_mem_total() / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def _mem_total() -> int:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) * 1024


# -- report ----------------------------------------------------------------


def table(results: dict) -> str:
    lines = []
    m = results["machine"]
    lines.append(f"tracedb benchmark ({results['mode']}): {m['cpus']} CPUs, {m['memory_gib']} GiB, "
                 f"Python {m['python']}; source {results['source']}")
    if results["ingest"]:
        lines.append("")
        lines.append("| ingest | JSON MB | events | s | MB/s | Mevents/s | peak RSS MiB | baseline MB/s | "
                     "baseline peak MiB | x baseline |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for e in results["ingest"]:
            if "error" in e:
                lines.append(f"| {e['workload']} | failed: {e['error'].strip().splitlines()[-1][:120]} |")
                continue
            b = (f"{e['baseline_mb_per_s']:.1f} | {e['baseline_peak_rss_mib']:.0f} | {e['speedup']:.2f}"
                 if "baseline_mb_per_s" in e else "- | - | -")
            lines.append(f"| {e['workload']} | {e['json_mb']:.0f} | {e['events']:,} | {e['seconds']:.1f} | "
                         f"{e['mb_per_s']:.1f} | {e['events_per_s'] / 1e6:.2f} | {e['peak_rss_mib']:.0f} | {b} |")
    if results["scaling"]:
        lines.append("")
        lines.append("| many files | files | JSON MB | --jobs | s | MB/s | speedup | peak RSS MiB |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for s in results["scaling"]:
            lines.append(f"| rank files | {s['files']} | {s['json_mb']:.0f} | {s['jobs']} | {s['seconds']:.1f} | "
                         f"{s['mb_per_s']:.1f} | {s['speedup']:.2f} | {s['peak_rss_mib']:.0f} |")
    if results["queries"]:
        w = results["warehouse"]
        lines.append("")
        lines.append(f"Queries through the CLI on {w['events']:,} events "
                     f"(CLI start-up alone: {results.get('cli_startup_seconds', float('nan')):.2f} s)")
        lines.append("")
        lines.append("| mart | cold s | warm s (median) | rows |")
        lines.append("|---|---:|---:|---:|")
        for q in results["queries"]:
            if "error" in q:
                lines.append(f"| {q['mart']} | failed | failed | - |")
            else:
                cold = f"{q['cold_seconds']:.2f}" + ("" if q["cold_cache_dropped"] else "*")
                lines.append(f"| {q['mart']} | {cold} | {q['warm_seconds']:.2f} | {q['rows']} |")
        if any(not q.get("cold_cache_dropped", True) for q in results["queries"]):
            lines.append("")
            lines.append("* cold = first run in a new process; the OS page cache was not dropped "
                         "(not root, or --smoke)")
    if results["warehouse"]:
        w = results["warehouse"]
        by = ", ".join(f"{t} {b / 1e6:.0f} MB" for t, b in w["parquet_bytes_by_table"].items())
        lines.append("")
        lines.append(f"Warehouse: {w['warehouse_bytes'] / 1e6:.0f} MB for {w['json_bytes'] / 1e6:.0f} MB of JSON "
                     f"= {100 * w['ratio']:.1f}% ({by})")
    for note in results.get("notes", []):
        lines.append(f"Note: {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (a couple of minutes)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes (seconds): checks that the script and the ingests work, measures nothing")
    ap.add_argument("--workdir", help="where workloads and warehouses go (default: a temp dir, removed)")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    ap.add_argument("--source", default=DEFAULT_SOURCE,
                    help=f"trace to tile, relative to ../shared/corpus (default: {DEFAULT_SOURCE})")
    ap.add_argument("--repeats", type=int, help="runs per single-trace workload (median; default 3, quick 1)")
    ap.add_argument("--query-repeats", type=int, default=3, help="warm runs per query (median)")
    ap.add_argument("--only", help="comma list: single, small, tiny, ranks")
    ap.add_argument("--marts", default=",".join(MARTS), help=f"marts to time (default: {','.join(MARTS)})")
    ap.add_argument("--keep", action="store_true", help="keep what the run made in the workdir")
    ap.add_argument("--reuse", action="store_true", help="reuse rank files an earlier --keep run left")
    args = ap.parse_args(argv)
    tmp = None
    if not args.workdir:
        tmp = tempfile.mkdtemp(prefix="tracedb-bench-")
        args.workdir = tmp
    try:
        results = Bench(args).run()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        elif args.workdir and not args.keep:
            for sub in ("single", "small", "tiny", "ranks", "subset", "wh-single", "wh-scaling", "wh-ranks"):
                shutil.rmtree(Path(args.workdir) / sub, ignore_errors=True)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
