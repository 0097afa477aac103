"""Ingest end to end on a folder of small traces with round numbers:
v1/ (2 ranks), v2/ (2 ranks), infer/{prefill,decode}/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import tracedb
from oracle import expected_counts
from conftest import write_trace


def _events(rank: int, scale: int) -> list[dict]:
    """A tiny Kineto-like trace: a CPU op launching a kernel, a B/E pair, an
    instant, a counter, a flow pair and metadata. Durations scale with the
    version so v1 and v2 differ."""
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "main"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 7,
         "ts": 1000, "dur": 100 * scale, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 7,
         "ts": 1010, "dur": 10, "args": {"correlation": 5, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
         "ts": 1050, "dur": 200 * scale, "args": {"correlation": 5, "device": 0, "stream": 7,
                                                 "grid": [4, 1, 1], "block": [128, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "relu", "pid": 0, "tid": 7,
         "ts": 1700, "dur": 50, "args": {"correlation": 6, "device": 0, "stream": 7}},
        {"ph": "B", "name": "step", "pid": 1, "tid": 7, "ts": 900},
        {"ph": "E", "name": "step", "pid": 1, "tid": 7, "ts": 2000},
        {"ph": "i", "name": "marker", "pid": 1, "tid": 7, "ts": 1500, "s": "t"},
        {"ph": "C", "name": "memory", "pid": 1, "ts": 1000, "args": {"allocated": 10 + rank, "reserved": 20}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 1, "tid": 7, "ts": 1010},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 5, "pid": 0, "tid": 7, "ts": 1050, "bp": "e"},
    ]


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    for version, scale in (("v1", 1), ("v2", 2)):
        for rank in (0, 1):
            write_trace(root / version / f"rank{rank}.json", _events(rank, scale),
                        distributedInfo={"backend": "nccl", "rank": rank, "world_size": 2})
    write_trace(root / "infer" / "prefill" / "rank0.json", _events(0, 1))
    write_trace(root / "infer" / "decode" / "rank-0.json.gz", _events(0, 3), gz=True)
    return root


EXPECTED = {  # file -> (run, rank, phase)
    "v1/rank0.json": ("v1", 0, "default"),
    "v1/rank1.json": ("v1", 1, "default"),
    "v2/rank0.json": ("v2", 0, "default"),
    "v2/rank1.json": ("v2", 1, "default"),
    "infer/prefill/rank0.json": ("infer", 0, "prefill"),
    "infer/decode/rank-0.json.gz": ("infer", 0, "decode"),
}


def test_events_hold_each_files_complete_events(runs: Path, warehouse: Path):
    db = tracedb.open(warehouse)
    report = db.ingest([runs], jobs=1)
    assert len(report.ingested) == 6 and not report.failed
    con = db.connect()
    for rel, (run, rank, phase) in EXPECTED.items():
        path = runs / rel
        row = con.execute(
            "SELECT file_id, run, rank, phase, event_count, flow_count, counter_count FROM traces "
            "WHERE source_path = ?", [str(path)]).fetchone()
        assert row[1:4] == (run, rank, phase), rel
        expected = expected_counts(_events(rank, 1))
        assert row[4:] == (expected["events"], expected["flows"], expected["counters"])
        for table, count in expected.items():
            n = con.execute(f"SELECT count(*) FROM {table} WHERE file_id = ?", [row[0]]).fetchone()[0]
            assert n == count, (rel, table)
            part = warehouse / table / f"run={run}" / f"rank={rank}" / f"phase={phase}" / f"{row[0]}.parquet"
            assert part.exists()


@pytest.mark.parametrize("setting", [("ONE_ROW_GROUP_EVENTS", 0), ("FINAL_ROW_GROUP_BYTES", 1)],
                         ids=["as a large trace's", "a tiny trace's past the bytes of one row group"])
def test_statistics_prune_by_trace_time_and_lane(runs: Path, warehouse: Path, monkeypatch, setting):
    """A published file's row groups give the least and greatest file_id (its
    own), ts_ns and cat, for a reader to skip other traces, other times and
    other kinds of event: a row group holds one lane (schema.EVENT_LANES);
    none for the text every row has (store._NO_STATISTICS), which prunes
    nothing. The trace is tiny, so its row groups are made as a large
    trace's, or its rows made larger than a row group may hold (then a tiny
    trace's lanes are not joined into one)."""
    monkeypatch.setattr(f"tracedb.store.{setting[0]}", setting[1])
    db = tracedb.open(warehouse)
    db.ingest([runs / "v1"], jobs=1)
    file_id, files = db.connect().execute("SELECT file_id, files FROM traces WHERE rank = 0").fetchone()
    meta = pq.ParquetFile(warehouse / json.loads(files)["events"]).metadata
    groups = []
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g)
        by_name = {stats.column(i).path_in_schema: stats.column(i).statistics for i in range(stats.num_columns)}
        assert (by_name["file_id"].min, by_name["file_id"].max) == (file_id, file_id)
        assert by_name["name"] is None and by_name["args"] is None
        cat = by_name["cat"]
        groups.append((stats.num_rows, by_name["ts_ns"].min, by_name["ts_ns"].max,
                       (cat.min, cat.max) if cat.has_min_max else None))
    assert groups == [
        (4, 900_000, 1_500_000, None),  # lane 0: the two metadata events, the B/E step, the marker
        (1, 1_000_000, 1_000_000, ("cpu_op", "cpu_op")),
        (1, 1_010_000, 1_010_000, ("cuda_runtime", "cuda_runtime")),
        (2, 1_050_000, 1_700_000, ("kernel", "kernel")),  # gemm, relu
    ]


