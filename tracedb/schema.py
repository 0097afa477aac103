"""The Arrow schemas of the Parquet tables: the data contract in one place.

The parser fills these columns; the finalize step adds ``file_id`` and
``self_ns``; the catalog builds its raw views from them. run, rank and phase
are not stored inside the files: they are the Hive partition folders
(``run=<run>/rank=<rank>/phase=<phase>``) every Parquet reader understands.
"""

from __future__ import annotations

import pyarrow as pa

from .warehouse import TABLES

# Args keys pulled into typed columns: args key -> (column, arrow type).
ARG_COLUMNS: dict[str, tuple[str, pa.DataType]] = {
    "correlation": ("correlation", pa.int64()),
    "External id": ("external_id", pa.int64()),
    "device": ("device", pa.int64()),
    "stream": ("stream", pa.int64()),
    "grid": ("grid", pa.list_(pa.int64())),
    "block": ("block", pa.list_(pa.int64())),
    "bytes": ("bytes", pa.int64()),
    "memory bandwidth (GB/s)": ("memory_bandwidth_gbps", pa.float64()),
    "Collective name": ("collective_name", pa.string()),
    "In msg nelems": ("in_msg_nelems", pa.int64()),
    "Out msg nelems": ("out_msg_nelems", pa.int64()),
    "Group size": ("group_size", pa.int64()),
    "dtype": ("dtype", pa.string()),
    "Process Group Name": ("pg_name", pa.string()),
    "Process Group Description": ("pg_desc", pa.string()),
    "Process Group Ranks": ("pg_ranks", pa.string()),
    "Sequence number": ("sequence_number", pa.int64()),
}

# Columns the parser writes for every slice/instant/metadata event.
EVENT_FIELDS: list[pa.Field] = [
    # Index of the event in the file (0-based, in file order; a matched B/E
    # pair takes the index of its B). With file_id, the row's key.
    pa.field("event_id", pa.int64()),
    # Start, nanoseconds since the epoch when the trace carries absolute
    # times or baseTimeNanoseconds; else as the trace counts them.
    pa.field("ts_ns", pa.int64()),
    # Duration in nanoseconds; NULL for instants, metadata and unmatched B/E.
    pa.field("dur_ns", pa.int64()),
    pa.field("ph", pa.string()),
    pa.field("cat", pa.string()),
    pa.field("name", pa.string()),
    # pid and tid as the trace wrote them (numbers or strings like "Spans").
    pa.field("pid", pa.string()),
    pa.field("tid", pa.string()),
    # The event's "id" (async b/e/n events), as text.
    pa.field("id", pa.string()),
    *[pa.field(col, typ) for col, typ in ARG_COLUMNS.values()],
    # The complete args object as JSON text.
    pa.field("args", pa.string()),
]
EVENT_SCHEMA = pa.schema(EVENT_FIELDS)

FLOW_SCHEMA = pa.schema([
    pa.field("event_id", pa.int64()),
    pa.field("ts_ns", pa.int64()),
    pa.field("ph", pa.string()),
    pa.field("id", pa.string()),
    pa.field("cat", pa.string()),
    pa.field("name", pa.string()),
    pa.field("pid", pa.string()),
    pa.field("tid", pa.string()),
    # Binding point: "e" binds a flow end to the enclosing slice.
    pa.field("bp", pa.string()),
])

COUNTER_SCHEMA = pa.schema([
    pa.field("event_id", pa.int64()),
    pa.field("ts_ns", pa.int64()),
    pa.field("cat", pa.string()),
    pa.field("name", pa.string()),
    pa.field("pid", pa.string()),
    pa.field("tid", pa.string()),
    pa.field("id", pa.string()),
    # One row per key of the counter event's args.
    pa.field("series", pa.string()),
    pa.field("value", pa.float64()),
])

# The tables, by their names in the warehouse layout (events, flows, counters).
SCHEMAS: dict[str, pa.Schema] = dict(zip(TABLES, (EVENT_SCHEMA, FLOW_SCHEMA, COUNTER_SCHEMA), strict=True))
