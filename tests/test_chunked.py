"""A file read in pieces (parse/pieces.py: the C reader, or where it
declines, the reference reader on the piece) gives exactly what the
whole-file read (parse/reader.py, the reference) gives: same rows, same
values, same meta; and what only the whole-file read can do raises
NotSplittable."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracedb
from conftest import corpus_file, trace_events
from tracedb.parse import TraceParser, pieces
from tracedb.parse.pieces import NotSplittable, SplitParser, count_events
from tracedb.schema import ARG_COLUMNS

ROOT = Path(__file__).resolve().parent.parent


def _tables(parser) -> dict[str, pa.Table]:
    out: dict[str, list] = {}
    for table, batch in parser.batches():
        out.setdefault(table, []).append(batch)
    keys = {"events": ["event_id"], "flows": ["event_id"], "counters": ["event_id", "series"]}
    return {t: pa.Table.from_batches(bs).sort_by([(k, "ascending") for k in keys[t]])
            for t, bs in out.items()}


def _values(table: pa.Table, col: str) -> list:
    """A column's values; args as the JSON they hold (the fast path keeps the
    trace's spelling of numbers, 464.592590, where the streaming parser
    writes orjson's, 464.59259)."""
    vals = table[col].to_pylist()
    return [None if v is None else json.loads(v) for v in vals] if col == "args" else vals


def _assert_same(path: Path, piece_bytes: int) -> SplitParser:
    ref = TraceParser(path)
    want = _tables(ref)
    fast = SplitParser(path, piece_bytes=piece_bytes)
    got = _tables(fast)
    assert sorted(got) == sorted(want)
    for t in want:
        assert got[t].num_rows == want[t].num_rows, t
        for col in want[t].column_names:
            assert _values(got[t], col) == _values(want[t], col), (t, col)
    for k, v in vars(ref.meta).items():
        assert getattr(fast.meta, k) == v, k
    return fast


@pytest.mark.parametrize("rel", [
    "hta/nccl_parser_config/nccl_data.json.gz",  # fractional µs, baseTimeNanoseconds, keys after events
    "hta/trace_diff/control/control.json.gz",  # integer epoch µs
    "deepseek/train.json",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",  # fractional epoch µs
    "hta/trace_filter/sampled_rank-1.json.gz",  # on one line
])
def test_corpus_same_as_streaming(rel):
    _assert_same(corpus_file(rel), piece_bytes=256 << 10)


def _kineto_text(events: list[dict], **top) -> str:
    """Kineto's layout: top-level keys, then one event per '  {' ... '  }' block."""
    head = "".join(f'  "{k}": {json.dumps(v)},\n' for k, v in top.items() if k != "baseTimeNanoseconds")
    body = ",\n".join("  {\n    " + json.dumps(e)[1:-1] + "\n  }" if isinstance(e, dict)
                       else "  " + json.dumps(e) for e in events)
    tail = ""
    if "baseTimeNanoseconds" in top:
        tail = f',\n  "traceName": "x.json",\n  "baseTimeNanoseconds": {top["baseTimeNanoseconds"]}'
    return "{\n" + head + '  "traceEvents": [\n' + body + "\n  ]" + tail + "\n}\n"


def _events(n: int) -> list[dict]:
    evs = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "main"}}]
    for i in range(n):
        evs.append({"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 7,
                    "ts": 1000 + 10 * i, "dur": 5, "args": {"External id": i, "Sequence number": i}})
        evs.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": "stream 7",
                    "ts": 1002 + 10 * i, "dur": 3, "args": {"correlation": i, "device": 0, "stream": 7,
                                                             "grid": [4, 1, 1], "bytes": 1 << 40}})
        evs.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 1, "tid": 7, "ts": 1001 + 10 * i})
        evs.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": i, "pid": 0, "tid": 7,
                    "ts": 1002 + 10 * i, "bp": "e"})
    evs.append({"ph": "C", "name": "memory", "pid": 1, "ts": 1000, "args": {"allocated": 10, "reserved": 2.5}})
    evs.append({"ph": "i", "name": "marker", "pid": "Traces", "tid": "", "ts": 1500, "s": "g"})
    return evs


def _write(path: Path, text: str, gz: bool = False) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_kineto_layout_same_as_streaming(tmp_path, gz):
    text = _kineto_text(_events(400), schemaVersion=1, distributedInfo={"rank": 3},
                        baseTimeNanoseconds=1_700_000_000_000_000_000)
    path = _write(tmp_path / ("t.json.gz" if gz else "t.json"), text, gz)
    fast = _assert_same(path, piece_bytes=4096)
    assert fast.meta.base_time_ns == 1_700_000_000_000_000_000
    assert fast.meta.distributed_info == {"rank": 3}


def test_fractional_times_are_exact(tmp_path):
    """3 decimals, 4 decimals (rounded half to even) and fractional epoch
    µs, whose doubles no longer hold the fraction: exact, as written."""
    evs = _events(50)
    fine = ["4458676522690.655", "4458677009853.422", "8796093022207.999", "0.001", "1.5",
            "1712195495519695.7", "1712195495519695.8", "12.3456", "4458677009853.4225"]
    for i in range(len(fine)):
        evs.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": f"@k{i}@", "dur": 1.001,
                    "args": {"warps per SM": 0.074074}})  # 4+ decimals in args do not count
    raw = _kineto_text(evs)
    for i, text in enumerate(fine):  # the literal texts, as a profiler writes them
        raw = raw.replace(f'"@k{i}@"', text)
    path = _write(tmp_path / "t.json", raw)
    _assert_same(path, piece_bytes=2048)
    fast = _tables(SplitParser(path))["events"].to_pylist()
    got = {r["name"]: r["ts_ns"] for r in fast if r["name"].startswith("k")}
    assert got["k0"] == 4458676522690655
    assert got["k1"] == 4458677009853422
    assert got["k2"] == 8796093022207999
    assert got["k3"] == 1
    assert got["k5"] == 1712195495519695700
    assert got["k6"] == 1712195495519695800
    assert got["k7"] == 12346  # 12345.6 ns, rounded half-even like the streaming parser
    assert got["k8"] == 4458677009853422  # its double, 4458677009853.423, would say ...423


