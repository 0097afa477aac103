"""Per-trace summaries (summaries.py): the views they stand in for give the
same answers as computing from the events, they go stale when the SQL or
comm_patterns.csv that made them changes (the views then read the events),
`tracedb migrate` recomputes them, and remove / check know their files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import duckdb
import pytest

from click.testing import CliRunner

import tracedb
from tracedb.catalog import Catalog
from tracedb.warehouse import Warehouse
from tracedb.cli import main
from conftest import CORPUS, ROOT
from marts_fixture import write_ranks

CUDA = ROOT / "tests" / "fixtures" / "cuda"
PER_TRACE = {"int_comm_ops", "int_overlap_sums", "int_op_step_sums", "int_op_dur_counts", "int_gpu_busy_sums",
             "int_step_sums", "int_annotation_nesting"}


def _norm(v):
    if isinstance(v, float):
        return None if math.isnan(v) else float(f"{v:.9g}")  # summation order moves the last bits
    if isinstance(v, (list, tuple)):
        return tuple(_norm(x) for x in v)
    return v


def snapshot(db: tracedb.TraceDB) -> dict[str, tuple[list, list]]:
    """(column types, sorted rows) of every intermediate view and mart, and
    of regressions between the CUDA fixture's v1 and v2."""
    con = db.connect()
    names = [n for (n,) in con.execute(
        "SELECT name FROM tracedb_meta.tracedb_views WHERE kind = 'view' AND layer <> 'staging' ORDER BY name").fetchall()]
    out = {}
    for name in names + ["regressions('v1', 'v2')"]:
        rel = con.sql(f"SELECT * FROM {name}")
        rows = sorted((tuple(_norm(v) for v in r) for r in rel.fetchall()), key=repr)
        out[name] = ([str(t) for t in rel.types], rows)
    return out


def view_sql(db: tracedb.TraceDB, name: str) -> str:
    return db.connect().execute("SELECT sql FROM duckdb_views() WHERE view_name = ?", [name]).fetchall()[0][0]


def mark_stale(wh: Path) -> None:
    with Warehouse(wh).catalog.writing() as con:
        con.execute("UPDATE traces SET summaries_fingerprint = 'made-by-an-older-tracedb'")


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    """Real CUDA traces (v1, v2), the 2-rank fixture with NCCL, DeepEP and
    gloo-free collectives, and the corpus' multi-rank NCCL trace."""
    tmp = tmp_path_factory.mktemp("summaries")
    runs = tmp / "runs"
    write_ranks(runs, run="fx")
    paths = [CUDA, runs]
    nccl = CORPUS / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
    if nccl.exists():
        paths.append(nccl)
    wh = tmp / "wh"
    db = tracedb.open(wh)
    report = db.ingest(paths)
    assert not report.failed
    db.close()
    return wh


def test_views_read_summaries_and_match_the_events(wh: Path):
    db = tracedb.open(wh)
    assert Catalog.stale_summaries(db.connect()) == 0
    for name in PER_TRACE:
        assert "summaries/" in view_sql(db, name)
    from_summaries = snapshot(db)
    db.close()
    assert from_summaries["overlap"][1] and from_summaries["comm_latency"][1]
    assert from_summaries["regressions('v1', 'v2')"][1]

    mark_stale(wh)  # the views fall back to their SQL over the events
    db = tracedb.open(wh)
    assert Catalog.stale_summaries(db.connect()) == db.connect().execute(
        "SELECT count(*) FROM traces WHERE status = 'ok'").fetchall()[0][0]
    for name in PER_TRACE:
        assert "summaries/" not in view_sql(db, name)
    from_events = snapshot(db)
    assert from_events.keys() == from_summaries.keys()
    for name in from_summaries:
        assert from_events[name] == from_summaries[name], name

    # migrate recomputes them, and the views read them again
    traces = db.sql("SELECT count(*) FROM traces WHERE status = 'ok'").fetchall()[0][0]
    assert db.rebuild_views() == traces
    assert Catalog.stale_summaries(db.connect()) == 0
    for name in PER_TRACE:
        assert "summaries/" in view_sql(db, name)
    assert snapshot(db) == from_summaries
    db.close()


def _rows(path: Path | None) -> list[tuple]:
    """A summary file's rows; none where no file was written for the view."""
    if path is None:
        return []
    rows = duckdb.sql(f"SELECT * FROM '{path}'").fetchall()
    assert rows, f"{path}: a summary file without rows"
    return sorted((tuple(_norm(v) for v in r) for r in rows), key=repr)


