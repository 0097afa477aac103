"""The `tracedb` command: parses options, makes one library call, formats the
result. Results go to stdout; progress, logs and errors to stderr.

Exit codes: 0 success, 1 an error (or any file failed to ingest), 2 usage.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import sys
from collections import defaultdict
from pathlib import Path

import click
import duckdb

from .api import TraceDB
from .errors import TracedbError
from .output import FORMATS, write
from .version import __version__
from .warehouse import DEFAULT_WAREHOUSE, WAREHOUSE_ENV


def _err(msg: str) -> None:
    click.echo(msg, err=True)


def _db(ctx: click.Context) -> TraceDB:
    return TraceDB(ctx.obj["warehouse"])


def _emit(rel: duckdb.DuckDBPyRelation, fmt: str, output: str | None) -> None:
    if fmt == "parquet" and not output:
        raise click.UsageError("--format parquet needs --output FILE")
    if output and fmt != "parquet":
        with open(output, "w", encoding="utf-8", newline="") as f:
            write(rel, fmt, f)
    else:
        write(rel, fmt, sys.stdout, output)


ENGINES = ("duckdb", "spark")


def _spark(engine: str, master: str | None):
    """The SparkSession of --engine spark (None for duckdb)."""
    if engine != "spark":
        if master:
            raise click.UsageError("--spark-master goes with --engine spark")
        return None
    try:
        from .spark.ingest import session
    except ImportError as e:
        raise click.ClickException(f"--engine spark needs the spark extra: pip install 'tracedb[spark]' ({e})")
    return session(master)


def _tags(ctx, param, values: tuple[str, ...]) -> dict[str, str]:
    """``--tag k=v`` options as a dict (the last of a key wins)."""
    tags = {}
    for text in values:
        key, eq, value = text.partition("=")
        if not eq or not key.strip():
            raise click.BadParameter(f"{text!r}: expected KEY=VALUE", param=param)
        tags[key.strip()] = value.strip()
    return tags


def _set_warehouse(ctx: click.Context, param, value: str | None) -> None:
    """``-w`` after the command: it wins over one before it and the environment."""
    if value is not None:
        ctx.obj["warehouse"] = value


def _warehouse_option(command):
    """``-w/--warehouse``, accepted after the command too (``tracedb query
    hotspots -w wh``): every command that opens the warehouse takes it."""
    return click.option("--warehouse", "-w", type=click.Path(file_okay=False), default=None, expose_value=False,
                        callback=_set_warehouse,
                        help="Warehouse folder or s3:// URL, as `tracedb -w DIR COMMAND` takes it "
                             "(given here, it wins).")(command)


class _Errors(click.Group):
    """Turn the library's typed errors into one `Error: ...` line, exit 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except TracedbError as e:
            raise click.ClickException(str(e)) from None


@click.group(cls=_Errors)
@click.option("--warehouse", "-w", type=click.Path(file_okay=False), envvar=WAREHOUSE_ENV,
              default=DEFAULT_WAREHOUSE, show_default=True,
              help=f"Warehouse folder, or s3://bucket/prefix (docs/storage.md); or set {WAREHOUSE_ENV}. "
                   "Also accepted after the command.")
@click.version_option(__version__, prog_name="tracedb")
@click.pass_context
def main(ctx: click.Context, warehouse: str) -> None:
    """A SQL warehouse of PyTorch Profiler (Kineto) / Chrome-trace JSON traces.

    \b
    Example:
      tracedb -w wh ingest runs/
      tracedb -w wh query hotspots --run v2 --limit 10
      tracedb query hotspots --run v2 -w wh     # -w after the command too
      tracedb -w s3://traces/team ingest runs/  # a warehouse in a bucket
    """
    ctx.obj = {"warehouse": warehouse}


# glibc's mallopt parameter for its arena count (malloc.h).
_M_ARENA_MAX = -8
# The C library's heaps for an ingest (glibc: one heap a thread, up to eight
# a core): two.
INGEST_MALLOC_ARENAS = 2
INGEST_HUGE_PAGES = "glibc.malloc.hugetlb=1"