@given(st.binary(max_size=80).map(lambda b: bytes(b" \n{a"[x % 4] for x in b)), st.integers(0, 4))
def test_events_counted_like_bytes_count(data, indent):
    """The splitter's count of event starts is bytes.count's, whatever the
    indent (none: a newline and a brace)."""
    sep = b"\n" + b" " * indent + b"{"
    assert count_events(data, sep) == data.count(sep)


@pytest.mark.parametrize("gz", [False, True])
def test_pieces_hold_each_event_once_in_order(tmp_path, gz):
    """The splitter's pieces, read as JSON, are the file's events, each once
    and in order, each piece's base the count before it. A plain file is
    read again from each cut (no bytes carried), so its pieces are at most
    the piece size; a file that fits in one read is one piece."""
    text = _kineto_text(_events(400), schemaVersion=1)
    path = _write(tmp_path / ("t.json.gz" if gz else "t.json"), text, gz)
    got, base = [], 0
    split = list(pieces.Splitter(path, piece_bytes=4096).pieces())
    for piece in split:
        assert piece.base == base
        events = json.loads(b"[" + bytes(pieces._events_text(piece)) + b"]")
        assert len(events) == piece.count
        got += events
        base += piece.count
    assert got == json.loads(text)["traceEvents"]
    assert len(split) > 10
    if not gz:
        assert max(len(piece.data) for piece in split) <= 4096
    few = _events(3)
    small = _write(tmp_path / ("s.json.gz" if gz else "s.json"), _kineto_text(few), gz)
    assert [piece.count for piece in pieces.Splitter(small, piece_bytes=1 << 20).pieces()] == [len(few)]


# Events as a profiler might write them, one per piece below: the C reader
# takes some (test_fastparse.py says which); here it is off, and every piece
# takes the reference reader.
_ODD_EVENTS = [
    '"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25,\n'
    '    "args": {\n      "warps per SM": 464.592590, "bw": 1268.4387096774194, "s": "a \\"b\\" \\u00e9"\n    }',
    '"ph": "X", "name": "n", "pid": 0, "tid": 7, "ts": 11, "dur": 1, "args": null',
    '"ph": "X", "name": "t", "pid": 1180591620717411303424, "tid": "stream 7", "ts": 12, "dur": 1,'
    ' "args": {"External id": "12", "grid": [1, "2", 3.0], "device": true, "bytes": 1.0,'
    ' "Collective name": 5, "stream": 1180591620717411303424}',
    '"ph": "X", "name": "u", "pid": 0, "tid": 7, "ts": 12.5, "dur": 1, "args": {"correlation": 1180591620717411303424,'
    ' "memory bandwidth (GB/s)": 3, "grid": [1, 2, 3], "dtype": "float", "Process Group Ranks": "[0, 1]"}',
    '"ph": "f", "bind_id": 3, "id": null, "pid": 0, "tid": 7, "ts": 13, "cat": "ac2g", "name": "ac2g", "bp": "e"',
    '"ph": "s", "bind_id": 4, "pid": 0, "tid": 7, "ts": 13, "cat": "ac2g", "name": "ac2g"',
    '"ph": "i", "name": "mark", "pid": "Traces", "tid": "", "ts": 14, "s": "g", "args": {}',
    '"ph": "C", "name": "mem", "pid": 0, "ts": 15, "args": {"allocated": 1}',
    '"ph": "X", "name": "l", "pid": 0, "tid": 7, "ts": 16, "dur": 1, "args": [1, 2]',
    '"name": "no phase", "pid": 0, "tid": 7, "ts": 17',
    '"ph": ["X"], "name": "odd phase", "pid": 0, "tid": 7, "ts": 18',
]


def test_reference_pieces_same_as_whole_file(tmp_path, monkeypatch):
    """Nulls, odd types, big integers, flows bound by id null, escapes,
    counters, events without a phase: with the C reader off, each piece
    takes the reference reader, and the rows are the whole file's and the
    values checked here by hand."""
    monkeypatch.setattr(pieces, "_fastparse", None)
    body = ",\n".join("  {\n    " + e + "\n  }" for e in _ODD_EVENTS)
    path = _write(tmp_path / "t.json", '{\n  "traceEvents": [\n' + body + "\n  ]\n}\n")
    assert len(list(SplitParser(path, piece_bytes=64).pieces())) > 4
    _assert_same(path, piece_bytes=64)
    tables = _tables(SplitParser(path, piece_bytes=64))
    rows = {r["name"]: r for r in tables["events"].to_pylist()}
    assert rows["k"]["args"] == '{"warps per SM":464.59259,"bw":1268.4387096774194,"s":"a \\"b\\" \u00e9"}'
    assert (rows["k"]["ts_ns"], rows["k"]["dur_ns"]) == (10_500, 2_250)
    assert rows["n"]["args"] is None
    assert rows["t"]["pid"] == "1180591620717411303424" and rows["t"]["tid"] == "stream 7"
    assert rows["t"]["external_id"] == 12 and rows["t"]["grid"] == [1, 2, 3]
    assert rows["t"]["device"] is None and rows["t"]["stream"] is None and rows["t"]["bytes"] == 1
    assert rows["t"]["collective_name"] == "5"
    assert rows["u"]["correlation"] is None and rows["u"]["memory_bandwidth_gbps"] == 3.0
    assert rows["u"]["grid"] == [1, 2, 3] and rows["u"]["dtype"] == "float" and rows["u"]["pg_ranks"] == "[0, 1]"
    assert rows["l"]["args"] == "[1,2]" and rows["l"]["grid"] is None
    assert (rows["no phase"]["ph"], rows["no phase"]["event_id"]) == (None, 9)
    assert rows["odd phase"]["ph"] == '["X"]'
    assert [(r["event_id"], r["id"], r["ts_ns"]) for r in tables["flows"].to_pylist()] == \
        [(4, None, 13_000), (5, "4", 13_000)]
    assert [(r["event_id"], r["series"], r["value"]) for r in tables["counters"].to_pylist()] == [(7, "allocated", 1.0)]


