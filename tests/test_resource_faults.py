"""A full disk and a read-only warehouse: one clear error line, no partial
files, the warehouse still whole. On a real small tmpfs (mounting needs
root, as in CI containers; skipped elsewhere). chmod cannot stand in for a
read-only warehouse here: root writes through file modes."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

import tracedb
from conftest import write_trace
from oracle import expected_counts
from tracedb import store
from tracedb.cli import main


def _mount(where: Path, size: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or 'not root'})")


@pytest.fixture
def small_fs(tmp_path: Path):
    """A 48 MiB tmpfs at tmp_path/fs, unmounted afterwards."""
    where = tmp_path / "fs"
    _mount(where, "48m")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _events(n: int, tag: str) -> list[dict]:
    return [{"ph": "X", "cat": "kernel", "name": f"{tag}{i % 50}", "pid": 0, "tid": i % 4,
             "ts": 10 * i, "dur": 7, "args": {"correlation": i, "note": tag * 20}} for i in range(n)]


def _leftovers(wh: Path) -> list[str]:
    """Anything an interrupted ingest could leave: staging, temp catalogs."""
    out = [str(p) for p in (wh / ".staging").rglob("*")] if (wh / ".staging").exists() else []
    return out + [str(p) for p in wh.glob(".tracedb.duckdb.*")]


def _fill(fs: Path, leave_bytes: int) -> Path:
    """Fill the file system up to leave_bytes free."""
    st = os.statvfs(fs)
    free = st.f_bavail * st.f_frsize
    filler = fs / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler


def test_full_disk_while_writing_parquet(small_fs: Path, tmp_path: Path):
    runs = tmp_path / "runs"
    write_trace(runs / "v1" / "small.json", _events(10, "a"))
    wh = small_fs / "wh"
    db = tracedb.open(wh)
    assert not db.ingest([runs]).failed
    write_trace(runs / "v1" / "big.json", _events(200_000, "b"))
    filler = _fill(small_fs, 256 << 10)

    res = CliRunner().invoke(main, ["-w", str(wh), "ingest", "--jobs", "1", str(runs)])
    assert res.exit_code == 1
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error")]
    assert errors == [f"Error: {wh}: cannot write the warehouse: No space left on device"]
    assert _leftovers(wh) == []
    db = tracedb.open(wh)
    assert db.check().problems == []  # no orphan Parquet either
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(10,)]

    filler.unlink()  # room again: the same command finishes the job
    res = CliRunner().invoke(main, ["-w", str(wh), "ingest", "--jobs", "1", str(runs)])
    assert res.exit_code == 0, res.output
    db.close()  # its connection holds the catalog it opened: a snapshot
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(200_010,)]


def test_full_disk_while_the_threaded_writer_writes(small_fs: Path):
    """The Parquet writer on Arrow's threads (a lone trace's final files)
    meets a full disk as pyarrow's writer does: an OSError with ENOSPC, which
    cannot_write makes one line."""
    if store._pqwriter is None:
        pytest.skip("the threaded writer is not built")
    _fill(small_fs, 256 << 10)
    schema = store.FINAL_SCHEMAS["flows"]
    n = 50_000
    rows = pa.table({f.name: pa.array([None] * n, f.type) for f in schema} | {
        "file_id": pa.array(["xxh3-0"] * n), "event_id": pa.array(range(n), pa.int64()),
        # distinct ids, written plain: zstd cannot squeeze them into 256 KiB
        "id": pa.array([os.urandom(12).hex() for _ in range(n)])}, schema=schema)
    with pytest.raises(OSError) as caught:
        with store._final_writer(small_fs / "flows.parquet", schema, threads=2) as write:
            for _ in range(4):
                write(rows)
    assert caught.value.errno == errno.ENOSPC
    assert str(store.cannot_write(small_fs, caught.value)) == f"{small_fs}: cannot write the warehouse: No space left on device"


def test_full_disk_while_swapping_the_catalog(small_fs: Path, tmp_path: Path):
    runs = tmp_path / "runs"
    write_trace(runs / "v1" / "a.json", _events(10, "a"))
    wh = small_fs / "wh"
    assert not tracedb.open(wh).ingest([runs]).failed
    catalog_bytes = (wh / "tracedb.duckdb").stat().st_size
    write_trace(runs / "v1" / "b.json", _events(20, "b"))
    # room for b's small Parquet files, not for a copy of the catalog
    filler = _fill(small_fs, catalog_bytes // 2)

    res = CliRunner().invoke(main, ["-w", str(wh), "ingest", str(runs)])
    assert res.exit_code == 1
    errors = [line for line in res.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {wh}: cannot write")
    assert "No space left on device" in errors[0]
    assert _leftovers(wh) == []
    db = tracedb.open(wh)
    assert db.check().problems == []  # b's published files went with the failed swap
    assert db.sql("SELECT count(*) FROM traces").fetchall() == [(1,)]
    filler.unlink()
    assert not db.ingest([runs]).failed
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(30,)]


def test_read_only_warehouse(small_fs: Path, tmp_path: Path):
    runs = tmp_path / "runs"
    events = _events(10, "a")
    write_trace(runs / "v1" / "a.json", events)
    wh = small_fs / "wh"
    assert not tracedb.open(wh).ingest([runs]).failed
    write_trace(runs / "v1" / "b.json", _events(5, "b"))
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    before = sorted(str(p) for p in wh.rglob("*"))

    res = CliRunner().invoke(main, ["-w", str(wh), "ingest", str(runs)])
    assert res.exit_code == 1
    assert res.stderr.splitlines()[-1] == f"Error: {wh}: the warehouse is not writable"
    assert sorted(str(p) for p in wh.rglob("*")) == before

    # Readers still work on a read-only warehouse, and check reads it.
    res = CliRunner().invoke(main, ["-w", str(wh), "sql", "SELECT count(*) AS n FROM events", "-f", "json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == [{"n": expected_counts(events)["events"]}]
    res = CliRunner().invoke(main, ["-w", str(wh), "check"])
    assert res.exit_code == 0 and res.stdout.endswith("OK.\n")
    res = CliRunner().invoke(main, ["-w", str(wh), "check", "--repair"])
    assert res.exit_code == 0  # nothing to repair, nothing written


def test_unwritable_staging_is_one_clear_error(tmp_path):
    """The staging folder cannot be made (a file stands in its way): a
    WarehouseError naming the warehouse and the OS's reason."""
    from tracedb.errors import WarehouseError
    from tracedb.store import TraceWriter
    from tracedb.warehouse import Warehouse

    wh = tmp_path / "wh"
    wh.mkdir()
    Warehouse(wh).staging.write_text("in the way")
    with pytest.raises(WarehouseError) as err:
        TraceWriter(Warehouse(wh))
    assert str(err.value) == f"{wh}: cannot write the warehouse: Not a directory"
