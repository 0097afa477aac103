"""Fast path for large pretty-printed traces: split into pieces, parse each
piece on its own (in worker processes when there are cores to spare).

Kineto pretty-prints one event per block that starts with a newline, a fixed
indent and ``{`` (``\\n  {``). JSON strings cannot hold a raw newline, so
that sequence is never inside a string; a piece of the event array cut just
before it is a run of whole events, parsed at C speed as ``[`` + piece +
``]``. A cut at the wrong depth makes the piece invalid JSON and is caught;
the caller then falls back to the streaming parser (parse.py), which stays
the reference for every file.

Two ways to parse a piece. The struct path (``msgspec``) decodes each event
into a struct of the keys that become columns, skipping the rest, and keeps
``args`` as raw JSON: its text, without the whitespace, is the args column
(so numbers keep the trace's spelling, ``464.592590`` where the streaming
parser writes ``464.59259``: the same JSON values), and a second decode of
the args pulls the typed columns. A piece it does not handle (counters,
events without a phase, args that are not objects) takes the dict path:
``orjson`` dicts, as the streaming parser reads them.

Exactness: both read fractional numbers as doubles. A timestamp written
with at most 3 decimals (Kineto's ns resolution) and below 2**43 µs is
recovered exactly from its double (the double's spacing there is under
1 ns); a piece with a timestamp or duration of 4+ decimals, or with one
written with a fraction at or past 2**43 µs, is parsed with ijson's
Decimals instead. (The C path of _fastparse.c, tried first, reads every
time exactly from its text.) Columns are built
a column at a time (list comprehensions, pyarrow), not an event at a time;
every value that is not of the common type goes through the same converters
as the streaming parser, so both paths write the same rows.

``B``/``E`` pairs may span pieces: a piece holding either raises
:class:`NotSplittable` and the whole file takes the streaming path.

This module knows nothing of DuckDB, Parquet or click.
"""

from __future__ import annotations

import gc
import gzip
import io
import math
import re
import zlib
from dataclasses import dataclass, field, replace
from decimal import Decimal
from itertools import chain, compress
from operator import attrgetter, not_
from pathlib import Path
from typing import Any, Iterator, Sequence

import ijson
import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from .parse import (
    _ARG_CONVERTERS,
    FLOW_PHASES,
    TraceMeta,
    TraceParser,
    _as_text,
    _default,
    _dump_args,
    _id_text,
    _pid_text,
    _to_ns,
    drop_bad_span,
)
from .schema import ARG_COLUMNS, EVENT_SCHEMA, FLOW_SCHEMA

try:
    from . import _fastparse
except ImportError:  # not compiled (no C compiler at install): Python only
    _fastparse = None
else:
    if _fastparse.ARG_KEYS != tuple((key, str(typ)) for key, (_col, typ) in ARG_COLUMNS.items()):
        raise ImportError("tracedb/_fastparse.c does not list schema.ARG_COLUMNS; rebuild it (pip install -e .)")

PIECE_BYTES = 4 << 20
_HEAD_LIMIT = 64 << 20
_READ_BYTES = 4 << 20
_TWO43 = float(1 << 43)
_TIME_LIMIT_NS = 1 << 62  # parse.py reads times past this as NULL (and says so)

# A number with 4+ decimals (fast to find); _is_time_value then says whether
# it is a timestamp or duration, which the double path cannot carry exactly.
_FINE_FRACTION_RE = re.compile(rb"\.\d{4}")
_DIGITS = frozenset(b"0123456789")
_SPACE = frozenset(b" \t\r\n")
_LONG_DIGITS_RE = re.compile(rb"\d{19}")
_EVENTS_KEY_RE = re.compile(rb'"traceEvents"\s*:\s*\[(\s*)\{')
_NONE = type(None)
_EMPTY: dict = {}
_ARG_KEYS = frozenset(key for key, _col, _conv in _ARG_CONVERTERS)
_ARG_TYPES = {col: EVENT_SCHEMA.field(col).type for _key, col, _conv in _ARG_CONVERTERS}


class NotSplittable(Exception):
    """The file cannot take the fast path; use the streaming parser."""


