"""`tracedb report`: one self-contained HTML page of charts over the marts.

    tracedb report --run v2 --base v1 -o report.html

Every number comes from a mart (hotspots, step_times, stragglers, overlap,
comm_latency, gpu_utilization, latency, regressions), so the page is made
in seconds on a warehouse of 100M events. The page opens offline: Plotly's
JavaScript, the charts and their data are inline, and nothing in it asks a
network address for anything. Each chart has a title that says what it
shows, units on its axes, a sentence of what to look for, its numbers (on
hover, in a table, as a CSV link) and the `tracedb query` that gives the
same numbers. A print stylesheet lays it out for paper.

The data of each chart sits in the page as JSON
(``<script type="application/json" class="chart-data">``: the mart's
columns and rows), which tests and scripts can read back.
"""

from __future__ import annotations

import csv
import html
import io
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

import orjson
import plotly.graph_objects as go
import plotly.io
import plotly.offline
from plotly.subplots import make_subplots

from .errors import QueryError, WarehouseError

if TYPE_CHECKING:
    from .api import TraceDB

TOP = 10  # rows per hotspot kind
TOP_REGRESSIONS = 20
TABLE_ROWS = 200  # rows shown in a chart's table (its CSV has them all)
LABEL_CHARS = 48
COLORS = {"slower": "#c0392b", "new": "#e67e22", "faster": "#27ae60", "gone": "#2980b9", "same": "#95a5a6"}


@dataclass
class Chart:
    """One chart of the page: its figure (None when there is nothing to
    draw; ``note`` says why), the mart rows behind it and the command that
    gives them."""

    key: str
    title: str
    look_for: str
    command: str
    columns: list[str]
    rows: list[tuple]
    figure: go.Figure | None = None
    note: str = ""


@dataclass
class ReportResult:
    path: Path
    chart_count: int
    bytes: int
    seconds: float
    charts: list[Chart] = field(default_factory=list, repr=False)


class _Page:
    """What the sections share: the database, the selection, the command prefix."""

    def __init__(self, db: TraceDB, runs: list[str], base: str | None, phase: str | None):
        self.db = db
        self.runs = runs
        self.base = base
        self.phase = phase
        self.prefix = f"tracedb -w {shlex.quote(str(db.wh))}"
        self._memo: dict[tuple, tuple[list[str], list[tuple]]] = {}

    def select(self, source: str, params: list | None = None, where: str = "",
               order: str = "run, phase") -> tuple[list[str], list[tuple]]:
        """Rows of a mart (or table macro, ``source`` with its arguments)
        for the selected runs and phase: one query for all of them."""
        key = (source, tuple(params or ()), where, order)
        if key in self._memo:
            return self._memo[key]
        sql = f"SELECT * FROM {source} WHERE list_contains(?, run)"
        args = [*(params or []), self.runs]
        if self.phase is not None:
            sql += " AND phase = ?"
            args.append(self.phase)
        rel = self.db.sql(f"{sql}{where} ORDER BY {order}", args)
        self._memo[key] = list(rel.columns), rel.fetchall()
        return self._memo[key]

    def command(self, name: str, run: str | None = None, **opts) -> str:
        words = [self.prefix, "query", name]
        for key, value in {"run": run, "phase": self.phase, **opts}.items():
            if value is not None:
                words += [f"--{key.replace('_', '-')}", shlex.quote(str(value))]
        return " ".join(words)

    def runs_option(self) -> str | None:
        """--run for a command over every selected run: the run, or none (all runs) when several."""
        return self.runs[0] if len(self.runs) == 1 else None


def _dicts(columns: list[str], rows: list[tuple]) -> list[dict]:
    return [dict(zip(columns, r)) for r in rows]


def _short(name: str, n: int = LABEL_CHARS) -> str:
    return name if len(name) <= n else name[: n - 1] + "…"


def _layout(fig: go.Figure, height: int = 420, **kw) -> go.Figure:
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=30, b=10),
                      font=dict(size=12), legend=dict(orientation="h", y=-0.15), hoverlabel=dict(align="left"),
                      **kw)
    return fig


# -- sections ---------------------------------------------------------------


