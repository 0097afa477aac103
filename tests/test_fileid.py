"""A trace's id is xxh3-128 of its bytes, prefixed; a warehouse made when ids
were BLAKE2b-128 (unprefixed) keeps its ids and does not ingest that content again."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import xxhash

import tracedb
from tracedb import ingest
from conftest import write_trace

EVENTS = [
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 100, "dur": 30},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 0, "tid": 1, "ts": 90, "dur": 50},
]


def _blake2b_ids(path: Path, legacy: bool = False) -> tuple[str, ...]:
    """The file ids of tracedb before xxh3 (its ingest.hash_file, verbatim)."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return (h.hexdigest(),)


def _ids(wh: Path) -> dict[str, str]:
    with tracedb.open(wh) as db:
        return dict(db.sql("SELECT source_path, file_id FROM traces WHERE status = 'ok'").fetchall())


def test_the_id_is_xxh3_128_of_the_bytes_named_by_a_prefix(tmp_path: Path):
    trace = write_trace(tmp_path / "runs" / "v1" / "rank0.json", EVENTS)
    report = tracedb.open(tmp_path / "wh").ingest([trace])
    expected = "xxh3-" + xxhash.xxh3_128(trace.read_bytes()).hexdigest()
    assert [(r.status, r.file_id) for r in report.results] == [("ok", expected)]
    assert len(expected) == len("xxh3-") + 32


def test_a_warehouse_of_blake2b_ids_does_not_ingest_its_content_again(tmp_path: Path, monkeypatch):
    old = write_trace(tmp_path / "runs" / "v1" / "rank0.json", EVENTS)
    wh = tmp_path / "wh"
    # The warehouse as tracedb made it before xxh3: ids (and file names) are BLAKE2b.
    with monkeypatch.context() as m:
        m.setattr(ingest, "content_ids", _blake2b_ids)
        made = tracedb.open(wh).ingest([old])
    legacy_id = hashlib.blake2b(old.read_bytes(), digest_size=16).hexdigest()
    assert [(r.status, r.file_id) for r in made.results] == [("ok", legacy_id)]
    assert [p.name for p in (wh / "events").rglob("*.parquet")] == [f"{legacy_id}.parquet"]

    # The same bytes under another path, and the old path touched (so path, size
    # and mtime no longer match): both recognised by content, under the old id.
    copy = tmp_path / "runs" / "v1" / "copy" / "rank0.json"
    copy.parent.mkdir()
    shutil.copyfile(old, copy)
    st = old.stat()
    os.utime(old, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = tracedb.open(wh).ingest([old, copy])
    assert sorted((r.status, r.file_id) for r in again.results) == [("skipped", legacy_id)] * 2

    # New content gets an xxh3 id beside the old ones.
    new = write_trace(tmp_path / "runs" / "v2" / "rank0.json", EVENTS[:1])
    added = tracedb.open(wh).ingest([new])
    new_id = "xxh3-" + xxhash.xxh3_128(new.read_bytes()).hexdigest()
    assert [(r.status, r.file_id) for r in added.results] == [("ok", new_id)]
    assert _ids(wh) == {str(old): legacy_id, str(new): new_id}
    with tracedb.open(wh) as db:
        assert db.sql("SELECT count(*) FROM events").fetchall() == [(3,)]