class InexactTime(Exception):
    """A double cannot say which exact ns a timestamp was; use Decimals."""


def _float_ns(v: float) -> int | None:
    """A timestamp orjson read as a double -> exact int ns, or InexactTime."""
    if v != v or v in (math.inf, -math.inf):
        return None
    if abs(v) >= _TWO43:  # a fraction the text had may be gone from the double (.080 -> .0)
        raise InexactTime
    whole = math.floor(v)
    return whole * 1000 + round((v - whole) * 1000)


def _exact_ns(v) -> int | None:
    return _float_ns(v) if type(v) is float else _to_ns(v)


def _as_read(v):
    """A value as the streaming parser reads it, for the converters it shares
    with this module: ijson reads a number with a fraction as a Decimal (the
    double's shortest spelling stands for the text the trace wrote)."""
    t = type(v)
    if t is float:
        return Decimal(repr(v))
    if t is list:
        return [_as_read(x) for x in v]
    if t is dict:
        return {k: _as_read(x) for k, x in v.items()}
    return v


def _event_as_read(ev: dict) -> dict:
    """An event as the streaming parser reads it, for its per-event code:
    ts and dur as the exact Decimals they were written as."""
    out = {}
    for key, v in ev.items():
        if (key == "ts" or key == "dur") and type(v) is float:
            ns = _float_ns(v)
            out[key] = None if ns is None else Decimal(ns).scaleb(-3)
        else:
            out[key] = _as_read(v)
    return out


@dataclass
class Piece:
    """A run of whole events: bytes and the file index of its first event."""

    number: int
    data: bytes
    base: int
    count: int
    # Where ``data`` lies in a plain (not gzip) file: offset and length.
    span: tuple[int, int] | None = None

    def sent(self) -> "Piece":
        """The piece to hand a worker process: without its bytes when the
        file holds them as they are (the worker reads them there, cheaper
        than a pipe: 1 GiB of pieces pickled and piped cost 0.8 s of CPU)."""
        return self if self.span is None else replace(self, data=b"")

    def received(self, path: str | Path) -> "Piece":
        """The piece with its bytes, read from ``path`` if it came without."""
        if self.data or self.span is None:
            return self
        offset, length = self.span
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise NotSplittable(f"piece {self.number}: the file changed while it was read")
        return replace(self, data=data)


@dataclass
class PieceResult:
    """What a parsed piece produced (batches, and its share of the meta)."""

    batches: list[tuple[str, pa.RecordBatch]] = field(default_factory=list)
    json_event_count: int = 0
    event_count: int = 0
    flow_count: int = 0
    counter_count: int = 0
    skipped_count: int = 0
    ts_min_ns: int | None = None
    ts_max_ns: int | None = None


# -- splitting ---------------------------------------------------------------


def _open(path: Path) -> io.BufferedIOBase:
    f = open(path, "rb")
    if f.read(2) == b"\x1f\x8b":
        f.seek(0)
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    f.seek(0)
    return f


def _read(f: io.BufferedIOBase, n: int) -> bytes:
    """The next ``n`` bytes. A file that cannot be read to its end (a
    truncated or corrupt gzip, an I/O error) is the streaming parser's: it
    says where and what, in the file's error."""
    try:
        return f.read(n)
    except (OSError, EOFError, zlib.error) as e:
        raise NotSplittable(f"cannot read: {e}") from None


