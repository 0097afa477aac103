"""Plain-Python expectations over trace JSON: the independent side of the
tests. Nothing here imports tracedb."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal


def ts_ns(v, base: int = 0) -> int:
    """Microseconds as written (int, float or numeric string) -> ns."""
    return int(Decimal(str(v)) * 1000) + base


def expected_counts(events: list[dict]) -> dict[str, int]:
    """Rows each table should hold for a trace's events.

    events: every event except flows (s/t/f) and counters (C), with a
    matched B/E pair counted once; flows: s/t/f; counters: one per args key
    of each C event.
    """
    n_events = n_flows = n_counters = 0
    open_b: dict[tuple, int] = defaultdict(int)
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph in ("s", "t", "f"):
            n_flows += 1
        elif ph == "C":
            n_counters += len(e.get("args") or {})
        elif ph == "B":
            open_b[(str(e.get("pid")), str(e.get("tid")))] += 1
            n_events += 1
        elif ph == "E":
            key = (str(e.get("pid")), str(e.get("tid")))
            if open_b[key]:
                open_b[key] -= 1  # closes a B: the pair is one row
            else:
                n_events += 1
        else:
            n_events += 1
    return {"events": n_events, "flows": n_flows, "counters": n_counters}


def kernel_sums(events: list[dict], base: int = 0) -> dict[str, tuple[int, int]]:
    """name -> (calls, total duration in ns) of ph X, cat kernel events."""
    out: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and str(e.get("cat", "")).lower() == "kernel":
            out[e["name"]][0] += 1
            out[e["name"]][1] += ts_ns(e["dur"])
    return {k: (v[0], v[1]) for k, v in out.items()}


def self_times(slices: list[tuple[int, int, str]]) -> dict[str, int]:
    """Self time of properly nested slices on one thread.

    slices: (start, duration, name); returns name -> self time (duration
    less the durations of direct children), by brute force: the parent of a
    slice is the shortest other slice that contains it.
    """
    out = {}
    for i, (s, d, name) in enumerate(slices):
        children = 0
        for j, (s2, d2, _n2) in enumerate(slices):
            if j == i or not (s <= s2 and s2 + d2 <= s + d):
                continue
            # direct child: no third slice strictly between them
            containers = [
                k for k, (s3, d3, _n3) in enumerate(slices)
                if k not in (i, j) and s3 <= s2 and s2 + d2 <= s3 + d3 and s <= s3 and s3 + d3 <= s + d
                and (s3, d3) != (s, d)
            ]
            if not containers:
                children += d2
        out[name] = d - children
    return out