def _columns(path: Path) -> list[tuple]:
    """The file's own columns and types (none from its path)."""
    return duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{path}', hive_partitioning = false)").fetchall()


def _ok_traces(wh: Path) -> list[tuple[str, str, int, str, dict[str, Path], str | None]]:
    """(file_id, run, rank, phase, table -> file, distributed_info) of each trace, by source path."""
    db = tracedb.open(wh)
    rows = db.sql("SELECT file_id, run, rank, phase, files, distributed_info FROM traces "
                  "WHERE status = 'ok' ORDER BY source_path").fetchall()
    db.close()
    return [(f, run, rank, phase, {t: wh / rel for t, rel in json.loads(files).items()}, info)
            for f, run, rank, phase, files, info in rows]


@pytest.mark.parametrize("rebind_after", [0, 1 << 40], ids=["rebinding-after-each", "one-connection"])
def test_one_summarizer_over_many_traces_gives_each_what_it_gives_alone(wh: Path, tmp_path: Path, monkeypatch,
                                                                        rebind_after: int):
    # An ingest binds the library once and runs it over trace after trace;
    # nothing of one trace may reach the next. Every trace of the warehouse,
    # twice over, against a connection of its own per trace.
    from tracedb import summaries
    from tracedb.catalog import resource_dir
    from tracedb.views import load_view_files

    monkeypatch.setattr(summaries, "REBIND_AFTER_BYTES", rebind_after)
    defs = load_view_files(resource_dir("queries"))
    traces = _ok_traces(wh)
    assert len(traces) >= 5
    spill = tmp_path / "spill"
    nonempty = set()
    with summaries.Summarizer(Warehouse(wh), defs, spill) as summarizer:
        for rep in range(2):
            for file_id, run, rank, phase, tables, info in traces:
                shared, alone = tmp_path / f"shared{rep}.{file_id}", tmp_path / f"alone{rep}.{file_id}"
                shared.mkdir()
                alone.mkdir()
                kw = dict(file_id=file_id, run=run, rank=rank, phase=phase, distributed_info=info)
                made = summarizer.compute(tables, shared, **kw)
                expected = summaries.compute(Warehouse(wh), defs, tables, alone, **kw)
                assert made.keys() == expected.keys() == PER_TRACE
                for view in PER_TRACE:
                    rows = _rows(made[view])
                    assert rows == _rows(expected[view]), (file_id, view)
                    if rows:
                        nonempty.add(view)
    assert nonempty == PER_TRACE
    assert not spill.exists()


@pytest.mark.parametrize("rebind_after", [0, 1 << 40], ids=["rebinding-after-each", "one-connection"])
def test_traces_computed_together_each_get_what_they_get_alone(wh: Path, tmp_path: Path, monkeypatch,
                                                               rebind_after: int):
    # compute_many (an ingest's small traces, in groups) over every trace of
    # the warehouse at once, then again, against each trace alone on a
    # connection of its own: the same rows, view by view, in files of their
    # own; the linked files go. As a large group (the next on a new
    # connection, a COPY per trace and view) and as a tiny one (the next on
    # the same connection, its tables dropped; one COPY a view).
    from tracedb import summaries
    from tracedb.catalog import resource_dir
    from tracedb.views import load_view_files

    monkeypatch.setattr(summaries, "GROUP_REBIND_AFTER_BYTES", rebind_after)
    defs = load_view_files(resource_dir("queries"))
    traces = _ok_traces(wh)
    assert len(traces) >= 5
    nonempty, empty = set(), set()
    with summaries.Summarizer(Warehouse(wh), defs, tmp_path / "spill") as summarizer:
        for rep in range(2):
            group = []
            for file_id, run, rank, phase, tables, info in traces:
                out = tmp_path / f"group{rep}.{file_id}"
                out.mkdir()
                group.append(summaries.TraceFiles(tables, out, file_id, run, rank, phase, info))
            made = summarizer.compute_many(group)
            assert len(made) == len(group)
            assert not (group[0].out_dir / "summaries.many").exists()
            for t, views in zip(group, made):
                alone = tmp_path / f"alone{rep}.{t.file_id}"
                alone.mkdir()
                expected = summaries.compute(Warehouse(wh), defs, t.tables, alone, file_id=t.file_id, run=t.run,
                                             rank=t.rank, phase=t.phase, distributed_info=t.distributed_info)
                assert views.keys() == expected.keys() == PER_TRACE
                for view in PER_TRACE:
                    rows = _rows(views[view])
                    assert rows == _rows(expected[view]), (t.file_id, view)
                    if rows:
                        assert views[view].parent == t.out_dir
                        assert _columns(views[view]) == _columns(expected[view]), (t.file_id, view)
                    else:  # no file, alone or together
                        assert views[view] is None and expected[view] is None, (t.file_id, view)
                    (nonempty if rows else empty).add(view)
    assert nonempty == PER_TRACE
    assert empty  # a trace without rows of a view: no file