def test_a_tiny_traces_lanes_share_one_row_group(runs: Path, warehouse: Path):
    """A trace of fewer than store.ONE_ROW_GROUP_EVENTS events is one row
    group (the writer's cost is per row group, not per row), its rows lane
    after lane as in the test above: 4 + 1 + 1 + 2."""
    db = tracedb.open(warehouse)
    db.ingest([runs / "v1"], jobs=1)
    files = db.connect().execute("SELECT files FROM traces WHERE rank = 0").fetchone()[0]
    f = pq.ParquetFile(warehouse / json.loads(files)["events"])
    assert f.metadata.num_row_groups == 1
    stats = f.metadata.row_group(0)
    ts = next(stats.column(i).statistics for i in range(stats.num_columns)
              if stats.column(i).path_in_schema == "ts_ns")
    assert (stats.num_rows, ts.min, ts.max) == (8, 900_000, 1_700_000)
    cats = f.read(columns=["cat"]).column("cat").to_pylist()
    assert cats[4:] == ["cpu_op", "cuda_runtime", "kernel", "kernel"]
    assert not {"cpu_op", "cuda_runtime", "kernel"} & set(cats[:4])


def test_values_are_exact(runs: Path, warehouse: Path):
    db = tracedb.open(warehouse)
    db.ingest([runs], jobs=1)
    rows = db.sql(
        "SELECT run, rank, name, ts_ns, dur_ns, self_ns, device, stream, grid, correlation FROM events "
        "WHERE cat = 'kernel' AND name = 'gemm' ORDER BY run, rank").fetchall()
    assert [(r[0], r[1]) for r in rows] == [("infer", 0), ("infer", 0), ("v1", 0), ("v1", 1), ("v2", 0), ("v2", 1)]
    v2 = [r for r in rows if r[0] == "v2"][0]
    assert v2[3:] == (1_050_000, 400_000, 400_000, 0, 7, [4, 1, 1], 5)
    # B/E became one slice of 1100 us; self time: 1100 less the mm op (100 or 200 us)
    step = db.sql("SELECT ph, dur_ns, self_ns FROM events WHERE run = 'v2' AND rank = 0 AND name = 'step'").fetchall()
    assert step == [("X", 1_100_000, 900_000)]
    mm = db.sql("SELECT self_ns FROM events WHERE run = 'v2' AND rank = 0 AND name = 'aten::mm'").fetchall()[0]
    assert mm == (200_000 - 10_000,)
    counters = db.sql("SELECT series, value FROM counters WHERE run = 'v1' AND rank = 1 ORDER BY series").fetchall()
    assert counters == [("allocated", 11.0), ("reserved", 20.0)]


def test_hotspots_totals(runs: Path, warehouse: Path):
    db = tracedb.open(warehouse)
    db.ingest([runs], jobs=1)
    rows = db.query("hotspots", run="v2").fetchall()
    cols = db.query("hotspots", run="v2").columns
    got = {r[cols.index("name")]: r for r in rows}
    assert set(got) == {"gemm", "relu"}  # kernels by default
    gemm = got["gemm"]
    assert gemm[cols.index("calls")] == 2
    assert gemm[cols.index("total_us")] == 800.0
    assert gemm[cols.index("pct_of_total")] == pytest.approx(100 * 800 / 900)
    by_rank = db.query("hotspots", run="v2", rank=1, kind="cpu_op").fetchall()
    assert len(by_rank) == 1 and by_rank[0][4] == "aten::mm"


