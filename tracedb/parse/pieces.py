"""Large traces in pieces: split the event array, parse each piece on its
own (on worker threads when there are cores to spare).

Kineto pretty-prints one event per block that starts with a newline, a fixed
indent and ``{`` (``\\n  {``). JSON strings cannot hold a raw newline, so
that sequence is never inside a string; a piece of the event array cut just
before it is a run of whole events. A cut at the wrong depth makes the piece
invalid JSON and is caught. A trace written on one line (``json.dumps``: no
newline before its first event) is cut after a comma between events, found
by the C reader's walk over the block's strings and nesting
(``_fastparse.cut``), and so is the rest of a trace from a block in which
no event begins a line (its events share lines after the first; an event
longer than a block); without the C reader such a file is read whole.

Each piece goes to the C reader (_fastparse.c) first. A piece it declines
(see ``decline_reason``; benchmarks/declines.py counts them on real traces)
goes to the reference reader (reader.py): the piece's events decoded
exactly (ijson, numbers with a fraction as Decimals) and turned into rows by
the same row rule as a whole file's. A piece that yajl rejects (``NaN``,
invalid UTF-8, old Kineto's unescaped quotes and bare ``N/A``) is read by
the tolerant reader (lenient.py), as the whole-file read reads what follows
yajl's error. What only a whole-file read can do raises
:class:`NotSplittable`, and the caller reads the file with
reader.TraceParser: ``B``/``E`` pairs (they may span pieces), a one-line
piece with unescaped quotes (they can have moved its cuts), keys before
the events that yajl cannot read.

This module knows nothing of DuckDB, Parquet or click.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import ijson
import numpy as np
import pyarrow as pa

from ..schema import ARG_COLUMNS, EVENT_LANES, EVENT_SCHEMA, FLOW_SCHEMA, by_lane
from ..errors import TraceFormatError
from .lenient import LenientReader
from .reader import (YAJL_ONLY_SPACE, TraceMeta, TraceParser, digits_lifted, drop_bad_span, lenient_warning,
                     short_error, value_warnings, yajl_only_space)
from .source import BOM, READ_ERRORS, open_trace

try:
    from . import _fastparse
except ImportError:  # not compiled (no C compiler at install): Python only
    _fastparse = None
else:
    if _fastparse.ARG_KEYS != tuple((key, str(typ)) for key, (_col, typ) in ARG_COLUMNS.items()):
        raise ImportError("tracedb/parse/_fastparse.c does not list schema.ARG_COLUMNS; rebuild it (pip install -e .)")
    if dict(_fastparse.LANES) != EVENT_LANES:
        raise ImportError("tracedb/parse/_fastparse.c does not list schema.EVENT_LANES; rebuild it (pip install -e .)")

# A piece is parsed, staged (one IPC file a table) and sorted on its own,
# and finalize reads each piece once a lane: every piece costs a file, its
# batches and their lz4 frames, whatever its size. At 8 MB, not 4, a 1.1 GB
# trace takes 9% less CPU, a 4.4 GB one 15% and a rank file of 189 MB 6%,
# with the peak within its run-to-run spread (benchmarks/ab.py,
# docs/performance.md); at 16 MB the 4.4 GB trace's peak came within 1 MiB
# of its 500 MB.
PIECE_BYTES = 8 << 20
_HEAD_LIMIT = 64 << 20
_READ_BYTES = 4 << 20
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[(\s*)\{')


class NotSplittable(Exception):
    """The file cannot be read in pieces; read it whole (reader.TraceParser)."""


@dataclass
class Piece:
    """A run of whole events: bytes (or a view of a block read) and the file
    index of its first event."""

    number: int
    data: bytes | memoryview
    base: int
    count: int
    # Cut at a newline before an event (Kineto's layout), which no string
    # holds even in JSON yajl rejects; not a one-line piece, whose cuts
    # follow quotes, which old Kineto left unescaped in names.
    by_line: bool = True


@dataclass
class PieceResult:
    """What a parsed piece produced (batches, and its share of the meta)."""

    batches: list[tuple[str, pa.RecordBatch]] = field(default_factory=list)
    # The lane of each of its events batches (schema.EVENT_LANES): a batch
    # holds one lane's rows, in event order.
    event_lanes: list[int] = field(default_factory=list)
    json_event_count: int = 0
    event_count: int = 0
    flow_count: int = 0
    counter_count: int = 0
    skipped_count: int = 0
    ts_min_ns: int | None = None
    ts_max_ns: int | None = None
    surrogates: int = 0  # strings with lone surrogates (U+FFFD in their place)
    out_of_range: int = 0  # values read as NULL (see reader._Columns)
    # When yajl rejected the piece and the tolerant reader read it: the
    # piece's number and why, and what that reader repaired
    # (lenient.REPAIR_LABELS)
    lenient: tuple[int, str] | None = None
    repairs: Counter = field(default_factory=Counter)
    # The C reader's slices for self time's stream, in event order (None: the
    # stream reads them from the staged part): (threads: [(pid, tid)], each
    # slice's thread as an index into threads, ts_ns, dur_ns, event_id).
    slices: tuple[list[tuple[str, str]], np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None


# -- splitting ---------------------------------------------------------------


def _read(f: io.BufferedIOBase, n: int) -> bytes:
    """The next ``n`` bytes. A file that cannot be read to its end (a
    truncated or corrupt gzip, an I/O error) is the whole-file reader's: it
    says where and what, in the file's error."""
    try:
        return f.read(n)
    except READ_ERRORS as e:
        raise NotSplittable(f"cannot read: {e}") from None


