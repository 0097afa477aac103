"""Odd but valid input ingests; bad input raises TraceFormatError naming the
file, the position and the reason. Real files in tmp_path; expectations from
plain json (or written by hand), never from tracedb."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import tracedb
from conftest import corpus_file, write_trace
from oracle import expected_counts
from tracedb.parse import lenient
from tracedb.errors import TraceFormatError
from tracedb.parse import TraceParser


def parse(path: Path) -> tuple[dict[str, int], TraceParser, list]:
    """Rows per table, the parser (for meta) and every events row."""
    tp = TraceParser(path)
    counts = {"events": 0, "flows": 0, "counters": 0}
    rows: list[dict] = []
    for table, batch in tp.batches():
        counts[table] += batch.num_rows
        if table == "events":
            rows.extend(batch.to_pylist())
    return counts, tp, sorted(rows, key=lambda r: r["event_id"])


def ev(i: int = 0, **kw) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1,
            "ts": 10 * i, "dur": 5, **kw}


def format_error(path: Path) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        parse(path)
    e = info.value
    assert e.path == str(path)
    assert "\n" not in str(e)
    return e


# -- odd but valid ------------------------------------------------------------


def test_bare_array_and_missing_cat_and_dur(tmp_path: Path):
    events = [{"ph": "X", "name": "a", "ts": 1, "pid": 0, "tid": 0},  # no cat, no dur
              {"ph": "i", "name": "b", "ts": 2}]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(events))
    counts, tp, rows = parse(p)
    assert counts == expected_counts(events)
    assert tp.meta.form == "array"
    assert [(r["cat"], r["dur_ns"]) for r in rows] == [(None, None), (None, None)]


def test_begin_end_pairs_and_unmatched_ones(tmp_path: Path):
    events = [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 100},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 110},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 130},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 200},
        {"ph": "E", "name": "stray", "pid": 1, "tid": 2, "ts": 300},
        {"ph": "B", "name": "open", "pid": 2, "tid": 1, "ts": 400},
    ]
    p = write_trace(tmp_path / "t.json", events)
    counts, tp, rows = parse(p)
    assert counts == expected_counts(events)
    got = {(r["name"], r["ph"], r["dur_ns"]) for r in rows}
    assert got == {("outer", "X", 100_000), ("inner", "X", 20_000),
                   ("stray", "E", None), ("open", "B", None)}
    assert (tp.meta.unmatched_begin, tp.meta.unmatched_end) == (1, 1)
    assert any("1 B without E, 1 E without B" in w for w in tp.meta.warnings)


def test_string_pids_zero_negative_durations_and_duplicates(tmp_path: Path, warehouse: Path):
    events = [
        {"ph": "X", "name": "span", "pid": "Spans", "tid": "Traces", "ts": 0, "dur": 100},
        {"ph": "X", "name": "zero", "pid": 1, "tid": 1, "ts": 10, "dur": 0},
        {"ph": "X", "name": "negative", "pid": 1, "tid": 1, "ts": 20, "dur": -7},
        ev(3), ev(3),  # the same event twice: kept as two rows
    ]
    write_trace(tmp_path / "runs" / "r" / "t.json", events)
    db = tracedb.open(warehouse)
    report = db.ingest([tmp_path / "runs"])
    assert not report.failed
    rows = db.sql("SELECT name, pid, tid, dur_ns, self_ns FROM events ORDER BY event_id").fetchall()
    assert rows == [
        ("span", "Spans", "Traces", 100_000, 100_000),
        ("zero", "1", "1", 0, 0),
        ("negative", "1", "1", -7_000, None),  # kept; no self time for a negative duration
        # duplicates stay two rows; the second nests in the first (same
        # start and length), so the first has no self time of its own
        ("op3", "1", "1", 5_000, 0),
        ("op3", "1", "1", 5_000, 5_000),
    ]


def test_long_names_non_ascii_and_deep_args(tmp_path: Path, warehouse: Path):
    long_name = "k" * 100_000 + "\u00e9"
    deep: object = "leaf"
    for i in range(800):  # deep nesting, written whole
        deep = {"d": deep} if i % 2 else [deep]
    events = [ev(0, name=long_name), ev(1, name="注意力 αβγ 🚀"), ev(2, args={"deep": deep})]
    write_trace(tmp_path / "runs" / "r" / "t.json", events)
    db = tracedb.open(warehouse)
    assert not db.ingest([tmp_path / "runs"]).failed
    rows = db.sql("SELECT name, CAST(args AS VARCHAR) FROM events ORDER BY event_id").fetchall()
    assert rows[0][0] == long_name
    assert rows[1][0] == "注意力 αβγ 🚀"
    assert json.loads(rows[2][1]) == {"deep": deep}


def test_pathologically_deep_nesting_is_a_format_error_not_a_crash(tmp_path: Path):
    p = tmp_path / "t.json"
    p.write_bytes(b'[{"ph": "i", "args": ' + b"[" * 200_000 + b"]" * 200_000 + b"}]")
    e = format_error(p)
    assert "nested too deeply" in e.reason and e.position == "byte 1, event 0"


@pytest.mark.parametrize("gz", [False, True])
def test_utf8_bom(tmp_path: Path, gz: bool):
    events = [ev(0), ev(1)]
    data = b"\xef\xbb\xbf" + json.dumps({"traceEvents": events, "traceName": "bom"}).encode()
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    counts, tp, _ = parse(p)
    assert counts["events"] == 2 and tp.meta.trace_name == "bom"


def test_nan_and_infinity_from_pythons_json(tmp_path: Path, warehouse: Path):
    events = [ev(0), ev(1, args={"a": float("nan"), "b": float("inf"), "c": -float("inf"), "s": "NaN"}),
              {"ph": "C", "name": "mem", "pid": 1, "ts": 5, "args": {"x": float("nan"), "y": 2}}]
    text = json.dumps({"traceEvents": events, "traceName": "t", "extra": float("nan")})
    assert "NaN" in text and "Infinity" in text
    write_trace(tmp_path / "runs" / "r" / "t.json", [])
    (tmp_path / "runs" / "r" / "t.json").write_text(text)
    db = tracedb.open(warehouse)
    report = db.ingest([tmp_path / "runs"])
    assert not report.failed
    (r,) = report.ingested
    assert any("NaN/Infinity" in w for w in r.warnings)
    counts = db.sql("SELECT event_count, counter_count, trace_name FROM traces").fetchall()[0]
    assert counts == (expected_counts(json.loads(text)["traceEvents"])["events"], 2, "t")
    args = db.sql("SELECT CAST(args AS VARCHAR) FROM events WHERE event_id = 1").fetchall()[0][0]
    assert json.loads(args) == {"a": None, "b": None, "c": None, "s": "NaN"}  # null, as JSON.stringify
    assert db.sql("SELECT series, value FROM counters ORDER BY series").fetchall() == [("x", None), ("y", 2.0)]


def test_integers_past_int64(tmp_path: Path, warehouse: Path):
    big = 2**70 + 1
    events = [ev(0, args={"Comms Id": big, "correlation": big, "neg": -big}),
              ev(1, ts=big),  # a time that cannot be nanoseconds in BIGINT
              ev(2, id=big)]
    write_trace(tmp_path / "runs" / "r" / "t.json", events)
    db = tracedb.open(warehouse)
    report = db.ingest([tmp_path / "runs"])
    assert not report.failed
    rows = db.sql("SELECT CAST(args AS VARCHAR), correlation, ts_ns, id FROM events ORDER BY event_id").fetchall()
    assert json.loads(rows[0][0]) == {"Comms Id": big, "correlation": big, "neg": -big}  # exact
    assert rows[0][1] is None  # the typed column cannot hold it
    assert rows[1][2] is None
    assert rows[2][3] == str(big)
    assert any("out of range" in w for w in report.ingested[0].warnings)


def test_a_number_of_thousands_of_digits_does_not_crash(tmp_path: Path):
    # ijson's C backend segfaults on integers past Python's 4300-digit limit;
    # run in a child so a regression fails this test, not the whole session.
    p = tmp_path / "t.json"
    p.write_bytes(b'[{"ph": "i", "ts": 1, "args": {"n": ' + b"7" * 6000 + b"}}]")
    code = ("import sys; from tracedb.parse import TraceParser; tp = TraceParser(sys.argv[1]);"
            "print(sum(b.num_rows for _, b in tp.batches()), sys.get_int_max_str_digits())")
    out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "4300"]  # the limit is restored afterwards


def test_invalid_utf8_inside_strings(tmp_path: Path):
    data = (b'{"traceEvents": [{"ph": "i", "name": "ab\xff\xfecd", "ts": 1},'
            b' {"ph": "i", "name": "cut \xe2\x82", "ts": 2}, {"ph": "i", "name": "ok \xe2\x82\xac", "ts": 3}]}')
    p = tmp_path / "t.json"
    p.write_bytes(data)
    counts, tp, rows = parse(p)
    oracle = json.loads(data.decode("utf-8", "replace"))["traceEvents"]
    assert [r["name"] for r in rows] == [e["name"] for e in oracle]
    assert rows[2]["name"] == "ok €"
    assert any("invalid UTF-8" in w for w in tp.meta.warnings)


@pytest.mark.parametrize("fast_path", [False, True], ids=["whole file", "pieces"])
def test_a_vertical_tab_or_form_feed_is_not_json(tmp_path: Path, warehouse: Path, monkeypatch, fast_path: bool):
    """yajl reads a vertical tab or a form feed as whitespace; JSON (and
    Python's json) has them nowhere unescaped. Such a file is not read as if
    it were JSON: it fails with one line at the byte (hypothesis found one
    in the top-level keys). In pieces of about an event each, the one
    holding the form feed is not the last (its text is a view of the piece)."""
    events = [b'  {\n    "ph": "i", "name": "a", "ts": 1\n  }', b'  {\n    "ph": "i",\x0c "name": "b", "ts": 2\n  }']
    events += [b'  {\n    "ph": "i", "name": "c%d", "ts": %d\n  }' % (i, i) for i in range(3, 9)]
    text = b'{"traceEvents": [\n' + b",\n".join(events) + b'\n], "x":\x0bnull}'
    p = tmp_path / "t.json"
    p.write_bytes(text)
    at = text.index(b"\x0c")
    if fast_path:  # the pieces' path: the C reader declines, yajl must not take the piece
        monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 64)
        report = tracedb.open(warehouse).ingest([p], jobs=1)
        (r,) = report.results
        assert r.status == "failed" and r.error.startswith(f"{p} at byte {at}, event 1: invalid JSON")
    else:
        assert format_error(p).position == f"byte {at}, event 1"


def test_lone_surrogate_escapes(tmp_path: Path):
    p = tmp_path / "t.json"
    p.write_bytes(b'[{"ph": "i", "name": "a\\udc00b\\ud800\\ud800c", "ts": 1},'
                  b' {"ph": "i", "name": "\\ud83d\\ude80 \\\\ud800", "ts": 2}]')
    _, _, rows = parse(p)
    assert [r["name"] for r in rows] == ["a\ufffdb\ufffd\ufffdc", "🚀 \\ud800"]


@pytest.mark.parametrize("gap", [b"", b"\n  "])  # on one line; an event a block, as Kineto writes
def test_lone_surrogate_escapes_in_top_level_keys(tmp_path: Path, warehouse: Path, gap: bytes):
    """Before and after the events (a lone low surrogate also stops yajl in
    the head): U+FFFD in the catalog, a warning, and the next file ingests."""
    runs = tmp_path / "runs" / "r"
    write_trace(runs / "good.json", [ev(1)])
    (runs / "odd.json").write_bytes(
        b'{"deviceProperties": [{"name": "gpu \\udc00"}, {"name": "\\udc00\\ud800x"}],'
        b' "traceEvents": [' + gap + b'{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2' + gap + b'}'
        + gap + b'],'
        b' "traceName": "t\\ud800"}')
    db = tracedb.open(warehouse)
    report = db.ingest([tmp_path / "runs"])
    assert not report.failed, report.failed[0].error
    assert sorted(Path(r.path).name for r in report.ingested) == ["good.json", "odd.json"]
    (odd,) = [r for r in report.ingested if r.path.endswith("odd.json")]
    assert any("'deviceProperties': lone surrogate" in w for w in odd.warnings)
    assert any("'traceName': lone surrogate" in w for w in odd.warnings)
    [(props, name)] = db.sql("SELECT device_properties, trace_name FROM traces WHERE trace_name IS NOT NULL").fetchall()
    assert json.loads(props) == [{"name": "gpu \ufffd"}, {"name": "\ufffd\ufffdx"}]
    assert name == "t\ufffd"
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(2,)]


def test_old_kineto_quoting(tmp_path: Path, warehouse: Path):
    # pytorch#146900: Kineto wrote names with unescaped quotes (with_stack
    # frames of dynamo code), thread names with quotes, bare N/A values,
    # raw tabs and Windows paths inside strings.
    text = (
        '{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
        '  {\n    "ph": "X", "cat": "python_function", "name": "{"device": "cpu", "dtype": "float32"}(12): run", '
        '"pid": 1, "tid": 1,\n    "ts": 10, "dur": 5\n  },\n'
        '  {\n    "name": "thread_name", "ph": "M", "ts": 0, "pid": 1, "tid": 1,\n'
        '    "args": {\n      "name": "thread "main" 1"\n    }\n  },\n'
        '  {\n    "ph": "C", "name": "bw", "pid": 1, "ts": 20, "args": {"gbps": N/A}\n  },\n'
        '  {\n    "ph": "X", "name": "tab\there", "pid": 1, "tid": 1, "ts": 30, "dur": 1,'
        ' "args": {"file": "C:\\Users\\me\\x.py"}\n  }\n'
        '  ],\n  "traceName": "old"\n}\n'
    )
    write_trace(tmp_path / "runs" / "r" / "t.json", [])
    (tmp_path / "runs" / "r" / "t.json").write_text(text)
    db = tracedb.open(warehouse)
    report = db.ingest([tmp_path / "runs"])
    assert not report.failed, report.failed[0].error
    rows = db.sql("SELECT ph, name, CAST(args AS VARCHAR) FROM events ORDER BY event_id").fetchall()
    assert rows[0][1] == '{"device": "cpu", "dtype": "float32"}(12): run'
    assert rows[1][:2] == ("M", "thread_name") and json.loads(rows[1][2]) == {"name": 'thread "main" 1'}
    assert rows[2][1] == "tab\there" and json.loads(rows[2][2]) == {"file": "C:\\Users\\me\\x.py"}
    assert db.sql("SELECT series, value FROM counters").fetchall() == [("gbps", None)]
    assert db.sql("SELECT trace_name, json_event_count FROM traces").fetchall()[0] == ("old", 4)
    (w,) = [w for w in report.ingested[0].warnings if "tolerant" in w]
    assert 'unescaped quote' in w and 'N/A' in w and 'backslash' in w


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 64])
def test_tolerant_reader_across_chunk_boundaries(tmp_path: Path, monkeypatch, chunk: int):
    # Every split point of NaN/-Infinity tokens, multibyte characters,
    # surrogate pairs, escapes and numbers, by reading a few bytes at a time.
    monkeypatch.setattr(lenient, "CHUNK_BYTES", chunk)
    events = [{"ph": "i", "name": "é€🚀\\\"x", "ts": 123456789, "args": {"v": float("nan"), "w": -float("inf"),
                                                                       "big": 2**80, "f": 1.5e-7}},
              {"ph": "i", "name": "\ud83d\ude80 pair", "ts": 1, "args": {"s": "NaN Infinity"}}]
    text = json.dumps({"traceEvents": events, "tail": [1, 2.5]}, ensure_ascii=True)  # \\u escapes, pairs
    p = tmp_path / "t.json"
    p.write_bytes(text.encode())
    counts, tp, rows = parse(p)
    assert counts["events"] == 2
    assert [r["name"] for r in rows] == ["é€🚀\\\"x", "🚀 pair"]
    assert json.loads(rows[0]["args"]) == {"v": None, "w": None, "big": 2**80, "f": 1.5e-7}
    assert rows[0]["ts_ns"] == 123456789000
    assert tp.meta.other["tail"] == [1, 2.5]


# -- bad input: one TraceFormatError, with where and why ----------------------


def _good(tmp_path: Path, n: int = 50) -> bytes:
    return json.dumps({"traceEvents": [ev(i) for i in range(n)]}, indent=1).encode()


def test_truncated_json_names_the_event(tmp_path: Path):
    data = _good(tmp_path)
    cut = data.index(b'"op20"')
    p = tmp_path / "t.json"
    p.write_bytes(data[:cut])
    e = format_error(p)
    assert e.reason.startswith("truncated JSON") and f"byte {cut}, event 20" == e.position


def test_corrupt_and_truncated_gzip(tmp_path: Path):
    packed = gzip.compress(_good(tmp_path, 2000))
    bad = bytearray(packed)
    for i in range(len(bad) // 3, len(bad) // 3 + 16):
        bad[i] ^= 0xFF
    p = tmp_path / "corrupt.json.gz"
    p.write_bytes(bytes(bad))
    assert "gzip" in format_error(p).reason
    p = tmp_path / "cut.json.gz"
    p.write_bytes(packed[: len(packed) // 2])
    e = format_error(p)
    assert "gzip" in e.reason and "event" in e.position


@pytest.mark.parametrize("content, reason", [
    (b"", "empty file"),
    (b" \n\t\r\n ", "empty file (only whitespace)"),
    (b'{"nodes": [1, 2], "schema": "1.0"}', "not a trace: no traceEvents array"),
    (b'{"traceEvents": {"ph": "X"}}', "not a trace: traceEvents is not an array"),
    (b'"just a string"', "not a trace: starts with '\"'"),
    (b"\x00\x01\x02binary\xff", "not JSON: binary data (byte 0x00)"),
    (b'[{"ph": "X"}] trailing', "trailing data after the JSON document"),
    (b'[1, 2, 3]', "not a trace: the array holds no event objects"),
])
def test_bad_content(tmp_path: Path, content: bytes, reason: str):
    p = tmp_path / "t.json"
    p.write_bytes(content)
    assert reason in format_error(p).reason


def test_binary_that_starts_like_json(tmp_path: Path):
    p = tmp_path / "t.json"
    p.write_bytes(b"[" + os.urandom(4000))
    e = format_error(p)
    assert "JSON" in e.reason and "byte" in e.position


def test_an_execution_trace_is_not_a_trace(tmp_path: Path):
    e = format_error(corpus_file("hta/execution_trace/benchmark_simple_add_et.json.gz"))
    assert e.reason == "not a trace: no traceEvents array"


def test_invalid_json_in_the_middle_gives_the_exact_byte(tmp_path: Path):
    data = _good(tmp_path)
    at = data.index(b'"op30"')
    p = tmp_path / "t.json"
    p.write_bytes(data[:at] + b"@" + data[at + 1:])
    e = format_error(p)
    assert e.reason.startswith("invalid JSON in event 30")
    assert e.position == f"byte {at}, event 30"


def test_ingest_records_each_bad_file(tmp_path: Path, warehouse: Path):
    root = tmp_path / "runs" / "r"
    write_trace(root / "good.json", [ev(0)])
    (root / "empty.json").write_bytes(b"")
    (root / "cut.json").write_bytes(_good(tmp_path)[:100])
    db = tracedb.open(warehouse)
    report = db.ingest([tmp_path / "runs"])
    assert len(report.ingested) == 1 and len(report.failed) == 2
    rows = db.sql("SELECT source_path, status, error FROM traces ORDER BY source_path").fetchall()
    assert [(Path(r[0]).name, r[1]) for r in rows] == [("cut.json", "failed"), ("empty.json", "failed"),
                                                       ("good.json", "ok")]
    assert "truncated JSON" in rows[0][2] and "empty file" in rows[1][2]
    with duckdb.connect(str(warehouse / "tracedb.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM events").fetchone() == (1,)
