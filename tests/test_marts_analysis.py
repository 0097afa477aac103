"""The analysis marts (docs/analysis.md) on a hand-made trace with round
numbers, the CUDA fixtures and the corpus, against tests/analysis_oracle.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracedb
from analysis_oracle import idle_breakdown
from conftest import load_json, write_trace
from marts_fixture import ingest_corpus, rows

CUDA = Path(__file__).resolve().parent / "fixtures" / "cuda"
CUDA_FILES = {
    ("v1", "train"): "v1/rank0.train.json.gz",
    ("v1", "prefill"): "v1/rank0.prefill.json.gz",
    ("v1", "decode"): "v1/rank0.decode.json.gz",
    ("v2", "train"): "v2/rank0.train.json.gz",
}
KEYS = list(CUDA_FILES)
IDS = [f"{r}-{p}" for r, p in KEYS]


def cuda_events(run: str, phase: str) -> list[dict]:
    return load_json(CUDA / CUDA_FILES[(run, phase)])["traceEvents"]


def _x(cat, name, ts, dur, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(ts, corr, name="cudaLaunchKernel", dur=5):
    return _x("cuda_runtime", name, ts, dur, 1, 1, correlation=corr)


def _gpu(name, ts, dur, corr, stream=7, cat="kernel", **args):
    return _x(cat, name, ts, dur, 0, stream, device=0, stream=stream, correlation=corr, **args)


def small_events() -> list[dict]:
    """One step of 1000 us on GPU 0, stream 7 (microseconds):

        launches  a@0  b@10  c@20  copy@400  a@700  b@710
        stream 7  a [100, 200)  b [200, 300)  c [350, 400)  copy [450, 550)
                  a [800, 900)  b [900.02, 1000)

    Gaps: b after a 0 (none), c after b 50 (launched at 20 < 300: other),
    copy after c 50 (launched at 400, not after 400: other), a after copy
    250 (launched at 700 > 550: host wait), b after a 20 ns (kernel wait).
    """
    return [
        _x("user_annotation", "ProfilerStep#1", 0, 1000, 1, 1),
        _x("user_annotation", "fwd", 0, 30, 1, 1),
        _launch(0, 1), _launch(10, 2), _launch(20, 3),
        _launch(400, 4, name="cudaMemcpyAsync"),
        _x("user_annotation", "bwd", 690, 30, 1, 1),
        _launch(700, 5), _launch(710, 6),
        _gpu("a", 100, 100, 1), _gpu("b", 200, 100, 2), _gpu("c", 350, 50, 3),
        _gpu("Memcpy HtoD (Pageable -> Device)", 450, 100, 4, cat="gpu_memcpy", bytes=1_000_000),
        _gpu("a", 800, 100, 5), _gpu("b", 900.02, 99.98, 6),
    ]


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("analysis")
    write_trace(root / "runs" / "s" / "train" / "rank0.json", small_events())
    db = tracedb.open(root / "wh")
    db.ingest([root / "runs"], jobs=1)
    yield db
    db.close()


@pytest.fixture(scope="module")
def cuda_db(tmp_path_factory):
    db = tracedb.open(tmp_path_factory.mktemp("cuda") / "wh")
    db.ingest([CUDA], jobs=1)
    yield db
    db.close()


# -- idle_breakdown -----------------------------------------------------------


def _check_idle(got: list[dict], want: dict) -> None:
    assert {(g["device"], g["stream"], g["category"]) for g in got} == set(want)
    for g in got:
        w = want[(g["device"], g["stream"], g["category"])]
        assert g["gap_count"] == w["count"]
        assert round(g["idle_us"] * 1000) == w["idle_ns"]
        assert round(g["max_gap_us"] * 1000) == w["max_ns"]
    totals = {}
    for g in got:
        totals[(g["device"], g["stream"])] = totals.get((g["device"], g["stream"]), 0) + g["idle_pct"]
    assert all(t == pytest.approx(100) for t in totals.values())


def test_idle_breakdown_small(small_db):
    got = rows(small_db, "SELECT * FROM idle_breakdown_by_rank ORDER BY category")
    _check_idle(got, idle_breakdown(small_events()))
    assert [(g["category"], g["gap_count"], g["idle_us"]) for g in got] == [
        ("host_wait", 1, 250), ("kernel_wait", 1, 0.02), ("other", 2, 100)]
    agg = rows(small_db, "SELECT * FROM idle_breakdown ORDER BY category")
    assert [(g["category"], g["rank_count"], g["idle_us"]) for g in agg] == [
        ("host_wait", 1, 250), ("kernel_wait", 1, 0.02), ("other", 1, 100)]


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_idle_breakdown_cuda(cuda_db, key):
    run, phase = key
    got = rows(cuda_db, "SELECT * FROM idle_breakdown_by_rank WHERE run = ? AND phase = ?", [run, phase])
    want = idle_breakdown(cuda_events(run, phase))
    assert any(c == "host_wait" for _, _, c in want)
    _check_idle(got, want)


def test_idle_breakdown_corpus(tmp_path):
    db, events = ingest_corpus(tmp_path, "hta/nccl_parser_config/nccl_data.json.gz", "n")
    with db:
        _check_idle(rows(db, "SELECT * FROM idle_breakdown_by_rank"), idle_breakdown(events))
