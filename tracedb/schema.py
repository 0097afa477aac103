"""The Arrow schemas of the Parquet tables: the data contract in one place.

The parser fills these columns; the finalize step adds ``file_id`` and
``self_ns``; the catalog builds its raw views from them. run, rank and phase
are not stored inside the files: they are the Hive partition folders
(``run=<run>/rank=<rank>/phase=<phase>``) every Parquet reader understands.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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

# The events' lanes, by category: each row group of a published events file
# holds rows of one lane (store.py), so that a scan of the CPU ops, the
# runtime calls or the GPU's work skips the row groups of the others (a
# 1 GiB trace's summaries: a quarter less CPU); a trace of fewer than
# store.ONE_ROW_GROUP_EVENTS events has its lanes, in order, in one row group.
# Lane 0 is every category not listed. The C reader (parse/_fastparse.c) lists the same.
EVENT_LANES: dict[str, int] = {
    "cpu_op": 1,
    "cuda_runtime": 2, "cuda_driver": 2,
    "kernel": 3, "gpu_memcpy": 3, "gpu_memset": 3, "gpu_user_annotation": 3,
}
N_EVENT_LANES = 4
_LANE_CATS = pa.array(list(EVENT_LANES), pa.string())
_LANE_BY_INDEX = np.array([*EVENT_LANES.values(), 0], np.int8)  # a category not listed: lane 0


def event_lanes(cat: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The lane of each row, from its category."""
    at = pc.fill_null(pc.index_in(cat, value_set=_LANE_CATS), len(EVENT_LANES))
    return _LANE_BY_INDEX[at.to_numpy()]


def by_lane(rows: pa.RecordBatch | pa.Table) -> list[tuple[int, pa.RecordBatch | pa.Table]]:
    """Rows of events as (lane, its rows) for each lane among them, in lane
    order, each in the order they came."""
    lanes = event_lanes(rows.column("cat"))
    if len(lanes) and (lanes == lanes[0]).all():
        return [(int(lanes[0]), rows)]
    return [(int(lane), rows.filter(pa.array(lanes == lane))) for lane in np.unique(lanes)]


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