_leaf = st.one_of(st.none(), st.booleans(), st.text(max_size=8), st.integers(-(2**70), 2**70),
                  st.floats(allow_nan=False, allow_infinity=False))
_value = st.recursive(_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                      max_leaves=8)
_ident = st.one_of(st.integers(-5, 2**70), st.sampled_from(["Spans", "", "stream 7"]), _leaf)
_micros = st.one_of(st.integers(-(10**12), 10**12), st.integers(0, 10**13).map(lambda n: n / 1000),
                    st.floats(-1e12, 1e12), _leaf)
_arg_key = st.sampled_from([*ARG_COLUMNS, "x", "Ev Idx"])
_random_event = st.fixed_dictionaries({"ph": st.sampled_from(list("XiIMCstfn"))}, optional={
    "name": st.one_of(st.text(max_size=10), _leaf), "cat": st.text(max_size=6), "pid": _ident, "tid": _ident,
    "ts": _micros, "dur": _micros, "id": _ident, "bind_id": _ident, "bp": st.just("e"),
    "args": st.one_of(st.dictionaries(_arg_key, _value, max_size=4), _value),
})


def piece_bytes_for(events: list[dict], least: int) -> int:
    """Pieces of ``least`` bytes, longer where an event is: the splitter
    gives up on a file with an event as long as 8 pieces (NotSplittable:
    the whole file then goes to the reference reader), which is not what
    the random tests check. json.dumps' escaped text is at least as long as
    the event's text in the file (UTF-8 or escaped)."""
    return max(least, max(len(json.dumps(e)) for e in events) // 4)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_random_event, min_size=1, max_size=30), one_line=st.booleans(), ascii=st.booleans())
def test_random_events_same_as_streaming(tmp_path, events, one_line, ascii):
    """Any values in any of the keys the columns read (pieces of one or two
    events; no B/E pairs, only valid JSON), laid out as Kineto does or on
    one line (json.dumps, its strings escaped to ASCII or not): every file
    is read in pieces, and gives the rows the whole-file read gives."""
    text = json.dumps({"traceEvents": events}, ensure_ascii=ascii) if one_line else _kineto_text(events)
    path = _write(tmp_path / "t.json", text)
    _assert_same(path, piece_bytes=piece_bytes_for(events, 128))


def test_begin_end_pairs_take_the_streaming_path(tmp_path):
    evs = _events(10) + [{"ph": "B", "name": "step", "pid": 1, "tid": 7, "ts": 900},
                         {"ph": "E", "name": "step", "pid": 1, "tid": 7, "ts": 2000}]
    path = _write(tmp_path / "t.json", _kineto_text(evs))
    with pytest.raises(NotSplittable):
        list(SplitParser(path, piece_bytes=1024).batches())


def test_items_that_are_not_events_are_skipped_as_the_whole_file_read_skips_them(tmp_path):
    # The last item is no object (no "\n  {" before it): the end of the array
    # is found by the one-line walk, and the item counted and skipped.
    path = _write(tmp_path / "t.json", _kineto_text(_events(10) + [[1, 2]]))
    fast = _assert_same(path, piece_bytes=1024)
    assert (fast.meta.skipped_count, fast.meta.json_event_count) == (1, 44)


# Events whose strings hold what the walk between events must not take for
# a cut: commas, braces and brackets, escaped quotes and backslashes, a run
# of backslashes before a quote at every offset of a 16-byte block.
_TRICKY = [{"ph": "i", "name": 'a "},{" b ], [' + "\\" * k + '"' + "x" * k, "pid": 1, "tid": 7, "ts": 5 + k,
            "s": "g", "args": {"k": "\\" * (k % 3) + "}", "l": [[{}], "]"]}} for k in range(20)]


@pytest.mark.parametrize("gz", [False, True])
def test_one_line_json_read_in_pieces(tmp_path, gz):
    """A trace as json.dumps writes it, all on one line, with keys before
    and after the events: cut in pieces between events (nothing inside a
    string or an args object is a cut), the same rows and meta as the
    whole-file read, every event of json.load's count in a piece."""
    evs = _events(100) + _TRICKY
    text = json.dumps({"schemaVersion": 1, "traceEvents": evs, "distributedInfo": {"rank": 3},
                       "baseTimeNanoseconds": 1_700_000_000_000_000_000})
    assert "\n" not in text
    path = _write(tmp_path / ("t.json.gz" if gz else "t.json"), text, gz)
    cut = list(SplitParser(path, piece_bytes=1024).pieces())
    assert len(cut) > 10
    assert sum(p.count for p in cut) == len(json.loads(text)["traceEvents"]) == 423
    assert [p.base for p in cut] == [sum(q.count for q in cut[:i]) for i in range(len(cut))]
    fast = _assert_same(path, piece_bytes=1024)
    assert fast.meta.base_time_ns == 1_700_000_000_000_000_000
    assert fast.meta.distributed_info == {"rank": 3}


@pytest.mark.parametrize("piece_bytes", [1024, None])  # several pieces; the file in one block
def test_events_sharing_lines_after_the_first_read_in_pieces(tmp_path, piece_bytes):
    """The first event on a line of its own, the others joined on one line
    ("[\\n{...}, {...}, ..."): no newline to cut at after the first, so
    the walk of one-line traces cuts the rest, and the rows are the
    whole-file read's."""
    evs = _events(100) + _TRICKY
    path = _write(tmp_path / "t.json", '{"traceEvents": [\n' + ", ".join(json.dumps(e) for e in evs)
                  + '\n], "traceName": "mixed"}\n')
    cut = list(SplitParser(path, piece_bytes=piece_bytes).pieces())
    assert sum(p.count for p in cut) == len(evs) and (len(cut) > 10 or piece_bytes is None)
    fast = _assert_same(path, piece_bytes=piece_bytes)
    assert fast.meta.trace_name == "mixed"


def test_an_event_longer_than_a_piece_read_in_pieces(tmp_path):
    """Kineto's layout with one event of 20 KB among 4 KB pieces: the block
    that holds no event's start goes on as on one line, and the rows are
    the whole-file read's."""
    evs = _events(100)
    evs[150]["args"] = {"stack": "x" * 20_000}
    path = _write(tmp_path / "t.json", _kineto_text(evs, baseTimeNanoseconds=1_700_000_000_000_000_000))
    cut = list(SplitParser(path, piece_bytes=4096).pieces())
    assert sum(p.count for p in cut) == len(evs) and len(cut) > 5
    _assert_same(path, piece_bytes=4096)


def test_one_line_cuts_fall_between_events():
    """_fastparse.cut over every prefix of a one-line event array: it ends
    just past the last comma between events that the prefix holds, with the
    events before it; over the whole array and its "]", every event. The
    expected cuts are where the events were joined (json.dumps of each),
    not found by a walk. Each prefix moves the bytes against the reader's
    16-byte blocks, so an escape at the end of a block is tried."""
    texts = [json.dumps(e) for e in _events(3) + _TRICKY]
    body = ", ".join(texts)
    ends = []  # just past each comma between events
    at = 0
    for t in texts[:-1]:
        at += len(t) + 1
        ends.append(at)
        at += 1
    data = body.encode()
    for n in range(len(data)):
        done = [e for e in ends if e <= n]
        assert pieces._fastparse.cut(data[:n]) == ((done[-1], len(done), False) if done else (0, 0, False)), n
    assert pieces._fastparse.cut(data + b" ]}") == (len(data) + 1, len(texts), True)
    for bad in (b'{"a": 1}}, {"b": 2}', data + b", ]", b" ]"):  # a brace too many; a trailing comma
        with pytest.raises(ValueError):
            pieces._fastparse.cut(bad)


def test_one_line_json_with_a_trailing_comma_is_the_whole_file_reads_error(tmp_path):
    """[{...}, {...}, ] is not JSON: the walk does not take the comma for a
    cut, and the file goes to the whole-file read, which says so."""
    path = _write(tmp_path / "t.json", '{"traceEvents": [' + ", ".join(json.dumps(e) for e in _events(5)) + ", ]}")
    with pytest.raises(NotSplittable):
        list(SplitParser(path, piece_bytes=256).batches())
    with pytest.raises(tracedb.errors.TraceFormatError, match="invalid JSON"):
        list(TraceParser(path).batches())


# pytorch#146900's old Kineto output, which yajl rejects: unescaped quotes in
# a name (8), a bare N/A, a Windows path's invalid escapes (\\U, \\m, \\x).
_OLD_KINETO = ['"ph": "X", "cat": "python_function", "name": "{"device": "cpu", "dtype": "float32"}(12): run", '
               '"pid": 1, "tid": 7, "ts": 3000, "dur": 5',
               '"ph": "C", "name": "bw", "pid": 1, "ts": 3010, "args": {"gbps": N/A}',
               '"ph": "X", "name": "tab\there", "pid": 1, "tid": 7, "ts": 3020, "dur": 1, '
               '"args": {"file": "C:\\Users\\me\\x.py"}']


def test_old_kineto_pieces_read_by_the_tolerant_reader(tmp_path):
    """Kineto's layout with events yajl rejects in two of its pieces: those
    pieces go to the tolerant reader, the rest to the C reader, and the
    rows, the meta and its one warning (yajl's reason, the repairs counted
    over both pieces) are the whole-file read's, which reads everything
    from the first bad event on with the tolerant reader."""
    good = ["  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in _events(100)]
    bad = ["  {\n    " + e + "\n  }" for e in _OLD_KINETO]
    blocks = good[:30] + bad + good[30:300] + bad[:1] + good[300:]
    path = _write(tmp_path / "t.json", '{\n  "traceEvents": [\n' + ",\n".join(blocks) + '\n  ],\n  "traceName": "old"\n}\n')
    cut = list(SplitParser(path, piece_bytes=2048).pieces())
    assert len(cut) > 10
    fast = _assert_same(path, piece_bytes=2048)
    assert fast.meta.json_event_count == 403 + 4 and fast.meta.trace_name == "old"
    (warning,) = fast.meta.warnings
    assert warning.startswith("yajl rejected the input (lexical error")
    assert "16 unescaped quote(s)" in warning and "1 bare N/A" in warning and "3 invalid backslash" in warning
    # On one line, where an unescaped quote can move a cut, the whole-file read takes the file.
    one_line = _write(tmp_path / "one.json", '{"traceEvents": [' + ", ".join(b.strip() for b in blocks) + "]}")
    with pytest.raises(NotSplittable):
        list(SplitParser(one_line, piece_bytes=2048).batches())


def test_one_line_pieces_with_nan_read_by_the_tolerant_reader(tmp_path):
    """json.dumps writes NaN and Infinity, which yajl rejects: on one line
    too, the pieces holding them go to the tolerant reader (nothing there
    moves a cut), with the whole-file read's rows, meta and warning."""
    evs = _events(100)
    for i in (7, 200, 390):
        evs[i]["args"] = {"bw": float("nan"), "peak": float("-inf"), "n": i}
    text = json.dumps({"traceEvents": evs, "traceName": "nan"})
    assert text.count("NaN") == 3 and "\n" not in text
    path = _write(tmp_path / "t.json", text)
    fast = _assert_same(path, piece_bytes=2048)
    assert fast.meta.warnings == ["yajl rejected the input (lexical error: invalid char in json text.); "
                                  "read with the tolerant reader: 6 NaN/Infinity literal(s) read as null"]


def test_one_line_json_without_the_c_reader_takes_the_streaming_path(tmp_path, monkeypatch):
    monkeypatch.setattr(pieces, "_fastparse", None)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": _events(10)}))
    with pytest.raises(NotSplittable):
        list(SplitParser(path).batches())


def test_pieces_with_long_integers_on_threads(tmp_path, monkeypatch):
    """Pieces the C reader declines (escaped names) holding 5,000-digit
    integers in args, parsed on two threads: each is read with Python's
    digit limit lifted, as the streaming parser reads them (past it,
    ijson's C backend crashes and the args cannot be written back), and
    the limit, the process's, is as it was afterwards."""
    import sys

    import tracedb.ingest as ingest
    from tracedb.warehouse import Warehouse

    big = "9" * 5000
    body = ",\n".join(
        '  {\n    "ph": "X", "cat": "cpu_op", "name": "op\\n%d", "pid": 1, "tid": 7, "ts": %d, "dur": 5, '
        '"args": {"big": %s}\n  }' % (i, 1000 + 10 * i, big) for i in range(200))
    path = _write(tmp_path / "t.json", '{\n  "traceEvents": [\n' + body + "\n  ]\n}\n")
    monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 20_000)
    monkeypatch.setattr(ingest, "TraceParser", lambda path: pytest.fail("the split path declined"))
    limit = sys.get_int_max_str_digits()
    meta, writer = ingest.stage(path, Warehouse(tmp_path / "wh"), workers=2)
    try:
        writer.close_staged()
        rows = pa.concat_tables(pa.ipc.open_file(p).read_all() for p in writer._sources("events"))
    finally:
        writer.discard()
    assert sys.get_int_max_str_digits() == limit
    assert meta.event_count == rows.num_rows == 200
    assert sorted(rows.column("name").to_pylist()) == sorted(f"op\n{i}" for i in range(200))
    assert set(rows.column("args").to_pylist()) == {'{"big":%s}' % big}


@pytest.mark.parametrize("sort_bytes", [4 << 20, -1], ids=["reference sorted in memory", "reference sorted by DuckDB"])
def test_ingest_parallel_same_rows(tmp_path, monkeypatch, sort_bytes):
    """A large file on 2 parse threads: the same rows as the
    streaming parser gives, counted against json.load; the reference's
    staged rows put in order by Arrow or by DuckDB (store._sorted), its
    events file lane after lane, each in event_id order."""
    import tracedb.ingest as ingest

    evs = _events(3000)
    text = _kineto_text(evs, distributedInfo={"rank": 1}, baseTimeNanoseconds=1_000_000)
    (tmp_path / "runs" / "v1").mkdir(parents=True)
    _write(tmp_path / "runs" / "v1" / "rank-1.json", text)
    monkeypatch.setattr(ingest, "WORKERS_MIN_BYTES", 1)
    monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 64 << 10)
    pieces = []
    monkeypatch.setattr(ingest, "TraceParser", lambda path: pytest.fail("the fast path declined"))

    class Counting(SplitParser):
        def add(self, res):
            pieces.append(res.json_event_count)
            super().add(res)

    monkeypatch.setattr(ingest, "SplitParser", Counting)
    fast = tracedb.TraceDB(tmp_path / "wh-fast")
    fast.ingest([tmp_path / "runs"], jobs=2)
    assert len(pieces) > 4 and sum(pieces) == len(evs)
    monkeypatch.undo()

    class Declining(SplitParser):  # the streaming parser alone: the reference
        def pieces(self):
            raise NotSplittable("the reference")

    monkeypatch.setattr(ingest, "SplitParser", Declining)
    monkeypatch.setattr("tracedb.store.SORT_IN_MEMORY_BYTES", sort_bytes)
    monkeypatch.setattr("tracedb.store.SORTED_BATCH_ROWS", 500)  # lanes kept in order across batches
    ref = tracedb.TraceDB(tmp_path / "wh-ref")
    ref.ingest([tmp_path / "runs"], jobs=1)
    q = ("SELECT * EXCLUDE (file_id) FROM {} ORDER BY event_id{}")
    for table, extra in (("events", ""), ("flows", ""), ("counters", ", series")):
        a = fast.sql(q.format(table, extra)).fetchall()
        b = ref.sql(q.format(table, extra)).fetchall()
        assert a == b, table
    (path,) = (tmp_path / "wh-ref" / "events").rglob("*.parquet")
    rows = pq.read_table(path, columns=["event_id", "cat"]).to_pylist()
    lane = {"cpu_op": 1, "cuda_runtime": 2, "cuda_driver": 2, "kernel": 3, "gpu_memcpy": 3, "gpu_memset": 3,
            "gpu_user_annotation": 3}
    keys = [(lane.get(r["cat"], 0), r["event_id"]) for r in rows]
    assert keys == sorted(keys) and len({k for k, _ in keys}) > 1
    n_events = sum(1 for e in evs if isinstance(e, dict) and e["ph"] not in "stfC")
    assert fast.sql("SELECT count(*) FROM events").fetchall()[0][0] == n_events