def count_events(data: bytes | memoryview, sep: bytes) -> int:
    """How many times ``sep`` (a newline, an indent, ``{``) occurs in
    ``data``: the events that start in it. Occurrences cannot overlap (the
    newline is only first). The C reader's count takes 0.36 ms for 4 MB,
    numpy's compares 1.9 and ``bytes.count`` 3.2, on the thread that feeds
    the parsers (without the C reader, ``bytes.count``)."""
    if _fastparse is not None:
        return _fastparse.count(data, sep)
    return bytes(data).count(sep)


class Splitter:
    """Reads a trace (plain or gzip) once, front to back, and yields its
    event array as pieces of about ``piece_bytes``; ``head``/``tail`` are the
    bytes around the array, for the top-level keys."""

    def __init__(self, path: str | Path, piece_bytes: int | None = None):
        self.path = Path(path)
        self.piece_bytes = piece_bytes or PIECE_BYTES
        self.form = "object"
        self.head = b""
        self.tail = b""

    def pieces(self) -> Iterator[Piece]:
        try:
            f = open_trace(self.path)
        except OSError as e:
            raise NotSplittable(f"cannot read: {e}") from None
        with f:
            buf = _read(f, min(_READ_BYTES, self.piece_bytes))
            bom = 3 if buf.startswith(BOM) else 0
            start, sep = self._find_start(f, buf[bom:])
            buf = self._buf
            self.head = buf[:start]
            carry = buf[start:]
            # A plain file is read again from after each piece's last boundary
            # (a seek back over the event the block cut), so that a piece is a
            # view of the bytes read, not a copy joined to the bytes before
            # (a copy of every byte: the bench's 1 GiB trace's splitter took
            # 0.60-0.69 CPU-s with it, 0.33-0.46 without). A gzip stream cannot
            # seek back cheaply: what follows the boundary is carried, joined.
            rewind = isinstance(f, io.BufferedReader)
            if rewind:
                f.seek(-len(carry), io.SEEK_CUR)
                carry = b""
            if sep is None:
                yield from self._one_line_pieces(f, carry, rewind)
                return
            number = base = 0
            while True:
                block = _read(f, self.piece_bytes)
                if not block:
                    break
                if rewind and len(block) < self.piece_bytes:  # the file's end: its last piece
                    carry += block
                    break
                cut = block.rfind(sep)
                if cut < 0:
                    # No event begins a line here (the first one did: "[\n{...},
                    # {...}", or one event is longer than the block): on from
                    # here as on one line, or without the C reader, carried.
                    if _fastparse is not None:
                        yield from self._one_line_pieces(f, carry + block, rewind, number, base)
                        return
                    carry += block
                    if len(carry) > 8 * self.piece_bytes:
                        raise NotSplittable("no event boundary in a long stretch")
                    continue
                # Cut at the last boundary of this block; it has the last event
                # of the array only if nothing follows, so keep the remainder.
                data = b"".join((carry, memoryview(block)[:cut])) if carry else memoryview(block)[:cut]
                count = count_events(data, sep) + 1
                yield Piece(number, data, base, count)
                if rewind:
                    f.seek(cut + 1 - len(block), io.SEEK_CUR)
                    carry = b""
                else:
                    carry = block[cut + 1:]
                number += 1
                base += count
            buf = carry
            # The rest: last events, then the end of the array and the tail
            # (where its events share lines, found as on one line).
            try:
                end = self._find_end(buf, sep)
            except NotSplittable:
                if _fastparse is None:
                    raise
                yield from self._one_line_pieces(f, buf, rewind, number, base)
                return
            data, self.tail = buf[:end], buf[end:]
            if data.strip():
                yield Piece(number, data, base, count_events(data, sep) + 1)

    def _one_line_pieces(self, f, carry: bytes, rewind: bool, number: int = 0, base: int = 0) -> Iterator[Piece]:
        """The pieces of an event array on one line (``json.dumps``' layout),
        from ``carry`` (bytes from an event's start) and the file's next
        blocks on; the first is numbered ``number``, its first event
        ``base``. Each block is cut after the last comma between its events,
        which the C reader's walk over strings and nesting finds
        (``_fastparse.cut``); the block that holds the array's ``]`` ends
        the pieces, and what follows it is the tail. A brace that closes
        nothing is not JSON."""
        while True:
            block = _read(f, self.piece_bytes)
            data = b"".join((carry, block)) if carry else block
            try:
                end, count, closed = _fastparse.cut(data)
            except ValueError as e:
                raise NotSplittable(f"not JSON: {e}") from None
            if closed:
                if count:
                    yield Piece(number, memoryview(data)[:end], base, count, by_line=False)
                self.tail = data[end:] + _read(f, _HEAD_LIMIT + 1)
                if len(self.tail) > _HEAD_LIMIT:
                    raise NotSplittable("more than 64 MiB after the event array")
                return
            if not block:
                raise NotSplittable("cannot find the end of the event array")
            if not count:
                carry = data
                if len(carry) > 8 * self.piece_bytes:
                    raise NotSplittable("no event boundary in a long stretch")
                continue
            yield Piece(number, memoryview(data)[:end], base, count, by_line=False)
            if rewind:
                f.seek(end - len(data), io.SEEK_CUR)
                carry = b""
            else:
                carry = data[end:]
            number += 1
            base += count

    def _find_start(self, f, buf: bytes) -> tuple[int, bytes | None]:
        while True:
            stripped = buf.lstrip()
            if stripped[:1] == b"[":
                self.form = "array"
                m = re.compile(rb"\s*\[(\s*)\{").match(buf)
            else:
                m = _EVENTS_KEY_RE.search(buf)
            if m:
                ws = m.group(1)
                nl = ws.rfind(b"\n")
                self._buf = buf
                if nl < 0:  # on one line: cut where the C reader's walk finds commas
                    if _fastparse is None:
                        raise NotSplittable("events are not one per line")
                    return m.end() - 1, None
                return m.end() - 1, b"\n" + ws[nl + 1:] + b"{"
            if len(buf) > _HEAD_LIMIT:
                raise NotSplittable("no traceEvents array near the start")
            more = _read(f, min(_READ_BYTES, self.piece_bytes))
            if not more:
                raise NotSplittable("no traceEvents array")
            buf += more

    def _find_end(self, buf: bytes, sep: bytes) -> int:
        close = b"\n" + sep[1:-1] + b"}"
        i = len(buf)
        while True:
            i = buf.rfind(close, 0, i)
            if i < 0:
                raise NotSplittable("cannot find the end of the event array")
            j = i + len(close)
            rest = buf[j:].lstrip()
            if rest[:1] == b"]":
                after = rest[1:].strip()
                if self.form == "array" and after == b"":
                    return j
                if self.form == "object" and (after == b"}" or after[:1] == b","):
                    return j


