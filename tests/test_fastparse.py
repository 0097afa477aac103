"""The C reader (tracedb/parse/_fastparse.c): built, exact on what it
takes, declining the rest with a reason, and writing the rows the reference
reader writes."""

from __future__ import annotations

import json
from collections import Counter
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_chunked import _ODD_EVENTS, _assert_same, _kineto_text, _random_event, _value, _write, piece_bytes_for
from tracedb.parse import pieces
from tracedb.parse.pieces import NotSplittable, Piece, SplitParser, parse_piece
from tracedb.schema import ARG_COLUMNS


def test_the_c_parser_is_built():
    """The install compiled it (CI's and the README's both do): without it
    every piece takes the reference reader, several times slower."""
    assert pieces._fastparse is not None


@given(st.binary(max_size=200).map(lambda b: bytes(b"ab\n{"[x % 4] for x in b)),
       st.binary(min_size=1, max_size=4).map(lambda b: bytes(b"ab\n{"[x % 4] for x in b)))
def test_count_is_bytes_count(data, sep):
    """The splitter's count in C: bytes.count's, overlapping separators
    (b"aa" in b"aaaa": 2) included."""
    assert pieces._fastparse.count(data, sep) == data.count(sep)
    assert pieces._fastparse.count(memoryview(data), sep) == data.count(sep)


def _piece(*events: str | bytes, base: int = 0) -> Piece:
    """Kineto's layout: each event a block of its keys."""
    blocks = [b"  {\n    " + (e if isinstance(e, bytes) else e.encode()) + b"\n  }" for e in events]
    return Piece(0, b",\n".join(blocks), base, len(events))


def _rows(res) -> dict[str, list[dict]]:
    """A piece's rows by table, in event order (its events come a batch
    for each lane)."""
    out: dict[str, list[dict]] = {}
    for table, batch in res.batches:
        out.setdefault(table, []).extend(batch.to_pylist())
    return {table: sorted(rows, key=lambda r: r["event_id"]) for table, rows in out.items()}


def test_values_as_written():
    """Hand-checked rows: exact ns from the text (a fractional epoch time no
    double holds), integers' text for pid/tid/id, args without whitespace
    outside strings, the typed args columns, flows bound by bind_id."""
    piece = _piece(
        '"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,\n'
        '    "ts": 1712195498123456.789, "dur": 2.5,\n'
        '    "args": {\n      "External id": 12, "correlation": 34, "grid": [1, 2, 3], "block": [ ],\n'
        '      "memory bandwidth (GB/s)": 1.25, "stream": 7, "x": "a  b \\" c"\n    }',
        '"ph": "i", "name": "mark", "pid": "Spans", "tid": "", "ts": -1.5, "dur": 3, "id": 9, "args": null',
        '"ph": "f", "bind_id": 3, "pid": 0, "tid": 7, "ts": 13, "cat": "ac2g", "name": "ac2g", "bp": "e"',
        '"ph": "s", "id": null, "bind_id": 4, "pid": 1, "tid": 7, "ts": 12.25, "dur": 1, "name": "ac2g"',
        base=100)
    res = pieces._convert_c(piece.data, piece)
    assert res is not None
    rows = _rows(res)
    gemm, mark = rows["events"]
    assert gemm["event_id"] == 100 and gemm["ts_ns"] == 1712195498123456789 and gemm["dur_ns"] == 2500
    assert (gemm["ph"], gemm["cat"], gemm["name"], gemm["pid"], gemm["tid"], gemm["id"]) == \
        ("X", "kernel", "gemm", "0", "7", None)
    assert (gemm["external_id"], gemm["correlation"], gemm["grid"], gemm["block"], gemm["stream"]) == \
        (12, 34, [1, 2, 3], [], 7)
    assert gemm["memory_bandwidth_gbps"] == 1.25 and gemm["device"] is None and gemm["dtype"] is None
    assert gemm["args"] == ('{"External id":12,"correlation":34,"grid":[1,2,3],"block":[],'
                            '"memory bandwidth (GB/s)":1.25,"stream":7,"x":"a  b \\" c"}')
    assert mark["event_id"] == 101 and mark["ts_ns"] == -1500 and mark["dur_ns"] is None  # not a slice
    assert (mark["pid"], mark["tid"], mark["id"], mark["args"]) == ("Spans", "", "9", None)
    f, s = rows["flows"]
    assert (f["event_id"], f["ts_ns"], f["id"], f["bp"], f["pid"]) == (102, 13000, "3", "e", "0")
    assert (s["event_id"], s["ts_ns"], s["id"], s["bp"], s["cat"]) == (103, 12250, None, None, None)
    assert (res.json_event_count, res.event_count, res.flow_count) == (4, 2, 2)
    # From the earliest start to the latest end, the instant's dur included.
    assert (res.ts_min_ns, res.ts_max_ns) == (-1500, 1712195498123456789 + 2500)


