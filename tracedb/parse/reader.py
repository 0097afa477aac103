"""The reference reader: Chrome-trace / Kineto JSON in, Arrow record
batches out, streaming, exact, and tolerant where it must be. Every file can
be read whole by it; the C reader (pieces.py) is checked against it, and the
pieces it declines are read by its row rule (``TraceParser.add_event``).

Memory stays bounded: ijson's C backend (yajl2_c) yields one event at a
time, events are appended to column lists, and every ``batch_rows`` rows a
record batch is handed on. Only open ``B`` slices (waiting for their ``E``)
and a small tail buffer of the input are held.

The top-level keys of a Kineto trace are read without a second pass: keys
before ``traceEvents`` from a short parse of the file's head, keys after it
(``traceName``, ``baseTimeNanoseconds``, ...) from the last bytes of the
stream, kept in a ring buffer while the events go by.

Input yajl rejects (NaN/Infinity, invalid UTF-8, raw control characters,
old Kineto's unescaped quotes, ...) costs nothing here: on such an error the
file is read again by the tolerant reader (lenient.py), which skips the
events already parsed and goes on from there. Only truncation ("premature
EOF") is reported directly.

This module knows nothing of DuckDB, Parquet or click.
"""

from __future__ import annotations

import io
import json
import re
import sys
import threading
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import ijson
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import TraceFormatError
from ..schema import COUNTER_SCHEMA, EVENT_SCHEMA, FLOW_SCHEMA
from .lenient import LenientReader, describe
from .source import BOM, CORRUPT_GZIP, READ_ERRORS, first_byte, open_trace
from .values import (ARG_CONVERTERS, FLOW_PHASES, INT64_MAX, INT64_MIN, SURROGATE, TIME_LIMIT_NS, as_float,
                     as_int, as_text, dump_args, id_text, jsonable, to_ns, without_surrogates)

BATCH_ROWS = 65_536
_TAIL_BYTES = 2 << 20
# Nesting deeper than this switches to the tolerant reader: yajl2_c keeps a
# prefix string per level (memory grows with depth squared).
_DEPTH_LIMIT = 2048


# Python's limit on the digits of an int read from or written as text is
# the process's; see digits_lifted. Reentrant: the head's read lifts it
# again inside a whole file's.
_DIGITS_LIFTED = threading.RLock()


@contextmanager
def digits_lifted() -> Iterator[None]:
    """Python's limit on an int's digits (4300) lifted: ijson's C backend
    crashes on a longer integer, and args holding one are written back as
    text. Pieces parsed on threads, and a whole file's read, take it one
    at a time (the limit is the process's)."""
    with _DIGITS_LIFTED:
        limit = sys.get_int_max_str_digits()
        sys.set_int_max_str_digits(0)
        try:
            yield
        finally:
            sys.set_int_max_str_digits(limit)


@dataclass
class TraceMeta:
    """What a trace says about itself, filled while parsing."""

    form: str = "object"  # "object" ({"traceEvents": [...]}) or "array"
    distributed_info: dict | None = None
    device_properties: list | None = None
    base_time_ns: int | None = None
    trace_name: str | None = None
    display_time_unit: str | None = None
    schema_version: Any = None
    other: dict = field(default_factory=dict)
    json_event_count: int = 0
    event_count: int = 0
    flow_count: int = 0
    counter_count: int = 0
    unmatched_begin: int = 0
    unmatched_end: int = 0
    skipped_count: int = 0
    ts_min_ns: int | None = None
    ts_max_ns: int | None = None
    warnings: list[str] = field(default_factory=list)