def read_tail_keys(tail: bytes, parser: TraceParser) -> None:
    """Top-level keys after the event array (``], "k": v, ...}``)."""
    rest = tail.lstrip()[1:].strip()  # drop "]"
    if rest[:1] != b",":
        return
    try:
        obj = json.loads(b"{" + rest[1:])
    except ValueError:
        parser.meta.warnings.append("could not read the top-level keys after traceEvents")
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            parser._set_meta(k, v)


# -- parsing a piece ---------------------------------------------------------


def parse_piece(piece: Piece, path: str = "<piece>") -> PieceResult:
    """Parse one piece into record batches (events, flows, counters): the
    C reader, or where it declines, the reference reader."""
    data = _events_text(piece)
    if _fastparse is not None:
        res = _convert_c(data, piece)
        if res is not None:
            return res
    return _convert_reference(data, piece, path)


def decline_reason(piece: Piece) -> str | None:
    """Why the C reader declines the piece (None: it takes it, or it is
    not built)."""
    if _fastparse is None:
        return None
    out = _fastparse.parse(_events_text(piece), piece.base)
    return out if isinstance(out, str) else None


_SPACE = frozenset(b" \t\n\r\x0b\x0c")  # what bytes.rstrip() takes
_COMMA = ord(",")


def _events_text(piece: Piece) -> memoryview:
    """The piece's events, without the comma after the last (a view: the
    piece's bytes are not copied)."""
    data = piece.data
    end = len(data)
    while end and data[end - 1] in _SPACE:
        end -= 1
    if end and data[end - 1] == _COMMA:
        end -= 1
    return memoryview(data)[:end]