def _settings_for_ingest() -> None:
    """An ingest's process settings: allocators that give back what a
    trace's steps free, so that the next step's memory does not come on top
    of it, huge pages, and no BLAS threads; a user's own settings stand. Set
    in the environment (each read once, at start), so that the processes an
    ingest spawns take them too.

    Arrow allocates from the C library: Arrow's default, mimalloc, kept about
    75 MiB of what a 1 GiB trace's finalize pass freed, under the summaries'
    DuckDB memory that comes next (peak RSS 75 MiB lower, same speed). Read
    when pyarrow loads: this process loads it after this call.

    glibc gives each thread that allocates at once its own heap (up to eight
    a core), and what a heap frees in its middle stays with it: after a
    4.4 GB trace's finalize the process kept 200-270 MiB (135-150 after the
    parse), and the summaries' 256 MB came on top. With two heaps it keeps
    145-166, and the peak is 58 MiB lower (a 1.1 GB trace: 25); the 1.1 GB
    trace takes the same time, a 4.4 GB one 0-9% more in five sets of runs
    (docs/performance.md). This process read its environment at
    start: it is told through mallopt, before its threads make heaps of
    their own.

    The processes it spawns (a worker for each file at once, the first
    commit's) also get glibc's transparent huge pages for what malloc maps
    (``glibc.malloc.hugetlb=1``, glibc 2.35 on; an older one ignores it):
    fewer page faults and TLB misses for the pieces' and row groups'
    buffers, 2.7-3.7% less CPU for 8 rank files at the same peak (two sets
    of 6 rounds, docs/performance.md). glibc reads its tunables only when a
    process starts, so this process, where a lone trace's work runs, goes
    without (the same setting given to the whole ingest: about 3% less
    CPU for a 1.1 GB trace, 12 MiB more at the peak).

    numpy's OpenBLAS starts a thread for each core when numpy loads, which
    spins for a while: an ingest uses no BLAS, so it gets none
    (``OPENBLAS_NUM_THREADS=1``, read when numpy loads: this process loads
    it after this call). A 1.1 GB trace: 6.51 s and 10.62 CPU-s against
    6.70 and 10.89 (8 alternating rounds)."""
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if not sys.platform.startswith("linux"):
        return
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb=" not in tunables:
        os.environ["GLIBC_TUNABLES"] = ":".join(filter(None, [tunables, INGEST_HUGE_PAGES]))
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    os.environ["MALLOC_ARENA_MAX"] = str(INGEST_MALLOC_ARENAS)
    try:
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, INGEST_MALLOC_ARENAS)
    except (OSError, AttributeError):  # not glibc's C library: it has no such setting
        pass


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--run", help="Run name for every file (default: first folder under PATH).")
@click.option("--rank", type=click.IntRange(min=0), help="Rank of a single file (default: distributedInfo.rank, the file name, 0).")
@click.option("--phase", help="Phase for every file (default: a known word in the path, else the folder).")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Files ingested at once (default: the number of cores).")
@click.option("--tag", "tags", multiple=True, callback=_tags, metavar="KEY=VALUE",
              help="Configuration tag for every run ingested (repeatable); adds to a run.json beside the traces.")
@click.option("--dry-run", is_flag=True, help="Show the run/rank/phase mapping and stop.")
@click.option("--engine", type=click.Choice(ENGINES), default="duckdb", show_default=True,
              help="duckdb on this machine, or spark (needs the spark extra and Java).")