def test_a_trace_whose_summaries_fail_fails_alone_in_its_group(tmp_path: Path):
    # Three small traces ingest as one group; the middle one's process group
    # list is an object, which its summaries cannot read (the library casts
    # it to a JSON list): it fails with that error, the other two are in,
    # their summaries current, on one process and on --jobs workers.
    from tracedb.discover import discover
    from tracedb.ingest import summary_groups

    runs = tmp_path / "runs"
    for rank, pg in enumerate(([{"pg_name": "0", "pg_size": 2}], {"pg_name": "0"}, [{"pg_name": "0", "pg_size": 2}])):
        events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5 + rank,
                   "args": {}} for i in range(1, 6)]
        (runs / "r").mkdir(parents=True, exist_ok=True)
        (runs / "r" / f"rank{rank}.json").write_text(json.dumps(
            {"distributedInfo": {"rank": rank, "pg_config": pg}, "traceEvents": events}))
    files = discover([runs])
    for jobs, groups in ((1, [3]), (2, [2, 1])):
        assert [len(g) for g in summary_groups(files, jobs)] == groups
        db = tracedb.open(tmp_path / f"wh{jobs}")
        report = db.ingest([runs], jobs=jobs)
        assert [Path(r.path).name for r in report.failed] == ["rank1.json"]
        assert "Expected ARRAY, but got OBJECT" in report.failed[0].error
        assert sorted(Path(r.path).name for r in report.ingested) == ["rank0.json", "rank2.json"]
        con = db.connect()
        assert Catalog.stale_summaries(con) == 0
        # each trace's five aten::mm of 5 + rank us, from its own summary
        assert sorted(con.execute("SELECT rank, sum(calls), sum(calls * dur_ns) FROM int_op_dur_counts "
                                  "GROUP BY rank").fetchall()) == [(0, 5, 25_000), (2, 5, 35_000)]
        db.close()


