"""Deterministic benchmark workloads: a real Kineto trace tiled in time.

A source trace (default: ../shared/corpus/hta/nccl_parser_config/nccl_data.json.gz,
a pretty-printed Kineto trace with fractional-microsecond timestamps, NCCL
collectives and ``baseTimeNanoseconds``) is cut into its head (keys before
``traceEvents``), its event block and its tail, as Kineto wrote them. A
workload repeats the event block ``tiles`` times, each copy shifted in time
past the previous one, with its ids made unique (``External id``,
``correlation``, flow ``id``, ``Ev Idx``, ``ProfilerStep#N``), so the result
looks like one long profiling window. Process/thread metadata (``ph: M``)
appear once. The text is transformed as text: the formatting (one event per
``  {`` ... ``  }`` block) and the exact fractional timestamps are Kineto's.

Everything streams: the output is written tile by tile, never held whole.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SOURCE = "hta/nccl_parser_config/nccl_data.json.gz"

_TS_RE = re.compile(rb'("ts": )(-?\d+)')
_ID_RE = re.compile(rb'("(?:External id|correlation|id|Ev Idx|Record function id)": )(\d+)')
_STEP_RE = re.compile(rb"(ProfilerStep#)(\d+)")
_RANK_RE = re.compile(rb'("rank": )(\d+)')
_DUR_RE = re.compile(rb'"dur": (\d+)')


@dataclass
class Source:
    """A Kineto trace split into head, event blocks and tail (bytes)."""

    head: bytes  # up to and including '"traceEvents": [\n'
    events: list[bytes]  # one '  {\n ... \n  }' block per event, no separator
    tail: bytes  # from '\n  ]' to the end

    @classmethod
    def load(cls, path: Path) -> "Source":
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        start = data.index(b'"traceEvents": [')
        start = data.index(b"\n", start) + 1
        end = data.rindex(b"\n  ]")
        head, block, tail = data[:start], data[start:end], data[end:]
        events = block.split(b"\n  },\n")
        events = [e if e.endswith(b"\n  }") else e + b"\n  }" for e in events]
        return cls(head, events, tail)

    @property
    def meta_events(self) -> list[bytes]:
        return [e for e in self.events if b'"ph": "M"' in e]

    @property
    def body_events(self) -> list[bytes]:
        return [e for e in self.events if b'"ph": "M"' not in e]


class _Template:
    """The body events with every shifted number split into a per-tile
    prefix (a placeholder byte) and a fixed, zero-padded remainder, so a tile
    is two ``bytes.replace`` calls instead of a regex pass per number.

    ts: all timestamps share ``ts // 10**d`` (d chosen so); tile k writes
    ``ts // 10**d + k`` there, i.e. shifts by k * 10**d µs. Ids and step
    numbers: tile k >= 1 writes the digits of k before the id padded to the
    width of the largest id, i.e. adds k * 10**width.
    """

    TS, ID = b"\x01", b"\x02"

    def __init__(self, body: bytes):
        ts = [int(m.group(2)) for m in _TS_RE.finditer(body)]
        if not ts or min(ts) < 0:
            raise ValueError("the source needs non-negative timestamps")
        longest = max((int(x) for x in _DUR_RE.findall(body)), default=0)
        d = len(str(max(ts) - min(ts) + longest + 1))
        while min(ts) // 10**d != max(ts) // 10**d:
            d += 1
        self.ts_digits, self.ts_prefix = d, min(ts) // 10**d
        self.period_us = 10**d
        width = max(len(str(int(m.group(2)))) for m in (*_ID_RE.finditer(body), *_STEP_RE.finditer(body)))
        self.body = body
        t = _TS_RE.sub(lambda m: m.group(1) + self.TS + str(int(m.group(2)) % 10**d).zfill(d).encode(), body)
        pad = lambda m: m.group(1) + self.ID + m.group(2).zfill(width)  # noqa: E731
        t = _ID_RE.sub(pad, t)
        self.template = _STEP_RE.sub(pad, t)

    def tile(self, k: int) -> bytes:
        if k == 0:
            return self.body
        out = self.template.replace(self.TS, str(self.ts_prefix + k).encode())
        return out.replace(self.ID, str(k).encode())


# A newline and the indent after it: whitespace between tokens, since no JSON
# string holds a raw newline.
_LINE_BREAK_RE = re.compile(rb"\n[ \t]*")


def write_tiled(src: Source, out: Path, tiles: int, rank: int | None = None,
                tile_offset: int = 0, gz: bool = False, one_line: bool = False) -> tuple[int, int]:
    """Write ``tiles`` time-shifted copies of the source's events to ``out``
    (``.json`` or gzip); ``tile_offset`` starts the numbering later (a
    different time window and ids); ``one_line``: without line breaks, as
    ``json.dumps`` writes a trace. Returns (bytes written uncompressed, event count)."""
    head = src.head
    if rank is not None:
        head = _RANK_RE.sub(lambda m: m.group(1) + str(rank).encode(), head, count=1)
    template = _Template(b",\n".join(src.body_events))
    meta = b",\n".join(src.meta_events)
    n_body, n_meta = len(src.body_events), len(src.meta_events)
    out.parent.mkdir(parents=True, exist_ok=True)
    f = gzip.open(out, "wb", compresslevel=6) if gz else open(out, "wb", buffering=1 << 20)
    written = 0

    def write(part: bytes) -> None:
        nonlocal written
        if one_line:
            part = _LINE_BREAK_RE.sub(b"", part)
        f.write(part)
        written += len(part)

    with f:
        for part in (head, meta) if n_meta else (head,):
            write(part)
        for k in range(tiles):
            write((b",\n" if (k or n_meta) else b"") + template.tile(k + tile_offset))
        write(src.tail)
    return written, n_meta + tiles * n_body


def tiles_for_bytes(src: Source, target_bytes: int) -> int:
    per_tile = sum(len(e) + 2 for e in src.body_events)
    return max(1, round(target_bytes / per_tile))


def tiles_for_events(src: Source, target_events: int) -> int:
    return max(1, round(target_events / len(src.body_events)))


TINY_TRACE_EVENTS = 20


def tiny_trace(n: int) -> str:
    """Trace number ``n`` of a thousand-rank job's tiny ones (a ForwardTimer's
    spans, a test's trace): TINY_TRACE_EVENTS cpu ops from ts ``n * 1000`` on
    (so that no two files share a content hash, the warehouse's file_id),
    indented as Kineto writes its traces."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": n * 1000 + 10 * i,
               "dur": 5, "args": {"External id": i}} for i in range(TINY_TRACE_EVENTS)]
    return json.dumps({"distributedInfo": {"rank": n % 1000}, "traceEvents": events}, indent=1)


def write_tiny_traces(folder: Path, first: int, count: int) -> int:
    """Traces ``first`` ... ``first + count - 1`` as ``folder/rank-<n % 1000>.json``
    (a new folder); returns their bytes."""
    folder.mkdir(parents=True)
    nbytes = 0
    for n in range(first, first + count):
        text = tiny_trace(n)
        (folder / f"rank-{n % 1000}.json").write_text(text)
        nbytes += len(text)
    return nbytes