@click.option("--spark-master", metavar="URL", help="With --engine spark: local[*] (default), spark://host:7077, yarn, ...")
@_warehouse_option
@click.pass_context
def ingest(ctx, paths, run, rank, phase, jobs, tags, dry_run, engine, spark_master):
    """Ingest trace files and folders (*.json, *.json.gz) into the warehouse.

    Content already ingested is skipped; a file that fails is named on stderr
    and recorded in `traces`, and the others still ingest (exit code 1).

    \b
    Example:
      tracedb ingest runs/                  # runs/<run>/.../<trace>.json[.gz]
      tracedb ingest --run v3 rank0.json.gz
      tracedb ingest runs/ --run v2 --tag tp=2 --tag dtype=bf16
      tracedb ingest runs/ --engine spark --spark-master spark://head:7077
    """
    db = _db(ctx)
    spark = _spark(engine, spark_master)
    files = db.discover(list(paths), run=run, rank=rank, phase=phase)
    if not files:
        _err("No trace files (*.json, *.json.gz) found.")
        return
    groups: dict[tuple[str, str], list] = defaultdict(list)
    for tf in files:
        groups[(tf.run, tf.phase)].append(tf)
    _err(f"Found {len(files)} trace file(s), {sum(f.size_bytes for f in files) / 1e6:,.1f} MB:")
    for (r, p), tfs in sorted(groups.items()):
        ranks = sorted({t.rank for t in tfs})
        shown = ",".join(map(str, ranks[:8])) + (",..." if len(ranks) > 8 else "")
        _err(f"  run={r} phase={p} files={len(tfs)} ranks={shown}")
    _err("  (ranks from file names; a trace's distributedInfo.rank takes precedence)")
    if dry_run:
        for tf in files:
            click.echo(f"{tf.path}\trun={tf.run}\trank={tf.rank}\tphase={tf.phase}")
        return

    _settings_for_ingest()
    from tqdm import tqdm

    total = sum(f.size_bytes for f in files)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="ingest", file=sys.stderr,
               disable=None, leave=False)

    def on_result(r):
        bar.update(r.bytes)
        if r.status == "failed":
            bar.write(f"Error: {r.error}", file=sys.stderr)
        for w in r.warnings:
            bar.write(f"Warning: {r.path}: {w}", file=sys.stderr)

    try:
        report = db.ingest(files=files, jobs=jobs, tags=tags, on_result=on_result,
                           on_wait=lambda m: bar.write(m + " ...", file=sys.stderr), spark=spark)
    finally:
        bar.close()
    _err(report.summary())
    stale = (report.stale_summaries or 0) if report.ingested else 0
    if stale:
        _err(f"{stale} trace(s) have summaries made by another tracedb or comm_patterns.csv: the marts "
             "compute from the events (slower) until `tracedb migrate` recomputes them.")
    if report.failed:
        ctx.exit(1)


@main.command()
@click.argument("name")
@click.option("--run", help="Run to show (regressions: the target run).")
@click.option("--base", help="Baseline run (regressions; latency: compare every run to it).")
@click.option("--rank", type=int, help="One rank (views with a per-rank variant use it).")
@click.option("--phase", help="Phase to show.")
@click.option("--kind", help="kernel, cpu_op or annotation (hotspots; default: kernels if any).")
@click.option("--span", help="Span name or SQL LIKE pattern (latency; default: 'ProfilerStep#%'); "
              "critical_path: an annotation to use instead of ProfilerStep#N, --step its instance from 0.")
@click.option("--tag", "tags", multiple=True, callback=_tags, metavar="KEY=VALUE",
              help="Only runs with this tag (repeatable: every one).")
@click.option("--step", type=int, help="Profiler step N of ProfilerStep#N (critical_path).")
@click.option("--resolution-us", type=click.FloatRange(min=0, min_open=True),
              help="Bucket width of a time series, microseconds (queue_length, memory_bandwidth_series, "
                   "memory_timeline; default 1000).")
@click.option("--k", type=click.IntRange(min=1), help="Sequence length (kernel_sequences; default 3).")
@click.option("--limit", "-n", type=click.IntRange(min=0), help="At most this many rows.")
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to a file instead of stdout.")
@click.option("--engine", type=click.Choice(ENGINES), default="duckdb", show_default=True,
              help="duckdb on this machine, or spark (needs the spark extra and Java).")