def runs_overview(p: _Page) -> list[Chart]:
    runs = _dicts(*_rel(p.db.runs()))
    steps = {(r["run"], r["phase"]): r for r in _dicts(*p.select("latency(span := ?)", ["ProfilerStep#%"]))}
    counts: dict[tuple, set] = {}
    for r in _dicts(*p.select("step_times", order="run, phase, rank, step")):
        counts.setdefault((r["run"], r["phase"]), set()).add(r["step"])
    columns = ["run", "phase", "rank_count", "step_count", "event_count", "median_step_us"]
    rows = [(r["run"], r["phase"], r["rank_count"], len(counts.get((r["run"], r["phase"]), ())), r["event_count"],
             steps.get((r["run"], r["phase"]), {}).get("p50_us"))
            for r in runs if r["run"] in p.runs and p.phase in (None, r["phase"])]
    fig = go.Figure()
    for phase in sorted({r[1] for r in rows}):
        mine = [r for r in rows if r[1] == phase and r[5] is not None]
        if mine:
            fig.add_bar(name=phase, x=[r[0] for r in mine], y=[r[5] / 1e3 for r in mine],
                        customdata=[r[2:5] for r in mine],
                        hovertemplate="run %{x}<br>median step %{y:.3f} ms<br>ranks %{customdata[0]}, "
                                      "steps %{customdata[1]}, events %{customdata[2]:,}<extra>" + html.escape(phase)
                                      + "</extra>")
    fig.update_xaxes(title_text="run", type="category")
    fig.update_yaxes(title_text="median profiler step (ms)")
    return [Chart(
        "runs", "Runs: ranks, phases, steps, events and the median step time",
        "A run whose median step is longer than its neighbours' is the one to open first; the table says how "
        "many ranks and steps each figure rests on.",
        f"{p.prefix} runs; {p.command('latency', p.runs_option(), span='ProfilerStep#%')}",
        columns, rows, _layout(fig, barmode="group") if fig.data else None,
        "" if fig.data else "No profiler steps (ProfilerStep#N) in these runs.")]


def hotspots(p: _Page) -> list[Chart]:
    charts = []
    columns, all_rows = p.select("hotspots", where=f" QUALIFY row_number() OVER (PARTITION BY run, phase, kind"
                                                   f" ORDER BY total_us DESC, name) <= {TOP}",
                                 order="run, phase, kind, total_us DESC, name")
    for run, phase in sorted({(r[0], r[1]) for r in all_rows}):
        rows = [r for r in all_rows if (r[0], r[1]) == (run, phase)]
        kinds = [(k, _dicts(columns, [r for r in rows if r[2] == k]))
                 for k in ("kernel", "cpu_op", "annotation") if any(r[2] == k for r in rows)]
        fig = make_subplots(rows=len(kinds), cols=1, vertical_spacing=0.12,
                            subplot_titles=[{"kernel": "GPU kernels", "cpu_op": "CPU ops",
                                             "annotation": "annotations"}[k] for k, _ in kinds])
        for i, (kind, recs) in enumerate(kinds, start=1):
            labels = [f"{j}. {_short(r['name'])}" for j, r in enumerate(recs, start=1)]
            custom = [[r["name"], r["calls"], r["mean_us"], r["pct_of_total"]] for r in recs]
            for col, label, color in (("total_us", "total", "#1f77b4"), ("self_us", "self", "#aec7e8")):
                fig.add_trace(go.Bar(
                    orientation="h", name=label, legendgroup=label, showlegend=i == 1, marker_color=color,
                    y=labels, x=[(r[col] or 0) / 1e3 for r in recs], customdata=custom,
                    hovertemplate="%{customdata[0]}<br>" + label + " %{x:.3f} ms, %{customdata[1]} calls, "
                                  "mean %{customdata[2]:.3f} µs, %{customdata[3]:.2f}% of the kind's time<extra></extra>"),
                    row=i, col=1)
            fig.update_yaxes(autorange="reversed", row=i, col=1)
            fig.update_xaxes(title_text="time, summed over calls and ranks (ms)", row=i, col=1)
        charts.append(Chart(
            f"hotspots-{run}-{phase}", f"Hotspots of {run} ({phase}): top {TOP} kernels, CPU ops and annotations "
                                       "by total time, self time beside it",
            "The longest bars are where the time goes. A total much longer than its self time is time spent in "
            "what the op calls (its children), not in the op itself.",
            p.command("hotspots", run, phase=phase, limit=TOP) + " --kind kernel|cpu_op|annotation",
            columns, rows, _layout(fig, height=max(360, 260 * len(kinds)), barmode="group")))
    return charts


