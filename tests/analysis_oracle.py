"""Plain-Python answers for the analysis marts (idle_breakdown, queue_length,
memory_bandwidth, kernel_sequences, gpu_annotations, memory_timeline,
cupti_counters), computed over a trace's event dicts as json.load gives
them: the independent side of tests/test_marts_analysis.py. Nothing here
imports tracedb or duckdb; every rule is written from the definitions in
docs/analysis.md, not from the SQL.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from marts_oracle import KERNEL_CATS, launch_calls, ns, slices

COPY_CATS = {"gpu_memcpy", "gpu_memset"}
FULL_QUEUE = 1024
KERNEL_WAIT_NS = 30


def stream_ops(events: list[dict]) -> dict[tuple, list[dict]]:
    """(device, stream) -> its kernels, copies and sets in start order, each
    {name, cat, ts, end, bytes, launch (ns of the launch call start or None)}."""
    calls = launch_calls(events)
    per: dict[tuple, list[tuple]] = defaultdict(list)
    for i, e in enumerate(events):
        if e.get("ph") != "X" or "dur" not in e or str(e.get("cat", "")).lower() not in KERNEL_CATS | COPY_CATS:
            continue
        a = e.get("args") or {}
        call = calls.get(a.get("correlation"))
        op = {"name": e["name"], "cat": e["cat"].lower(), "ts": ns(e["ts"]), "end": ns(e["ts"]) + ns(e["dur"]),
              "bytes": a.get("bytes"), "launch": ns(call["ts"]) if call else None}
        per[(a.get("device", e["pid"]), a.get("stream", e["tid"]))].append((op["ts"], i, op))
    return {k: [op for _, _, op in sorted(v, key=lambda t: t[:2])] for k, v in per.items()}


def idle_breakdown(events: list[dict]) -> dict[tuple, dict]:
    """(device, stream, category) -> {count, idle_ns, max_ns} of the gaps
    between consecutive operations of a stream."""
    out: dict[tuple, dict] = {}
    for (dev, stream), ops in stream_ops(events).items():
        for prev, op in zip(ops, ops[1:]):
            gap = op["ts"] - prev["end"]
            if gap <= 0:
                continue
            if op["launch"] is not None and op["launch"] > prev["end"]:
                cat = "host_wait"
            elif gap < KERNEL_WAIT_NS:
                cat = "kernel_wait"
            else:
                cat = "other"
            r = out.setdefault((dev, stream, cat), {"count": 0, "idle_ns": 0, "max_ns": 0})
            r["count"] += 1
            r["idle_ns"] += gap
            r["max_ns"] = max(r["max_ns"], gap)
    return out


def queue_steps(events: list[dict]) -> dict[tuple, list[tuple[int, int, int]]]:
    """(device, stream) -> [(start ns, end ns, queue length)]: operations with
    a launch call, counted from the call's start to the operation's end."""
    out = {}
    for key, ops in stream_ops(events).items():
        delta: Counter = Counter()
        for op in ops:
            if op["launch"] is not None:
                delta[op["launch"]] += 1
                delta[op["end"]] -= 1
        times = sorted(delta)
        level, steps_ = 0, []
        for t, nxt in zip(times, times[1:]):
            level += delta[t]
            steps_.append((t, nxt, level))
        if steps_:
            out[key] = steps_
    return out


def queue_summary(events: list[dict]) -> dict[tuple, dict]:
    out = {}
    for key, st in queue_steps(events).items():
        span = sum(e - s for s, e, _ in st)
        top = max(q for _, _, q in st)
        out[key] = {"span_ns": span, "mean": sum((e - s) * q for s, e, q in st) / span, "max": top,
                    "at_max_ns": sum(e - s for s, e, q in st if q == top),
                    "empty_ns": sum(e - s for s, e, q in st if q == 0),
                    "full_ns": sum(e - s for s, e, q in st if q >= FULL_QUEUE)}
    return out


def queue_series(events: list[dict], width_ns: int) -> dict[tuple, dict]:
    """(device, stream, bucket) -> {mean, max} over the bucket's covered part;
    buckets counted from the trace's first launch."""
    st = queue_steps(events)
    origin = min(s for steps_ in st.values() for s, _, _ in steps_)
    acc: dict[tuple, list] = {}
    for (dev, stream), steps_ in st.items():
        for s, e, q in steps_:
            b = (s - origin) // width_ns
            while origin + b * width_ns < e:
                lo, hi = max(s, origin + b * width_ns), min(e, origin + (b + 1) * width_ns)
                if hi > lo:
                    a = acc.setdefault((dev, stream, b), [0, 0, 0])
                    a[0] += (hi - lo) * q
                    a[1] += hi - lo
                    a[2] = max(a[2], q)
                b += 1
    return {k: {"mean": a / c, "max": m} for k, (a, c, m) in acc.items()}