class _Source(io.RawIOBase):
    """Reads the (decompressed) trace bytes, counting them, skipping a BOM,
    and keeping the last ``_TAIL_BYTES`` for the top-level keys after
    ``traceEvents``."""

    def __init__(self, raw: io.BufferedIOBase, keep_tail: bool = True):
        self._raw = raw
        self.offset = 0
        self._first = True
        self._tail: deque[bytes] | None = deque() if keep_tail else None
        self._tail_len = 0
        self._depth = 0  # opening less closing brackets: an estimate of the depth

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        data = self.read(len(buf))
        n = len(data)
        buf[:n] = data
        return n

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        data = self._raw.read(n)
        if self._first and data:
            self._first = False
            if data.startswith(BOM):
                data = data[3:]
        self.offset += len(data)
        # Brackets inside strings blur the estimate; going past the limit
        # only moves the file to the tolerant reader, which is exact.
        depth = self._depth + data.count(b"[") + data.count(b"{") - data.count(b"]") - data.count(b"}")
        self._depth = depth if depth > 0 else 0
        if depth > _DEPTH_LIMIT:
            raise _TooDeep()
        if yajl_only_space(data):
            raise _NotJson(YAJL_ONLY_SPACE)
        if self._tail is not None and data:
            self._tail.append(data)
            self._tail_len += len(data)
            while self._tail_len - len(self._tail[0]) >= _TAIL_BYTES:
                self._tail_len -= len(self._tail.popleft())
        return data

    def tail(self) -> bytes:
        return b"".join(self._tail or ())


def value_warnings(m: TraceMeta, surrogates: int, out_of_range: int) -> None:
    """The warnings for values the batches replaced (see _Columns)."""
    if surrogates:
        m.warnings.append(f"{surrogates} string(s) with lone surrogate escapes: U+FFFD in their place")
    if out_of_range:
        m.warnings.append(
            f"{out_of_range} value(s) out of range (times past 2^62 ns, integers past int64) read as NULL")


def lenient_warning(m: TraceMeta, why: str, repairs: Counter) -> None:
    """The warning of a read the tolerant reader took over from yajl: why
    yajl gave up, and what the tolerant reader repaired."""
    done = describe(repairs)
    m.warnings.append(f"yajl rejected the input ({why}); read with the tolerant reader" + (f": {done}" if done else ""))


def drop_bad_span(m: TraceMeta) -> None:
    """No time span when it ends before it starts (negative durations) or
    lies past the supported range."""
    if m.ts_min_ns is not None and not (-TIME_LIMIT_NS <= m.ts_min_ns <= m.ts_max_ns <= TIME_LIMIT_NS):
        m.ts_min_ns = m.ts_max_ns = None


