"""The tolerant reader: parses a Chrome trace that yajl (the strict decoder
of reader.py) rejected, one event at a time, with bounded memory.

yajl is strict; real traces are not always. What this reader accepts, and
how it reads it:

- ``NaN``, ``Infinity``, ``-Infinity`` (Python's json writes them): ``null``,
  as JavaScript's ``JSON.stringify`` does. Inside strings they are text.
- invalid UTF-8 bytes: U+FFFD (``bytes.decode(errors="replace")``, through an
  incremental decoder, so a character split across reads is not broken).
- lone surrogate escapes (``"\\ud800"``): decoded as Python does; the
  parser's batches replace them by U+FFFD (Arrow strings are UTF-8).
- raw control characters inside strings (old Kineto): kept as they are.
- old Kineto quoting: bare ``N/A`` values become the string ``"N/A"``;
  unescaped double quotes inside a ``"name"`` value
  (``"name": "{"device": "cpu"}(12): run"``, pytorch#146900) and invalid
  backslash escapes (``C:\\Users``) are escaped, and only kept when the whole
  event then parses.

Everything else that is not JSON raises :class:`TraceFormatError` with the
byte offset (of the decompressed stream) and the index of the event.

The reader decodes one value at a time with the C scanner of Python's json
module (``raw_decode`` over a text buffer refilled 1 MiB at a time), so it is
slower than yajl but streams: memory is bounded by the largest single event.
"""

from __future__ import annotations

import codecs
import json
import re
from collections import Counter
from decimal import Decimal
from typing import Any, BinaryIO, Callable, Iterator

from ..errors import TraceFormatError

CHUNK_BYTES = 1 << 20
MAX_VALUE_CHARS = 256 << 20  # one event (or top-level value) larger than this is an error
_BOM = "\ufeff"
_WS = " \t\n\r"
_NEAR_END = 16  # an error this close to the end of the buffer may just need more input
_MAX_REPAIRS_PER_VALUE = 64
_MAX_QUOTE_CANDIDATES = 64

_NAME_KEY = re.compile(r'(?<!\\)"name"\s*:\s*"')

REPAIR_LABELS = {
    "nan": "NaN/Infinity literal(s) read as null",
    "utf8": "invalid UTF-8 sequence(s) replaced by U+FFFD",
    "na": "bare N/A value(s) read as the string \"N/A\"",
    "quote": "unescaped quote(s) inside \"name\" values escaped",
    "escape": "invalid backslash escape(s) kept as a backslash",
}