def step_heatmaps(p: _Page) -> list[Chart]:
    columns, rows = p.select("step_times", order="run, phase, rank, step")
    scol, srows = p.select("stragglers", order="run, phase, step")
    stragglers = _dicts(scol, srows)
    recs = _dicts(columns, rows)
    charts = []
    for run, phase in sorted({(r["run"], r["phase"]) for r in recs}):
        mine = [r for r in recs if (r["run"], r["phase"]) == (run, phase) and r["step"] is not None]
        if not mine:
            continue
        steps = sorted({r["step"] for r in mine})
        ranks = sorted({r["rank"] for r in mine})
        cell = {(r["rank"], r["step"]): r["dur_us"] / 1e3 for r in mine}
        fig = go.Figure(go.Heatmap(
            x=[str(s) for s in steps], y=[str(k) for k in ranks], colorscale="Viridis",
            z=[[cell.get((k, s)) for s in steps] for k in ranks], colorbar=dict(title="ms"),
            hovertemplate="step %{x}, rank %{y}: %{z:.3f} ms<extra></extra>"))
        slow = [s for s in stragglers if (s["run"], s["phase"]) == (run, phase) and s["rank_count"] > 1]
        if slow:
            fig.add_trace(go.Scatter(
                x=[str(s["step"]) for s in slow], y=[str(s["slowest_rank"]) for s in slow], mode="markers",
                name="slowest rank of the step", marker=dict(symbol="x-thin", size=12, color="#ff4136",
                                                             line=dict(width=3, color="#ff4136")),
                customdata=[[s["slowest_us"] / 1e3, s["median_us"] / 1e3, s["excess_pct"]] for s in slow],
                hovertemplate="step %{x}: rank %{y} took %{customdata[0]:.3f} ms, median %{customdata[1]:.3f} ms "
                              "(+%{customdata[2]:.1f}%)<extra>straggler</extra>"))
        fig.update_xaxes(title_text="profiler step", type="category")
        fig.update_yaxes(title_text="rank", type="category")
        charts.append(Chart(
            f"steps-{run}-{phase}", f"Step time of {run} ({phase}) per rank and step (ms); ✕ marks each step's "
                                    "slowest rank",
            "A bright row is a rank slow in every step (its hardware or its data); a bright column is a slow step "
            "on every rank (a checkpoint, a recompile). Hover a ✕ for how far the straggler was over the median.",
            f"{p.command('step_times', run, phase=phase)}; {p.command('stragglers', run, phase=phase)}",
            columns, [tuple(r.values()) for r in mine],
            _layout(fig, height=max(300, min(900, 40 * len(ranks) + 160)), showlegend=bool(slow)),
            "" if len(ranks) > 1 else "One rank: no straggler to mark."))
    return charts


