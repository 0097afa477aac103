"""`tracedb report`: the page opens in headless Chromium with the network
blocked, draws every chart, and its embedded numbers are the ones the JSON
of the traces gives (plain Python, no SQL)."""

from __future__ import annotations

import gzip
import html
import json
import os
import re
import shutil
import subprocess
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracedb
from conftest import ROOT
from tracedb.cli import main

CUDA = ROOT / "tests" / "fixtures" / "cuda"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# No network: no proxy that answers, no name that resolves, no background fetches.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
         "--virtual-time-budget=15000"]
DATA = re.compile(r'<script type="application/json" class="chart-data" data-chart="([^"]+)">(.*?)</script>', re.S)


def _ns(us) -> int:
    return int(Decimal(str(us)) * 1000)


def _events(run: str) -> list[dict]:
    return json.loads(gzip.decompress((CUDA / run / "rank0.train.json.gz").read_bytes()))["traceEvents"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The done-when report: v2 against v1, made through the CLI."""
    tmp = tmp_path_factory.mktemp("report")
    db = tracedb.open(tmp / "wh")
    for run in ("v1", "v2"):
        db.ingest([CUDA / run], run=run, jobs=2)
    db.close()
    out = tmp / "report.html"
    res = CliRunner().invoke(main, ["-w", str(tmp / "wh"), "report", "--run", "v2", "--base", "v1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert re.match(r"Wrote .*report\.html \(\d+ charts, [\d.]+ MB\) in [\d.]+ s\.", res.output.strip())
    text = out.read_text()
    data = {key: json.loads(body) for key, body in DATA.findall(text)}
    return out, text, {k: [dict(zip(d["columns"], r)) for r in d["rows"]] for k, d in data.items()}


def test_the_page_has_every_chart_and_asks_no_network(made):
    _out, text, data = made
    assert {"runs", "regressions-v2", "hotspots-v2-train", "steps-v2-train", "overlap", "comm", "gpu",
            "latency-0"} <= set(data)
    # one self-contained file: no external script, style, image or font
    assert not re.search(r"""<(script|img|link|iframe)[^>]*\s(src|href)=["']?(https?:)?//""", text, re.I)
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert "@media print" in text  # laid out for paper too
    assert "<title>tracedb report: v2 against v1</title>" in text
    # each chart says what it shows, what to look for and which command gives its numbers
    sections = re.findall(r'<section class="chart" id="([^"]+)">\s*<h2>(.*?)</h2>\s*<p class="look">(.*?)</p>', text)
    assert {k for k, _t, _l in sections} == set(data)
    assert all(t and look.startswith("What to look for: ") for _k, t, look in sections)
    commands = dict(re.findall(r'<section class="chart" id="([^"]+)">.*?The same numbers: <code>(.*?)</code>',
                               text, re.S))
    assert " query regressions --base v1 --run v2" in html.unescape(commands["regressions-v2"])
    assert " query hotspots --run v2 --phase train --limit 10" in html.unescape(commands["hotspots-v2-train"])


def test_regressions_chart_starts_with_v2s_slower_attention(made):
    rows = made[2]["regressions-v2"]
    assert (rows[0]["kind"], rows[0]["name"], rows[0]["status"]) == ("annotation", "attn(F)", "slower")
    # attn(F) per profiler step from the JSON: its calls summed, over the 3 steps of each run
    per_step = {}
    for run in ("v1", "v2"):
        ev = _events(run)
        calls = [e for e in ev if e.get("name") == "attn(F)" and e.get("cat") == "user_annotation"]
        steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation"]
        per_step[run] = sum(_ns(e["dur"]) for e in calls) / len(steps) / 1e3
    assert rows[0]["base_per_step_us"] == pytest.approx(per_step["v1"])
    assert rows[0]["target_per_step_us"] == pytest.approx(per_step["v2"])
    # enclosing regions (the step, forward) are left out of the chart; impact decreases down the chart
    assert not {"ProfilerStep#*", "forward"} & {r["name"] for r in rows}
    impacts = [abs(r["delta_per_step_us"]) for r in rows]
    assert impacts == sorted(impacts, reverse=True)


def test_hotspots_and_step_times_equal_the_json(made):
    data = made[2]
    totals: dict[str, int] = defaultdict(int)
    ev = _events("v2")
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            totals[e["name"]] += _ns(e["dur"])
    top = sorted(totals.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
    kernels = [r for r in data["hotspots-v2-train"] if r["kind"] == "kernel"]
    assert [r["name"] for r in kernels] == [n for n, _t in top]
    assert [r["total_us"] for r in kernels] == pytest.approx([t / 1e3 for _n, t in top])
    steps = {int(e["name"][13:]): _ns(e["dur"]) / 1e3 for e in ev
             if e.get("name", "").startswith("ProfilerStep#") and e.get("cat") == "user_annotation"}
    assert {r["step"]: r["dur_us"] for r in data["steps-v2-train"]} == pytest.approx(steps)
    run_rows = {(r["run"], r["phase"]): r for r in data["runs"]}
    assert run_rows[("v2", "train")]["event_count"] == sum(1 for e in ev if e.get("ph") not in ("s", "t", "f", "C"))
    assert run_rows[("v2", "train")]["median_step_us"] == pytest.approx(sorted(steps.values())[1])


def _chromium() -> str:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"chromium is not installed ({CHROMIUM}); .ci/run installs it")
        pytest.skip("chromium is not installed (Debian package `chromium`); the report's browser test needs it")
    return CHROMIUM


def _browse(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([_chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=300)


def test_chromium_draws_every_chart_without_errors(made, tmp_path: Path):
    out, _text, data = made
    res = _browse(tmp_path, "--enable-logging=stderr", "--log-level=0", "--dump-dom", out.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    # the page logs nothing: no error, no failed request, no uncaught exception
    assert not [line for line in res.stderr.splitlines() if ":CONSOLE" in line]
    dom = res.stdout
    plots = re.split(r'<div class="plot[^"]*" id="plot-', dom)[1:]
    drawn = {}
    for chunk in plots:
        key = chunk[: chunk.index('"')]
        body = chunk[: chunk.find('class="chart-spec"')]
        # marks: bars and markers (g.point paths), lines, heatmap images
        drawn[key] = len(re.findall(r'class="point[^"]*"|class="js-line"|<image ', body))
        assert 'class="main-svg"' in body, key
    assert set(drawn) == set(data)
    assert all(n > 0 for n in drawn.values()), drawn
    # the top hotspot kernel is named in the page
    totals: dict[str, int] = defaultdict(int)
    for e in _events("v2"):
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            totals[e["name"]] += _ns(e["dur"])
    assert html.escape(max(totals, key=totals.get), quote=False) in dom
    shot = tmp_path / "report.png"
    res = _browse(tmp_path, "--hide-scrollbars", "--window-size=1280,4000", f"--screenshot={shot}", out.as_uri())
    assert res.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_report_errors_are_one_line(made, tmp_path: Path):
    wh = str(made[0].parent / "wh")
    res = CliRunner().invoke(main, ["-w", wh, "report", "--run", "v9", "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 1 and res.output.strip().splitlines()[-1] == "Error: no run 'v9' in the warehouse (runs: v1, v2)"
    assert not (tmp_path / "r.html").exists()


def test_names_from_a_trace_cannot_end_a_script_or_add_markup(tmp_path: Path):
    """A trace is input from anyone: its names land in the page as data, never as markup."""
    from conftest import write_trace

    evil = '</script><script>alert(1)</script><img src=x onerror=alert(2)>'
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cpu_op", "name": evil, "pid": 1, "tid": 1, "ts": 10, "dur": 50},
        {"ph": "X", "cat": "kernel", "name": evil, "pid": 0, "tid": 7, "ts": 20, "dur": 30,
         "args": {"device": 0, "stream": 7}},
    ]
    write_trace(tmp_path / "runs" / "x<y" / "rank0.train.json", events)
    db = tracedb.open(tmp_path / "wh")
    db.ingest([tmp_path / "runs"], jobs=1)
    made = db.report(tmp_path / "r.html")
    text = made.path.read_text()
    assert evil not in text and "<img src=x" not in text
    # ... and the data still holds the name, as it was
    data = {html.unescape(k): json.loads(b) for k, b in DATA.findall(text)}
    assert evil in [r[3] for r in data["hotspots-x_y-train"]["rows"]]  # (discover makes run x<y x_y)
    db.close()