def count_events(data: bytes, sep: bytes) -> int:
    """How many times ``sep`` (a newline, an indent, ``{``) occurs in
    ``data``: the events that start in it. Occurrences cannot overlap (the
    newline is only first). numpy's compares take a third of the time of
    ``bytes.count`` (1 ms against 3 for a 4 MB piece), which on a 1 GiB
    trace ran on the process that feeds the workers."""
    a = np.frombuffer(data, np.uint8)
    k = len(sep) - 1
    at = np.flatnonzero(a[k:] == sep[k])  # where the last byte of a match would start, less k
    keep = np.ones(len(at), bool)
    for j in range(k):
        keep &= a[at + j] == sep[j]
    return int(np.count_nonzero(keep))


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
            f = _open(self.path)
        except OSError as e:
            raise NotSplittable(f"cannot read: {e}") from None
        plain = not isinstance(f, gzip.GzipFile)
        with f:
            buf = _read(f, min(_READ_BYTES, self.piece_bytes))
            bom = 3 if buf.startswith(b"\xef\xbb\xbf") else 0
            start, sep = self._find_start(f, buf[bom:])
            buf = self._buf
            self.head = buf[:start]
            buf = buf[start:]
            number = base = 0
            carry, at = buf, bom + start  # at: where carry starts in the file
            read = bom + len(self._buf)  # bytes read so far
            while True:
                block = _read(f, self.piece_bytes)
                if not block:
                    break
                cut = block.rfind(sep)
                read += len(block)
                if cut < 0:
                    carry += block
                    if len(carry) > 8 * self.piece_bytes:
                        raise NotSplittable("no event boundary in a long stretch")
                    continue
                # Cut at the last boundary of this block; it has the last event
                # of the array only if nothing follows, so keep the remainder.
                data = carry + block[:cut]
                count = count_events(data, sep) + 1
                yield Piece(number, data, base, count, (at, len(data)) if plain else None)
                carry, at = block[cut + 1:], read - len(block) + cut + 1
                number += 1
                base += count
            buf = carry
            # The rest: last events, then the end of the array and the tail.
            end = self._find_end(buf, sep)
            data, self.tail = buf[:end], buf[end:]
            if data.strip():
                yield Piece(number, data, base, count_events(data, sep) + 1, (at, len(data)) if plain else None)

    def _find_start(self, f, buf: bytes) -> tuple[int, bytes]:
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
                if nl < 0:
                    raise NotSplittable("events are not one per line")
                self._buf = buf
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
        obj = orjson.loads(b"{" + rest[1:])
    except orjson.JSONDecodeError:
        import json

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
    """Parse one piece into record batches (events, flows, counters).

    Anything out of the ordinary (values the streaming parser sanitizes,
    types pyarrow will not take) raises :class:`NotSplittable`: the
    streaming parser is the reference for those."""
    enabled = gc.isenabled()
    gc.disable()  # orjson's dicts hold no cycles; the collector only costs here
    try:
        return _parse_piece(piece, path)
    except (OverflowError, UnicodeError, TypeError, ValueError, pa.ArrowException) as e:
        raise NotSplittable(f"piece {piece.number}: {type(e).__name__}: {e}") from None
    finally:
        if enabled:
            gc.enable()


def _parse_piece(piece: Piece, path: str) -> PieceResult:
    data = piece.data.rstrip()
    if data.endswith(b","):
        data = data[:-1]
    if _fastparse is not None:
        res = _convert_c(data, piece)
        if res is not None:
            return res
    text = b"[" + data + b"]"
    check = _TimeCheck(data)
    try:
        try:
            return _convert_structs(text, piece, check)
        except _Decline:
            pass
        try:
            # orjson reads integers past 64 bits as doubles; ijson, exactly
            evs = None if _LONG_DIGITS_RE.search(data) else orjson.loads(text)
        except orjson.JSONDecodeError:
            evs = None
        if evs is not None:
            return _convert(evs, piece, path, check)
    except InexactTime:
        pass
    evs = None
    try:
        evs = list(ijson.items(io.BytesIO(text), "item", use_float=False))
    except (ijson.JSONError, ijson.IncompleteJSONError, UnicodeDecodeError) as e:
        raise NotSplittable(f"piece {piece.number}: {e}") from None
    return _convert(evs, piece, path, None)


class _TimeCheck:
    """Whether the piece writes a timestamp or duration with 4+ decimals
    (run once, and only when a fractional one shows up)."""

    def __init__(self, data: bytes):
        self.data = data
        self.done = False

    def __call__(self) -> None:
        if not self.done:
            self.done = True
            for m in _FINE_FRACTION_RE.finditer(self.data):
                if _is_time_value(self.data, m.start()):
                    raise InexactTime

    def all_in(self, part: bytes) -> None:
        """Skip the check when every such number of the piece is in ``part``
        (its events' args, which hold no times), as Kineto's usually are."""
        count = _FINE_FRACTION_RE.findall
        if len(count(self.data)) == len(count(part)):
            self.done = True