def overlap(p: _Page) -> list[Chart]:
    columns, rows = p.select("overlap", order="run, phase, rank")
    if not rows:
        return []
    recs = _dicts(columns, rows)
    x = [f"{r['run']} {r['phase']} r{r['rank']}" for r in recs]
    fig = go.Figure()
    parts = (("compute only", lambda r: r["compute_us"] - r["overlap_us"], "#1f77b4"),
             ("comm hidden under compute", lambda r: r["overlap_us"], "#2ca02c"),
             ("comm exposed", lambda r: r["exposed_comm_us"], "#d62728"))
    for label, value, color in parts:
        fig.add_bar(name=label, x=x, y=[value(r) / 1e3 for r in recs], marker_color=color,
                    customdata=[["n/a" if r["comm_hidden_pct"] is None else f"{r['comm_hidden_pct']:.1f}%"]
                                for r in recs],
                    hovertemplate="%{x}<br>" + label + " %{y:.3f} ms<br>comm_hidden_pct %{customdata[0]}"
                                  "<extra></extra>")
    fig.update_xaxes(title_text="run, phase, rank", type="category")
    fig.update_yaxes(title_text="GPU time, union of kernels (ms)")
    has_comm = any(r["comm_us"] for r in recs)
    charts = [Chart(
        "overlap", "Compute, communication and their overlap per rank (ms), with comm_hidden_pct",
        "Red is communication that nothing hides: the GPU waits on the network. The higher comm_hidden_pct "
        "(green over green + red), the better the overlap.",
        p.command("overlap", p.runs_option()), columns, rows, _layout(fig, barmode="stack"),
        "" if has_comm else "No communication kernels in these runs: there is nothing to hide.")]
    scol, srows = p.select("overlap_by_step", order="run, phase, rank, step")
    steps = [r for r in _dicts(scol, srows) if r["step"] is not None and r["comm_us"]]
    if steps:
        sfig = go.Figure()
        for key in sorted({(r["run"], r["phase"], r["rank"]) for r in steps}):
            mine = sorted((r for r in steps if (r["run"], r["phase"], r["rank"]) == key), key=lambda r: r["step"])
            sfig.add_scatter(name=f"{key[0]} {key[1]} r{key[2]}", mode="lines+markers",
                             x=[r["step"] for r in mine], y=[r["comm_hidden_pct"] for r in mine],
                             hovertemplate="step %{x}: %{y:.1f}% hidden<extra>%{fullData.name}</extra>")
        sfig.update_xaxes(title_text="profiler step")
        sfig.update_yaxes(title_text="communication hidden under compute (%)", range=[0, 105])
        charts.append(Chart(
            "overlap-steps", "Share of communication hidden under compute per step and rank (comm_hidden_pct, %)",
            "A dip is a step whose communication ran alone; a rank always lower than the others launches its "
            "collectives at a different point.",
            p.command("overlap_by_step", p.runs_option()), scol, [tuple(r.values()) for r in steps],
            _layout(sfig)))
    return charts


def comm_latency(p: _Page) -> list[Chart]:
    columns, rows = p.select("comm_latency", order="run, phase, library, collective, msg_bytes_bucket")
    if not rows:
        return []
    recs = _dicts(columns, rows)
    fig = make_subplots(rows=1, cols=2, subplot_titles=["latency: p50, bar to p95", "bus bandwidth (median)"])
    for key in sorted({(r["run"], r["phase"], r["library"], r["collective"]) for r in recs}):
        mine = sorted((r for r in recs if (r["run"], r["phase"], r["library"], r["collective"]) == key),
                      key=lambda r: r["msg_bytes_bucket"])
        size = [((r["min_msg_bytes"] or 1) * (r["max_msg_bytes"] or 1)) ** 0.5 for r in mine]
        custom = [[r["min_msg_bytes"], r["max_msg_bytes"], r["calls"], r["p95_us"], r["p99_us"], r["busbw_gbps"],
                   r["group_size"]] for r in mine]
        name = " ".join(map(str, key))
        hover = ("%{customdata[0]:,}-%{customdata[1]:,} B, group %{customdata[6]}, %{customdata[2]} calls<br>"
                 "p50 %{y:.1f} µs, p95 %{customdata[3]:.1f}, p99 %{customdata[4]:.1f}<br>"
                 "busbw %{customdata[5]:.2f} GB/s<extra>" + html.escape(name) + "</extra>")
        fig.add_trace(go.Scatter(
            x=size, y=[r["p50_us"] for r in mine], name=name, legendgroup=name, mode="lines+markers",
            error_y=dict(type="data", symmetric=False, array=[r["p95_us"] - r["p50_us"] for r in mine],
                         arrayminus=[0] * len(mine)), customdata=custom, hovertemplate=hover), row=1, col=1)
        fig.add_trace(go.Scatter(
            x=size, y=[r["busbw_gbps"] if r["busbw_gbps"] else None for r in mine], name=name, legendgroup=name,
            showlegend=False, mode="lines+markers", customdata=custom, hovertemplate=hover), row=1, col=2)
    fig.update_xaxes(type="log", title_text="message size (bytes, log)")
    fig.update_yaxes(type="log", title_text="latency (µs, log)", row=1, col=1)
    fig.update_yaxes(type="log", title_text="bus bandwidth (GB/s, log)", row=1, col=2)
    zero = all(not r["busbw_gbps"] for r in recs)
    return [Chart(
        "comm", "Collective latency and bus bandwidth against message size, per collective kind (log axes)",
        "Latency should be flat for small messages and grow with size for large ones; bus bandwidth should "
        "climb to the link's peak (NVLink: hundreds of GB/s). A kind far below its peers at the same size, or a "
        "long p95 bar, points at contention or a straggler (the table names the slowest rank).",
        p.command("comm_latency", p.runs_option()), columns, rows, _layout(fig),
        "Bus bandwidth is 0 when the group has one rank (nothing crosses a link): not drawn on a log axis."
        if zero else "")]