def _convert_reference(data: bytes | memoryview, piece: Piece, path: str) -> PieceResult:
    """The piece's events decoded exactly and put through the reference
    reader's row rule (TraceParser.add_event), as the whole file's read
    would."""
    with digits_lifted():  # as TraceParser.batches
        return _reference_rows(data, piece, path)


def _reference_rows(data: bytes | memoryview, piece: Piece, path: str) -> PieceResult:
    text = b"[" + data + b"]"
    if yajl_only_space(text):  # yajl would take it: the whole-file read says where
        raise NotSplittable(f"piece {piece.number}: {YAJL_ONLY_SPACE}")
    why = None
    try:
        evs = list(ijson.items(io.BytesIO(text), "item", use_float=False))
    except (ijson.JSONError, UnicodeDecodeError) as e:
        # as the whole-file read: the tolerant reader takes what yajl rejects
        why = f"invalid UTF-8 ({e.reason})" if isinstance(e, UnicodeDecodeError) else short_error(e)
        reader = LenientReader(io.BytesIO(text), path, _no_meta)
        try:
            evs = list(reader.events())
        except (TraceFormatError, RecursionError) as e:  # the whole-file read says where
            raise NotSplittable(f"piece {piece.number}: {type(e).__name__}: {e}") from None
        if not piece.by_line and reader.repairs["quote"]:
            # an unescaped quote can have moved the one-line walk's cuts
            raise NotSplittable(f"piece {piece.number}: unescaped quotes in a piece on one line") from None
    except RecursionError as e:
        raise NotSplittable(f"piece {piece.number}: {type(e).__name__}: {e}") from None
    if len(evs) != piece.count:
        raise NotSplittable(f"piece {piece.number}: {len(evs)} events, expected {piece.count}")
    p = TraceParser(path)
    m = p.meta
    try:
        for i, ev in enumerate(evs):
            if type(ev) is not dict:
                m.skipped_count += 1
                continue
            ph = ev.get("ph")
            if ph == "B" or ph == "E":
                raise NotSplittable("B/E events (matched across the whole file)")
            p.add_event(piece.base + i, ev)
        batches = list(p.flush())
    except RecursionError:  # args nested too deeply to write: the whole-file read says where
        raise NotSplittable(f"piece {piece.number}: nested too deeply") from None
    # The events by lane, as the C reader gives them (a copy; this path is rare).
    lanes = [(lane, rows) for table, batch in batches if table == "events" for lane, rows in by_lane(batch)]
    batches = [*(("events", rows) for _lane, rows in lanes), *((t, b) for t, b in batches if t != "events")]
    res = PieceResult(batches, event_lanes=[lane for lane, _rows in lanes],
                      json_event_count=len(evs), event_count=m.event_count, flow_count=m.flow_count,
                      counter_count=m.counter_count, skipped_count=m.skipped_count,
                      ts_min_ns=m.ts_min_ns, ts_max_ns=m.ts_max_ns)
    res.surrogates, res.out_of_range = p.sanitized()
    if why is not None:
        res.lenient, res.repairs = (piece.number, why), reader.repairs
    return res


def _no_meta(key: str, value: object) -> None:
    """A piece's array has no top-level keys."""


# -- the C path: _fastparse.c ------------------------------------------------


