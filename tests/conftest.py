"""Shared fixtures: the real corpus in ../shared/corpus (when present) and
helpers that build small traces with round numbers."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus"


def corpus_file(rel: str = "") -> Path:
    """A file of ../shared/corpus (the folder itself by default). Where the
    corpus is absent the test skips, except in CI (CI=true), where the
    corpus is always laid beside the clone: there a missing file fails."""
    p = CORPUS / rel
    if not p.exists():
        if os.environ.get("CI"):
            pytest.fail(f"corpus file {rel or '.'} not present in CI ({CORPUS})")
        pytest.skip(f"corpus file {rel or '.'} not present")
    return p


def load_json(path: Path):
    """Plain json.load of a trace (the independent oracle's reader)."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def trace_events(path: Path) -> list[dict]:
    d = load_json(path)
    return d["traceEvents"] if isinstance(d, dict) else d


def write_trace(path: Path, events: list[dict], gz: bool = False, **top) -> Path:
    """Write a Chrome trace ({"traceEvents": [...], **top}) to path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {**top, "traceEvents": events} if top or not isinstance(events, list) else {"traceEvents": events}
    data = json.dumps(doc, indent=1).encode()
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


@pytest.fixture(scope="session", autouse=True)
def cache_home(tmp_path_factory) -> Path:
    """The user's cache folder (where new warehouses' catalogs start from,
    catalog._template_path): one of the session's, for it and the processes
    it starts, never the home folder's."""
    path = tmp_path_factory.mktemp("cache")
    os.environ["XDG_CACHE_HOME"] = str(path)
    return path


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    return tmp_path / "wh"


@pytest.fixture(scope="session")
def demo_runs(tmp_path_factory) -> Path:
    """Real Kineto traces captured with torch.profiler on CPU (2-rank gloo
    jobs): v1, v2 (slower attn(F) region, one extra op), infer/prefill and
    infer/decode. Made once per test session, in a few seconds per run."""
    pytest.importorskip("torch")
    from tracedb.capture import make_demo

    return make_demo(tmp_path_factory.mktemp("demo") / "runs")
