"""Plain-Python answers for the marts, computed over a trace's event dicts
(as json.load gives them): the independent side of tests/test_marts_*.py.
Nothing here imports tracedb or duckdb; every rule is written from the
issue's definitions, not from the SQL.
"""

from __future__ import annotations

import re
from collections import defaultdict
from decimal import Decimal

RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "mtia_runtime"}
KERNEL_CATS = {"kernel", "mtia_ccp_events"}
DTYPE_BYTES = {"float": 4, "long": 8, "bfloat16": 2, "half": 2, "double": 8, "int": 4, "byte": 1}
BUSBW_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def ns(us) -> int:
    """Trace microseconds (int, float or str) -> integer nanoseconds."""
    return int(Decimal(str(us)) * 1000)


def slices(events: list[dict], cats: set[str]) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and str(e.get("cat", "")).lower() in cats and "dur" in e]


def kernels(events: list[dict]) -> list[dict]:
    return slices(events, KERNEL_CATS)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


def union_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of [start, end) intervals."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def islands(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def steps(events: list[dict]) -> dict[int, tuple[int, int]]:
    """ProfilerStep#N (CPU user annotation) -> (start ns, end ns)."""
    out = {}
    for e in slices(events, {"user_annotation"}):
        m = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
        if m:
            out[int(m.group(1))] = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
    return out


def step_at(ts: int, step_ranges: dict[int, tuple[int, int]]) -> int | None:
    for n, (s, e) in step_ranges.items():
        if s <= ts < e:
            return n
    return None


def launch_calls(events: list[dict]) -> dict[int, dict]:
    """correlation -> the earliest CPU runtime/driver call carrying it."""
    out: dict[int, dict] = {}
    for e in slices(events, RUNTIME_CATS):
        c = (e.get("args") or {}).get("correlation")
        if c is None:
            continue
        if c not in out or ns(e["ts"]) < ns(out[c]["ts"]):
            out[c] = e
    return out


def comm_kind(name: str) -> tuple[str, str] | None:
    """(library, collective as the name says it) of a communication kernel, else None."""
    base = name[5:] if name.startswith("void ") else name
    for prefix in ("ncclKernel_", "ncclDevKernel_"):
        if base.startswith(prefix):
            return "nccl", base[len(prefix):].split("_")[0].split("(")[0].lower()
    if "dpsk::ep::" in name or "deep_ep::" in name:
        head = name.split("(")[0]
        if "notify" in head:
            return "deepep", "notify"
        for kind in ("dispatch", "combine"):
            if f"::{kind}<" in head or head.endswith(f"::{kind}"):
                return "deepep", kind
    return None


def collectives(events: list[dict], default_group_size: int | None = None) -> list[dict]:
    """One dict per communication kernel: collective, msg_bytes, group_size,
    dur_ns, algbw/busbw (GB/s), taking sizes from the kernel's args, else
    from the record_param_comms op with the same External id; the group size
    else default_group_size (the trace's one process-group size)."""
    params = {}
    for e in slices(events, {"cpu_op"}):
        if e["name"] == "record_param_comms":
            params[e["args"]["External id"]] = e["args"]
    out = []
    for k in kernels(events):
        kind = comm_kind(k["name"])
        if kind is None:
            continue
        a = k.get("args") or {}
        p = params.get(a.get("External id"), {})
        src = a if "In msg nelems" in a else p
        coll = (a.get("Collective name") or p.get("Collective name") or kind[1]).lower().replace("_", "")
        n = src.get("Group size") or default_group_size
        nbytes = None
        if "In msg nelems" in src:
            nbytes = max(src["In msg nelems"], src["Out msg nelems"]) * DTYPE_BYTES[src["dtype"].lower()]
        dur = ns(k["dur"])
        algbw = nbytes / dur if nbytes is not None else None
        busbw = algbw * BUSBW_FACTOR[coll](n) if algbw is not None and n and coll in BUSBW_FACTOR else None
        out.append({"name": k["name"], "collective": coll, "msg_bytes": nbytes, "group_size": n,
                    "dur_ns": dur, "algbw_gbps": algbw, "busbw_gbps": busbw, "library": kind[0],
                    "ts_ns": ns(k["ts"])})
    return out


def overlap(events: list[dict], step: int | None = None, by_step: bool = False) -> dict:
    """Unions of compute and communication kernels and their intersection;
    by_step: only kernels whose launch lies in `step`."""
    calls = launch_calls(events)
    ranges = steps(events)
    comp, comm = [], []
    for k in kernels(events):
        if by_step:
            call = calls.get((k.get("args") or {}).get("correlation"))
            if (step_at(ns(call["ts"]), ranges) if call else None) != step:
                continue
        iv = (ns(k["ts"]), ns(k["ts"]) + ns(k["dur"]))
        (comm if comm_kind(k["name"]) else comp).append(iv)
    c, m, both = union_ns(comp), union_ns(comm), union_ns(comp + comm)
    ov = c + m - both
    return {"compute_ns": c, "comm_ns": m, "overlap_ns": ov, "kernel_ns": both,
            "comm_hidden_pct": 100.0 * ov / m if m else None,
            "compute_kernel_count": len(comp), "comm_kernel_count": len(comm)}


def gpu_busy(events: list[dict]) -> dict[tuple, dict]:
    """(device, stream) and (device, None) -> busy/span/gaps of kernels, copies and sets."""
    per: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for e in slices(events, KERNEL_CATS | {"gpu_memcpy", "gpu_memset"}):
        a = e.get("args") or {}
        dev, stream = a.get("device", e["pid"]), a.get("stream", e["tid"])
        iv = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
        per[(dev, stream)].append(iv)
        per[(dev, None)].append(iv)
    out = {}
    for key, ivs in per.items():
        isl = islands(ivs)
        gaps = [b[0] - a[1] for a, b in zip(isl, isl[1:])]
        out[key] = {"count": len(ivs), "busy_ns": union_ns(ivs), "span_ns": isl[-1][1] - isl[0][0],
                    "gap_count": len(gaps), "max_gap_ns": max(gaps) if gaps else None}
    return out


def annotation_kernels(events: list[dict]) -> list[tuple[dict, int, int]]:
    """(annotation, kernels launched inside it, their summed ns): launches by
    the same process between the annotation's start (inclusive) and end."""
    calls = launch_calls(events)
    launched = []
    for k in kernels(events):
        call = calls.get((k.get("args") or {}).get("correlation"))
        if call is not None:
            launched.append((str(call["pid"]), ns(call["ts"]), ns(k["dur"])))
    out = []
    for a in slices(events, {"user_annotation"}):
        s, e = ns(a["ts"]), ns(a["ts"]) + ns(a["dur"])
        inside = [d for pid, t, d in launched if pid == str(a["pid"]) and s <= t < e]
        out.append((a, len(inside), sum(inside)))
    return out