def test_args_text_as_written_without_whitespace():
    """The args column, hand-checked: each key and value as written, the
    whitespace outside strings gone, inside nested containers and empty ones
    too, strings (spaces, escapes) kept whole."""
    piece = _piece(
        '"ph": "X", "args": { }',
        '"ph": "X", "args": {\n  "a" :  1 ,\n  "b": [ 1, [ 2 , 3 ], { "c" : "x y" } ] , "d": "s \\" t",\n'
        '  "e": true, "f": null, "g": -1.5e3, "h": { } , "i": [ ]\n}',
        base=0)
    res = pieces._convert_c(piece.data, piece)
    assert res is not None
    empty, full = _rows(res)["events"]
    assert empty["args"] == "{}"
    assert full["args"] == ('{"a":1,"b":[1,[2,3],{"c":"x y"}],"d":"s \\" t",'
                            '"e":true,"f":null,"g":-1.5e3,"h":{},"i":[]}')


def test_times_of_every_digit_count():
    """ts and dur with 1 to 15 digits before the point and 0 to 6 after
    (runs of digits across the reader's 8-byte steps), and integers in args
    of 1 to 18 digits: the C reader's values equal Decimal's reading of the
    same text (microseconds to ns, half to even)."""
    texts = [("9876543210123456"[:whole] + ("." + "123456"[:frac] if frac else ""))
             for whole in range(1, 16) for frac in (0, 1, 3, 4, 6)]
    ids = ["9" * n for n in range(1, 19)]
    events = [f'"ph": "X", "ts": {t}, "dur": -{t}, "args": {{"External id": {i}}}'
              for t, i in zip(texts, ids * 5, strict=False)]
    piece = _piece(*events)
    res = pieces._convert_c(piece.data, piece)
    assert res is not None
    for row, t, i in zip(_rows(res)["events"], texts, ids * 5, strict=False):
        ns = int((Decimal(t) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
        assert (row["ts_ns"], row["dur_ns"], row["external_id"]) == (ns, -ns, int(i)), t


def test_values_of_the_common_case_beyond_kineto():
    """What the C reader takes besides Kineto's usual spelling, hand-checked:
    times finer than 1 ns (rounded half to even), integers past 64 bits as
    ids, typed args that read as null (not numbers, past int64, not lists)
    or as integers from their text."""
    piece = _piece(
        '"ph": "X", "name": "a", "pid": 1180591620717411303424, "tid": 1, "ts": 1.2345, "dur": 0.0015,\n'
        '    "args": {"External id": "12", "correlation": 9223372036854775808, "stream": "0x0",\n'
        '      "device": true, "memory bandwidth (GB/s)": "1.5", "grid": "grid(100,)", "block": {"x": 1}}',
        '"ph": "X", "name": "b", "pid": 0, "tid": 1, "ts": -2.0005, "dur": 1.2355001,\n'
        '    "args": {"External id": "-7", "correlation": "1a2", "stream": "", "bytes": "-"}')
    res = pieces._convert_c(piece.data, piece)
    assert res is not None
    a, b = _rows(res)["events"]
    assert (a["ts_ns"], a["dur_ns"], a["pid"]) == (1234, 2, "1180591620717411303424")
    assert (a["external_id"], a["correlation"], a["stream"], a["device"]) == (12, None, None, None)
    assert (a["memory_bandwidth_gbps"], a["grid"], a["block"]) == (None, None, None)
    assert (b["ts_ns"], b["dur_ns"]) == (-2000, 1236)
    assert (b["external_id"], b["correlation"], b["stream"], b["bytes"]) == (-7, None, None, None)


# Events the C reader declines, why (its reason starts so), and the row the
# piece gives through the reference reader, checked by hand (NotSplittable:
# only the whole-file read takes it).
@pytest.mark.parametrize("c_path", [True, False], ids=["C", "Python"])
def test_a_piece_gives_its_events_by_lane(c_path):
    """Each events batch of a piece holds one lane (schema.EVENT_LANES), in
    lane order, each in event order, and event_lanes says so: by the C
    reader, and by the reference reader where the C reader is not used.
    Hand-checked: a category not listed (or none, or spelled otherwise) is
    lane 0."""
    cats = ["kernel", "cpu_op", "user_annotation", "cuda_runtime", "cpu_op", None, "gpu_memcpy",
            "Kernel", "cuda_driver", "gpu_memset", "gpu_user_annotation", "cpu_op"]
    piece = _piece(*(f'"ph": "X", "cat": {json.dumps(c)}, "name": "e{i}", "pid": 0, "tid": 1, "ts": {i}, "dur": 1'
                     for i, c in enumerate(cats)))
    saved = pieces._fastparse
    if not c_path:
        pieces._fastparse = None
    try:
        res = parse_piece(piece)
    finally:
        pieces._fastparse = saved
    batches = [b.to_pydict() for t, b in res.batches if t == "events"]
    assert [(b["event_id"], b["cat"]) for b in batches] == [
        ([2, 5, 7], ["user_annotation", None, "Kernel"]),
        ([1, 4, 11], ["cpu_op"] * 3),
        ([3, 8], ["cuda_runtime", "cuda_driver"]),
        ([0, 6, 9, 10], ["kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"]),
    ]
    assert res.event_lanes == [0, 1, 2, 3]
    assert res.event_count == 12


_DECLINED = [
    ('"ph": "B", "name": "a", "ts": 1', "phase B", NotSplittable),
    ('"ph": "C", "name": "mem", "ts": 1, "args": {"a": 1}', "phase C",
     ("counters", {"ts_ns": 1000, "name": "mem", "series": "a", "value": 1.0})),
    ('"name": "no phase", "ts": 1', "an event without a phase", {"ph": None, "name": "no phase", "ts_ns": 1000}),
    ('"ph": null, "ts": 1', "ph: null", {"ph": None, "ts_ns": 1000}),
    ('"ph": "X", "ts": 1e3', "ts: a number with an exponent", {"ts_ns": 1_000_000}),
    ('"ph": "X", "ts": "12"', "ts: a string", {"ts_ns": 12_000}),
    ('"ph": "X", "dur": true', "dur: a boolean", {"ts_ns": None, "dur_ns": None}),
    ('"ph": "X", "ts": 4611686018427388', "ts: past +-2**62 ns", {"ts_ns": None}),  # past 2**62 ns
    ('"ph": "X", "ts": 4611686018427387.905', "ts: past +-2**62 ns", {"ts_ns": None}),  # 2**62 ns and 1
    ('"ph": "X", "name": "a\\"b"', "name: a string with escapes", {"name": 'a"b'}),
    ('"ph": "X", "name": 5', "name: an integer", {"name": "5"}),
    ('"ph": "X", "name": "a", "name": "b"', "an event key twice", {"name": "b"}),
    ('"ph": "X", "n\\u0061me": "a"', "an event key with escapes", {"name": "a"}),
    ('"ph": "X", "pid": 1.5', "pid: a number with a fraction", {"pid": "1.5"}),
    ('"ph": "X", "pid": -0', "pid: an integer", {"pid": "0"}),
    ('"ph": "X", "args": [1]', "args neither an object nor null", {"args": "[1]", "external_id": None}),
    ('"ph": "X", "args": {"External id": 1, "External id": 2}', "a typed args key twice",
     {"external_id": 2, "args": '{"External id":2}'}),
    ('"ph": "X", "args": {"grid": [1, 2.0]}', "grid: an array", {"grid": [1, 2]}),
    ('"ph": "X", "args": {"grid": [1, 9223372036854775808]}', "grid: an array", {"grid": [1, None]}),
    ('"ph": "X", "args": {"dtype": "a\\tb"}', "dtype: a string with escapes", {"dtype": "a\tb"}),
    ('"ph": "X", "args": {"dtype": 5}', "dtype: an integer", {"dtype": "5"}),
    ('"ph": "X", "args": {"External id": 3.0}', "External id: a number with a fraction", {"external_id": 3}),
    ('"ph": "X", "args": {"External id": "+3"}', "External id: a string", {"external_id": 3}),
    ('"ph": "X", "args": {"x": "\\ud83d\\ude00"}', "a \\u escape of a surrogate", {"args": '{"x":"\U0001F600"}'}),
    ('"ph": "X", "args": {"x": ' + "[" * 70 + "]" * 70 + "}", "nested deeper than 64 levels",
     {"args": '{"x":' + "[" * 70 + "]" * 70 + "}"}),
    ('"ph": "X", "args": {"x": 12e382}', "a number with a fraction past a double's range", {"args": '{"x":null}'}),
    ('"ph": "X", "args": {"x": 1' + "0" * 400 + '.5}', "a number with a fraction past", {"args": '{"x":null}'}),
    ('"ph": "X", "x": tru', "not JSON", NotSplittable),
    ('"ph": "X", "x": 01', "not JSON", NotSplittable),
    # yajl rejects these too: the tolerant reader's rows (a raw control
    # character kept, as old Kineto wrote it; invalid UTF-8 bytes as U+FFFD)
    ('"ph": "X", "name": "tab\there"', "a control character in a string", {"name": "tab\there"}),
    (b'"ph": "X", "name": "\xff"', "invalid UTF-8", {"name": "\ufffd"}),
    (b'"ph": "X", "name": "\xed\xa0\x80"', "invalid UTF-8", {"name": "\ufffd" * 3}),  # a surrogate in UTF-8
]


@pytest.mark.parametrize(("event", "why", "expected"), _DECLINED)
def test_declined_pieces_take_the_reference_reader(event, why, expected):
    """Out of the common case (see _fastparse.c): the C reader declines the
    whole piece and says why, and the piece's rows (through the reference
    reader) are those checked by hand here."""
    piece = _piece('"ph": "X", "name": "ok", "pid": 0, "tid": 1, "ts": 1, "dur": 1', event)
    reason = pieces._fastparse.parse(piece.data, 0)
    assert isinstance(reason, str) and reason.startswith(why)
    assert isinstance(pieces._fastparse.parse(piece.data + b",\n  1", 0), str)  # and with an item not an object
    if expected is NotSplittable:
        with pytest.raises(NotSplittable):
            parse_piece(piece)
        return
    table, want = expected if isinstance(expected, tuple) else ("events", expected)
    rows = _rows(parse_piece(piece))
    ok = rows["events"].pop(0)
    assert (ok["event_id"], ok["name"], ok["ts_ns"], ok["dur_ns"]) == (0, "ok", 1000, 1000)
    (row,) = rows[table]
    assert row["event_id"] == 1
    assert {k: row[k] for k in want} == want


def _outcome(piece: Piece, c_path: bool = True):
    """The piece's rows and span (or "declined"), with the C reader first or
    with the reference reader alone."""
    saved = pieces._fastparse
    if not c_path:
        pieces._fastparse = None
    try:
        res = parse_piece(piece)
    except NotSplittable:
        return "declined"
    finally:
        pieces._fastparse = saved
    return _rows(res), res.ts_min_ns, res.ts_max_ns


@pytest.mark.parametrize("c_path", [True, False], ids=["C", "Python"])
def test_epoch_times_whose_doubles_look_whole(tmp_path, monkeypatch, c_path):
    """Fractional epoch microseconds whose doubles have no fraction left
    (1712195495737655.080 reads as ...655.0): exact on both paths. The
    Python paths had them at ...655000 (found by fuzzing the C path against
    them)."""
    if not c_path:
        monkeypatch.setattr(pieces, "_fastparse", None)
    body = ",\n".join(
        "  {\n    " + f'"ph": "X", "name": "k{i}", "pid": 1, "tid": 1, "ts": {ts}, "dur": 0.555' + "\n  }"
        for i, ts in enumerate(["1712195495737655.080", "1712195495737656.001", "1712195495737657.999"]))
    path = _write(tmp_path / "t.json", '{\n  "traceEvents": [\n' + body + "\n  ]\n}\n")
    _assert_same(path, piece_bytes=1 << 20)
    rows = _outcome(next(SplitParser(path).pieces()))[0]["events"]
    assert [r["ts_ns"] for r in rows] == [1712195495737655080, 1712195495737656001, 1712195495737657999]
    assert [r["dur_ns"] for r in rows] == [555] * 3


def test_odd_events_which_the_c_path_takes(tmp_path):
    """test_chunked's odd events, each a piece: the C reader takes those in
    the common case, says why it declines the others, and the file reads as
    the whole-file read reads it."""
    why = [pieces.decline_reason(_piece(e)) for e in _ODD_EVENTS]
    assert why == [None, None, "grid: an array (or one with an item not an int64)", None, None, None, None,
                   "phase C", "args neither an object nor null", "an event without a phase",
                   "ph: an array (or one with an item not an int64)"]
    body = ",\n".join("  {\n    " + e + "\n  }" for e in _ODD_EVENTS)
    path = _write(tmp_path / "t.json", '{\n  "traceEvents": [\n' + body + "\n  ]\n}\n")
    _assert_same(path, piece_bytes=64)


def _python_and_c(path, piece_bytes: int) -> list[tuple]:
    """Each piece parsed with the C reader first and without it: (whether C
    took it, the outcome with C, the outcome without)."""
    out = []
    for piece in SplitParser(path, piece_bytes=piece_bytes).pieces():
        out.append((pieces.decline_reason(piece) is None, _outcome(piece), _outcome(piece, c_path=False)))
    return out


def _as_values(outcome):
    """Args as the JSON they hold (the Python paths may respell numbers)."""
    if outcome == "declined":
        return outcome
    rows, lo, hi = outcome
    for table in rows.values():
        for row in table:
            if row.get("args") is not None:
                row["args"] = json.loads(row["args"])
    return rows, lo, hi


_plain = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='"\\'), max_size=10)
_int64 = st.integers(-(2**63), 2**63 - 1)
_typed = {"int64": _int64, "double": st.one_of(_int64, st.floats(allow_nan=False, allow_infinity=False)),
          "string": _plain, "list<item: int64>": st.lists(_int64, max_size=4)}