class _Columns:
    """Column lists for one table, flushed as record batches."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.names = schema.names
        self.cols: dict[str, list] = {n: [] for n in self.names}
        self.rows = 0

    def batch(self) -> pa.RecordBatch:
        try:
            arrays = [pa.array(self.cols[n], type=self.schema.field(n).type) for n in self.names]
        except (OverflowError, UnicodeEncodeError, pa.ArrowInvalid):
            arrays = [self._array_sanitized(n) for n in self.names]
        for i, n in enumerate(self.names):
            if n in ("ts_ns", "dur_ns"):
                arrays[i] = self._clamp(arrays[i])
        self.cols = {n: [] for n in self.names}
        self.rows = 0
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    # Rare values, handled apart: integers past int64 (NULL) and
    # strings with lone surrogates (U+FFFD); times past TIME_LIMIT_NS (NULL).
    out_of_range = 0
    surrogates = 0

    def _array_sanitized(self, name: str) -> pa.Array:
        typ = self.schema.field(name).type
        values = self.cols[name]
        if pa.types.is_int64(typ):
            ok = [v if v is None or INT64_MIN <= v <= INT64_MAX else None for v in values]
            self.out_of_range += sum(1 for a, b in zip(values, ok) if a is not None and b is None)
            values = ok
        elif pa.types.is_string(typ):
            fixed = [SURROGATE.sub("\ufffd", v) if type(v) is str else v for v in values]
            self.surrogates += sum(1 for a, b in zip(values, fixed) if a is not b and a != b)
            values = fixed
        return pa.array(values, type=typ)

    def _clamp(self, arr: pa.Array) -> pa.Array:
        lo, hi = pc.min_max(arr).values()
        if lo.as_py() is None or (-TIME_LIMIT_NS <= lo.as_py() and hi.as_py() <= TIME_LIMIT_NS):
            return arr
        bad = pc.greater(pc.abs(arr), TIME_LIMIT_NS)
        self.out_of_range += pc.sum(bad).as_py() or 0
        return pc.if_else(bad, pa.scalar(None, arr.type), arr)


class TraceParser:
    """Parse one trace file. Iterate ``batches()`` for ``(table, batch)``
    pairs; ``meta`` is complete once the iteration ends.

    Raises :class:`TraceFormatError` naming the file, position and reason.
    """

    def __init__(self, path: str | Path, batch_rows: int = BATCH_ROWS):
        self.path = Path(path)
        self.batch_rows = batch_rows
        self.meta = TraceMeta()
        self._events = _Columns(EVENT_SCHEMA)
        self._flows = _Columns(FLOW_SCHEMA)
        self._counters = _Columns(COUNTER_SCHEMA)
        self._open: dict[tuple, list[tuple[int, dict]]] = {}
        self._source: _Source | None = None

    # -- errors ---------------------------------------------------------

    def _error(self, reason: str, position: str | None = None) -> TraceFormatError:
        if position is None and self._source is not None:
            position = f"byte {self._source.offset}"
        return TraceFormatError(str(self.path), reason, position)

    # -- top level --------------------------------------------------------

    def batches(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        with digits_lifted():
            yield from self._batches()

    def _batches(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        if self.path.stat().st_size == 0:
            raise self._error("empty file", "byte 0")
        try:
            first = first_byte(self.path)
        except READ_ERRORS as e:
            raise self._error(f"corrupt gzip: {short_error(e)}", "byte 0") from None
        if first == b"[":
            self.meta.form = "array"
            prefix = "item"
        elif first == b"{":
            self.meta.form = "object"
            prefix = "traceEvents.item"
            self._read_head()
        elif first == b"":
            raise self._error("empty file (only whitespace)", "byte 0")
        elif 0x20 <= first[0] < 0x7f:
            raise self._error(
                f"not a trace: starts with {first.decode()!r}, expected '{{' or '['", "byte 0"
            )
        else:
            raise self._error(f"not JSON: binary data (byte 0x{first[0]:02x})", "byte 0")
        self._lenient = False
        yield from self._read_events(prefix)
        if self.meta.form == "object" and not self._lenient:
            self._read_tail()
        yield from self.flush()
        value_warnings(self.meta, *self.sanitized())
        drop_bad_span(self.meta)

    def flush(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        """The rows added so far, as one batch per table that has any."""
        for table, cols in (("events", self._events), ("flows", self._flows),
                            ("counters", self._counters)):
            if cols.rows:
                yield table, cols.batch()

    def sanitized(self) -> tuple[int, int]:
        """How many strings had lone surrogates, and how many values were
        out of range, in the batches flushed so far."""
        tables = (self._events, self._flows, self._counters)
        return sum(c.surrogates for c in tables), sum(c.out_of_range for c in tables)

    def _read_head(self) -> None:
        """Top-level keys before traceEvents (a short parse of the head)."""
        found = False
        try:
            # the backend reads ahead of the key: a long integer in the first
            # events would crash it
            with digits_lifted(), open_trace(self.path) as raw:
                src = _Source(raw, keep_tail=False)
                builder = None
                key = None
                for prefix, event, value in ijson.parse(src, use_float=False):
                    if found == "key":  # the token after "traceEvents":
                        found = event == "start_array" or "not an array"
                        break
                    if prefix == "" and event == "map_key":
                        if value == "traceEvents":
                            found = "key"
                            continue
                        key = value
                        builder = ijson.ObjectBuilder()
                        continue
                    if builder is not None and key is not None:
                        builder.event(event, value)
                        if prefix == key and event in ("end_map", "end_array", "string",
                                                       "number", "boolean", "null"):
                            self._set_meta(key, builder.value)
                            builder = None
                            key = None
        except (ijson.JSONError, ijson.IncompleteJSONError, UnicodeDecodeError, _NotJson):
            # The main pass reports the error with its position (or reads
            # past a lone surrogate escape with the tolerant reader).
            return
        except READ_ERRORS:
            return
        self._has_events_key = found

    def _read_tail(self) -> None:
        """Top-level keys after traceEvents, from the last bytes read."""
        assert self._source is not None
        text = self._source.tail().decode("utf-8", errors="replace")
        for m in re.finditer(r"\]\s*([,}])", text):
            if m.group(1) == "}":
                if not text[m.end():].strip():
                    return
                continue
            members = _object_members(text, m.end())
            if members is not None:
                # In a small file the tail holds the head too, and the first
                # complete suffix may start before traceEvents: skip it.
                for k, v in members:
                    if k != "traceEvents":
                        self._set_meta(k, v)
                return
        self.meta.warnings.append(
            "could not read the top-level keys after traceEvents"
        )

    def _set_meta(self, key: str, value: Any) -> None:
        m = self.meta
        value = jsonable(value)
        clean = without_surrogates(value)
        if clean != value:  # the catalog's JSON and text columns take UTF-8 only
            m.warnings.append(f"top-level key {key!r}: lone surrogate escapes, U+FFFD in their place")
            value = clean
        if key == "distributedInfo" and isinstance(value, dict):
            m.distributed_info = value
        elif key == "deviceProperties" and isinstance(value, list):
            m.device_properties = value
        elif key == "baseTimeNanoseconds":
            m.base_time_ns = as_int(value)
        elif key == "traceName":
            m.trace_name = as_text(value)
        elif key == "displayTimeUnit":
            m.display_time_unit = as_text(value)
        elif key == "schemaVersion":
            m.schema_version = value
        else:
            m.other[key] = value

    # -- events -----------------------------------------------------------

    def _read_events(self, prefix: str) -> Iterator[tuple[str, pa.RecordBatch]]:
        try:
            raw = open_trace(self.path)
        except OSError as e:
            raise self._error(f"cannot open: {e.strerror or e}", "byte 0") from None
        self._source = src = _Source(raw)
        index = 0
        why = None  # why yajl gave up, when the tolerant reader takes over
        try:
            with raw:
                for ev in ijson.items(src, prefix, use_float=False):
                    if type(ev) is not dict:
                        self.meta.skipped_count += 1
                        index += 1
                        continue
                    self.add_event(index, ev)
                    index += 1
                    if self._events.rows >= self.batch_rows:
                        yield "events", self._events.batch()
                    if self._flows.rows >= self.batch_rows:
                        yield "flows", self._flows.batch()
                    if self._counters.rows >= self.batch_rows:
                        yield "counters", self._counters.batch()
        except ijson.JSONError as e:  # IncompleteJSONError too: yajl2_c raises it for any error
            if "premature EOF" in str(e):
                raise self._error(f"truncated JSON: the file ends inside event {index}",
                                  f"byte {src.offset}, event {index}") from None
            why = short_error(e)
        except UnicodeDecodeError as e:  # a lone low surrogate escape, decoded by ijson
            why = f"invalid UTF-8 ({e.reason})"
        except _TooDeep:
            why = f"nested deeper than {_DEPTH_LIMIT} levels"
        except _NotJson as e:
            why = str(e)
        except RecursionError:
            raise self._error(f"event {index} is nested too deeply (over ~900 levels)",
                              f"byte {src.offset}, event {index}") from None
        except EOFError:
            raise self._error("truncated gzip: the compressed stream ends early",
                              f"byte {src.offset}, event {index}") from None
        except CORRUPT_GZIP as e:
            raise self._error(f"corrupt gzip: {short_error(e)}", f"byte {src.offset}, event {index}") from None
        if why is not None:
            index = yield from self._read_lenient(index, why)
        self.meta.json_event_count = index
        found = getattr(self, "_has_events_key", False)
        if self.meta.form == "object" and index == 0 and found is not True:
            if found == "not an array":
                raise self._error("not a trace: traceEvents is not an array", "byte 0")
            raise self._error("not a trace: no traceEvents array", "byte 0")
        if self.meta.form == "array" and index > 0 and self.meta.skipped_count == index:
            raise self._error("not a trace: the array holds no event objects", "byte 0")
        self._close_open_slices()

    def _read_lenient(self, skip: int, why: str) -> Iterator[tuple[str, pa.RecordBatch]]:
        """Read the file again with the tolerant reader, from the start,
        skipping the ``skip`` events yajl already gave. Returns
        the number of items in the event array."""
        self._lenient = True
        raw = open_trace(self.path)
        reader = LenientReader(raw, str(self.path), self._set_meta)
        try:
            with raw:
                for ev in reader.events():
                    index = reader.index - 1
                    if index < skip:
                        continue
                    if type(ev) is not dict:
                        self.meta.skipped_count += 1
                        continue
                    self.add_event(index, ev)
                    for table, cols in (("events", self._events), ("flows", self._flows),
                                        ("counters", self._counters)):
                        if cols.rows >= self.batch_rows:
                            yield table, cols.batch()
        except EOFError:
            raise self._error("truncated gzip: the compressed stream ends early",
                              f"byte {reader.offset()}, event {reader.index}") from None
        except CORRUPT_GZIP as e:
            raise self._error(f"corrupt gzip: {short_error(e)}",
                              f"byte {reader.offset()}, event {reader.index}") from None
        except RecursionError:
            raise self._error(f"event {reader.index} is nested too deeply (over ~900 levels)",
                              f"byte {reader.offset()}, event {reader.index}") from None
        self.meta.form = reader.form or self.meta.form
        self._has_events_key = reader.has_events_key
        lenient_warning(self.meta, why, reader.repairs)
        return reader.index

    def add_event(self, index: int, ev: dict) -> None:
        """The row rule: event ``index`` of the file (a dict as ijson reads
        it, numbers with a fraction as Decimals) -> its rows. B slices wait
        for their E (the whole file's read keeps those never closed)."""
        ph = ev.get("ph")
        if type(ph) is not str:
            ph = as_text(ph)
        ts = to_ns(ev.get("ts"))
        if ts is not None:
            m = self.meta
            if m.ts_min_ns is None or ts < m.ts_min_ns:
                m.ts_min_ns = ts
            end = ts + (to_ns(ev.get("dur")) or 0)
            if m.ts_max_ns is None or end > m.ts_max_ns:
                m.ts_max_ns = end
        if ph == "X":
            self._slice(index, ev, ts, to_ns(ev.get("dur")), "X")
        elif ph in FLOW_PHASES:
            self._flow(index, ev, ts, ph)
        elif ph == "C":
            self._counter(index, ev, ts)
        elif ph == "B":
            key = (id_text(ev.get("pid")), id_text(ev.get("tid")))
            self._open.setdefault(key, []).append((index, ev))
        elif ph == "E":
            key = (id_text(ev.get("pid")), id_text(ev.get("tid")))
            stack = self._open.get(key)
            if stack:
                b_index, b = stack.pop()
                b_ts = to_ns(b.get("ts"))
                dur = ts - b_ts if ts is not None and b_ts is not None else None
                args = b.get("args")
                e_args = ev.get("args")
                if isinstance(e_args, dict) and e_args:
                    args = {**args, **e_args} if isinstance(args, dict) else e_args
                merged = dict(b)
                merged["args"] = args
                self._slice(b_index, merged, b_ts, dur, "X")
            else:
                self.meta.unmatched_end += 1
                self._slice(index, ev, ts, None, "E")
        else:
            self._slice(index, ev, ts, None, ph)

    def _slice(self, index: int, ev: dict, ts: int | None, dur: int | None, ph: str | None) -> None:
        c = self._events.cols
        c["event_id"].append(index)
        c["ts_ns"].append(ts)
        c["dur_ns"].append(dur)
        c["ph"].append(ph)
        cat = ev.get("cat")
        c["cat"].append(cat if cat is None or type(cat) is str else as_text(cat))
        name = ev.get("name")
        c["name"].append(name if name is None or type(name) is str else as_text(name))
        c["pid"].append(id_text(ev.get("pid")))
        c["tid"].append(id_text(ev.get("tid")))
        c["id"].append(id_text(ev.get("id")))
        args = ev.get("args")
        if type(args) is dict and args:
            for key, col, conv in ARG_CONVERTERS:
                v = args.get(key)
                c[col].append(None if v is None else conv(v))
        else:
            for _key, col, _conv in ARG_CONVERTERS:
                c[col].append(None)
        c["args"].append(dump_args(args))
        self._events.rows += 1
        self.meta.event_count += 1

    def _flow(self, index: int, ev: dict, ts: int | None, ph: str) -> None:
        c = self._flows.cols
        c["event_id"].append(index)
        c["ts_ns"].append(ts)
        c["ph"].append(ph)
        c["id"].append(id_text(ev.get("id", ev.get("bind_id"))))
        c["cat"].append(as_text(ev.get("cat")))
        c["name"].append(as_text(ev.get("name")))
        c["pid"].append(id_text(ev.get("pid")))
        c["tid"].append(id_text(ev.get("tid")))
        c["bp"].append(as_text(ev.get("bp")))
        self._flows.rows += 1
        self.meta.flow_count += 1

    def _counter(self, index: int, ev: dict, ts: int | None) -> None:
        args = ev.get("args")
        if type(args) is not dict:
            args = {}
        c = self._counters.cols
        name = as_text(ev.get("name"))
        cat = as_text(ev.get("cat"))
        pid, tid = id_text(ev.get("pid")), id_text(ev.get("tid"))
        cid = id_text(ev.get("id"))
        for series, value in args.items():
            c["event_id"].append(index)
            c["ts_ns"].append(ts)
            c["cat"].append(cat)
            c["name"].append(name)
            c["pid"].append(pid)
            c["tid"].append(tid)
            c["id"].append(cid)
            c["series"].append(str(series))
            c["value"].append(as_float(value))
            self._counters.rows += 1
            self.meta.counter_count += 1

    def _close_open_slices(self) -> None:
        """B events never closed by an E: kept, with a NULL duration."""
        for stack in self._open.values():
            for index, ev in stack:
                self.meta.unmatched_begin += 1
                self._slice(index, ev, to_ns(ev.get("ts")), None, "B")
        self._open.clear()
        if self.meta.unmatched_begin or self.meta.unmatched_end:
            self.meta.warnings.append(
                f"{self.meta.unmatched_begin} B without E, "
                f"{self.meta.unmatched_end} E without B (kept with NULL dur_ns)"
            )


_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")


def _object_members(text: str, pos: int) -> list[tuple[str, Any]] | None:
    """Parse ``"key": value, ... }`` from ``pos`` to the end of ``text``
    (the rest of the top-level object after traceEvents); None when the text
    there is not exactly that. Parses in place: no copy of the tail per try."""
    members = []
    end = len(text)
    while True:
        pos = _WS.match(text, pos).end()
        try:
            key, pos = _DECODER.raw_decode(text, pos)
        except ValueError:
            return None
        if not isinstance(key, str):
            return None
        pos = _WS.match(text, pos).end()
        if pos >= end or text[pos] != ":":
            return None
        pos = _WS.match(text, pos + 1).end()
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except ValueError:
            return None
        members.append((key, value))
        pos = _WS.match(text, pos).end()
        if pos < end and text[pos] == ",":
            pos += 1
            continue
        if pos < end and text[pos] == "}" and _WS.match(text, pos + 1).end() == end:
            return members
        return None


class _TooDeep(Exception):
    """Raised by _Source when the input nests deeper than _DEPTH_LIMIT."""


class _NotJson(Exception):
    """Raised by _Source for what yajl reads but JSON does not allow."""


YAJL_ONLY_SPACE = "a vertical tab or form feed, which JSON allows only escaped"


def yajl_only_space(data: bytes) -> bool:
    """Whether ``data`` (bytes: ``in`` on a memoryview compares its items,
    integers, and finds nothing) holds a vertical tab or a form feed, which
    yajl reads as whitespace and JSON has nowhere unescaped."""
    return b"\x0b" in data or b"\x0c" in data


def short_error(e: BaseException) -> str:
    """The first line of an error's text, at most 200 characters."""
    arg = e.args[0] if e.args else None
    text = arg.decode("utf-8", "replace") if isinstance(arg, bytes) else str(e)
    text = text.strip().splitlines()
    return text[0][:200] if text else type(e).__name__