@click.option("--spark-master", metavar="URL", help="With --engine spark: local[*] (default), spark://host:7077, yarn, ...")
@_warehouse_option
@click.pass_context
def query(ctx, name, run, base, rank, phase, kind, span, tags, step, resolution_us, k, limit, fmt, output, engine,
          spark_master):
    """Run a view of the library (see `tracedb views`).

    \b
    Example:
      tracedb query hotspots --run v2 --kind kernel --limit 10
      tracedb query hotspots --run v2 --format csv > hotspots.csv
      tracedb query regressions --base v1 --run v2
      tracedb query latency --run v2 --span 'forward%'
      tracedb query latency --span forward --base bs1 --tag dtype=fp32
      tracedb query queue_length --run v2 --rank 0 --resolution-us 100
      tracedb query critical_path --run v2 --rank 0 --step 2
      tracedb query hotspots --run v2 --engine spark --spark-master yarn
    """
    db = _db(ctx)
    params = dict(run=run, base=base, rank=rank, phase=phase, kind=kind, limit=limit, span=span, tags=tags or None,
                  step=step, resolution_us=resolution_us, k=k)
    spark = _spark(engine, spark_master)
    if spark is not None:
        from .spark.query import query_relation

        rel = query_relation(spark, db.warehouse, name, **params)
    else:
        rel = db.query(name, **params)
    _emit(rel, fmt, output)


@main.command()
@click.argument("statement")
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to a file instead of stdout.")
@_warehouse_option
@click.pass_context
def sql(ctx, statement, fmt, output):
    """Run read-only SQL over the catalog.

    \b
    Example:
      tracedb sql "SELECT run, count(*) FROM events GROUP BY run"
    """
    db = _db(ctx)
    try:
        rel = db.sql(statement)
        if rel is None:
            raise click.ClickException("the statement returned no rows (the catalog is read-only here)")
        _emit(rel, fmt, output)
    except duckdb.Error as e:
        raise click.ClickException(str(e).splitlines()[0]) from None