def test_first_commit_in_a_process_of_its_own(runs: Path, warehouse: Path, tmp_path: Path, monkeypatch):
    """Above EARLY_COMMIT_THREAD_MAX_BYTES of JSON, a new warehouse's first
    commit runs in a process of its own (its memory goes when it exits);
    what it commits is the catalog the traces' commit then adds to. Run
    from a folder holding another ``tracedb`` package, it imports tracedb's."""
    import tracedb.ingest as ingest

    monkeypatch.setattr(ingest, "EARLY_COMMIT_THREAD_MAX_BYTES", 0)
    (tmp_path / "cwd" / "tracedb").mkdir(parents=True)
    (tmp_path / "cwd" / "tracedb" / "__init__.py").write_text("raise SystemExit('not tracedb')\n")
    monkeypatch.chdir(tmp_path / "cwd")
    made = []
    real = ingest._empty_commit_in_process
    monkeypatch.setattr(ingest, "_empty_commit_in_process", lambda wh: made.append(real(wh)))
    db = tracedb.open(warehouse)
    report = db.ingest([runs], jobs=1)
    assert made == [None] and len(report.ingested) == 6 and not report.failed
    got = {r[0]: r[1:] for r in db.sql("SELECT name, calls, total_us FROM hotspots WHERE run = 'v2'").fetchall()}
    assert got == {"gemm": (2, 800.0), "relu": (2, 100.0), "aten::mm": (2, 400.0)}


@pytest.mark.parametrize("traces, since_s, last_cost_s, due", [
    (0, 60.0, 0.0, False),  # nothing to commit
    (1, 4.0, 0.0, False),  # too soon for one trace
    (1, 5.0, 0.0, True),  # five seconds on
    (64, 0.5, 0.0, True),  # 64 traces
    (64, 1.0, 0.1, False),  # the last took 0.1 s: 2 s apart
    (64, 2.0, 0.1, True),
    (1, 5.0, 0.5, False),  # the last took 0.5 s (a large warehouse): 10 s apart
    (1, 10.0, 0.5, True),
])
def test_commits_space_out_as_they_cost_more(traces, since_s, last_cost_s, due):
    from tracedb.ingest import commit_due

    assert commit_due(traces, since_s, last_cost_s) is due


@pytest.mark.parametrize("spacing, commits", [(0, [1, 1, 1, 1, 1, 1]), (10**9, [1, 5])])
def test_ingest_commits_as_spaced(runs: Path, warehouse: Path, monkeypatch, spacing, commits):
    """Six traces, a commit due after each: each is committed, or, when the
    first commit took too long for another to follow within the ingest, the
    other five are committed at its end."""
    import tracedb.ingest as ingest
    from tracedb.warehouse import Warehouse

    monkeypatch.setattr(ingest, "COMMIT_EVERY_FILES", 1)
    monkeypatch.setattr(ingest, "COMMIT_SPACING", spacing)
    registered = []
    real = Warehouse.register
    monkeypatch.setattr(Warehouse, "register", lambda self, rows, on_wait=None: (
        registered.append(len(rows)), real(self, rows, on_wait))[1])
    db = tracedb.open(warehouse)
    report = db.ingest([runs], jobs=1)
    assert len(report.ingested) == 6 and not report.failed
    assert registered == commits
    assert db.sql("SELECT count(*) FROM traces WHERE status = 'ok'").fetchall() == [(6,)]


def test_ingest_again_changes_nothing(runs: Path, warehouse: Path):
    db = tracedb.open(warehouse)
    db.ingest([runs], jobs=1)
    before = db.sql("SELECT file_id, event_count, ingested_at FROM traces ORDER BY file_id").fetchall()
    parquet_before = sorted(p.relative_to(warehouse) for p in warehouse.rglob("*.parquet"))
    report = db.ingest([runs], jobs=1)
    assert len(report.skipped) == 6 and not report.ingested and not report.failed
    assert db.sql("SELECT file_id, event_count, ingested_at FROM traces ORDER BY file_id").fetchall() == before
    assert sorted(p.relative_to(warehouse) for p in warehouse.rglob("*.parquet")) == parquet_before
    # a touched file with the same content is recognised by its hash
    (runs / "v1" / "rank0.json").touch()
    report = tracedb.open(warehouse).ingest([runs], jobs=1)
    assert len(report.skipped) == 6 and not report.ingested


