"""The afternoon baseline: what a user would write without tracedb.

json.load the whole trace, build one column per field (args kept as JSON
text), write one Parquet file. Run as a script so that its peak RSS is its
own: ``python baseline.py TRACE OUT.parquet`` prints one JSON line.
"""

from __future__ import annotations

import gzip
import json
import resource
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq


def load_columns(path: str) -> pa.Table:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    cols: dict[str, list] = {k: [] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")}
    for ev in events:
        cols["ph"].append(ev.get("ph"))
        cols["cat"].append(ev.get("cat"))
        cols["name"].append(ev.get("name"))
        cols["pid"].append(str(ev.get("pid")))
        cols["tid"].append(str(ev.get("tid")))
        ts, dur = ev.get("ts"), ev.get("dur")
        cols["ts"].append(None if ts is None else int(ts * 1000))
        cols["dur"].append(None if dur is None else int(dur * 1000))
        args = ev.get("args")
        cols["args"].append(None if args is None else json.dumps(args))
    return pa.table({
        "ph": pa.array(cols["ph"], pa.string()),
        "cat": pa.array(cols["cat"], pa.string()),
        "name": pa.array(cols["name"], pa.string()),
        "pid": pa.array(cols["pid"], pa.string()),
        "tid": pa.array(cols["tid"], pa.string()),
        "ts_ns": pa.array(cols["ts"], pa.int64()),
        "dur_ns": pa.array(cols["dur"], pa.int64()),
        "args": pa.array(cols["args"], pa.string()),
    })


def main() -> None:
    path, out = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    table = load_columns(path)
    pq.write_table(table, out, compression="zstd")
    seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "rows": table.num_rows, "peak_rss_bytes": peak_kb * 1024}))


if __name__ == "__main__":
    main()