def gpu_utilization(p: _Page) -> list[Chart]:
    columns, rows = p.select("gpu_utilization", order="run, phase, rank, device, scope, stream")
    if not rows:
        return []
    recs = _dicts(columns, rows)
    fig = go.Figure()
    for scope, color in (("device", "#1f77b4"), ("stream", "#9ecae1")):
        mine = [r for r in recs if r["scope"] == scope]
        if not mine:
            continue
        fig.add_bar(
            name="whole device" if scope == "device" else "one stream", marker_color=color,
            x=[f"{r['run']} {r['phase']} r{r['rank']} GPU{r['device']}"
               + ("" if scope == "device" else f" s{r['stream']}") for r in mine],
            y=[r["busy_pct"] for r in mine],
            customdata=[[r["busy_us"] / 1e3, r["span_us"] / 1e3, r["gap_count"], r["max_gap_us"]] for r in mine],
            hovertemplate="%{x}: busy %{y:.1f}%<br>%{customdata[0]:.3f} ms of %{customdata[1]:.3f} ms, "
                          "%{customdata[2]} gaps, longest %{customdata[3]:.1f} µs<extra></extra>")
    fig.update_xaxes(title_text="run, phase, rank, GPU (device) and stream", type="category")
    fig.update_yaxes(title_text="busy (% of first start to last end)", range=[0, 105])
    return [Chart(
        "gpu", "GPU utilization per device and stream (% of the span busy)",
        "A device busy well under 100% is waiting on the CPU (launch bound) or on data; many short gaps point "
        "at launch overhead, a few long ones at synchronizations.",
        p.command("gpu_utilization", p.runs_option()), columns, rows, _layout(fig))]


def latency(p: _Page) -> list[Chart]:
    spans = [("ProfilerStep#%", "profiler steps")]
    timers = p.db.sql("SELECT DISTINCT name FROM stg_timer_spans WHERE list_contains(?, run) ORDER BY name LIMIT 5",
                      [p.runs]).fetchall()
    spans += [(name, f"{name} (ForwardTimer)") for (name,) in timers]
    charts = []
    for pattern, label in spans:
        columns, rows = p.select("latency(span := ?)", [pattern])
        if not rows:
            continue
        recs = _dicts(columns, rows)
        # the samples behind the percentiles: the steps of step_times, the timed passes
        samples_of: dict[tuple, list[float]] = {}
        if pattern == "ProfilerStep#%":
            scol, srows = p.select("step_times", order="run, phase, rank, step")
            for r in _dicts(scol, srows):
                samples_of.setdefault((r["run"], r["phase"], "annotation", "trace"), []).append(r["dur_us"])
        else:
            for run, phase, clock, dur in p.db.sql(
                    "SELECT run, phase, clock, dur_ns FROM stg_timer_spans WHERE list_contains(?, run) AND name = ?",
                    [p.runs, pattern]).fetchall():
                samples_of.setdefault((run, phase, "timer", clock), []).append(dur / 1e3)
        fig = go.Figure()
        for r in recs:
            name = f"{r['run']} {r['phase']}" + ("" if r["clock"] == "trace" else f" ({r['clock']})")
            samples = samples_of.get((r["run"], r["phase"], r["kind"], r["clock"]), [])
            fig.add_trace(go.Box(x=samples, name=name, boxpoints="all", jitter=0.4, pointpos=0, orientation="h",
                                 marker=dict(size=4, opacity=0.5), line=dict(width=1), fillcolor="rgba(0,0,0,0)",
                                 hovertemplate="%{x:.3f} µs<extra>" + html.escape(name) + "</extra>",
                                 showlegend=False))
            for q, symbol in (("p50_us", "line-ns"), ("p95_us", "diamond-tall"), ("p99_us", "star")):
                fig.add_trace(go.Scatter(
                    x=[r[q]], y=[name], mode="markers+text", text=[q[:3]], textposition="top center",
                    marker=dict(symbol=symbol, size=14, color="#d62728", line=dict(width=2, color="#d62728")),
                    showlegend=False, hovertemplate=f"{q[:3]} %{{x:.3f}} µs<extra>{html.escape(name)}</extra>"))
        fig.update_xaxes(title_text="span duration (µs)")
        fig.update_yaxes(title_text="run, phase", type="category")
        charts.append(Chart(
            f"latency-{len(charts)}", f"Latency distribution of {label} (µs), p50 / p95 / p99 marked",
            "The spread between p50 and p99 is the tail a user waits for; a second cluster of points is a "
            "mode (a recompile, a cache miss) worth a look in the trace (`tracedb export --step N`).",
            p.command("latency", p.runs_option(), span=pattern), columns, rows,
            _layout(fig, height=max(300, 90 * len(recs) + 140))))
    return charts