def test_small_traces_go_in_groups_that_keep_every_worker_busy_and_a_large_one_alone():
    from tracedb.discover import TraceFile
    from tracedb.ingest import SUMMARY_GROUP_MAX_BYTES, summary_groups

    def tf(name: str, size: int) -> TraceFile:
        return TraceFile(Path(name), "r", 0, "p", size, 0)

    small = [tf(f"s{i}.json", 10 << 20) for i in range(11)]
    big = tf("big.json", SUMMARY_GROUP_MAX_BYTES + 1)
    gz = tf("small.json.gz", SUMMARY_GROUP_MAX_BYTES // 5)  # about 10x that much JSON: large
    names = lambda groups: [[t.path.name for t in g] for g in groups]  # noqa: E731
    # 11 small on 2 workers: in their order, groups of 6 (no more than 8);
    # a large one alone, as it comes
    assert names(summary_groups([big, *small[:5], gz, *small[5:]], 2)) == [
        ["big.json"], ["small.json.gz"], [f"s{i}.json" for i in range(6)], [f"s{i}.json" for i in range(6, 11)]]
    assert [len(g) for g in summary_groups(small, 1)] == [8, 3]
    assert [len(g) for g in summary_groups(small[:3], 4)] == [1, 1, 1]
    # tiny ones: more to a group while its JSON is under 8 MiB, up to 64
    tiny = [tf(f"t{i}.json", 3_500) for i in range(150)]
    assert [len(g) for g in summary_groups(tiny, 2)] == [64, 64, 22]
    assert [len(g) for g in summary_groups(tiny[:100], 2)] == [50, 50]
    assert [len(g) for g in summary_groups([tf(f"m{i}.json", 1 << 20) for i in range(20)], 1)] == [8, 8, 4]
    assert [len(g) for g in summary_groups([tf(f"h{i}.json", 1 << 19) for i in range(20)], 1)] == [16, 4]


def test_a_trace_that_fails_leaves_the_summarizer_to_the_next(wh: Path, tmp_path: Path):
    from tracedb import summaries
    from tracedb.catalog import resource_dir
    from tracedb.views import load_view_files

    defs = load_view_files(resource_dir("queries"))
    file_id, run, rank, phase, tables, info = _ok_traces(wh)[0]
    kw = dict(file_id=file_id, run=run, rank=rank, phase=phase, distributed_info=info)
    bad = tmp_path / "events.parquet"
    bad.write_bytes(b"not parquet at all" * 100)
    (tmp_path / "alone").mkdir()
    expected = summaries.compute(Warehouse(wh), defs, tables, tmp_path / "alone", **kw)
    with summaries.Summarizer(Warehouse(wh), defs, tmp_path / "spill") as summarizer:
        for i in range(2):  # a good trace, then a broken one, then the good one again
            out = tmp_path / f"good{i}"
            out.mkdir()
            made = summarizer.compute(tables, out, **kw)
            assert {v: _rows(p) for v, p in made.items()} == {v: _rows(p) for v, p in expected.items()}
            if i == 0:
                with pytest.raises(duckdb.Error):
                    summarizer.compute({**tables, "events": bad}, tmp_path, **kw)


def two_ranks(tmp_path: Path) -> tuple[Path, tracedb.TraceDB]:
    """A warehouse of the 2-rank fixture (run fx)."""
    write_ranks(tmp_path / "runs", run="fx")
    wh = tmp_path / "wh"
    db = tracedb.open(wh)
    db.ingest([tmp_path / "runs"])
    return wh, db


def overlap_counts(db: tracedb.TraceDB) -> dict[int, tuple[int, int]]:
    return {r[0]: r[1:] for r in db.sql(
        "SELECT rank, comm_kernel_count, compute_kernel_count FROM overlap WHERE run = 'fx'").fetchall()}


def test_ingest_report_counts_the_stale_summaries_its_commit_left(tmp_path: Path):
    wh, db = two_ranks(tmp_path)
    db.close()
    mark_stale(wh)  # both traces' summaries now from "another tracedb"
    write_ranks(tmp_path / "more", run="other", ranks=(0,))
    db = tracedb.open(wh)
    report = db.ingest([tmp_path / "more"])
    assert len(report.ingested) == 1
    assert report.stale_summaries == 2  # the two marked; the new trace's are current
    again = db.ingest([tmp_path / "more"])  # all skipped: nothing committed
    assert not again.ingested and again.stale_summaries is None
    assert db.rebuild_views() == 2
    write_ranks(tmp_path / "third", run="third", ranks=(0,))
    assert db.ingest([tmp_path / "third"]).stale_summaries == 0
    db.close()


def test_comm_patterns_change_makes_summaries_stale_until_migrate(tmp_path: Path):
    wh, db = two_ranks(tmp_path)
    before = overlap_counts(db)
    db.close()
    # gemm kernels become "communication": a pattern for kernels that matches only them
    (wh / "comm_patterns.csv").write_text("source,pattern,library,collective\nkernel,^gemm$,custom,allreduce\n")
    # the next ingest's catalog sees the two older traces' summaries are stale, says so, and
    # the views compute from the events (with the new patterns) meanwhile
    write_ranks(tmp_path / "more", run="other", ranks=(0,))
    res = CliRunner().invoke(main, ["-w", str(wh), "ingest", str(tmp_path / "more")])
    assert res.exit_code == 0, res.output
    assert ("2 trace(s) have summaries made by another tracedb or comm_patterns.csv: the marts compute "
            "from the events (slower) until `tracedb migrate` recomputes them.") in res.stderr
    db = tracedb.open(wh)
    assert "summaries/" not in view_sql(db, "int_comm_ops")
    computed = overlap_counts(db)
    # two steps with one gemm each move from compute to comm; the default comm kernels no longer count
    for rank, (comm, compute) in computed.items():
        assert comm == 2 and compute == before[rank][1] - 2 + before[rank][0]
    assert db.rebuild_views() == 2  # the two stale traces
    assert "summaries/" in view_sql(db, "int_comm_ops")
    assert overlap_counts(db) == computed
    assert {r[0] for r in db.sql("SELECT DISTINCT library FROM collectives").fetchall()} == {"custom"}
    db.close()


def test_remove_and_check_know_the_summary_files(tmp_path: Path):
    wh, db = two_ranks(tmp_path)
    listed = [json.loads(s) for (s,) in db.sql("SELECT summaries FROM traces").fetchall()]
    assert all(set(s) == PER_TRACE for s in listed)
    files = [wh / rel for s in listed for rel in s.values()]
    assert all(f.is_file() for f in files)
    assert db.check().ok

    files[0].unlink()
    report = db.check()
    assert [(p.kind, p.path) for p in report.problems] == [("missing_summary", str(files[0]))]
    report = db.check(repair=True)  # derived data: made again from the events, the trace stays
    assert [p.repaired for p in report.problems] == ["recomputed from the events"]
    assert files[0].is_file() and db.check().ok
    assert db.sql("SELECT count(*) FROM traces").fetchall() == [(2,)]

    assert db.remove("fx") == 2
    assert not any(f.exists() for f in files)
    assert not (wh / "summaries").exists() or not any(p.is_file() for p in (wh / "summaries").rglob("*"))
    assert db.check().ok
    db.close()


def test_running_out_of_memory_is_the_traces_failure_not_the_librarys(tmp_path: Path):
    # an error while computing (here: no memory at all) is a duckdb error that
    # fails this one file; only SQL that does not bind is a ViewError
    from tracedb import summaries
    from tracedb.catalog import resource_dir
    from tracedb.views import load_view_files

    wh, db = two_ranks(tmp_path)
    file_id, files = db.sql("SELECT file_id, files FROM traces ORDER BY rank LIMIT 1").fetchall()[0]
    db.close()
    tables = {t: wh / rel for t, rel in json.loads(files).items()}
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(duckdb.OutOfMemoryException):
        summaries.compute(Warehouse(wh), load_view_files(resource_dir("queries")), tables, out, file_id=file_id, run="fx",
                          rank=0, phase="default", distributed_info=None, threads=2, memory_limit="1KB")


def _view(name: str, sql: str, requires: list[str], layer: str = "intermediate", per_trace: bool = False):
    from tracedb.views import ViewDef
    return ViewDef(name=name, layer=layer, kind="view", path=Path(f"{name}.sql"), sql=sql, description="",
                   requires=requires, per_trace=per_trace)


def test_tables_over_one_trace_are_the_joins_or_their_projections_that_would_run_twice():
    from tracedb.summaries import to_tables
    join = "SELECT * FROM a JOIN b USING (x)"
    needed = [
        _view("stg", "SELECT * FROM raw WHERE x > 0", [], layer="staging"),
        _view("calls", join, ["stg"]),  # read only by `steps`' table: a view
        _view("steps", "-- no JOIN here\nSELECT x, step FROM calls", ["calls"]),  # a projection of a join, read thrice: the narrow table
        _view("union", "SELECT x FROM stg UNION ALL SELECT x FROM stg", ["stg"]),  # read twice, but a union
        _view("once", join, ["stg"]),  # read once: a view
        _view("sums1", "SELECT x, count(*) FROM steps GROUP BY x", ["steps", "union"], per_trace=True),
        _view("sums2", "SELECT x, count(*) FROM steps GROUP BY x", ["steps", "union", "once"], per_trace=True),
        _view("sums3", join, ["steps"], per_trace=True),
        _view("sums4", "SELECT * FROM sums3", ["sums3"], per_trace=True),
    ]
    # sums3 runs for its COPY and for sums4's.
    assert to_tables(needed) == ["steps", "sums3"]


def test_a_view_without_rows_for_a_trace_has_no_summary_file(tmp_path: Path):
    # A trace of CPU ops alone: its op sums and duration counts have rows;
    # no kernel, collective, step or annotation, so the five other per-trace
    # views have none, and no file (null in traces.summaries). The summaries
    # are current all the same, the views over them give no rows with their
    # columns, and a second trace with a collective adds int_comm_ops' only file.
    runs = tmp_path / "runs" / "v1"
    runs.mkdir(parents=True)
    ops = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 2}", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5}
           for i in range(4)]
    (runs / "rank0.json").write_text(json.dumps({"traceEvents": ops}))
    db = tracedb.open(tmp_path / "wh")
    db.ingest([tmp_path / "runs"])
    [(listed,)] = db.sql("SELECT summaries FROM traces").fetchall()
    listed = json.loads(listed)
    assert sorted(v for v, key in listed.items() if key is not None) == ["int_op_dur_counts", "int_op_step_sums"]
    assert sorted(p.parts[-5] for p in (tmp_path / "wh" / "summaries").rglob("*.parquet")) == \
        ["int_op_dur_counts", "int_op_step_sums"]
    assert db.sql("SELECT value FROM tracedb_meta.catalog_info WHERE key = 'stale_summaries'").fetchall() == [("0",)]
    columns = [c for c, in db.sql("SELECT column_name FROM tracedb_meta.tracedb_view_columns "
                                  "WHERE view_name = 'int_comm_ops' ORDER BY position").fetchall()]
    assert [c for c, *_ in db.sql("DESCRIBE int_comm_ops").fetchall()] == columns
    assert db.sql("SELECT count(*) FROM int_comm_ops").fetchall() == [(0,)]
    assert db.sql("SELECT name, calls FROM hotspots ORDER BY name").fetchall() == [("op0", 2), ("op1", 2)]

    gloo = [{"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 1, "ts": 100,
             "dur": 7}]
    (runs / "rank1.json").write_text(json.dumps({"traceEvents": ops + gloo}))
    db.ingest([tmp_path / "runs"])
    assert [p.parts[-3] for p in (tmp_path / "wh" / "summaries" / "int_comm_ops").rglob("*.parquet")] == ["rank=1"]
    assert db.sql("SELECT rank, collective, dur_ns FROM int_comm_ops").fetchall() == [(1, "allreduce", 7000)]


