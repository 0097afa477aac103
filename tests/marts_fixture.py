"""Small training traces with round numbers (microseconds) for the mart
tests: two profiler steps per rank, DualPipe-style annotations, compute and
communication kernels on two streams, a copy, a kernel launched from the
autograd thread and one whose launch the trace does not hold.

Per rank and step k (offset o = (k - 1) * 1000 us), on pid 1 (CPU; tid 1
main, tid 2 autograd) and pid 0 (GPU 0; stream 7 compute, stream 20 comm):

    ProfilerStep#k   tid 1  [o, o + STEP_US[rank][k])
    attn(F)          tid 1  [o+100, o+300)   launches gemm (corr 1)
    mlp(B)           tid 1  [o+400, o+600)   while tid 2 launches gemm_bwd (corr 2)
    record_param_comms + launch of the NCCL allreduce (corr 3, args on the kernel)
    record_param_comms + launch of an old-style NCCL broadcast (corr 4, no args:
                     sizes only on record_param_comms)
    DeepEP dispatch (corr 5) overlapping an elementwise kernel (corr 6)
    Memcpy HtoD (corr 7), and an orphan kernel (corr 99, no launch in the trace)

    stream 7:  gemm [o+200, o+400) memcpy [o+150, o+180) gemm_bwd [o+450, o+550)
               elementwise [o+820, o+900) orphan [o+950, o+960)
    stream 20: allreduce [o+520, o+520+AR_US[rank]) broadcast [o+730, o+780)
               dispatch [o+800, o+850)
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tracedb
from conftest import corpus_file, trace_events, write_trace

STEP_US = {0: {1: 900, 2: 900}, 1: {1: 900, 2: 1000}}
AR_US = {0: 200, 1: 300}
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BROADCAST = "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
DISPATCH = "void dpsk::ep::internode::dispatch<false, 8>(int4*, float*)"


def _x(cat, name, ts, dur, pid, tid, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _launch(ts, corr, ext, tid=1, name="cudaLaunchKernel"):
    return _x("cuda_runtime", name, ts, 5, 1, tid, correlation=corr, **{"External id": ext})


def _kernel(name, ts, dur, corr, ext, stream=7, **args):
    return _x("kernel", name, ts, dur, 0, stream, device=0, stream=stream, correlation=corr,
              **{"External id": ext}, **args)


def rank_events(rank: int) -> list[dict]:
    ev: list[dict] = []
    for k in (1, 2):
        o = (k - 1) * 1000
        c = k * 100  # correlation / external id base of the step
        ev += [
            _x("user_annotation", f"ProfilerStep#{k}", o, STEP_US[rank][k], 1, 1),
            _x("user_annotation", "attn(F)", o + 100, 200, 1, 1),
            _x("cpu_op", "aten::mm", o + 110, 30, 1, 1, **{"External id": c + 1}),
            _launch(o + 120, c + 1, c + 1),
            _kernel("gemm", o + 200, 200, c + 1, c + 1),
            _x("cpu_op", "aten::copy_", o + 140, 10, 1, 1, **{"External id": c + 7}),
            _launch(o + 145, c + 7, c + 7, name="cudaMemcpyAsync"),
            _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", o + 150, 30, 0, 7, device=0, stream=7,
               correlation=c + 7, bytes=4096),
            _x("user_annotation", "mlp(B)", o + 400, 200, 1, 1),
            _x("cpu_op", "aten::mm", o + 410, 30, 1, 2, **{"External id": c + 2}),
            _launch(o + 420, c + 2, c + 2, tid=2),
            _kernel("gemm_bwd", o + 450, 100, c + 2, c + 2),
            _x("cpu_op", "record_param_comms", o + 500, 30, 1, 1, **{
                "External id": c + 3, "Collective name": "allreduce", "In msg nelems": 1048576,
                "Out msg nelems": 1048576, "Group size": 2, "dtype": "Float", "Process Group Name": "0"}),
            _launch(o + 510, c + 3, c + 3),
            _kernel(ALLREDUCE, o + 520, AR_US[rank], c + 3, c + 3, stream=20, **{
                "Collective name": "allreduce", "In msg nelems": 1048576, "Out msg nelems": 1048576,
                "Group size": 2, "dtype": "Float", "Process Group Name": "0",
                "Process Group Description": "default_pg"}),
            _x("cpu_op", "record_param_comms", o + 600, 10, 1, 1, **{
                "External id": c + 4, "Collective name": "broadcast", "In msg nelems": 1000,
                "Out msg nelems": 1000, "Group size": 2, "dtype": "Long"}),
            _launch(o + 602, c + 4, c + 4),
            _kernel(BROADCAST, o + 730, 50, c + 4, c + 4, stream=20),
            _launch(o + 700, c + 5, c + 5),
            _kernel(DISPATCH, o + 800, 50, c + 5, c + 5, stream=20),
            _launch(o + 710, c + 6, c + 6),
            _kernel("elementwise", o + 820, 80, c + 6, c + 6),
            _kernel("orphan", o + 950, 10, 9900 + k, 9900 + k),
        ]
    return ev


def write_ranks(root: Path, run: str = "v1", ranks=(0, 1)) -> list[Path]:
    """root/<run>/train/rank<N>.json for each rank; returns the paths."""
    info = lambda r: {"backend": "nccl", "rank": r, "world_size": len(ranks),  # noqa: E731
                      "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": len(ranks)}]}
    return [write_trace(root / run / "train" / f"rank{r}.json", rank_events(r), distributedInfo=info(r),
                        traceName=f"{run}/rank{r}")  # distinct content per run: not skipped as known
            for r in ranks]


def gloo_events(with_gloo: bool = True) -> list[dict]:
    """A CPU-only rank: c10d::allreduce_ ops, and (with_gloo) the gloo:all_reduce
    annotations doing the work on the gloo thread."""
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 1000, 1, 1)]
    for i, (ts, dur) in enumerate([(100, 40), (300, 60), (500, 80)]):
        ev.append(_x("cpu_op", "c10d::allreduce_", ts, dur + 20, 1, 1, **{
            "External id": i + 1, "Input Dims": [[[1024]], [], []], "Input type": ["TensorList", "", ""]}))
        if with_gloo:
            ev.append(_x("user_annotation", "gloo:all_reduce", ts + 5, dur, 1, 3, **{
                "External id": 100 + i, "Input Dims": [[1024]], "Input type": ["float"]}))
    return ev


def rows(db: tracedb.TraceDB, sql: str, params: list | None = None) -> list[dict]:
    """A query's rows as dicts."""
    rel = db.sql(sql, params)
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def ingest_corpus(tmp: Path, rel: str, run: str) -> tuple[tracedb.TraceDB, list[dict]]:
    """A warehouse holding one corpus file as `run`, and the file's events
    (plain json.load); skips the test when the corpus is absent."""
    path = corpus_file(rel)
    db = tracedb.open(tmp / "wh")
    db.ingest([path], run=run, jobs=1)
    return db, trace_events(path)


@pytest.fixture(scope="module")
def fixture_db(tmp_path_factory) -> tracedb.TraceDB:
    """A warehouse holding write_ranks' two ranks as run v1, phase train
    (import it into a test module to use it there)."""
    root = tmp_path_factory.mktemp("marts")
    write_ranks(root / "runs")
    db = tracedb.open(root / "wh")
    db.ingest([root / "runs"], jobs=1)
    yield db
    db.close()
