"""Property-based: valid traces keep their exact event counts through the
parser (and through a whole ingest); mutated traces either raise
TraceFormatError, or parse with the counts Python's json gives them (or, not
JSON any more, through the tolerant reader, which says so); never anything
else, and never hang."""

from __future__ import annotations

import gzip
import json
import signal
import tempfile
import zlib
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracedb
from oracle import expected_counts
from tracedb.errors import TraceFormatError
from tracedb.parse import TraceParser

leaf = st.one_of(
    st.none(), st.booleans(), st.text(max_size=12),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
)
json_value = st.recursive(
    leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=10)
ident = st.one_of(st.integers(min_value=-5, max_value=2**40), st.sampled_from(["Spans", "Traces", "", "gpu 0"]))
micros = st.one_of(st.integers(min_value=0, max_value=10**12),
                   st.integers(min_value=0, max_value=10**12).map(lambda n: n / 1000))
event = st.fixed_dictionaries(
    {"ph": st.sampled_from(list("XiIBEMCstfben"))},
    optional={
        "name": st.text(max_size=30), "cat": st.text(max_size=10), "pid": ident, "tid": ident,
        "ts": micros, "dur": st.integers(min_value=-100, max_value=10**9), "id": ident,
        "args": st.dictionaries(st.text(max_size=10), json_value, max_size=4), "bp": st.just("e"),
    })
trace_events = st.lists(event, max_size=25)


@st.composite
def documents(draw) -> tuple[bytes, list]:
    """(file bytes, the events) in any of the forms tracedb reads."""
    events = draw(trace_events)
    if draw(st.booleans()):
        doc: object = events
    else:
        top = draw(st.dictionaries(st.sampled_from(["schemaVersion", "traceName", "deviceProperties", "x"]),
                                   json_value, max_size=3))
        doc = {**top, "traceEvents": events} if draw(st.booleans()) else {"traceEvents": events, **top}
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 1])))
    data = text.encode()
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    if draw(st.booleans()):
        data = gzip.compress(data)
    return data, events


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang("the parser ran past its time limit")


def parse_counts(path: Path, limit_s: int = 20) -> dict[str, int]:
    """Rows per table; a hang becomes a test failure, not a stuck suite."""
    return _parse(path, limit_s)[0]


def _parse(path: Path, limit_s: int = 20) -> tuple[dict[str, int], list[str]]:
    """Rows per table and the meta's warnings."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(limit_s)
    try:
        tp = TraceParser(path)
        counts = {"events": 0, "flows": 0, "counters": 0}
        for table, batch in tp.batches():
            counts[table] += batch.num_rows
        return counts, tp.meta.warnings
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def json_events(data: bytes) -> list | None:
    """The event array of a trace file's bytes as Python's json reads it
    (gzip and a BOM allowed), or None when that is not valid JSON holding
    one: the independent answer to a mutated file."""
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        doc = json.loads(data.removeprefix(b"\xef\xbb\xbf").decode("utf-8"))
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if isinstance(doc, dict):
        doc = doc.get("traceEvents")
    return doc if isinstance(doc, list) else None


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory() as d:
        yield Path(d)


PARSE_SETTINGS = settings(max_examples=150, deadline=timedelta(seconds=5),
                          suppress_health_check=[HealthCheck.too_slow])


@PARSE_SETTINGS
@given(doc=documents())
def test_valid_traces_keep_their_event_counts(scratch: Path, doc):
    data, events = doc
    path = scratch / "valid.json"
    path.write_bytes(data)
    if not events:  # an empty trace: nothing to count (the object form ingests, the array too)
        try:
            assert parse_counts(path) == {"events": 0, "flows": 0, "counters": 0}
        except TraceFormatError as e:
            pytest.fail(f"an empty but valid trace failed: {e}")
        return
    assert parse_counts(path) == expected_counts(events)


@st.composite
def mutations(draw) -> bytes:
    data, _ = draw(documents())
    if data[:2] == b"\x1f\x8b" and draw(st.booleans()):
        data = gzip.decompress(data)  # mostly mutate the JSON itself
    kind = draw(st.sampled_from(["truncate", "flip", "drop_bracket", "insert", "several"]))
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 4)) if kind == "several" else 1):
        if not buf:
            break
        k = kind if kind != "several" else draw(st.sampled_from(["truncate", "flip", "drop_bracket", "insert"]))
        i = draw(st.integers(0, len(buf) - 1))
        if k == "truncate":
            del buf[i:]
        elif k == "flip":
            buf[i] ^= draw(st.integers(1, 255))
        elif k == "drop_bracket":
            at = [j for j, b in enumerate(buf) if b in b"[]{}"]
            if at:
                del buf[draw(st.sampled_from(at))]
        else:
            buf[i:i] = draw(st.sampled_from([b"[", b"{", b"]", b"}", b",", b'"', b"\\", b"NaN", b"\xff", b"\x00"]))
    return bytes(buf)


@settings(max_examples=300, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])
@given(data=mutations())
def test_mutated_traces_parse_or_raise_the_format_error(scratch: Path, data: bytes):
    path = scratch / "mutated.json"
    path.write_bytes(data)
    try:
        counts, warnings = _parse(path)
    except TraceFormatError as e:
        assert e.path == str(path) and e.reason and "\n" not in str(e)
        return
    events = json_events(data)
    if events is None:  # not JSON: read by the tolerant reader, which says so
        assert any("read with the tolerant reader" in w for w in warnings), warnings
    else:  # still JSON: every event counted, as Python's json reads them
        assert counts == expected_counts(events)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=documents())
def test_valid_traces_through_a_whole_ingest(doc):
    data, events = doc
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "runs" / "v1" / "t.json"
        src.parent.mkdir(parents=True)
        src.write_bytes(data)
        db = tracedb.open(Path(d) / "wh")
        report = db.ingest([Path(d) / "runs"], jobs=1)
        assert not report.failed, report.failed[0].error
        want = expected_counts(events)
        got = db.sql("SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM flows),"
                     " (SELECT count(*) FROM counters),"
                     " (SELECT count(*) FROM events WHERE args IS NOT NULL AND NOT json_valid(args))").fetchall()
        assert got == [(want["events"], want["flows"], want["counters"], 0)]
        db.close()
