"""Top-level keys before and after traceEvents, both trace forms, exact times."""

from __future__ import annotations

import json
from pathlib import Path

from tracedb.parse import TraceParser


def _parse(path: Path):
    p = TraceParser(path, batch_rows=3)
    batches = list(p.batches())
    return p.meta, batches


def test_keys_before_and_after_events(tmp_path: Path):
    events = [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1,
               "args": {"grid": [1, 2, 3], "note": "] , {"}} for i in range(200)]
    text = (
        '{"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 8},\n'
        ' "deviceProperties": [{"id": 0, "name": "GPU"}],\n'
        ' "traceEvents": ' + json.dumps(events, indent=2) + ',\n'
        ' "INFO": ["log ] line", "x], \\"y\\": 1}"], "traceName": "t.json",\n'
        ' "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000,\n'
        ' "custom": {"nested": [1, {"a": null}]}}\n'
    )
    f = tmp_path / "t.json"
    f.write_text(text)
    meta, batches = _parse(f)
    assert meta.form == "object"
    assert meta.distributed_info == {"rank": 3, "world_size": 8}
    assert meta.device_properties == [{"id": 0, "name": "GPU"}]
    assert meta.base_time_ns == 1_700_000_000_000_000_000
    assert (meta.trace_name, meta.display_time_unit, meta.schema_version) == ("t.json", "ms", 1)
    assert meta.other == {"INFO": ["log ] line", 'x], "y": 1}'], "custom": {"nested": [1, {"a": None}]}}
    assert meta.event_count == 200 == sum(b.num_rows for t, b in batches if t == "events")
    assert not meta.warnings


def test_bare_array_and_exact_fractional_times(tmp_path: Path):
    f = tmp_path / "a.json"
    f.write_text('[{"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 4458677009853.422, "dur": 2636.669},'
                 ' {"ph": "i", "name": "m", "pid": 0, "tid": 7, "ts": "12.5"},'
                 ' {"ph": "X", "name": "big", "pid": "Spans", "tid": "Traces", "ts": 1740461679479712, "dur": 85}]')
    meta, batches = _parse(f)
    assert meta.form == "array"
    rows = [r for t, b in batches if t == "events" for r in b.to_pylist()]
    assert [(r["ts_ns"], r["dur_ns"], r["pid"], r["tid"]) for r in rows] == [
        (4_458_677_009_853_422, 2_636_669, "0", "7"),
        (12_500, None, "0", "7"),
        (1_740_461_679_479_712_000, 85_000, "Spans", "Traces"),
    ]


def test_traceevents_last(tmp_path: Path):
    f = tmp_path / "last.json"
    f.write_text('{"traceName": "x", "traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, '
                 '"args": {"block": [1, 1, 1]}}]}')
    meta, _ = _parse(f)
    assert meta.trace_name == "x" and meta.event_count == 1 and not meta.warnings
