"""collectives, comm_latency and comm_patterns: a round-number fixture and
the real NCCL / DeepEP / gloo traces, against tests/marts_oracle.py."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import pytest

import tracedb
from click.testing import CliRunner
from tracedb.cli import main
from conftest import corpus_file, trace_events, write_trace
from marts_fixture import AR_US, fixture_db, gloo_events, ingest_corpus, rank_events, rows, write_ranks  # noqa: F401 (fixture)
from marts_oracle import collectives as oracle_collectives
from marts_oracle import percentile

NCCL_DATA = "hta/nccl_parser_config/nccl_data.json.gz"



def test_collectives_fixture_row_by_row(fixture_db):
    got = rows(fixture_db, "SELECT * FROM collectives ORDER BY rank, ts_ns")
    want = []
    for rank in (0, 1):
        want += sorted(oracle_collectives(rank_events(rank), default_group_size=2), key=lambda r: r["ts_ns"])
    assert len(got) == len(want) == 12  # 3 comm kernels x 2 steps x 2 ranks
    for g, w in zip(got, want):
        assert g["name"] == w["name"]
        assert g["collective"] == w["collective"]
        assert g["library"] == w["library"]
        assert g["msg_bytes"] == w["msg_bytes"]
        assert g["group_size"] == w["group_size"]
        assert g["dur_us"] == pytest.approx(w["dur_ns"] / 1e3)
        assert g["algbw_gbps"] == pytest.approx(w["algbw_gbps"])
        assert g["busbw_gbps"] == pytest.approx(w["busbw_gbps"])
    # the hand-checked numbers: 4 MiB allreduce in 200 us on 2 ranks
    ar = got[0]
    assert (ar["collective"], ar["msg_bytes"], ar["step"], ar["stream"]) == ("allreduce", 4194304, 1, 20)
    assert ar["algbw_gbps"] == pytest.approx(4194304 / 200_000)
    assert ar["busbw_gbps"] == pytest.approx(4194304 / 200_000 * 2 * 1 / 2)
    assert ar["pg_name"] == "0" and ar["pg_desc"] == "default_pg"
    # the old-style broadcast kernel has no args: sizes from record_param_comms (1000 Long)
    bc = got[1]
    assert (bc["collective"], bc["msg_bytes"], bc["dtype"], bc["busbw_gbps"]) == (
        "broadcast", 8000, "Long", pytest.approx(8000 / 50_000))
    # DeepEP dispatch: communication, size unknown; group size from the trace's one process group
    dp = got[2]
    assert (dp["collective"], dp["library"], dp["msg_bytes"], dp["busbw_gbps"]) == ("dispatch", "deepep", None, None)
    assert dp["group_size"] == 2


def test_comm_latency_fixture(fixture_db):
    got = {(r["collective"], r["msg_bytes_bucket"]): r for r in rows(fixture_db, "SELECT * FROM comm_latency")}
    assert set(got) == {("allreduce", 4194304), ("broadcast", 4096), ("dispatch", None)}
    ar = got[("allreduce", 4194304)]
    durs = [AR_US[r] for r in (0, 1) for _ in (1, 2)]
    assert (ar["calls"], ar["rank_count"], ar["group_size"]) == (4, 2, 2)
    assert ar["p50_us"] == pytest.approx(percentile(durs, 0.5))
    assert ar["p95_us"] == pytest.approx(percentile(durs, 0.95))
    assert ar["p99_us"] == pytest.approx(percentile(durs, 0.99))
    assert ar["max_us"] == 300
    assert ar["busbw_gbps"] == pytest.approx(percentile([4194304 / (d * 1e3) for d in durs], 0.5))
    assert (ar["slowest_rank"], ar["slowest_rank_avg_us"]) == (1, 300)
    # per rank
    by_rank = rows(fixture_db, "SELECT rank, calls, p50_us FROM comm_latency_by_rank"
                               " WHERE collective = 'allreduce' ORDER BY rank")
    assert by_rank == [{"rank": 0, "calls": 2, "p50_us": 200}, {"rank": 1, "calls": 2, "p50_us": 300}]


def test_gloo_annotations_are_the_ops_and_c10d_only_without_them(tmp_path: Path):
    with_gloo = write_trace(tmp_path / "runs" / "cpu" / "rank0.json", gloo_events(True),
                            distributedInfo={"backend": "gloo", "rank": 0, "world_size": 4,
                                             "pg_config": [{"pg_name": "0", "pg_size": 4}]})
    c10d_only = write_trace(tmp_path / "runs" / "cpu" / "rank1.json", gloo_events(False),
                            distributedInfo={"backend": "gloo", "rank": 1, "world_size": 4,
                                             "pg_config": [{"pg_name": "0", "pg_size": 4}]})
    with tracedb.open(tmp_path / "wh") as db:
        db.ingest([with_gloo, c10d_only], jobs=1)
        got = rows(db, "SELECT rank, source, collective, dur_us, msg_nelems, msg_bytes, group_size, busbw_gbps, step"
                       " FROM collectives ORDER BY rank, ts_ns")
    gloo = [r for r in got if r["rank"] == 0]
    c10d = [r for r in got if r["rank"] == 1]
    assert [r["source"] for r in gloo] == ["annotation"] * 3  # c10d ops not counted twice
    assert [r["dur_us"] for r in gloo] == [40, 60, 80]
    assert all(r["msg_bytes"] == 4096 and r["group_size"] == 4 and r["step"] == 1 for r in gloo)
    assert gloo[0]["busbw_gbps"] == pytest.approx(4096 / 40_000 * 2 * 3 / 4)
    assert [r["source"] for r in c10d] == ["cpu_op"] * 3
    assert [r["dur_us"] for r in c10d] == [60, 80, 100]
    # a TensorList gives the element count; its element type is unknown
    assert all(r["msg_nelems"] == 1024 and r["msg_bytes"] is None and r["collective"] == "allreduce" for r in c10d)


def test_comm_patterns_csv_replaces_the_defaults(tmp_path: Path):
    wh = tmp_path / "wh"
    with tracedb.open(wh) as db:
        write_ranks(tmp_path / "runs", ranks=(0,))
        db.ingest([tmp_path / "runs"], jobs=1)
        assert len(rows(db, "SELECT * FROM comm_patterns")) == 5  # the defaults
    # the workflow `tracedb migrate --help` shows: export, edit, rebuild
    runner = CliRunner()
    res = runner.invoke(main, ["-w", str(wh), "query", "comm_patterns", "-f", "csv", "-o", str(wh / "comm_patterns.csv")])
    assert res.exit_code == 0, res.output
    assert "priority,source,pattern,library,collective" in (wh / "comm_patterns.csv").read_text()
    (wh / "comm_patterns.csv").write_text(
        "source,pattern,library,collective\n"
        "kernel,^elementwise$,mine,alltoall\n"
        "kernel,^ncclDevKernel_(\\w+?)_,nccl,\n")
    res = runner.invoke(main, ["-w", str(wh), "migrate"])
    assert res.exit_code == 0, res.output
    with tracedb.open(wh) as db:
        assert rows(db, "SELECT source, library, collective FROM comm_patterns ORDER BY priority") == [
            {"source": "kernel", "library": "mine", "collective": "alltoall"},
            {"source": "kernel", "library": "nccl", "collective": None}]
        got = Counter((r["collective"], r["library"]) for r in rows(db, "SELECT * FROM collectives"))
        ov = rows(db, "SELECT comm_kernel_count FROM overlap")
    # broadcast (ncclKernel_) and DeepEP are no longer communication; elementwise is
    assert got == {("alltoall", "mine"): 2, ("allreduce", "nccl"): 2}
    assert ov == [{"comm_kernel_count": 4}]


def test_bad_comm_patterns_csv_is_a_clear_error(tmp_path: Path):
    wh = tmp_path / "wh"
    wh.mkdir()
    (wh / "comm_patterns.csv").write_text("source,pattern,library,collective\nkernels,nccl,nccl,\n")
    with pytest.raises(tracedb.errors.ViewError, match="comm_patterns.csv.*source must be one of"):
        write_ranks(tmp_path / "runs", ranks=(0,))
        tracedb.open(wh).ingest([tmp_path / "runs"], jobs=1)


# -- the real NCCL trace ----------------------------------------------------


@pytest.fixture(scope="module")
def nccl_db(tmp_path_factory):
    db, events = ingest_corpus(tmp_path_factory.mktemp("nccl"), NCCL_DATA, "nccl")
    yield db, events
    db.close()


def test_nccl_corpus_collectives_match_the_json(nccl_db):
    db, events = nccl_db
    want = sorted(oracle_collectives(events), key=lambda r: r["ts_ns"])
    got = rows(db, "SELECT * FROM collectives ORDER BY ts_ns")
    assert Counter(r["collective"] for r in got) == {"allreduce": 15, "broadcast": 6}
    assert len(got) == len(want) == 21
    for g, w in zip(got, want):
        assert (g["collective"], g["msg_bytes"], g["group_size"]) == (w["collective"], w["msg_bytes"], w["group_size"])
        assert g["dur_us"] == pytest.approx(w["dur_ns"] / 1e3)
        assert g["busbw_gbps"] == pytest.approx(w["busbw_gbps"])
        assert g["algbw_gbps"] == pytest.approx(w["algbw_gbps"])


def test_nccl_corpus_comm_latency_counts_the_same(nccl_db):
    db, events = nccl_db
    want = defaultdict(list)
    for c in oracle_collectives(events):
        want[c["collective"]].append(c["dur_ns"] / 1e3)
    got = rows(db, "SELECT collective, sum(calls) AS calls, max(max_us) AS max_us FROM comm_latency GROUP BY 1")
    assert {r["collective"]: r["calls"] for r in got} == {k: len(v) for k, v in want.items()}
    assert {r["collective"]: r["max_us"] for r in got} == pytest.approx({k: max(v) for k, v in want.items()})
    # one size per bucket here: the bucket's percentiles are those of its ops
    for r in rows(db, "SELECT * FROM comm_latency WHERE min_msg_bytes = max_msg_bytes"):
        durs = [c["dur_ns"] / 1e3 for c in oracle_collectives(events) if c["msg_bytes"] == r["min_msg_bytes"]
                and c["collective"] == r["collective"]]
        assert r["calls"] == len(durs)
        assert r["p50_us"] == pytest.approx(percentile(durs, 0.5))
        assert r["p95_us"] == pytest.approx(percentile(durs, 0.95))


def test_cpu_only_gloo_corpus(tmp_path: Path):
    path = corpus_file("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    events = trace_events(path)
    gloo = [e for e in events if e.get("name", "").startswith("gloo:")]
    with tracedb.open(tmp_path / "wh") as db:
        db.ingest([path], jobs=1)
        got = rows(db, "SELECT collective, dur_us, msg_bytes, group_size FROM collectives ORDER BY ts_ns")
    want = sorted(gloo, key=lambda e: e["ts"])
    assert len(got) == len(want) == 10
    for g, w in zip(got, want):
        assert g["collective"] == "allreduce"
        assert g["dur_us"] == pytest.approx(float(w["dur"]))
        assert g["msg_bytes"] == w["args"]["Input Dims"][0][0] * 4  # float
        assert g["group_size"] == 300  # every process group of the trace has 300 ranks