_common_args = st.fixed_dictionaries({}, optional={
    **{key: st.one_of(st.none(), _typed[str(typ)]) for key, (_col, typ) in ARG_COLUMNS.items()},
    "x": _value, "Ev Idx": _value, "é key": _value})
_micros = st.one_of(st.none(), st.integers(-(10**15), 10**15),
                    st.integers(-(10**12), 10**12).map(lambda n: n / 1000))
_ident = st.one_of(st.none(), st.integers(-(10**16), 10**17), _plain)
_common_event = st.fixed_dictionaries({"ph": st.sampled_from(["X", "i", "M", "s", "t", "f", "n", "b", ""])}, optional={
    "name": st.one_of(st.none(), _plain), "cat": _plain, "pid": _ident, "tid": _ident, "ts": _micros,
    "dur": _micros, "id": _ident, "bind_id": _ident, "bp": st.just("e"), "extra": _value,
    "args": st.one_of(st.none(), _common_args),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_common_event, min_size=1, max_size=30))
def test_common_events_taken_by_c_with_python_rows(tmp_path, events):
    """Events in the common case, as json.dumps writes them (non-ASCII as
    it is, strings of args with escapes): the C path takes every piece, and
    its rows are the Python paths' rows."""
    body = ",\n".join("  {\n    " + json.dumps(e, ensure_ascii=False)[1:-1] + "\n  }" for e in events)
    path = _write(tmp_path / "t.json", '{\n  "traceEvents": [\n' + body + "\n  ]\n}\n")
    piece_bytes = piece_bytes_for(events, 128)
    for took, with_c, python in _python_and_c(path, piece_bytes):
        assert took
        assert _as_values(with_c) == _as_values(python)
    _assert_same(path, piece_bytes=piece_bytes)