def _is_time_value(data: bytes, dot: int) -> bool:
    """Whether the number whose decimal point is at ``data[dot]`` is the
    value of a "ts" or "dur" key (read backwards: digits, sign, colon, key)."""
    j = dot
    while j and data[j - 1] in _DIGITS:
        j -= 1
    if j and data[j - 1] == 0x2D:  # -
        j -= 1
    while j and data[j - 1] in _SPACE:
        j -= 1
    if not j or data[j - 1] != 0x3A:  # :
        return False
    j -= 1
    while j and data[j - 1] in _SPACE:
        j -= 1
    return data.endswith(b'"ts"', 0, j) or data.endswith(b'"dur"', 0, j)


def _nulls(n: int, typ: pa.DataType) -> pa.Array:
    return pa.nulls(n, type=typ)


def _ns(vals: Sequence, check: "_TimeCheck | None") -> pa.Array:
    """Microseconds (JSON numbers) -> exact int64 nanoseconds."""
    arr = _ns_array(vals, check)
    lo, hi = pc.min_max(arr).values()
    if lo.as_py() is not None and (lo.as_py() < -_TIME_LIMIT_NS or hi.as_py() > _TIME_LIMIT_NS):
        raise NotSplittable("times past the supported range")
    return arr


def _ns_array(vals: Sequence, check: "_TimeCheck | None") -> pa.Array:
    types = set(map(type, vals))
    if float in types and check is not None:
        check()
    types.discard(_NONE)
    if not types:
        return _nulls(len(vals), pa.int64())
    if types == {int}:
        try:
            return pc.multiply_checked(pa.array(vals, pa.int64()), 1000)
        except (OverflowError, pa.ArrowInvalid):
            pass
    elif types <= {int, float}:
        arr = pa.array(vals, pa.float64())
        mag = pc.max(pc.abs(arr)).as_py()
        if mag is not None and mag >= _TWO43:
            # past 2**43 µs a double's spacing passes 1 ns: 1712195495737655.080
            # reads as ...655.0, with no fraction left to say it had one
            raise InexactTime
        if mag is not None and not pc.any(pc.is_nan(arr)).as_py():
            whole = pc.floor(arr)
            frac = pc.subtract(arr, whole)
            return pc.add(
                pc.multiply(pc.cast(whole, pa.int64()), 1000),
                pc.cast(pc.round(pc.multiply(frac, 1000.0)), pa.int64()),
            )
    return pa.array([_exact_ns(v) for v in vals], pa.int64())