def memory_kind(e: dict) -> str:
    if e["cat"].lower() == "gpu_memset":
        return "memset"
    words = e["name"].split()
    return words[1] if words[0] == "Memcpy" and len(words) > 1 else "memcpy"


def memory_ops(events: list[dict]) -> list[dict]:
    return [{"kind": memory_kind(e), "device": (e.get("args") or {}).get("device", e["pid"]),
             "ts": ns(e["ts"]), "dur": ns(e["dur"]), "bytes": (e.get("args") or {}).get("bytes")}
            for e in slices(events, COPY_CATS)]


def memory_bandwidth(events: list[dict]) -> dict[str, dict]:
    """kind -> {count, bytes, dur_ns, gbps (bytes / summed ns), max_gbps}."""
    out: dict[str, dict] = {}
    for op in memory_ops(events):
        r = out.setdefault(op["kind"], {"count": 0, "bytes": 0, "dur_ns": 0, "max_gbps": None})
        r["count"] += 1
        r["bytes"] += op["bytes"]
        r["dur_ns"] += op["dur"]
        if op["dur"] > 0:
            bw = op["bytes"] / op["dur"]
            r["max_gbps"] = bw if r["max_gbps"] is None else max(r["max_gbps"], bw)
    for r in out.values():
        r["gbps"] = r["bytes"] / r["dur_ns"] if r["dur_ns"] else None
    return out