def test_random_events_same_rows_as_python(tmp_path):
    """Any values in the keys the columns read, mixed with events of the
    common case: where the C reader takes a piece, its rows are the
    reference reader's. Over the examples, both kinds of piece occur (a run
    where C took none would check nothing)."""
    took: Counter[bool] = Counter()

    @settings(max_examples=60, deadline=None)
    @given(events=st.lists(st.one_of(_random_event, _common_event), min_size=1, max_size=30))
    def check(events):
        path = _write(tmp_path / "t.json", _kineto_text(events))  # json.dumps: escapes non-ASCII
        for c_took, with_c, python in _python_and_c(path, piece_bytes_for(events, 512)):
            took[c_took] += 1
            if c_took:
                assert _as_values(with_c) == _as_values(python)

    check()
    assert took[True] >= 5 and took[False] >= 5, took


_FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cuda" / "v1" / "rank0.train.json.gz"
_SPLICES = [b'"', b"\\", b"{", b"}", b"[", b"]", b",", b":", b"1", b".", b"-", b"e", b"\xff", b"\xc3",
            b"\xed\xa0\x80", b"\\u", b"\\ud800", b"null", b" ", b"\n", b"\x01", b"0", b'"ph": "B"', b"1.2345",
            b"1e5", b"12e382", b'"ts": 1712195495737655.080']