class LenientReader:
    """Read a trace document from ``raw`` (decompressed bytes).

    ``events()`` yields the items of the event array in order (every item,
    objects or not, as reader.py's strict decoder counts them); ``on_meta(key, value)``
    receives each other top-level key of the object form. ``form`` is
    "object" or "array" once reading has started; ``repairs`` counts what was
    read leniently (see REPAIR_LABELS).
    """

    def __init__(self, raw: BinaryIO, path: str, on_meta: Callable[[str, Any], None]):
        self._raw = raw
        self.path = path
        self._on_meta = on_meta
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._decoder = json.JSONDecoder(strict=False, parse_float=Decimal,
                                         parse_constant=self._constant)
        self.buf = ""
        self.pos = 0
        self.eof = False
        self._first = True
        self._bytes_before = 0  # bytes of input before buf[0]
        self._inserted = 0  # characters the repairs added to buf (for offsets)
        self.index = 0  # items of the event array read so far
        self.form: str | None = None
        self.has_events_key = False
        self.repairs: Counter[str] = Counter()

    # -- input --------------------------------------------------------------

    def _constant(self, name: str) -> None:
        self.repairs["nan"] += 1
        return None

    def _fill(self) -> bool:
        """Append the next chunk to the buffer; False at the end of input."""
        if self.eof:
            return False
        data = self._raw.read(CHUNK_BYTES)
        if data:
            text = self._utf8.decode(data)
            bad = text.count("\ufffd") - data.count(b"\xef\xbf\xbd")
            if bad > 0:
                self.repairs["utf8"] += bad
        else:
            self.eof = True
            text = self._utf8.decode(b"", final=True)
        if self._first and (text or self.eof):
            self._first = False
            if text.startswith(_BOM):
                text = text[1:]
                self._bytes_before += 3
        self.buf += text
        return True

    def _compact(self) -> None:
        """Drop what has been read; only between values (positions move)."""
        if self.pos > CHUNK_BYTES:
            self._bytes_before += _utf8_len(self.buf[:self.pos]) - self._inserted
            self.buf = self.buf[self.pos:]
            self.pos = 0
            self._inserted = 0

    def offset(self, pos: int | None = None) -> int:
        """Byte offset (in the decompressed input) of buffer position pos."""
        pos = self.pos if pos is None else pos
        return self._bytes_before + _utf8_len(self.buf[:pos]) - self._inserted

    def _error(self, reason: str, pos: int | None = None) -> TraceFormatError:
        where = f"byte {self.offset(pos)}, event {self.index}"
        return TraceFormatError(self.path, reason, where)

    def _peek(self) -> str:
        """The next non-blank character ('' at the end of input)."""
        while True:
            buf, pos, n = self.buf, self.pos, len(self.buf)
            while pos < n and buf[pos] in _WS:
                pos += 1
            self.pos = pos
            if pos < n:
                return buf[pos]
            if not self._fill():
                return ""

    # -- values -------------------------------------------------------------

    def _value(self, what: str) -> Any:
        """Decode one JSON value at the current position."""
        self._peek()
        start = self.pos
        repairs = 0
        while True:
            try:
                value, end = self._decoder.raw_decode(self.buf, start)
            except json.JSONDecodeError as e:
                if self._needs_more(e, start):
                    continue
                if repairs < _MAX_REPAIRS_PER_VALUE and self._repair(e, start):
                    repairs += 1
                    continue
                if self.eof and (e.msg.startswith("Unterminated string")
                                 or not self.buf[e.pos:].strip()):
                    raise self._error(f"truncated JSON: the file ends inside {what}",
                                      len(self.buf)) from None
                raise self._error(f"invalid JSON in {what}: {e.msg}", e.pos) from None
            except RecursionError:
                raise self._error(f"{what} is nested too deeply (over ~900 levels)", start) from None
            except ValueError as e:  # e.g. an integer of more digits than Python reads
                raise self._error(f"unreadable value in {what}: {e}", start) from None
            if end >= len(self.buf) and not self.eof and self._fill():
                continue  # a number may go on in the next chunk
            self.pos = end
            return value

    def _needs_more(self, e: json.JSONDecodeError, start: int) -> bool:
        if self.eof:
            return False
        if len(self.buf) - start > MAX_VALUE_CHARS:
            return False
        if e.msg.startswith("Unterminated string") or len(self.buf) - e.pos <= _NEAR_END:
            return self._fill()
        return False

    def _repair(self, e: json.JSONDecodeError, start: int) -> bool:
        """Fix one known kind of breakage at e.pos; True when something changed."""
        buf, p = self.buf, e.pos
        if e.msg == "Expecting value" and buf.startswith("N/A", p):
            self._edit(p, p + 3, '"N/A"', "na")
            return True
        if e.msg == "Invalid \\escape" and buf.startswith("\\", p):
            self._edit(p, p, "\\", "escape")
            return True
        if e.msg == "Invalid \\uXXXX escape" and p > 0 and buf[p - 1] == "\\":
            self._edit(p - 1, p - 1, "\\", "escape")
            return True
        return self._repair_name_quotes(start, p)

    def _edit(self, a: int, b: int, text: str, kind: str) -> None:
        self.buf = self.buf[:a] + text + self.buf[b:]
        self._inserted += len(text) - (b - a)
        self.repairs[kind] += 1

    def _repair_name_quotes(self, start: int, err: int) -> bool:
        """Kineto wrote names with unescaped double quotes. Find the "name"
        value on the line of the error; escape its inner quotes up to the
        first later quote after which the whole event parses."""
        buf = self.buf
        line_start = buf.rfind("\n", start, err) + 1 or start
        match = None
        for m in _NAME_KEY.finditer(buf, max(start, line_start), err):
            match = m
        if match is None:
            return False
        o = match.end()  # first character of the name's text
        while not self.eof and len(self.buf) - err < 65536:
            self._fill()  # positions stay: _fill only appends
        buf = self.buf
        line_end = buf.find("\n", err)
        if line_end < 0:
            line_end = len(buf)
        quotes = [i for i in _unescaped_quotes(buf, o, line_end)]
        if len(quotes) < 2:
            return False
        for k, q in enumerate(quotes[1:_MAX_QUOTE_CANDIDATES], start=1):
            after = buf[q + 1:q + 2 + 64].lstrip(_WS)
            if after and after[0] not in ",}]":
                continue
            inner = quotes[:k]
            candidate = _escape_at(buf, inner)
            if self._parses(candidate, start):
                self.buf = candidate
                self._inserted += len(inner)
                self.repairs["quote"] += len(inner)
                return True
        return False

    def _parses(self, text: str, start: int) -> bool:
        """Does the event at start decode whole and end where an event may end?"""
        try:
            _value, end = self._decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError, ValueError):
            return False
        rest = text[end:end + 64].lstrip(_WS)
        return not rest or rest[0] in ",]}"

    # -- document -----------------------------------------------------------

    def events(self) -> Iterator[Any]:
        c = self._peek()
        if c == "[":
            self.form = "array"
            yield from self._array()
        elif c == "{":
            self.form = "object"
            yield from self._object()
        elif c == "":
            raise self._error("empty file (only whitespace)")
        else:
            raise self._error(f"not a trace: starts with {c!r}, expected '{{' or '['")
        if self._peek() != "":
            raise self._error("trailing data after the JSON document")

    def _object(self) -> Iterator[Any]:
        self.pos += 1  # {
        if self._peek() == "}":
            self.pos += 1
            return
        while True:
            self._compact()
            if self._peek() != '"':
                raise self._error("invalid JSON: expected a key in the top-level object")
            key = self._value("a top-level key")
            if self._peek() != ":":
                raise self._error(f"invalid JSON: expected ':' after the key {key!r}")
            self.pos += 1
            if key == "traceEvents":
                if self._peek() != "[":
                    raise self._error("not a trace: traceEvents is not an array")
                self.has_events_key = True
                yield from self._array()
            else:
                self._on_meta(key, self._value(f"the top-level key {key!r}"))
            if not self._more("}", "the top-level object"):
                return

    def _array(self) -> Iterator[Any]:
        self.pos += 1  # [
        if self._peek() == "]":
            self.pos += 1
            return
        while True:
            self._compact()
            if self._peek() == "":
                raise self._error("truncated JSON: the file ends inside the event array")
            start = self.pos
            item = self._value(f"event {self.index}")
            if self._peek() not in (",", "]", "") and self._repair_name_quotes(start, self.pos):
                self.pos = start  # the event closed early: read it again, repaired
                item = self._value(f"event {self.index}")
            self.index += 1
            yield item
            if not self._more("]", "the event array"):
                return

    def _more(self, close: str, where: str) -> bool:
        """Past the separator after a member: True after ',', False after close."""
        c = self._peek()
        self.pos += 1
        if c == ",":
            return True
        if c == close:
            return False
        if c == "":
            raise self._error(f"truncated JSON: the file ends inside {where}")
        raise self._error(f"invalid JSON: expected ',' or '{close}' in {where}", self.pos - 1)


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _unescaped_quotes(buf: str, a: int, b: int) -> Iterator[int]:
    i = buf.find('"', a, b)
    while i >= 0:
        j = i - 1
        while j >= a and buf[j] == "\\":
            j -= 1
        if (i - 1 - j) % 2 == 0:
            yield i
        i = buf.find('"', i + 1, b)


def _escape_at(buf: str, positions: list[int]) -> str:
    parts = []
    last = 0
    for i in positions:
        parts.append(buf[last:i])
        parts.append("\\")
        last = i
    parts.append(buf[last:])
    return "".join(parts)


def describe(repairs: Counter) -> str:
    """One line: what the tolerant reader read leniently."""
    return ", ".join(f"{n} {REPAIR_LABELS[k]}" for k, n in sorted(repairs.items()) if n)
