"""`tracedb demo`, the README's first command, run as a new user would: from
a folder outside the checkout, with HOME there too. Every part it prints
names a command; running that command must print the same text."""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

CLI = [sys.executable, "-m", "tracedb.cli"]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(cwd)}
    env.pop("TRACEDB_WAREHOUSE", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _sections(stdout: str) -> dict[str, tuple[str, str]]:
    """title -> (command, the text printed under it)."""
    out = {}
    for block in stdout.split("== ")[1:]:
        title, rest = block.split("\n", 1)
        m = re.match(r"\$ (.*)\n", rest)
        out[title] = (m.group(1), rest[m.end():].rstrip("\n") + "\n")
    return out


def _sample_kernel_totals(run: str) -> dict[str, float]:
    """Kernel time per name in a sample run's training trace, from the JSON."""
    path = ROOT / "tests" / "fixtures" / "cuda" / run / "rank0.train.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    totals: dict[str, float] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            totals[e["name"]] = totals.get(e["name"], 0) + e["dur"]
    return totals


def _check_demo(home: Path, extra: list[str]) -> dict[str, tuple[str, str]]:
    res = _run([*CLI, "demo", "here", *extra], home)
    assert res.returncode == 0, res.stderr
    sections = _sections(res.stdout)
    assert [t for t in sections if "BI tool" not in t] == [
        "What was ingested: runs, phases, ranks",
        "Where v2's GPU time went: the top kernels",
        "What changed from v1 to v2 in training, largest first",
    ]
    for title, (command, printed) in sections.items():
        if "BI tool" in title:
            continue
        words = shlex.split(command)
        assert words[0] == "tracedb"
        again = _run([*CLI, *words[1:]], home)
        assert again.returncode == 0, again.stderr
        assert again.stdout == printed, title
    # The top hotspot is the kernel with the most time in v2, by the JSON.
    totals = _sample_kernel_totals("v2")
    top = max(totals, key=totals.get)
    first = re.split(r"\s{2,}", sections["Where v2's GPU time went: the top kernels"][1].splitlines()[2])
    assert first[:3] == ["v2", "train", "kernel"]
    assert first[3] == (top if len(top) <= 70 else top[:69] + "…")
    assert "$ tracedb -w here/warehouse serve" in res.stdout
    return sections


def test_demo_without_torch_capture_from_an_empty_folder(tmp_path: Path):
    sections = _check_demo(tmp_path, ["--no-capture"])
    runs = sections["What was ingested: runs, phases, ranks"][1]
    assert [line.split()[:2] for line in runs.splitlines()[2:]] == [
        ["v1", "decode"], ["v1", "prefill"], ["v1", "train"], ["v2", "train"]]
    regressions = sections["What changed from v1 to v2 in training, largest first"][1].splitlines()
    assert regressions[2].split()[:4] == ["train", "annotation", "ProfilerStep#*", "slower"]
    # A rerun ingests nothing new and prints the same.
    again = _run([*CLI, "demo", "here", "--no-capture"], tmp_path)
    assert again.returncode == 0 and _sections(again.stdout) == sections
    assert "Ingested 0 file(s)" in again.stderr and "skipped 4 already ingested" in again.stderr


@pytest.mark.slow
def test_demo_with_torch_captures_cpu_runs(tmp_path: Path):
    pytest.importorskip("torch")
    sections = _check_demo(tmp_path, [])
    runs = sections["What was ingested: runs, phases, ranks"][1]
    names = {line.split()[0] for line in runs.splitlines()[2:]}
    assert names == {"v1", "v2", "cpu-v1", "cpu-v2", "cpu-infer"}
    assert sorted(p.name for p in (tmp_path / "here" / "runs" / "cpu").iterdir()) == ["infer", "v1", "v2"]