def regressions(p: _Page) -> list[Chart]:
    if p.base is None:
        return []
    charts = []
    for run in p.runs:
        if run == p.base:
            continue
        rel = p.db.sql("SELECT * FROM regressions(?, ?)" + (" WHERE phase = ?" if p.phase else "")
                       + " ORDER BY abs(delta_per_step_us) DESC NULLS LAST, kind, name",
                       [p.base, run] + ([p.phase] if p.phase else []))
        columns, rows = _rel(rel)
        enclosing = {(ph, n) for ph, n in p.db.sql(
            "SELECT phase, name FROM int_annotation_nesting WHERE run = ? OR run = ? GROUP BY run, phase, name"
            " HAVING sum(enclosing_count) = sum(call_count)", [run, p.base]).fetchall()}
        recs = [r for r in _dicts(columns, rows) if not (r["kind"] == "annotation" and (r["phase"], r["name"]) in enclosing)]
        left_out = sorted({r[2] for r in rows if r[1] == "annotation" and (r[0], r[2]) in enclosing})
        top = recs[:TOP_REGRESSIONS]
        if not top:
            continue
        fig = go.Figure()
        labels = [f"{i}. {_short(r['kind'] + ' ' + r['name'])}" + (f" [{r['phase']}]" if p.phase is None else "")
                  for i, r in enumerate(top, start=1)]
        for status in ("slower", "new", "faster", "gone", "same"):
            idx = [i for i, r in enumerate(top) if r["status"] == status]
            if not idx:
                continue
            fig.add_bar(
                orientation="h", name="within noise" if status == "same" else status, marker_color=COLORS[status],
                y=[labels[i] for i in idx], x=[top[i]["delta_per_step_us"] for i in idx],
                error_x=dict(type="data", array=[3 * (top[i]["noise_us"] or 0) for i in idx], color="#555"),
                customdata=[[top[i]["name"], top[i]["base_per_step_us"], top[i]["target_per_step_us"],
                             "n/a" if top[i]["change_pct"] is None else f"{top[i]['change_pct']:+.1f}%",
                             top[i]["noise_us"] or 0] for i in idx],
                hovertemplate="%{customdata[0]}<br>" + html.escape(p.base) + " %{customdata[1]:.1f} → "
                              + html.escape(run) + " %{customdata[2]:.1f} µs per step (%{customdata[3]})<br>"
                              "change %{x:+.1f} µs per step, noise ±%{customdata[4]:.1f} µs (1 s.e.)"
                              "<extra>" + status + "</extra>")
        fig.update_yaxes(autorange="reversed", categoryorder="array", categoryarray=labels)
        fig.update_xaxes(title_text=f"change in time per step and rank, {run} - {p.base} (µs)")
        note = (f"Left out of the chart (they enclose other annotations, so their change is their children's): "
                f"{', '.join(left_out)}; the command lists them." if left_out else "")
        charts.append(Chart(
            f"regressions-{run}", f"Regressions of {run} against {p.base}: what changed the time per step most, "
                                  "largest impact first",
            "Red bars got slower beyond noise, orange are new; grey ones moved less than the noise (the whisker is "
            "3 standard errors of the per-step spread). Start at the top: it is the change that cost the most.",
            f"{p.prefix} query regressions --base {shlex.quote(p.base)} --run {shlex.quote(run)}"
            + (f" --phase {shlex.quote(p.phase)}" if p.phase else ""),
            columns, [tuple(r.values()) for r in top], _layout(fig, height=max(360, 28 * len(top) + 140),
                                                               barmode="overlay"), note))
    return charts