class _ViewsGroup(_Errors):
    """`tracedb views [NAME]`, and `tracedb views export ...`: a first word
    that is not a subcommand is the name of a view."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and not args[0].startswith("-") and args[0] not in self.commands:
            ctx.meta["tracedb_view"] = args[0]
            args = args[1:]
        return super().parse_args(ctx, args)


def _not_on_spark() -> dict[str, str]:
    """View -> why it cannot run on Spark."""
    from .catalog import resource_dir
    from .views import not_on_spark
    return not_on_spark(resource_dir("queries"))


@main.group(cls=_ViewsGroup, invoke_without_command=True)
@click.option("--all", "show_all", is_flag=True, help="Include staging and intermediate views.")
@_warehouse_option
@click.pass_context
def views(ctx, show_all):
    """List the views with what they answer, or one view's columns (NAME).
    A view that cannot run on Spark says so, and why.

    \b
    Example:
      tracedb views
      tracedb views hotspots
      tracedb views export --dialect spark -o spark_sql/
    """
    if ctx.invoked_subcommand is not None:
        return
    name = ctx.meta.get("tracedb_view")
    db = _db(ctx)
    infos = db.views()
    not_on_spark = _not_on_spark()
    if name:
        match = [v for v in infos if v.name == name]
        if not match:
            from .errors import UnknownView
            raise UnknownView(name, [v.name for v in infos])
        v = match[0]
        where = "" if v.kind == "python" else f"; in the catalog: {v.relation}"
        click.echo(f"{v.name} ({v.layer} {v.kind}{where})\n  {v.description}")
        if v.name in not_on_spark:
            click.echo(f"  not on Spark: {not_on_spark[v.name]}")
        for p, doc in v.params.items():
            click.echo(f"  param {p}: {doc}")
        for col, typ, doc in db.view_columns(name):
            click.echo(f"  {col:<24} {typ or '':<12} {doc or ''}".rstrip())
        return
    for v in infos:
        if v.layer != "marts" and not show_all:
            continue
        label = v.name if v.layer == "marts" else f"{v.name} [{v.layer}]"
        mark = f" [not on Spark: {not_on_spark[v.name]}]" if v.name in not_on_spark else ""
        click.echo(f"{label:<28} {v.description}{mark}")


@views.command("export")
@click.option("--dialect", type=click.Choice(["spark", "trino"]), required=True,
              help="SQL dialect to generate (trino: untested).")
@click.option("--output", "-o", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Folder for the .sql files (one per view, numbered in dependency order).")
def views_export(dialect, out_dir):
    """Write the view library as Spark (or Trino) SQL, to register in a metastore.

    \b
    Example:
      tracedb views export --dialect spark -o spark_sql/
    """
    try:
        from .spark.dialect import export, library
    except ImportError as e:
        raise click.ClickException(f"views export needs sqlglot: pip install 'tracedb[spark]' ({e})")
    written, why = export(library(), out_dir, dialect)
    for view, reason in why.items():
        _err(f"Not expressible in {dialect}: {view}: {reason}")
    _err(f"Wrote {len(written)} file(s) to {out_dir}.")


@main.command()
@click.option("--format", "-f", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@_warehouse_option
@click.pass_context
def runs(ctx, fmt):
    """What is in the warehouse: runs, phases, ranks, files, events, tags.

    \b
    Example:
      tracedb runs
    """
    _emit(_db(ctx).runs(), fmt, None)


@main.command()
@click.option("--repair", is_flag=True,
              help="Remove orphan files and leftovers; unregister broken traces so that the next ingest redoes them.")
@_warehouse_option
@click.pass_context
def check(ctx, repair):
    """Verify the warehouse: every Parquet file belongs to a registered trace,
    every trace's files exist and hold its row counts, and nothing is left
    over from a killed ingest. Exits 1 while a problem remains.

    \b
    Example:
      tracedb check
      tracedb check --repair
    """
    report = _db(ctx).check(repair=repair, on_wait=lambda m: _err(m + " ..."))
    for problem in report.problems:
        click.echo(str(problem))
    click.echo(report.summary())
    if not report.ok:
        if not repair:
            _err("Run `tracedb check --repair` to fix them.")
        ctx.exit(1)


@main.command()
@click.option("--run", required=True, help="The run to remove.")
@click.option("--rank", type=int, help="Only this rank of the run.")
@click.option("--phase", help="Only this phase of the run.")
@_warehouse_option
@click.pass_context
def remove(ctx, run, rank, phase):
    """Remove a run's traces (or one rank or phase of it) from the warehouse:
    their rows leave the catalog at once, then their Parquet files go.

    \b
    Example:
      tracedb remove --run v1
      tracedb remove --run infer --phase decode
    """
    n = _db(ctx).remove(run, rank=rank, phase=phase, on_wait=lambda m: _err(m + " ..."))
    _err(f"Removed {n} trace(s).")


@main.command()
@_warehouse_option
@click.pass_context
def migrate(ctx):
    """Apply pending catalog migrations, re-create every view, and recompute
    the per-trace summaries an older tracedb or comm_patterns.csv made: after
    upgrading tracedb, moving the warehouse, or writing
    <warehouse>/comm_patterns.csv.

    \b
    Example:
      tracedb query comm_patterns -f csv -o tracedb/comm_patterns.csv
      tracedb migrate
    """
    n = _db(ctx).rebuild_views(on_wait=lambda m: _err(m + " ..."))
    _err(f"Views rebuilt; summaries recomputed for {n} trace(s)." if n else "Views rebuilt.")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; a non-loopback one needs TRACEDB_SERVE_PASSWORD.")
@click.option("--port", default=5433, show_default=True, type=click.IntRange(0, 65535))
@click.option("--statement-timeout", default=30.0, show_default=True, type=click.FloatRange(min=0.001),
              help="Seconds a statement, and the sending of its rows, may take.")
@click.option("--max-rows", default=1_000_000, show_default=True, type=click.IntRange(min=1),
              help="Rows a statement may return.")
@click.option("--max-result-mb", default=256, show_default=True, type=click.IntRange(min=1),
              help="Megabytes a statement may return.")
@click.option("--max-statement-kb", default=1024, show_default=True, type=click.IntRange(min=1),
              help="Kilobytes of statement text.")
@click.option("--max-connections", default=64, show_default=True, type=click.IntRange(min=1),
              help="Authenticated sessions at once; more are refused (SQLSTATE 53300).")
@click.option("--auth-timeout", default=60.0, show_default=True, type=click.FloatRange(0.001, 60),
              help="Seconds a client has for start-up and authentication.")
@click.option("--idle-timeout", default=3600.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds of silence after which a session is closed (0: never).")
@click.option("--memory-limit", default="1GB", show_default=True,
              help="DuckDB's memory limit; the process may use 512 MiB more, then statements fail.")
@click.option("--threads", default=2, show_default=True, type=click.IntRange(min=1),
              help="DuckDB threads for the server.")
@_warehouse_option
@click.pass_context
def serve(ctx, host, port, statement_timeout, max_rows, max_result_mb, max_statement_kb, max_connections,
          auth_timeout, idle_timeout, memory_limit, threads):
    """Serve the warehouse read-only over the PostgreSQL wire protocol, for
    BI tools (Superset, Grafana, Metabase, DBeaver) and psql / psycopg.

    Set TRACEDB_SERVE_PASSWORD to require a password. The server can read
    nothing outside the warehouse and refuses writes, COPY, ATTACH and
    INSTALL. New sessions see traces ingested while it runs.

    \b
    Example:
      tracedb -w wh serve --port 5433
      psql "host=127.0.0.1 port=5433 dbname=tracedb user=tracedb" -c "SELECT * FROM hotspots LIMIT 5"
    """
    from .serve import ServeConfig

    password = os.environ.get("TRACEDB_SERVE_PASSWORD") or None
    config = ServeConfig(
        host=host, port=port, password=password, statement_timeout_s=statement_timeout, max_rows=max_rows,
        max_result_bytes=max_result_mb * 1024 * 1024, max_statement_bytes=max_statement_kb * 1024,
        max_connections=max_connections, auth_timeout_s=auth_timeout, idle_timeout_s=idle_timeout,
        memory_limit=memory_limit, threads=threads, limit_process_memory=True)
    db = _db(ctx)

    def ready(server) -> None:
        _err(f"Serving {db.wh} on {host}:{server.port} (read-only"
             f"{', password required' if password else ''}); Ctrl-C stops.")

    try:
        db.serve(config, on_ready=ready)
    except KeyboardInterrupt:
        _err("Stopped.")


@main.command()
@click.option("--run", "runs", multiple=True, help="Run to show (repeatable; default: every run).")
@click.option("--base", help="Baseline run: adds the regressions of each run against it.")
@click.option("--phase", help="Only this phase.")
@click.option("--output", "-o", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="The HTML file to write.")
@_warehouse_option
@click.pass_context
def report(ctx, runs, base, phase, output):
    """Write one self-contained HTML page of charts over the marts: runs,
    hotspots, step times and stragglers, overlap, collectives, GPU
    utilization, span latency and, with --base, the regressions. It opens
    offline (scripts and data inline); each chart names the `tracedb query`
    that gives its numbers.

    \b
    Example:
      tracedb report -o report.html
      tracedb report --run v2 --base v1 -o v2-vs-v1.html
    """
    made = _db(ctx).report(output, runs=list(runs) or None, base=base, phase=phase)
    _err(f"Wrote {made.path} ({made.chart_count} charts, {made.bytes / 1e6:,.1f} MB) in {made.seconds:.1f} s.")


@main.command()
@click.option("--run", required=True, help="The run.")
@click.option("--rank", required=True, type=click.IntRange(min=0), help="The rank.")
@click.option("--phase", help="The phase (needed when the rank has several).")
@click.option("--step", type=int, help="Profiler step N (ProfilerStep#N) and the GPU work it launched.")
@click.option("--start-ns", type=int, help="Window start, nanoseconds (as ts_ns in the warehouse).")
@click.option("--end-ns", type=int, help="Window end (exclusive), nanoseconds.")
@click.option("--compare", help="Base run whose same step is put beside it (separate processes, aligned).")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="The JSON file to write (.json or .json.gz).")
@_warehouse_option
@click.pass_context
def export(ctx, run, rank, phase, step, start_ns, end_ns, compare, output):
    """Write a window of one rank's trace as Chrome-trace JSON that Perfetto
    UI and chrome://tracing open: the events, flows and counters that start
    in it, the process and thread names, the original args. Ingesting the
    file gives back the same rows.

    \b
    Example:
      tracedb export --run v2 --rank 0 --step 2 -o step2.json
      tracedb export --run v2 --rank 0 --step 2 --compare v1 -o v1-v2-step2.json.gz
      tracedb export --run v2 --rank 3 --start-ns 1700000000000000000 --end-ns 1700000000050000000 -o slice.json
    """
    made = _db(ctx).export(output, run=run, rank=rank, phase=phase, step=step, start_ns=start_ns,
                           end_ns=end_ns, compare=compare)
    w = made.window
    _err(f"Wrote {made.path}: run {w.run} rank {w.rank} phase {w.phase}"
         + (f" step {w.step}" if w.step is not None else "")
         + f", {made.event_count:,} events, {made.flow_count:,} flows, {made.counter_count:,} counters"
         + (f"; beside it {made.base.run}'s same step" if made.base else "") + ".")


@main.command()
@click.argument("folder", default="tracedb-demo", type=click.Path(file_okay=False))
@click.option("--capture/--no-capture", default=None,
              help="Also capture 2-rank CPU jobs with torch (default: when torch is installed).")
def demo(folder, capture):
    """Make a warehouse from the real traces that ship with tracedb (H200
    runs v1 and v2; with torch, captured CPU runs too) and show what it
    answers, with the command behind each part. FOLDER holds the warehouse
    (FOLDER/warehouse); a rerun skips what is already there.

    \b
    Example:
      tracedb demo
      tracedb demo /tmp/tracedb-demo --no-capture
    """
    from .demo import prepare

    made = prepare(folder, capture, on_progress=_err)
    _err(made.report.summary())
    w = shlex.quote(str(Path(folder) / "warehouse"))
    sections = [
        ("What was ingested: runs, phases, ranks", f"tracedb -w {w} runs", made.db.runs()),
        ("Where v2's GPU time went: the top kernels",
         f"tracedb -w {w} query hotspots --run v2 --limit 5", made.db.query("hotspots", run="v2", limit=5)),
        ("What changed from v1 to v2 in training, largest first",
         f"tracedb -w {w} query regressions --base v1 --run v2 --phase train --limit 8",
         made.db.query("regressions", base="v1", run="v2", phase="train", limit=8)),
    ]
    for title, command, rel in sections:
        click.echo(f"== {title}\n$ {command}")
        write(rel, "table", sys.stdout)
        click.echo()
    click.echo("== The same warehouse from a BI tool or psql")
    click.echo(f"$ tracedb -w {w} serve")
    click.echo('$ psql "host=127.0.0.1 port=5433 dbname=tracedb user=tracedb" -c "SELECT * FROM hotspots LIMIT 5"')
    click.echo(f"(or open {made.db.catalog.path} read-only with DuckDB; `tracedb -w {w} views` lists every mart)")
    if not made.captured:
        _err("With torch installed (pip install 'tracedb[torch]'), the demo also captures CPU runs cpu-v1, cpu-v2, cpu-infer.")
    made.db.close()
    if made.report.failed:
        raise click.ClickException(f"{len(made.report.failed)} sample trace(s) failed to ingest")


if __name__ == "__main__":  # pragma: no cover
    main(prog_name=os.path.basename(sys.argv[0]))
