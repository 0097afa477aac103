"""Trace files -> Arrow record batches (events, flows, counters) and the
trace's meta.

Two paths, one rule:
- values.py: the value rules (times to exact ns, args typing, ids to text);
- reader.py: the reference reader, streaming, exact, tolerant where it must
  be (lenient.py): every file can be read whole by ``TraceParser``, and it
  holds the event -> row rule (``TraceParser.add_event``);
- pieces.py: a large pretty-printed file in pieces, each parsed by the C
  reader (_fastparse.c, the fast path, which mirrors values.py and declines
  what it does not take) or, where it declines, by the reference reader.

This package knows nothing of DuckDB, Parquet or click.
"""

from .pieces import NotSplittable, Piece, PieceResult, SplitParser, parse_piece
from .reader import TraceMeta, TraceParser

__all__ = ["NotSplittable", "Piece", "PieceResult", "SplitParser", "TraceMeta", "TraceParser", "parse_piece"]