def test_only_the_new_file_is_ingested(runs: Path, warehouse: Path):
    db = tracedb.open(warehouse)
    db.ingest([runs], jobs=1)
    write_trace(runs / "v2" / "rank2.json", _events(2, 2),
                distributedInfo={"rank": 2, "world_size": 3})
    report = db.ingest([runs], jobs=2)
    assert [Path(r.path).name for r in report.ingested] == ["rank2.json"]
    assert len(report.skipped) == 6
    assert db.sql("SELECT count(*) FROM traces WHERE status = 'ok'").fetchall()[0] == (7,)
    assert db.sql("SELECT count(DISTINCT rank) FROM events WHERE run = 'v2'").fetchall()[0] == (3,)


def test_parallel_jobs_give_the_same_warehouse(runs: Path, tmp_path: Path):
    a = tracedb.open(tmp_path / "a")
    a.ingest([runs], jobs=1)
    b = tracedb.open(tmp_path / "b")
    b.ingest([runs], jobs=2)
    q = "SELECT run, rank, phase, file_id, event_id, ts_ns, dur_ns, self_ns, name FROM events ORDER BY ALL"
    assert a.sql(q).fetchall() == b.sql(q).fetchall()


def test_catalog_opens_read_only_from_another_directory(runs: Path, warehouse: Path, tmp_path: Path):
    tracedb.open(warehouse).ingest([runs], jobs=1)
    code = (
        "import duckdb, sys\n"
        f"con = duckdb.connect({str(warehouse / 'tracedb.duckdb')!r}, read_only=True)\n"
        "print(con.execute('SELECT count(*) FROM events').fetchone()[0])\n"
        "print(con.execute(\"SELECT sum(calls) FROM hotspots WHERE kind = 'kernel'\").fetchone()[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    n_events = sum(expected_counts(_events(0, 1))["events"] for _ in range(6))
    assert out.stdout.split() == [str(n_events), "12"]  # 6 files x 2 kernels


def test_rank_override_and_run_override(tmp_path: Path, warehouse: Path):
    f = write_trace(tmp_path / "x" / "trace.json", _events(0, 1),
                    distributedInfo={"rank": 5})
    db = tracedb.open(warehouse)
    db.ingest([f], run="custom", rank=3, phase="decode", jobs=1)
    assert db.sql("SELECT run, rank, phase, rank_source FROM traces").fetchall() == [
        ("custom", 3, "decode", "override")]


@pytest.mark.parametrize("version, stored", [
    (1, "1"), ("1.0.2", "1.0.2"), (1.5, "1.5"), ({"major": 1}, '{"major": 1}'), ([1, 2], "[1, 2]")])
def test_schema_version_is_stored_as_json_text(tmp_path: Path, warehouse: Path, version, stored: str):
    """schemaVersion as the trace writes it: a string as it is, any other
    value as JSON (Kineto writes an integer)."""
    f = write_trace(tmp_path / "r" / "rank0.json", _events(0, 1), schemaVersion=version)
    db = tracedb.open(warehouse)
    db.ingest([f], jobs=1)
    assert db.sql("SELECT schema_version FROM traces").fetchall() == [(stored,)]


def test_distributed_info_rank_wins_over_file_name(tmp_path: Path, warehouse: Path):
    f = write_trace(tmp_path / "r" / "rank7.json", _events(0, 1), distributedInfo={"rank": 2})
    db = tracedb.open(warehouse)
    db.ingest([f], jobs=1)
    row = db.sql("SELECT run, rank, phase, rank_source, distributed_info FROM traces").fetchall()[0]
    assert row[:4] == ("r", 2, "default", "distributedInfo")
    assert json.loads(row[4]) == {"rank": 2}


def test_failed_file_is_recorded_and_others_ingest(runs: Path, warehouse: Path):
    (runs / "v1" / "rank9.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1,')
    db = tracedb.open(warehouse)
    report = db.ingest([runs], jobs=1)
    assert len(report.ingested) == 6 and len(report.failed) == 1
    status, error = db.sql("SELECT status, error FROM traces WHERE source_path LIKE '%rank9.json'").fetchall()[0]
    assert status == "failed"
    assert "rank9.json" in error and "truncated" in error


def test_a_warehouse_of_another_kind_is_refused(tmp_path: Path, runs: Path):
    other = tmp_path / "not_a_warehouse"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(tracedb.WarehouseError, match="not a tracedb warehouse"):
        tracedb.open(other).ingest([runs])


def test_empty_warehouse_views_answer(tmp_path: Path):
    f = tmp_path / "bad" / "x.json"
    f.parent.mkdir()
    f.write_text("")
    db = tracedb.open(tmp_path / "wh")
    report = db.ingest([f], jobs=1)
    assert len(report.failed) == 1
    assert db.sql("SELECT count(*) FROM events").fetchall()[0] == (0,)
    assert db.query("hotspots").fetchall() == []
    con = duckdb.connect(str(tmp_path / "wh" / "tracedb.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM traces WHERE status = 'failed'").fetchone() == (1,)


_FREED_HEAP = """
import ctypes, sys
from tracedb import store

def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) >> 10 for line in f if line.startswith("VmRSS"))

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
# 200 MiB in blocks of 64 KiB (under malloc's mmap threshold: from its heap),
# every 16th kept, so that the heap cannot shrink from its top
blocks = [libc.malloc(64 << 10) for _ in range(3200)]
for b in blocks:
    ctypes.memset(b, 1, 64 << 10)
for i, b in enumerate(blocks):
    if i % 16:
        libc.free(ctypes.c_void_p(b))
before = rss_mib()
store.give_back_freed()
print(before, rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heaps")
def test_the_writer_gives_the_freed_heap_back():
    from tracedb import store
    if store._malloc_trim is None:
        pytest.skip("no malloc_trim in this C library")
    out = subprocess.run([sys.executable, "-c", _FREED_HEAP], capture_output=True, text=True, check=True,
                         env={**os.environ, "MALLOC_ARENA_MAX": "2"})
    before, after = map(int, out.stdout.split())
    assert before >= 200  # the 200 MiB written, 187.5 of them freed: still held
    assert after <= before - 150


def _kernel(root: Path, *, background_bytes: int = 0, ratio: int = 10, available_kb: int | None = 20_000_000,
            dirty_kb: int = 0, writeback_kb: int = 0, cgroup: str | None = None,
            files: dict[str, str] | None = None) -> tuple[Path, Path]:
    """A /proc and a /sys/fs/cgroup with what plain_staging_bytes reads."""
    proc, cgroups = root / "proc", root / "cgroup"
    (proc / "sys" / "vm").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "sys" / "vm" / "dirty_background_bytes").write_text(f"{background_bytes}\n")
    (proc / "sys" / "vm" / "dirty_background_ratio").write_text(f"{ratio}\n")
    meminfo = "MemTotal:       32000000 kB\nMemFree:         1000000 kB\n"
    if available_kb is not None:
        meminfo += f"MemAvailable:   {available_kb} kB\n"
    meminfo += f"Dirty:          {dirty_kb} kB\nWriteback:      {writeback_kb} kB\n"
    (proc / "meminfo").write_text(meminfo + "HugePages_Total:       0\n")
    if cgroup is not None:
        (proc / "self" / "cgroup").write_text(cgroup)
    for rel, text in (files or {}).items():
        (cgroups / rel).parent.mkdir(parents=True, exist_ok=True)
        (cgroups / rel).write_text(text)
    return proc, cgroups


@pytest.mark.parametrize(("kernel", "expected"), [
    # vm.dirty_background_bytes, when set, is the threshold: half of it
    (dict(background_bytes=600_000_000), 300_000_000),
    # else 10% of MemAvailable (20,000,000 kB = 20,480,000,000 bytes), halved
    (dict(), 1_024_000_000),
    (dict(ratio=5), 512_000_000),
    # less what is dirty or being written already: (2,048,000,000 - 500 MiB
    # dirty - 100 MiB in writeback) / 2, and nothing once that passes it
    (dict(dirty_kb=512_000, writeback_kb=102_400), 709_427_200),
    (dict(background_bytes=600_000_000, dirty_kb=100_000), 248_800_000),
    (dict(dirty_kb=3_000_000), 0),
    # a cgroup v2 with 3 GiB left of its 4 GiB: 10% of 3 GiB, halved
    (dict(cgroup="0::/job\n", files={"job/memory.max": "4294967296\n", "job/memory.current": "1073741824\n"}),
     161_061_273),
    # cgroup v2 without a limit, and v1 without one (its huge number): MemAvailable's
    (dict(cgroup="0::/job\n", files={"job/memory.max": "max\n", "job/memory.current": "1073741824\n"}),
     1_024_000_000),
    (dict(cgroup="5:memory:/job\n0::/\n", files={"memory/job/memory.limit_in_bytes": "9223372036854771712\n",
                                               "memory/job/memory.usage_in_bytes": "1073741824\n"}),
     1_024_000_000),
    # cgroup v1 with 2 GiB left of 2.5 GiB, beside a v2 root without memory files
    (dict(cgroup="5:cpu,memory:/job\n0::/\n", files={"memory/job/memory.limit_in_bytes": "2684354560\n",
                                                   "memory/job/memory.usage_in_bytes": "536870912\n"}),
     107_374_182),
    # a cgroup that has used more than its limit: nothing uncompressed
    (dict(cgroup="0::/job\n", files={"job/memory.max": "1000\n", "job/memory.current": "5000\n"}), 0),
    # a kernel that does not say what memory is available: all lz4
    (dict(available_kb=None), 0),
])
def test_plain_staging_is_half_the_kernels_background_dirty_threshold(tmp_path, kernel, expected):
    from tracedb.store import plain_staging_bytes
    assert plain_staging_bytes(*_kernel(tmp_path, **kernel)) == expected


def test_plain_staging_is_nothing_where_the_kernel_has_no_proc(tmp_path):
    from tracedb.store import plain_staging_bytes
    assert plain_staging_bytes(tmp_path / "no-proc", tmp_path / "no-cgroup") == 0


@pytest.mark.parametrize(("kernel", "expected"), [
    (dict(), 20_480_000_000),  # MemAvailable, 20,000,000 kB
    # a cgroup v2 with 3 GiB left of its 4 GiB: what it has left
    (dict(cgroup="0::/job\n", files={"job/memory.max": "4294967296\n", "job/memory.current": "1073741824\n"}),
     3_221_225_472),
    (dict(available_kb=None), None),
])
def test_memory_available_is_the_kernels_or_the_cgroups_if_less(tmp_path, kernel, expected):
    from tracedb.store import memory_available
    assert memory_available(*_kernel(tmp_path, **kernel)) == expected


def test_an_ingest_lets_go_of_its_files_pages_when_they_are_more_than_half_the_memory(tmp_path):
    from tracedb.discover import TraceFile
    from tracedb.ingest import reads_past_cache

    def files(*sizes: int) -> list[TraceFile]:
        return [TraceFile(Path(f"rank-{i}.json"), "v1", i, "train", size, 0) for i, size in enumerate(sizes)]

    assert reads_past_cache(files(300, 201), 1000)
    assert not reads_past_cache(files(300, 200), 1000)
    assert not reads_past_cache(files(10**12), None)  # the kernel does not say


def _resident_bytes(path: Path) -> int:
    """How many of the file's bytes the page cache holds (util-linux's fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


@pytest.mark.skipif(not shutil.which("fincore"), reason="util-linux's fincore is not installed")
@pytest.mark.parametrize("let_go", [True, False])
def test_a_trace_let_go_leaves_the_page_cache_once_ingested(tmp_path, let_go):
    """With let_go, the trace's pages are dropped once it is read, its rows
    all ingested; without, they stay cached."""
    from tracedb.discover import discover
    from tracedb.ingest import ingest_files, new_summarizer
    from tracedb.warehouse import Warehouse
    fs = subprocess.run(["stat", "-f", "--format=%T", str(tmp_path)], capture_output=True, text=True).stdout
    if fs.strip() == "tmpfs":
        pytest.skip("a tmpfs file's pages are the file: they stay")
    n = 40_000
    events = [{"ph": "X", "name": f"op{i % 7}", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": i * 10, "dur": 5}
              for i in range(n)]
    trace = write_trace(tmp_path / "runs" / "v1" / "rank-0.json", events)
    assert trace.stat().st_size > 4 << 20
    with open(trace, "rb") as f:  # on the disk (a dirty page is not let go), and in the page cache
        os.fsync(f.fileno())
        f.read()
    assert _resident_bytes(trace) > 4 << 20
    wh = Warehouse(tmp_path / "wh")
    wh.create()
    with new_summarizer(wh, threads=1) as summarizer:
        [r] = ingest_files(wh, discover([tmp_path / "runs"]), summarizer, let_go=let_go)
    assert r.status == "ok", r.error
    assert pq.read_table(wh.root / "events").num_rows == n
    if let_go:
        assert _resident_bytes(trace) == 0
    else:
        assert _resident_bytes(trace) > 4 << 20