def test_a_small_trace_takes_the_fast_path_too(tmp_path, monkeypatch):
    """Not only large files: a 50 KB Kineto trace is parsed by the fast path
    (the streaming parser is not asked), with every event in the warehouse."""
    import tracedb.ingest as ingest

    evs = _events(100)
    path = _write(tmp_path / "rank-0.json", _kineto_text(evs, baseTimeNanoseconds=1_000_000))
    assert path.stat().st_size < 64 << 10
    monkeypatch.setattr(ingest, "TraceParser", lambda path: pytest.fail("the fast path declined"))
    db = tracedb.TraceDB(tmp_path / "wh")
    assert [r.status for r in db.ingest([path], run="v1", jobs=2).results] == ["ok"]
    counts = db.sql("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM flows), "
                    "(SELECT count(*) FROM counters)").fetchall()
    assert counts == [(sum(1 for e in evs if e["ph"] not in "stfC"),
                       sum(1 for e in evs if e["ph"] in "stf"),
                       sum(len(e["args"]) for e in evs if e["ph"] == "C"))]


@pytest.mark.parametrize(("size", "max_bytes", "expected"), [
    (6, 1 << 20, [(0, 6), (0, 1), (1, 6), (1, 6), (1, 3), (3, 2)]),  # by rows; a lane's last shorter
    (100, 72, [(0, 7), (1, 10), (1, 5), (3, 2)]),  # by bytes: 8 an int64 row, a table ends at 72 or more
])
def test_finalize_row_groups_hold_one_lane(size, max_bytes, expected):
    """finalize's row groups (store._row_groups), hand-checked: batches that
    come lane after lane make tables of one lane each, of ``size`` rows or
    fewer where they reach ``max_bytes`` first, the rows in the order they
    came."""
    from tracedb.store import _row_groups

    counts = [(0, 3), (0, 4), (1, 5), (1, 5), (1, 5), (3, 2)]
    batches, at = [], 0
    for lane, n in counts:
        batches.append((lane, pa.record_batch({"x": pa.array(range(at, at + n), pa.int64())})))
        at += n
    got = list(_row_groups(iter(batches), size, max_bytes))
    assert [(lane, t.num_rows) for lane, t in got] == expected
    assert [x for _, t in got for x in t.column("x").to_pylist()] == list(range(at))