# The views the sections read.
NEEDS = ("hotspots", "step_times", "stragglers", "overlap", "overlap_by_step", "comm_latency", "gpu_utilization",
         "stg_timer_spans", "int_annotation_nesting")
SECTIONS = (runs_overview, regressions, hotspots, step_heatmaps, overlap, comm_latency, gpu_utilization, latency)


def _rel(rel) -> tuple[list[str], list[tuple]]:
    return list(rel.columns), rel.fetchall()


# -- the page ---------------------------------------------------------------

STYLE = """
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); margin: 0; }
header, main { max-width: 1180px; margin: 0 auto; padding: 0 20px; }
header { padding-top: 16px; border-bottom: 1px solid var(--line); }
h1 { font-size: 1.5em; margin: 0.2em 0; } h2 { font-size: 1.15em; margin: 0 0 0.2em; }
.meta, .look, .note, .cmd { color: var(--muted); margin: 0.3em 0; }
nav ol { columns: 2; font-size: 0.9em; padding-left: 1.4em; }
section.chart { border-bottom: 1px solid var(--line); padding: 18px 0; }
.plot { width: 100%; }
code { background: #f6f8fa; padding: 1px 4px; border-radius: 3px; font-size: 0.88em; word-break: break-all; }
.numbers { max-height: 16em; overflow: auto; border: 1px solid var(--line); margin-top: 6px; }
table { border-collapse: collapse; font-size: 0.8em; width: 100%; }
th, td { padding: 2px 6px; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th { position: sticky; top: 0; background: #f6f8fa; }
td.t, th.t { text-align: left; max-width: 28em; overflow: hidden; text-overflow: ellipsis; }
@media print {
  @page { size: A4 landscape; margin: 12mm; }
  body { font-size: 10pt; } header, main { max-width: none; padding: 0; }
  nav, .modebar-container, a.csv { display: none !important; }
  section.chart { break-inside: avoid; page-break-inside: avoid; }
  .numbers { max-height: none; overflow: visible; border: 0; }
  th { position: static; }
}
"""

TEMPLATE = "plotly_white"
LOADER = """
const template = JSON.parse(document.getElementById('chart-template').textContent);
for (const el of document.querySelectorAll('script.chart-spec')) {
  const spec = JSON.parse(el.textContent);
  spec.layout.template = template;
  Plotly.newPlot(el.dataset.target, spec.data, spec.layout,
                 {responsive: true, displaylogo: false, toImageButtonOptions: {filename: el.dataset.target}});
}
window.addEventListener('beforeprint', () => {
  for (const d of document.querySelectorAll('.js-plotly-plot')) Plotly.Plots.resize(d);
});
"""