def _text(vals: Sequence) -> pa.Array:
    """Strings as they are; anything else as the streaming parser writes it."""
    try:
        return pa.array(vals, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        return pa.array([v if v is None or type(v) is str else _as_text(_as_read(v)) for v in vals], pa.string())


def _int_text(vals: Sequence, types: set) -> pa.Array | None:
    """Integers (and strings) as text, as ``str`` writes them; None when a
    value is of another type. Integer columns (nulls aside) are cast by
    Arrow."""
    if types - {_NONE} == {int}:
        try:
            return pa.array(vals, pa.int64()).cast(pa.string())
        except OverflowError:  # past 64 bits
            pass
    if types <= {int, str}:
        return pa.array(list(map(str, vals)), pa.string())
    return None


def _pid(vals: Sequence) -> pa.Array:
    text = _int_text(vals, set(map(type, vals)))
    if text is not None:
        return text
    return pa.array([v if type(v) is str else str(v) if type(v) is int else _pid_text(_as_read(v))
                     for v in vals], pa.string())


def _ids(vals: Sequence) -> pa.Array:
    if vals.count(None) == len(vals):
        return _nulls(len(vals), pa.string())
    text = _int_text(vals, set(map(type, vals)))
    if text is not None:
        return text
    return pa.array([_id_text(_as_read(v)) for v in vals], pa.string())


def _arg_column(vals: Sequence, present: Sequence, typ: pa.DataType, conv) -> pa.Array:
    """One typed column from args: ``vals`` (one per event, None where
    absent) and ``present`` (the values found, for their types)."""
    types = set(map(type, present))
    types.discard(_NONE)
    if not types:
        return _nulls(len(vals), typ)
    try:
        if pa.types.is_int64(typ) and types == {int}:
            return pa.array(vals, typ)
        if pa.types.is_string(typ) and types == {str}:
            return pa.array(vals, typ)
        if pa.types.is_float64(typ) and types <= {int, float}:
            return pa.array(vals, typ)
        if pa.types.is_list(typ) and types == {list}:
            items = chain.from_iterable(v for v in present if v is not None)
            if set(map(type, items)) <= {int}:
                return pa.array(vals, typ)
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
        pass
    return pa.array([None if v is None else conv(_as_read(v)) for v in vals], typ)


def _dump_all(args: list) -> pa.Array:
    """The args objects as JSON text, as parse._dump_args writes them."""
    dumps = orjson.dumps
    try:
        texts = [None if a is None else dumps(a, default=_default).decode() for a in args]
    except TypeError:
        texts = [_dump_args(a) for a in args]
    return pa.array(texts, pa.string())


def _widen(span: "PieceResult | TraceMeta", lo: int | None, hi: int | None) -> None:
    """Widen ``span``'s ts_min_ns/ts_max_ns to take in lo and hi."""
    if lo is not None and (span.ts_min_ns is None or lo < span.ts_min_ns):
        span.ts_min_ns = lo
    if hi is not None and (span.ts_max_ns is None or hi > span.ts_max_ns):
        span.ts_max_ns = hi


def _minmax(res: PieceResult, ts: pa.Array, end: pa.Array) -> None:
    _widen(res, pc.min(ts).as_py(), pc.max(end).as_py())


def _convert(evs: list, piece: Piece, path: str, check: _TimeCheck | None) -> PieceResult:
    if len(evs) != piece.count:
        raise NotSplittable(f"piece {piece.number}: {len(evs)} events, expected {piece.count}")
    res = PieceResult(json_event_count=len(evs))
    base = piece.base
    sl_idx: list[int] = []
    fl_idx: list[int] = []
    other: list[int] = []
    for i, ev in enumerate(evs):
        if type(ev) is not dict:
            res.skipped_count += 1
            continue
        ph = ev.get("ph")
        if type(ph) is str and ph not in ("B", "E", "C"):
            (fl_idx if ph in FLOW_PHASES else sl_idx).append(i)
        elif ph == "B" or ph == "E":
            raise NotSplittable("B/E events (matched across the whole file)")
        else:
            other.append(i)
    if sl_idx:
        res.batches.append(("events", _slices([evs[i] for i in sl_idx], [base + i for i in sl_idx], res, check)))
    if fl_idx:
        res.batches.append(("flows", _flows([evs[i] for i in fl_idx], [base + i for i in fl_idx], res, check)))
    if other:
        # Counters and odd events: the streaming parser's own per-event code.
        p = TraceParser(path)
        for i in other:
            p._add(base + i, _event_as_read(evs[i]))
        if p._open:
            raise NotSplittable("B/E events (matched across the whole file)")
        m = p.meta
        res.event_count += m.event_count
        res.counter_count += m.counter_count
        _widen(res, m.ts_min_ns, m.ts_max_ns)
        for table, cols in (("events", p._events), ("counters", p._counters)):
            if cols.rows:
                res.batches.append((table, cols.batch()))
            if cols.out_of_range or cols.surrogates:
                raise NotSplittable("values the streaming parser warns of")
    return res


_FIELDS = ("ph", "ts", "dur", "cat", "name", "pid", "tid", "id")
_FLOW_FIELDS = ("ph", "ts", "dur", "cat", "name", "pid", "tid", "bp")


def _slices(evs: list[dict], ids: list[int], res: PieceResult, check) -> pa.RecordBatch:
    n = len(evs)
    f = {key: [e.get(key) for e in evs] for key in _FIELDS}
    args = [e.get("args") for e in evs]
    argd = [a if type(a) is dict else _EMPTY for a in args]
    found: dict[str, tuple[list, list]] = {}
    for j, a in enumerate(argd):
        for key in a:
            if key in _ARG_KEYS:
                entry = found.get(key)
                if entry is None:
                    entry = found[key] = ([None] * n, [])
                v = a[key]
                entry[0][j] = v
                entry[1].append(v)
    arg_cols = {}
    for key, col, conv in _ARG_CONVERTERS:
        entry = found.get(key)
        arg_cols[col] = (_nulls(n, _ARG_TYPES[col]) if entry is None
                         else _arg_column(entry[0], entry[1], _ARG_TYPES[col], conv))
    return _event_batch(f, ids, arg_cols, _dump_all(args), res, check)


def _event_batch(f: dict[str, Sequence], ids: list[int] | np.ndarray, arg_cols: dict[str, pa.Array],
                 args_text: pa.Array, res: PieceResult, check) -> pa.RecordBatch:
    """The events batch from its fields (one list per key of ``_FIELDS``),
    its typed args columns and its args as JSON text."""
    n = len(ids)
    ph = pa.array(f["ph"], pa.string())
    ts = _ns(f["ts"], check)
    dur_all = _ns(f["dur"], check)
    dur = pc.if_else(pc.equal(ph, "X"), dur_all, pa.nulls(n, pa.int64()))
    _minmax(res, ts, pc.add(ts, pc.coalesce(dur_all, 0)))
    cols = {
        "event_id": pa.array(ids, pa.int64()),
        "ts_ns": ts,
        "dur_ns": dur,
        "ph": ph,
        "cat": _text(f["cat"]),
        "name": _text(f["name"]),
        "pid": _pid(f["pid"]),
        "tid": _pid(f["tid"]),
        "id": _ids(f["id"]),
        **arg_cols,
        "args": args_text,
    }
    res.event_count += n
    return pa.RecordBatch.from_arrays([cols[name] for name in EVENT_SCHEMA.names], schema=EVENT_SCHEMA)


def _flows(evs: list[dict], ids: list[int], res: PieceResult, check) -> pa.RecordBatch:
    f = {key: [e.get(key) for e in evs] for key in _FLOW_FIELDS}
    f["id"] = [e.get("id", e.get("bind_id")) for e in evs]
    return _flow_batch(f, ids, res, check)


def _flow_batch(f: dict[str, Sequence], ids: list[int] | np.ndarray, res: PieceResult, check) -> pa.RecordBatch:
    """The flows batch from its fields (``_FLOW_FIELDS`` and ``id``)."""
    ts = _ns(f["ts"], check)
    _minmax(res, ts, pc.add(ts, pc.coalesce(_ns(f["dur"], check), 0)))
    cols = {
        "event_id": pa.array(ids, pa.int64()),
        "ts_ns": ts,
        "ph": pa.array(f["ph"], pa.string()),
        "id": _ids(f["id"]),
        "cat": _text(f["cat"]),
        "name": _text(f["name"]),
        "pid": _pid(f["pid"]),
        "tid": _pid(f["tid"]),
        "bp": _text(f["bp"]),
    }
    res.flow_count += len(ids)
    return pa.RecordBatch.from_arrays([cols[name] for name in FLOW_SCHEMA.names], schema=FLOW_SCHEMA)


# -- the struct path: msgspec decodes only the keys the columns need ----------


class _Decline(Exception):
    """The piece has something only the dict path handles (counters, events
    without a phase, args that are not objects...)."""


class _Event(msgspec.Struct, gc=False):
    """An event's top-level keys that become columns; ``args`` stays raw JSON
    (its text is the args column), every other key is skipped unread."""

    ph: Any = None
    ts: Any = None
    dur: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    id: Any = msgspec.UNSET
    bind_id: Any = None
    bp: Any = None
    args: msgspec.Raw = msgspec.Raw()


# The args keys of the typed columns, as struct fields (a0, a1, ...).
_ARG_FIELD = {key: f"a{i}" for i, (key, _col, _conv) in enumerate(_ARG_CONVERTERS)}
_Args = msgspec.defstruct("_Args", [(f, Any, None) for f in _ARG_FIELD.values()],
                          rename={f: key for key, f in _ARG_FIELD.items()}, gc=False)
# The same fields typed as their columns take them: when a piece's args all
# decode so (most do), no value needs its type checked in Python.
_COLUMN_PY = {pa.int64(): int, pa.float64(): int | float, pa.string(): str, pa.list_(pa.int64()): list[int]}
_TypedArgs = msgspec.defstruct(
    "_TypedArgs", [(_ARG_FIELD[key], _COLUMN_PY[_ARG_TYPES[col]] | None, None) for key, col, _conv in _ARG_CONVERTERS],
    rename={f: key for key, f in _ARG_FIELD.items()}, gc=False)
_NO_ARGS = _Args()
_EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_ARGS_DECODER = msgspec.json.Decoder(list[_Args | None])
_TYPED_ARGS_DECODER = msgspec.json.Decoder(list[_TypedArgs | None])
_RAWS_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_GET_PH = attrgetter("ph")
_ARG_COLS = [(col, conv) for _key, col, conv in _ARG_CONVERTERS]  # the order of _Args' fields
_SPLIT_AWAY = frozenset(("B", "E", "C", None))


def _convert_structs(text: bytes, piece: Piece, check: _TimeCheck) -> PieceResult:
    try:
        evs = _EVENTS_DECODER.decode(text)
    except msgspec.DecodeError:
        raise _Decline from None
    n = len(evs)
    if n != piece.count:
        raise NotSplittable(f"piece {piece.number}: {n} events, expected {piece.count}")
    phs = list(map(_GET_PH, evs))
    try:
        kinds = set(phs)
    except TypeError:  # a list or object as the phase
        raise _Decline from None
    if "B" in kinds or "E" in kinds:
        raise NotSplittable("B/E events (matched across the whole file)")
    if kinds & _SPLIT_AWAY or not all(type(k) is str for k in kinds):
        raise _Decline
    res = PieceResult(json_event_count=n)
    base = piece.base
    if kinds & FLOW_PHASES:
        # Flows apart from the other events, each with its event_id; the
        # selection in C (compress, numpy), not a comprehension per list.
        is_flow = list(map(FLOW_PHASES.__contains__, phs))
        fl = list(compress(evs, is_flow))
        evs = list(compress(evs, map(not_, is_flow)))
        mask = np.array(is_flow)
        fl_ids, ids = np.flatnonzero(mask) + base, np.flatnonzero(~mask) + base
    else:
        fl, fl_ids, ids = [], [], np.arange(base, base + n)
    if evs:
        f = _columns(evs)
        absent = f["id"].count(msgspec.UNSET)
        if absent == len(evs):  # as events other than flows mostly are
            f["id"] = (None,) * absent
        elif absent:
            f["id"] = [None if v is msgspec.UNSET else v for v in f["id"]]
        arg_cols, args_text = _struct_args(f["args"], check)
        res.batches.append(("events", _event_batch(f, ids, arg_cols, args_text, res, check)))
    if fl:
        f = _columns(fl)
        if msgspec.UNSET in f["id"]:  # bound by bind_id
            f["id"] = [b if i is msgspec.UNSET else i for i, b in zip(f["id"], f["bind_id"])]
        res.batches.append(("flows", _flow_batch(f, fl_ids, res, check)))
    return res


def _columns(structs: list) -> dict[str, tuple]:
    """Struct field -> the values of every struct (at least one): the
    structs transposed as tuples in C, twice as fast as a getter per field."""
    fields = structs[0].__struct_fields__
    return dict(zip(fields, zip(*map(msgspec.structs.astuple, structs))))


def _struct_args(raws: Sequence, check: _TimeCheck) -> tuple[dict[str, pa.Array], pa.Array]:
    """Typed columns and JSON text from the events' raw args (an empty Raw
    where an event has none)."""
    n = len(raws)
    joined = b",".join([r or b"{}" for r in raws])
    check.all_in(joined)
    # All the args without whitespace in one call, then cut back into one
    # Raw per event: cheaper than formatting each object on its own.
    compact = msgspec.json.format(b"[" + joined + b"]", indent=-1)
    try:
        args, typed = _TYPED_ARGS_DECODER.decode(compact), True
    except msgspec.ValidationError:
        try:
            args, typed = _ARGS_DECODER.decode(compact), False
        except msgspec.DecodeError:
            raise _Decline from None  # args that are not objects
    present = np.fromiter(map(len, raws), np.int64, n) > 0
    if None in args:  # "args": null
        for i, a in enumerate(args):
            if a is None:
                args[i] = _NO_ARGS
                present[i] = False
    cols = {}
    for (col, conv), vals in zip(_ARG_COLS, _columns(args).values()):
        typ = _ARG_TYPES[col]
        if vals.count(None) == n:
            cols[col] = _nulls(n, typ)
        elif typed:
            cols[col] = _typed_column(vals, typ, conv)
        else:
            cols[col] = _arg_column(vals, vals, typ, conv)
    return cols, _texts(_RAWS_DECODER.decode(compact), present)


def _typed_column(vals: Sequence, typ: pa.DataType, conv) -> pa.Array:
    """A typed column from values of its type (or None): Arrow takes them
    as they are, unless an integer is past 64 bits."""
    try:
        return pa.array(vals, typ)
    except (OverflowError, pa.ArrowInvalid):
        return _arg_column(vals, vals, typ, conv)


def _texts(raws: list, present: np.ndarray) -> pa.Array:
    """A string column of ``raws`` (JSON text), NULL where not ``present``,
    built from one buffer: no Python object per value."""
    lengths = np.fromiter(map(len, raws), np.int32, len(raws))
    lengths[~present] = 0
    offsets = np.zeros(len(raws) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(compress(raws, present.tolist()))
    valid = pa.array(present).buffers()[1]
    return pa.Array.from_buffers(pa.string(), len(raws), [valid, pa.py_buffer(offsets), pa.py_buffer(data)])


# -- the C path: _fastparse.c, for pieces all in the common case ---------------


def _convert_c(data: bytes, piece: Piece) -> PieceResult | None:
    """The piece's batches from _fastparse, or None where it declines (the
    piece has something out of the common case its source lists)."""
    out = _fastparse.parse(data, piece.base)
    if out is None:
        return None
    count, events, flows, span = out
    if count != piece.count:
        raise NotSplittable(f"piece {piece.number}: {count} events, expected {piece.count}")
    res = PieceResult(json_event_count=count)
    for table, schema, cols in (("events", EVENT_SCHEMA, events), ("flows", FLOW_SCHEMA, flows)):
        n = len(cols[0][2]) // 8  # event_id's values
        if n:
            arrays = [_from_buffers(f.type, n, col) for f, col in zip(schema, cols)]
            res.batches.append((table, pa.RecordBatch.from_arrays(arrays, schema=schema)))
    res.event_count = len(events[0][2]) // 8
    res.flow_count = len(flows[0][2]) // 8
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


class SplitParser:
    """The fast path with TraceParser's interface: ``pieces()`` to hand out,
    ``finish()`` once they are parsed; or ``batches()`` to parse them here,
    one after the other. Raises :class:`NotSplittable` (before or while
    yielding) when the file needs the streaming parser."""

    def __init__(self, path: str | Path, piece_bytes: int | None = None):
        self.path = Path(path)
        self._parser = TraceParser(self.path)
        self.meta = self._parser.meta
        self.splitter = Splitter(self.path, piece_bytes)

    def pieces(self) -> Iterator[Piece]:
        yield from self.splitter.pieces()

    def add(self, res: PieceResult) -> None:
        merge_meta(self.meta, res)

    def finish(self) -> None:
        """Top-level keys (head and tail) into ``meta``."""
        self.meta.form = self.splitter.form
        drop_bad_span(self.meta)
        if self.splitter.form == "object":
            self._parser._read_head()
            read_tail_keys(self.splitter.tail, self._parser)

    def batches(self) -> Iterator[tuple[str, pa.RecordBatch]]:
        for piece in self.pieces():
            res = parse_piece(piece, str(self.path))
            self.add(res)
            yield from res.batches
        self.finish()