@pytest.mark.parametrize(("in_memory_events", "stream_window"), [(5_000_000, 1 << 14), (5_000_000, 1), (0, 1)],
                         ids=["streamed as parsed", "sorted in memory (too far from its order to stream)",
                              "sorted by DuckDB (too far from its order to stream)"])
def test_split_ingest_self_times_across_pieces(tmp_path, monkeypatch, in_memory_events, stream_window):
    """Nesting that spans pieces (children written before their parents, a
    slice holding the whole trace written last; events without a phase make
    pieces whose rows are not in file order): self times by construction,
    and the published file in whole row groups across pieces, each of one
    lane, in event_id order."""
    import pyarrow.parquet as pq

    import tracedb.ingest as ingest

    evs: list[dict] = []
    for k in range(20):
        step = k * 5000
        for j in range(10):
            op = step + 100 + j * 300
            evs.append({"ph": "X", "cat": "cpu_op", "name": f"child{k}.{j}", "pid": 1, "tid": 7,
                        "ts": op + 50, "dur": 100})
            evs.append({"ph": "X", "cat": "cpu_op", "name": f"op{k}.{j}", "pid": 1, "tid": 7, "ts": op, "dur": 200})
        evs.append({"ph": "C", "name": "memory", "pid": 1, "ts": step, "args": {"allocated": k}})
        evs.append({"name": "no phase", "pid": 1, "tid": 7, "ts": step})  # an events row off the fast path
        evs.append({"ph": "X", "cat": "user_annotation", "name": f"step{k}", "pid": 1, "tid": 7,
                    "ts": step, "dur": 4000})
    evs.append({"ph": "X", "cat": "user_annotation", "name": "whole", "pid": 1, "tid": 7, "ts": 0, "dur": 100000})
    (tmp_path / "runs" / "v1").mkdir(parents=True)
    _write(tmp_path / "runs" / "v1" / "rank-0.json",
           _kineto_text(evs, baseTimeNanoseconds=1_000_000_000))
    monkeypatch.setattr(ingest, "WORKERS_MIN_BYTES", 1)
    monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 4 << 10)
    monkeypatch.setattr(ingest, "TraceParser", lambda path: pytest.fail("the fast path declined"))
    monkeypatch.setattr("tracedb.store.FINAL_ROW_GROUP", 100)
    monkeypatch.setattr("tracedb.store.ONE_ROW_GROUP_EVENTS", 0)  # row groups as a large trace's
    monkeypatch.setattr("tracedb.store.IN_MEMORY_EVENTS", in_memory_events)
    monkeypatch.setattr("tracedb.store.STREAM_WINDOW", stream_window)
    if stream_window > 1:  # the stream fed as pieces finish, in any order, must not stop
        monkeypatch.setattr("tracedb.store._child_sums_in_memory", lambda *a: pytest.fail("the stream stopped"))
        monkeypatch.setattr("tracedb.store._child_pairs", lambda *a: pytest.fail("the stream stopped"))
    db = tracedb.TraceDB(tmp_path / "wh")
    db.ingest([tmp_path / "runs"], jobs=2)
    expected = {"whole": 100000 - 20 * 4000}
    for k in range(20):
        expected[f"step{k}"] = 4000 - 10 * 200
        for j in range(10):
            expected[f"op{k}.{j}"] = 200 - 100
            expected[f"child{k}.{j}"] = 100
    got = dict(db.sql("SELECT name, self_ns FROM events WHERE ph = 'X'").fetchall())
    assert got == {name: ns * 1000 for name, ns in expected.items()}
    assert db.sql("SELECT ts_ns FROM events WHERE name = 'step3'").fetchall() == [(15_000_000 + 1_000_000_000,)]
    (path,) = (tmp_path / "wh" / "events").rglob("*.parquet")
    f = pq.ParquetFile(path)
    # Row groups of one lane each, lane after lane: the rest (21 annotations,
    # 20 events without a phase), then the 400 CPU ops in four; each lane in
    # event_id order.
    groups = [f.read_row_group(i, columns=["event_id", "cat"]).to_pydict() for i in range(f.num_row_groups)]
    assert [len(g["event_id"]) for g in groups] == [41, 100, 100, 100, 100]
    assert set(groups[0]["cat"]) == {"user_annotation", None}
    assert all(set(g["cat"]) == {"cpu_op"} for g in groups[1:])
    ops = [i for g in groups[1:] for i in g["event_id"]]
    assert ops == sorted(ops) and groups[0]["event_id"] == sorted(groups[0]["event_id"])
    ids = groups[0]["event_id"] + ops
    assert len(ids) == len(set(ids)) == len(evs) - 20 == 441