def memory_series(events: list[dict], width_ns: int) -> dict[tuple, float]:
    """(device, kind, bucket) -> bytes moved in the bucket, each op's bytes
    spread evenly over its duration; buckets from the first copy's start."""
    ops = [op for op in memory_ops(events) if op["bytes"] is not None]
    origin = min(op["ts"] for op in ops)
    out: dict[tuple, float] = defaultdict(float)
    for op in ops:
        s, e = op["ts"], op["ts"] + op["dur"]
        if op["dur"] == 0:
            out[(op["device"], op["kind"], (s - origin) // width_ns)] += op["bytes"]
            continue
        for b in range((s - origin) // width_ns, (e - 1 - origin) // width_ns + 1):
            lo, hi = max(s, origin + b * width_ns), min(e, origin + (b + 1) * width_ns)
            out[(op["device"], op["kind"], b)] += op["bytes"] * (hi - lo) / op["dur"]
    return dict(out)


def kernel_sequences(events: list[dict], k: int) -> dict[tuple, dict]:
    """(device, stream, names) -> {count, kernel_ns, span_ns} of every run of
    k consecutive kernels on a stream (copies and memsets left out)."""
    out: dict[tuple, dict] = {}
    for (dev, stream), ops in stream_ops(events).items():
        ks = [op for op in ops if op["cat"] in KERNEL_CATS]
        for i in range(len(ks) - k + 1):
            run = ks[i:i + k]
            r = out.setdefault((dev, stream, tuple(op["name"] for op in run)),
                               {"count": 0, "kernel_ns": 0, "span_ns": 0})
            r["count"] += 1
            r["kernel_ns"] += sum(op["end"] - op["ts"] for op in run)
            r["span_ns"] += max(op["end"] for op in run) - run[0]["ts"]
    return out


def step_window(events: list[dict], step: int, span: str | None = None) -> tuple[int, int]:
    """(start, end) ns of a step's critical-path window: ProfilerStep#N's
    start (with span: the step-th event of that name, from 0) to the later
    of its end and the last end of a GPU operation whose launch call starts
    inside it."""
    named = [e for e in slices(events, {"user_annotation", "cpu_op"})
             if e["name"] == (span or f"ProfilerStep#{step}")]
    a = sorted(named, key=lambda e: ns(e["ts"]))[step if span else 0]
    s, e = ns(a["ts"]), ns(a["ts"]) + ns(a["dur"])
    end = e
    for ops in stream_ops(events).values():
        for op in ops:
            if op["launch"] is not None and s <= op["launch"] < e:
                end = max(end, op["end"])
    return s, end


def gpu_intervals(events: list[dict]) -> set[tuple[str, int, int]]:
    """(name, start ns, end ns) of every kernel, copy and memset."""
    return {(op["name"], op["ts"], op["end"]) for ops in stream_ops(events).values() for op in ops}


def memory_events(events: list[dict]) -> list[dict]:
    out = []
    for i, e in enumerate(events):
        if e.get("ph") in ("i", "I") and e.get("name") == "[memory]":
            a = e["args"]
            dtype = {0: "cpu", 1: "cuda"}.get(a["Device Type"], str(a["Device Type"]))
            out.append({"i": i, "ts": ns(e["ts"]), "key": (dtype, a["Device Id"]), "bytes": a["Bytes"],
                        "allocated": a["Total Allocated"], "reserved": a["Total Reserved"],
                        "pid": str(e["pid"]), "tid": str(e["tid"])})
    return out


def memory_peaks(events: list[dict]) -> dict[tuple, dict]:
    """(device type, device) -> the first event at the highest Total
    Allocated, with the innermost CPU op holding it on the same thread."""
    mem = memory_events(events)
    ops = slices(events, {"cpu_op"})
    out = {}
    for key in {m["key"] for m in mem}:
        ms = [m for m in mem if m["key"] == key]
        top = max(m["allocated"] for m in ms)
        peak = min((m for m in ms if m["allocated"] == top), key=lambda m: (m["ts"], m["i"]))
        holding = [o for o in ops if str(o["pid"]) == peak["pid"] and str(o["tid"]) == peak["tid"]
                   and ns(o["ts"]) <= peak["ts"] <= ns(o["ts"]) + ns(o["dur"])]
        inner = max(holding, key=lambda o: (ns(o["ts"]), -ns(o["dur"])), default=None)
        out[key] = {**peak, "op": inner["name"] if inner else None, "max_reserved": max(m["reserved"] for m in ms)}
    return out


def memory_timeline(events: list[dict], width_ns: int) -> dict[tuple, dict]:
    """(device type, device, bucket) -> {count, max, last} of allocated bytes."""
    mem = sorted(memory_events(events), key=lambda m: (m["ts"], m["i"]))
    origin = mem[0]["ts"]
    out: dict[tuple, dict] = {}
    for m in mem:
        r = out.setdefault((*m["key"], (m["ts"] - origin) // width_ns), {"count": 0, "max": None})
        r["count"] += 1
        r["max"] = m["allocated"] if r["max"] is None else max(r["max"], m["allocated"])
        r["last"] = m["allocated"]
    return out


def cupti_counters(events: list[dict]) -> dict[tuple, dict]:
    """(kernel name, counter) -> {count, total} over cuda_profiler_range events."""
    out: dict[tuple, dict] = {}
    for e in slices(events, {"cuda_profiler_range"}):
        for counter, value in (e.get("args") or {}).items():
            r = out.setdefault((e["name"], counter), {"count": 0, "total": 0})
            r["count"] += 1
            r["total"] += value
    return out


def gpu_annotations(events: list[dict]) -> dict[str, dict]:
    """annotation name -> {calls, cpu_ns, gpu_ns}: GPU time is the union of
    its gpu_user_annotation ranges if the trace has any of that name, else
    of the GPU operations whose launch call the same process made inside
    one of its CPU ranges."""
    from marts_oracle import union_ns

    cpu = slices(events, {"user_annotation"})
    gpu: dict[str, list] = defaultdict(list)
    for e in slices(events, {"gpu_user_annotation"}):
        gpu[e["name"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    calls = launch_calls(events)
    launched = []
    for e in slices(events, KERNEL_CATS | COPY_CATS):
        call = calls.get((e.get("args") or {}).get("correlation"))
        if call is not None:
            launched.append((str(call["pid"]), ns(call["ts"]), (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))))
    out: dict[str, dict] = {}
    for a in cpu:
        r = out.setdefault(a["name"], {"calls": 0, "cpu_ns": 0, "ivs": set()})
        r["calls"] += 1
        r["cpu_ns"] += ns(a["dur"])
        s, e = ns(a["ts"]), ns(a["ts"]) + ns(a["dur"])
        r["ivs"] |= {iv for pid, t, iv in launched if pid == str(a["pid"]) and s <= t < e}
    for name, r in out.items():
        r["gpu_ns"] = union_ns(gpu[name] if name in gpu else list(r.pop("ivs")))
        r.pop("ivs", None)
    return out