def _convert_c(data: bytes | memoryview, piece: Piece) -> PieceResult | None:
    """The piece's batches from _fastparse, or None where it declines (the
    piece has something out of the common case its source lists)."""
    out = _fastparse.parse(data, piece.base)
    if isinstance(out, str):  # why it declined
        return None
    count, lanes, flows, span, (threads, thread, ts, dur, event_id) = out
    if count != piece.count:
        raise NotSplittable(f"piece {piece.number}: {count} events, expected {piece.count}")
    res = PieceResult(json_event_count=count)
    # The events a batch for each lane (its own buffers), in lane order.
    for table, schema, cols, lane in [*(("events", EVENT_SCHEMA, cols, lane) for lane, cols in enumerate(lanes)),
                                      ("flows", FLOW_SCHEMA, flows, None)]:
        n = len(cols[0][2]) // 8  # event_id's values
        if n:
            arrays = [_from_buffers(f.type, n, col) for f, col in zip(schema, cols)]
            res.batches.append((table, pa.RecordBatch.from_arrays(arrays, schema=schema)))
            if lane is not None:
                res.event_lanes.append(lane)
    res.event_count = sum(len(lane[0][2]) // 8 for lane in lanes)
    res.flow_count = len(flows[0][2]) // 8
    res.slices = (threads, np.frombuffer(thread, np.int32), *(np.frombuffer(b, np.int64) for b in (ts, dur, event_id)))
    if span is not None:
        _widen(res, *span)
    return res


def _from_buffers(typ: pa.DataType, n: int, col: tuple) -> pa.Array:
    """An Arrow array of a column _fastparse wrote: (null count, validity
    bitmap or None, values, offsets or None)."""
    nulls, valid, data, offsets = col
    valid = None if valid is None else pa.py_buffer(valid)
    if pa.types.is_list(typ):
        items = pa.Array.from_buffers(pa.int64(), len(data) // 8, [None, pa.py_buffer(data)])
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(offsets)], null_count=nulls, children=[items])
    if offsets is None:
        return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(data)], null_count=nulls)
    return pa.Array.from_buffers(typ, n, [valid, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def merge_meta(meta: TraceMeta, res: PieceResult) -> None:
    meta.json_event_count += res.json_event_count
    meta.event_count += res.event_count
    meta.flow_count += res.flow_count
    meta.counter_count += res.counter_count
    meta.skipped_count += res.skipped_count
    _widen(meta, res.ts_min_ns, res.ts_max_ns)


def _widen(span: "PieceResult | TraceMeta", lo: int | None, hi: int | None) -> None:
    """Widen ``span``'s ts_min_ns/ts_max_ns to take in lo and hi."""
    if lo is not None and (span.ts_min_ns is None or lo < span.ts_min_ns):
        span.ts_min_ns = lo
    if hi is not None and (span.ts_max_ns is None or hi > span.ts_max_ns):
        span.ts_max_ns = hi


class SplitParser:
    """A file in pieces, with TraceParser's interface: ``pieces()`` to hand
    out, ``add()`` each result, ``finish()`` once they are parsed; or
    ``batches()`` to parse them here, one after the other. Raises
    :class:`NotSplittable` (before or while yielding) when the file needs
    the whole-file read."""

    def __init__(self, path: str | Path, piece_bytes: int | None = None):
        self.path = Path(path)
        self._parser = TraceParser(self.path)
        self.meta = self._parser.meta
        self.splitter = Splitter(self.path, piece_bytes)
        self._surrogates = self._out_of_range = 0
        self._lenient: tuple[int, str] | None = None  # the first piece yajl rejected: (number, why)
        self._repairs: Counter = Counter()

    def pieces(self) -> Iterator[Piece]:
        yield from self.splitter.pieces()

    def add(self, res: PieceResult) -> None:
        merge_meta(self.meta, res)
        self._surrogates += res.surrogates
        self._out_of_range += res.out_of_range
        if res.lenient is not None:
            self._lenient = min(self._lenient or res.lenient, res.lenient)
            self._repairs += res.repairs

    def finish(self) -> None:
        """Top-level keys (head and tail) into ``meta``, and the warnings
        the whole-file read would give."""
        self.meta.form = self.splitter.form
        drop_bad_span(self.meta)
        if self.splitter.form == "object":
            self._parser._read_head()
            if getattr(self._parser, "_has_events_key", False) is not True:
                # yajl stopped in the head (a lone low surrogate escape): the
                # whole-file read's tolerant reader reads its keys
                raise NotSplittable("the top-level keys before the events are not strict JSON")
            read_tail_keys(self.splitter.tail, self._parser)
        if self._lenient is not None:
            lenient_warning(self.meta, self._lenient[1], self._repairs)
        value_warnings(self.meta, self._surrogates, self._out_of_range)

    def batches(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        for piece in self.pieces():
            res = parse_piece(piece, str(self.path))
            self.add(res)
            yield from res.batches
        self.finish()