def test_migrate_removes_the_empty_summary_files_of_an_older_tracedb(tmp_path: Path):
    # A warehouse an older tracedb made wrote a file for every view, rows or
    # none: here int_comm_ops' of a CPU-only trace, listed, the summaries
    # stale. migrate recomputes them: the view has no rows, so its file goes
    # (check finds no orphan) and the trace lists null.
    import pyarrow as pa
    import pyarrow.parquet as pq

    runs = tmp_path / "runs" / "v1"
    runs.mkdir(parents=True)
    ops = [{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 5} for i in range(3)]
    (runs / "rank0.json").write_text(json.dumps({"traceEvents": ops}))
    db = tracedb.open(tmp_path / "wh")
    db.ingest([tmp_path / "runs"])
    db.close()
    w = Warehouse(tmp_path / "wh")
    with w.catalog.writing() as con:
        [(file_id, listed)] = con.execute("SELECT file_id, summaries FROM traces").fetchall()
        key = w.summary_key("int_comm_ops", "v1", 0, "default", file_id)
        (tmp_path / "wh" / key).parent.mkdir(parents=True)
        pq.write_table(pa.table({"file_id": pa.array([], pa.string())}), tmp_path / "wh" / key)
        con.execute("UPDATE traces SET summaries = ?, summaries_fingerprint = 'made-by-an-older-tracedb'",
                    [json.dumps({**json.loads(listed), "int_comm_ops": key})])
    db = tracedb.open(tmp_path / "wh")
    assert db.rebuild_views() == 1
    assert not (tmp_path / "wh" / key).exists()
    assert json.loads(db.sql("SELECT summaries FROM traces").fetchall()[0][0])["int_comm_ops"] is None
    assert db.check().problems == []