def test_a_known_trace_stops_the_parse_that_started_while_hashing(tmp_path, monkeypatch):
    """A large trace parsed by workers starts before its hash is in. A copy
    of a trace already ingested (at another path, so it is hashed) is
    skipped: its parse stops before the end, and nothing of it stays."""
    import tracedb.ingest as ingest

    text = _kineto_text(_events(3000), baseTimeNanoseconds=1_000_000)
    first = _write(tmp_path / "rank-0.json", text)
    (tmp_path / "copy").mkdir()
    copy = _write(tmp_path / "copy" / "rank-0.json", text)
    monkeypatch.setattr(ingest, "WORKERS_MIN_BYTES", 1)
    monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 4 << 10)
    db = tracedb.TraceDB(tmp_path / "wh")
    assert [r.status for r in db.ingest([first], run="v1", jobs=2).results] == ["ok"]
    rows = db.sql("SELECT count(*) FROM events").fetchall()
    read: list[int] = []

    class Counting(SplitParser):
        def pieces(self):
            for piece in super().pieces():
                read.append(piece.number)
                yield piece

    monkeypatch.setattr(ingest, "SplitParser", Counting)
    report = db.ingest([copy], run="v1", jobs=2)
    assert [(r.status, r.file_id) for r in report.results] == [("skipped", "xxh3-" + xxhash.xxh3_128(first.read_bytes()).hexdigest())]
    total = sum(1 for _ in SplitParser(first).pieces())
    assert total > 100 and len(read) < total
    assert db.sql("SELECT count(*) FROM events").fetchall() == rows
    assert list((tmp_path / "wh" / ".staging").iterdir()) == []