def _json_script(value, cls: str, **attrs) -> str:
    """JSON inside a <script> element: '<' escaped, so no text in it can end the element."""
    text = orjson.dumps(value, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("<", "\\u003c")
    extra = "".join(f' data-{k}="{html.escape(v)}"' for k, v in attrs.items())
    return f'<script type="application/json" class="{cls}"{extra}>{text}</script>'


def _csv(columns: list[str], rows: list[tuple]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    w.writerows(rows)
    return "data:text/csv;charset=utf-8," + quote(buf.getvalue())


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "" if v is None else str(v)


def _table(columns: list[str], rows: list[tuple]) -> str:
    text = {i for i, c in enumerate(columns) if any(isinstance(r[i], str) for r in rows[:50])}
    head = "".join(f'<th class="{"t" if i in text else ""}">{html.escape(c)}</th>' for i, c in enumerate(columns))
    body = "".join(
        "<tr>" + "".join(f'<td class="{"t" if i in text else ""}" title="{html.escape(_cell(v))}">'
                         f"{html.escape(_cell(v))}</td>" for i, v in enumerate(r)) + "</tr>"
        for r in rows[:TABLE_ROWS])
    more = f'<p class="note">First {TABLE_ROWS} of {len(rows):,} rows; the CSV has them all.</p>' \
        if len(rows) > TABLE_ROWS else ""
    return f'<div class="numbers"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{more}'


def _section(c: Chart) -> str:
    parts = [f'<section class="chart" id="{html.escape(c.key)}">', f"<h2>{html.escape(c.title)}</h2>",
             f'<p class="look">What to look for: {html.escape(c.look_for)}</p>']
    if c.figure is not None:
        parts.append(f'<div class="plot" id="plot-{html.escape(c.key)}"></div>')
        spec = c.figure.to_plotly_json()
        spec["layout"].pop("template", None)  # the page's one template (TEMPLATE) applies; a copy each costs 0.2 s
        parts.append(_json_script(spec, "chart-spec", target=f"plot-{c.key}"))
    if c.note:
        parts.append(f'<p class="note">{html.escape(c.note)}</p>')
    parts.append(f'<p class="cmd">The same numbers: <code>{html.escape(c.command)}</code> · '
                 f'<a class="csv" download="{html.escape(c.key)}.csv" href="{_csv(c.columns, c.rows)}">CSV</a></p>')
    if c.rows:
        parts.append(_table(c.columns, c.rows))
    parts.append(_json_script({"columns": c.columns, "rows": c.rows}, "chart-data", chart=c.key))
    parts.append("</section>")
    return "\n".join(parts)


def build_page(db: TraceDB, runs: list[str] | None = None, base: str | None = None,
               phase: str | None = None) -> tuple[str, list[Chart]]:
    """The HTML text of the report and its charts."""
    present = {v for (v,) in db.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    missing = sorted(set(NEEDS) - present)
    if missing:
        raise WarehouseError(f"{db.wh}: the catalog has no {', '.join(missing)} (made by an older "
                             "tracedb); run `tracedb migrate` to re-create the views")
    have = [r for (r,) in db.sql("SELECT DISTINCT run FROM traces WHERE status = 'ok' ORDER BY run").fetchall()]
    for r in [*(runs or []), *([base] if base else [])]:
        if r not in have:
            raise QueryError(f"no run {r!r} in the warehouse (runs: {', '.join(have) or 'none'})")
    if phase is not None and not db.sql("SELECT 1 FROM traces WHERE phase = ? LIMIT 1", [phase]).fetchall():
        raise QueryError(f"no phase {phase!r} in the warehouse")
    chosen = list(dict.fromkeys(runs or have))
    if base is not None and base not in chosen:
        chosen.append(base)  # the base is shown beside the runs compared to it
    page = _Page(db, chosen, base, phase)
    charts = [c for section in SECTIONS for c in section(page)]
    shown = [r for r in chosen if r != base] or chosen
    title = "tracedb report: " + ", ".join(shown) + (f" against {base}" if base else "") + \
        (f", phase {phase}" if phase else "")
    toc = "".join(f'<li><a href="#{html.escape(c.key)}">{html.escape(c.title)}</a></li>' for c in charts)
    body = "\n".join(_section(c) for c in charts)
    template = _json_script(plotly.io.templates[TEMPLATE].to_plotly_json(), "chart-template").replace(
        "<script ", '<script id="chart-template" ', 1)
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:; font-src data:">
<title>{html.escape(title)}</title>
<style>{STYLE}</style>
<script>{plotly.offline.get_plotlyjs()}</script>
</head><body>
<header><h1>{html.escape(title)}</h1>
<p class="meta">Warehouse <code>{html.escape(str(db.wh))}</code>, made {made}. Hover a chart for its numbers;
each chart's table, CSV and <code>tracedb query</code> give them too.</p>
<nav><ol>{toc}</ol></nav></header>
<main>
{body}
</main>
{template}
<script>{LOADER}</script>
</body></html>
"""
    return text, charts


def write_report(db: TraceDB, path: str | os.PathLike, runs: list[str] | None = None, base: str | None = None,
                 phase: str | None = None) -> ReportResult:
    """Write the report to ``path`` (atomically) and say what it holds."""
    start = time.perf_counter()
    text, charts = build_page(db, runs, base, phase)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    data = text.encode()
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return ReportResult(path, len(charts), len(data), time.perf_counter() - start, charts)