def test_a_query_of_one_run_or_rank_opens_only_its_summary_files(tmp_path: Path):
    # The per-trace views list every trace's summary files, and DuckDB pays
    # about 0.1 ms a scan for each file it opens: in a warehouse of twenty runs
    # of 1,000 ranks, a query of one run would open 20,000 of them. The files
    # sit under Hive partitions, so a filter on run or rank leaves the others
    # unopened: shown here with files that cannot be read. (hotspots_by_rank's
    # percentiles, over ranks and per rank from one scan, read every rank's.)
    write_ranks(tmp_path / "runs", run="v1")
    write_ranks(tmp_path / "runs", run="v2")
    wh = tmp_path / "wh"
    asks = [("overlap", dict(run="v1")), ("overlap", dict(run="v2", rank=0)),
            ("hotspots", dict(run="v1", kind="kernel"))]
    with tracedb.open(wh) as db:
        assert not db.ingest([tmp_path / "runs"], jobs=1).failed
        before = [db.query(name, **q).fetchall() for name, q in asks]
        listed = db.sql("SELECT run, rank, summaries FROM traces").fetchall()
    assert all(before)
    junk = [wh / key for run, rank, made in listed if (run, rank) == ("v2", 1)
            for key in json.loads(made).values() if key is not None]
    assert len(junk) >= 3  # overlap's and hotspots' two among them
    for path in junk:
        path.write_bytes(b"not a Parquet file")
    with tracedb.open(wh) as db:
        assert [db.query(name, **q).fetchall() for name, q in asks] == before
        for name in ("overlap", "hotspots"):
            with pytest.raises(duckdb.Error):  # the junk is read where a query needs it
                db.query(name, run="v2", kind="kernel" if name == "hotspots" else None).fetchall()