def test_a_bad_large_trace_fails_alike_with_the_hash_first_or_alongside(tmp_path, monkeypatch):
    """The parse that starts while the file is hashed (2 workers) and the one
    after it (1) fail a truncated trace with the same error, and the
    warehouse records it the same way."""
    import tracedb.ingest as ingest

    text = _kineto_text(_events(300))
    (tmp_path / "runs" / "v1").mkdir(parents=True)
    bad = _write(tmp_path / "runs" / "v1" / "rank-0.json", text[: len(text) // 2])
    monkeypatch.setattr(ingest, "WORKERS_MIN_BYTES", 1)
    monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 4 << 10)
    got = {}
    for jobs in (1, 2):
        db = tracedb.TraceDB(tmp_path / f"wh{jobs}")
        (r,) = db.ingest([tmp_path / "runs"], jobs=jobs).results
        got[jobs] = (r.status, r.file_id, r.error,
                     db.sql("SELECT status, error FROM traces").fetchall(),
                     list((tmp_path / f"wh{jobs}" / ".staging").iterdir()))
    assert got[2] == got[1]
    status, file_id, error, traces, staging = got[1]
    assert (status, file_id, traces, staging) == ("failed", "xxh3-" + xxhash.xxh3_128(bad.read_bytes()).hexdigest(), [("failed", error)], [])
    assert error.startswith(f"{bad} at byte ") and "truncated JSON" in error


def test_a_large_gzip_that_cannot_be_read_to_its_end_fails_alone(tmp_path, monkeypatch):
    """A large .json.gz cut short (an interrupted copy) or with a wrong
    checksum breaks the reading itself, not the JSON. The fast path leaves it
    to the streaming parser, whose error names the file; the good trace beside
    it is ingested. (The reading's own exception used to end the whole
    ingest: an EOFError, which click prints as "Aborted!".)"""
    import tracedb.ingest as ingest

    data = gzip.compress(_kineto_text(_events(3000), baseTimeNanoseconds=1_000_000).encode())
    runs = tmp_path / "runs" / "v1"
    runs.mkdir(parents=True)
    cut = runs / "rank-0.json.gz"
    cut.write_bytes(data[: len(data) * 3 // 4])
    crc = runs / "rank-1.json.gz"
    crc.write_bytes(data[:-8] + bytes(8))  # CRC-32 and size zeroed
    good = _write(runs / "rank-2.json", _kineto_text(_events(10)))
    monkeypatch.setattr(ingest, "WORKERS_MIN_BYTES", 1)
    monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 4 << 10)
    says = {cut: "truncated gzip", crc: "corrupt gzip"}
    # One file after another here (--jobs 1), and each bad one alone with
    # its pieces parsed by 2 workers.
    db = tracedb.TraceDB(tmp_path / "wh")
    results = {Path(r.path): r for r in db.ingest([tmp_path / "runs"], jobs=1).results}
    for path in says:
        (r,) = tracedb.TraceDB(tmp_path / f"wh-{path.name}").ingest([path], run="v1", jobs=2).results
        assert (r.status, r.error) == ("failed", results[path].error)
    assert {path: r.status for path, r in results.items()} == {cut: "failed", crc: "failed", good: "ok"}
    for path, what in says.items():
        assert results[path].error.startswith(f"{path} at byte ") and what in results[path].error
    n_events = sum(1 for e in trace_events(good) if e["ph"] not in "stfC")
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(n_events,)]
    assert list((tmp_path / "wh" / ".staging").iterdir()) == []


def test_workload_generator_tiles_exactly(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from workloads import Source, write_tiled

    src_path = _write(tmp_path / "src.json", _kineto_text(_events(20), distributedInfo={"rank": 0}))
    src = Source.load(src_path)
    out = tmp_path / "tiled.json"
    _, count = write_tiled(src, out, tiles=3, rank=5)
    doc = json.loads(out.read_text())
    evs = doc["traceEvents"]
    assert len(evs) == count == 1 + 3 * (len(src.events) - 1)
    assert doc["distributedInfo"]["rank"] == 5
    ext = [e["args"]["External id"] for e in evs if e.get("cat") == "cpu_op"]
    assert len(ext) == len(set(ext)) == 60
    ts = [e["ts"] for e in evs if e.get("cat") == "cpu_op"]
    assert ts == sorted(ts)


def test_pieces_staged_uncompressed_until_the_budget_is_spent(tmp_path, monkeypatch):
    """A writer's plain_bytes: pieces' rows are staged as plain Arrow IPC
    (the file at least as large as its rows) until the next part would
    overrun what is left, then with lz4 (the same file as a writer without
    plain_bytes stages; these rows, a few names and rising integers,
    compress to under half); no part went to lz4 while what was left could
    hold it. The rows read back are the same either way."""
    import tracedb.ingest as ingest
    from tracedb.warehouse import Warehouse

    path = _write(tmp_path / "t.json", _kineto_text(_events(3000), baseTimeNanoseconds=1_000_000))
    monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 64 << 10)
    monkeypatch.setattr(ingest, "TraceParser", lambda path: pytest.fail("the split path declined"))

    def staged(plain_bytes: int) -> list[tuple[int, int, pa.Table]]:
        """Each part in piece order: its file's size, its rows' bytes, its rows."""
        _, writer = ingest.stage(path, Warehouse(tmp_path / f"wh{plain_bytes}"), workers=1,
                                 plain_bytes=plain_bytes)
        try:
            parts = sorted(writer._parts["events"] + writer._parts.get("flows", []), key=lambda p: p.name[-12:])
            out = []
            for p in parts:
                rows = pa.ipc.open_file(p).read_all()
                out.append((p.stat().st_size, rows.nbytes, rows))
            return out
        finally:
            writer.discard()

    everything = sum(rows for _, rows, _ in staged(1 << 40))
    all_lz4 = staged(0)
    assert sum(size for size, _, _ in all_lz4) < everything // 2
    budget = everything * 2 // 5
    parts = staged(budget)
    assert len(parts) == len(all_lz4) > 10
    # a part staged with lz4 is the same file as in all_lz4, byte for byte
    plain = [(size, rows) for (size, rows, _), (lz4, _, _) in zip(parts, all_lz4) if size != lz4]
    compressed = [rows for (size, rows, _), (lz4, _, _) in zip(parts, all_lz4) if size == lz4]
    assert plain and compressed
    assert all(size >= rows for size, rows in plain)
    spent = sum(rows for _, rows in plain)
    assert spent <= budget
    assert budget - spent < min(compressed)

    def all_rows(parts):
        return pa.concat_tables(t for _, _, t in parts if "bp" not in t.column_names)
    assert all_rows(parts).equals(all_rows(all_lz4))


@pytest.mark.parametrize("layout", ["kineto", "compact"])
def test_finalize_deletes_the_staged_rows_once_read(tmp_path, monkeypatch, layout):
    """Each table's staged rows (a piece's IPC files, or the streaming
    parser's Parquet for compact JSON) are deleted once its final file is
    written, before the summaries, so that the kernel need not write them
    out; the final files hold every event (6,000 slices: 3,000 ops and
    3,000 kernels)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import tracedb.ingest as ingest
    from tracedb.warehouse import Warehouse

    events = _events(3000)
    text = (_kineto_text(events) if layout == "kineto"
            else json.dumps({"traceEvents": events}, separators=(",", ":")))
    path = _write(tmp_path / "t.json", text)
    monkeypatch.setattr("tracedb.parse.pieces.PIECE_BYTES", 64 << 10)
    meta, writer = ingest.stage(path, Warehouse(tmp_path / "wh"), workers=1, plain_bytes=1 << 20)
    try:
        staged = [p for p in writer.dir.rglob("*") if p.is_file()]
        assert len(staged) > (10 if layout == "kineto" else 0)
        writer.file_id = "xxh3-0123456789abcdef0123456789abcdef"
        writer.finalize(meta.base_time_ns or 0, meta.json_event_count)
        assert not [p for p in staged if p.exists()]
        assert sorted(p for p in writer.dir.rglob("*") if p.is_file()) == sorted(writer.final.values())
        rows = pq.read_table(writer.final["events"], columns=["ph"])
        assert pc.sum(pc.equal(rows.column("ph"), "X")).as_py() == 6000
        assert pq.read_metadata(writer.final["flows"]).num_rows == 6000
    finally:
        writer.discard()