@pytest.fixture(scope="module")
def real_pieces() -> list[Piece]:
    """A real CUDA trace (torch.profiler on an H200) cut into 4 KB pieces."""
    return list(SplitParser(_FIXTURE, piece_bytes=4096).pieces())


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pick=st.integers(0, 10**6), edits=st.lists(
    st.tuples(st.integers(0, 10**6), st.sampled_from(["flip", "splice", "cut", "end"]), st.integers(0, 255),
              st.sampled_from(_SPLICES)), min_size=1, max_size=3))
def test_mutated_real_pieces_same_rows_as_python(real_pieces, pick, edits):
    """Real events with bytes flipped, spliced in, cut out or cut off (what
    found the Python paths' inexact epoch times, and the numbers msgspec
    refuses): where the C path takes the result, its rows are the Python
    paths'."""
    piece = real_pieces[pick % len(real_pieces)]
    data = bytearray(piece.data)
    for at, kind, byte, splice in edits:
        i = at % (len(data) + 1)
        if kind == "flip" and data:
            data[min(i, len(data) - 1)] = byte
        elif kind == "splice":
            data[i:i] = splice
        elif kind == "cut":
            del data[i:i + 1 + byte % 8]
        else:
            del data[i:]
    out = pieces._fastparse.parse(bytes(data).rstrip().rstrip(b","), piece.base)
    if isinstance(out, str):  # declined
        return
    mutated = Piece(piece.number, bytes(data), piece.base, out[0])
    assert _as_values(_outcome(mutated)) == _as_values(_outcome(mutated, c_path=False))
