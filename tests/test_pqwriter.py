"""The Parquet writer that encodes a row group's columns on Arrow's threads
(tracedb/_pqwriter.cpp, store._final_writer): built, and writing the file
pyarrow's writer writes with the same options (the reference here), row
group for row group: the same rows, schema, encodings, dictionaries and
statistics."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tracedb import store
from tracedb.api import TraceDB

FIXTURE = Path(__file__).parent / "fixtures" / "cuda" / "v1" / "rank0.train.json.gz"


def test_the_parallel_writer_is_built():
    """The install compiled it against the pyarrow it runs with (CI's and
    the README's both do): without it a lone trace's events are written on
    one thread."""
    assert store._pqwriter is not None


@pytest.fixture(scope="module")
def final_events(tmp_path_factory) -> Path:
    """A real trace's published events: kernels, runtime calls, CPU ops,
    args, the list columns, NULLs."""
    db = TraceDB(tmp_path_factory.mktemp("wh"))
    report = db.ingest([FIXTURE], run="v1", rank=0, jobs=1)
    assert len(report.ingested) == 1
    [path] = db.warehouse.glob("events/**/*.parquet")
    return path


def _column_chunks(path: Path) -> list[list[dict]]:
    meta = pq.ParquetFile(path).metadata
    out = []
    for g in range(meta.num_row_groups):
        group = []
        for c in range(meta.num_columns):
            col = meta.row_group(g).column(c)
            stats = col.statistics if col.is_stats_set else None
            group.append({"path": col.path_in_schema, "encodings": sorted(col.encodings),
                          "compression": col.compression, "dictionary": col.has_dictionary_page,
                          "values": col.num_values,
                          "stats": stats and (stats.has_min_max and (stats.min, stats.max), stats.null_count)})
        out.append(group)
    return out


@pytest.mark.parametrize("rows_per_group", [1, 700, 1_000_000])
def test_writes_what_pyarrows_writer_writes(tmp_path, final_events, rows_per_group):
    rows = pq.read_table(final_events)
    assert rows.num_rows > 2_000 and rows.column("args").null_count < rows.num_rows
    schema = store.FINAL_SCHEMAS["events"]
    assert rows.schema.equals(schema)
    groups = [rows.slice(at, rows_per_group) for at in range(0, min(rows.num_rows, 50 * rows_per_group), rows_per_group)]

    ref = tmp_path / "pyarrow.parquet"
    with pq.ParquetWriter(ref, schema, compression="zstd", **store._encodings(schema)) as w:
        for g in groups:
            w.write_table(g, row_group_size=store.FINAL_ROW_GROUP)
    out = tmp_path / "threads.parquet"
    with store._final_writer(out, schema, threads=2) as write:
        for g in groups:
            write(g)

    written, expected = pq.ParquetFile(out), pq.ParquetFile(ref)
    assert written.schema_arrow.equals(expected.schema_arrow, check_metadata=True)
    assert written.metadata.metadata == expected.metadata.metadata  # the stored Arrow schema
    assert written.metadata.num_row_groups == len(groups)
    assert [written.metadata.row_group(i).num_rows for i in range(len(groups))] == [g.num_rows for g in groups]
    assert _column_chunks(out) == _column_chunks(ref)
    assert written.read().equals(expected.read())
    # The options did something: delta integers, dictionaries on the texts
    # but args, no statistics for the names.
    chunks = {c["path"]: c for c in _column_chunks(out)[0]}
    assert "DELTA_BINARY_PACKED" in chunks["ts_ns"]["encodings"] and not chunks["ts_ns"]["dictionary"]
    assert chunks["name"]["dictionary"] and chunks["name"]["stats"] is None
    assert not chunks["args"]["dictionary"] and chunks["cat"]["stats"] is not None
    assert chunks["ts_ns"]["compression"] == "ZSTD"


def test_a_file_it_cannot_open_is_an_oserror_naming_it(tmp_path):
    dst = tmp_path / "no such folder" / "events.parquet"
    with pytest.raises(OSError, match="no such folder"):
        with store._final_writer(dst, store.FINAL_SCHEMAS["events"], threads=2):
            pass


def test_closed_twice_is_closed_and_a_write_after_is_refused(tmp_path, final_events):
    rows = pq.read_table(final_events).slice(0, 10)
    opts = store._encodings(rows.schema)
    w = store._pqwriter.Writer(str(tmp_path / "x.parquet"), rows.schema.__arrow_c_schema__(),
                               opts["use_dictionary"], list(opts["column_encoding"]), opts["write_statistics"])
    w.write(rows.__arrow_c_stream__())
    w.close()
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.write(rows.__arrow_c_stream__())
    assert pq.read_table(tmp_path / "x.parquet").equals(rows)
