"""Self time: which slice is whose parent (store._child_pairs, and
store._child_sums_in_memory, which traces of up to IN_MEMORY_EVENTS take:
by the C pass, _selftime.c, and by numpy where that is not built; and
store._child_sums_streamed, the C pass's stream, which larger traces take).

The pass is vectorized over sorted batches and carries state from one batch
to the next; these tests give it batches of a few rows, so that threads, tie
groups and open slices straddle batch boundaries. Both ways of sorting must
give the same sums. Expected values come from a brute-force containment
search (properly nested slices) and from the rule spelled out one row at a
time (any overlap).
"""

from __future__ import annotations

import heapq
import random
from collections import defaultdict
from contextlib import contextmanager

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oracle import self_times
from tracedb import _selftime, store
from tracedb.store import _child_pairs, _child_sums_in_memory, _child_sums_streamed


def _child_sums(tmp_path, slices: list[tuple[str, str, int, int]], batch_rows: int) -> dict[int, int]:
    """Slices (pid, tid, ts, dur), event_id = position: parent -> summed child time."""
    src, dst = tmp_path / "slices.parquet", tmp_path / "pairs.parquet"
    pq.write_table(pa.table({
        "event_id": pa.array(range(len(slices)), pa.int64()),
        "ph": ["X"] * len(slices),
        "pid": [s[0] for s in slices], "tid": [s[1] for s in slices],
        "ts_ns": pa.array([s[2] for s in slices], pa.int64()),
        "dur_ns": pa.array([s[3] for s in slices], pa.int64()),
    }), src)
    con = duckdb.connect()
    try:
        _child_pairs(con, f"read_parquet('{src}')", dst, batch_rows=batch_rows)
    finally:
        con.close()
    sums: dict[int, int] = defaultdict(int)
    for parent, dur in zip(*pq.read_table(dst).to_pydict().values()):
        sums[parent] += dur
    for solver in (_selftime, None):  # the C pass, and numpy's where it is not built
        with _solver(solver):
            in_memory = _child_sums_in_memory([src], len(slices), batch_rows=batch_rows).to_pydict()
        assert in_memory["parent_id"] == sorted(in_memory["parent_id"])
        assert dict(zip(in_memory["parent_id"], in_memory["child_ns"])) == sums, solver
    for run in (store.SUM_RUN, 2):  # one run in memory; runs of two staged and merged
        with _sum_run(run):
            streamed = _child_sums_streamed([src], tmp_path, threads=2)
        got = pa.Table.from_batches(list(streamed()), schema=_SUMS).to_pydict()
        assert got["parent_id"] == sorted(got["parent_id"])
        assert dict(zip(got["parent_id"], got["child_ns"])) == sums, run
    return dict(sums)


_SUMS = pa.schema([("parent_id", pa.int64()), ("child_ns", pa.int64())])


@contextmanager
def _sum_run(pairs: int):
    was = store.SUM_RUN
    store.SUM_RUN = pairs
    try:
        yield
    finally:
        store.SUM_RUN = was


@contextmanager
def _solver(module):
    """store's C pass for self time set to ``module`` (None: numpy's)."""
    was = store._selftime
    store._selftime = module
    try:
        yield
    finally:
        store._selftime = was


def _by_rule(slices: list[tuple[str, str, int, int]]) -> dict[int, int]:
    """The rule, one slice at a time in (thread, start, longer first,
    event_id) order: a slice's depth is the number of earlier slices of its
    thread that end after it starts; its parent is the latest earlier slice
    at one depth less."""
    order = sorted(range(len(slices)), key=lambda i: (slices[i][0], slices[i][1], slices[i][2], -slices[i][3], i))
    sums: dict[int, int] = defaultdict(int)
    thread, ends, last = None, [], []
    for i in order:
        pid, tid, ts, dur = slices[i]
        if (pid, tid) != thread:
            thread, ends, last = (pid, tid), [], []
        while ends and ends[0] <= ts:
            heapq.heappop(ends)
        depth = len(ends)
        if depth:
            sums[last[depth - 1]] += dur
        last[depth:depth + 1] = [i]
        heapq.heappush(ends, ts + dur)
    return dict(sums)


def test_nested_slices_across_batches(tmp_path):
    """Round numbers: a step of 100 with two ops, the second with a kernel
    launch and a zero-length marker at its start; a second thread with one
    op. Self times: 100-30-50=20, 30, 50-20-0=30, 20, 0, and 7."""
    slices = [
        ("1", "a", 0, 100),    # 0: step
        ("1", "a", 10, 30),    # 1: op
        ("1", "a", 50, 50),    # 2: op, ends with the step
        ("1", "a", 50, 0),     # 3: marker at the op's start
        ("1", "a", 60, 20),    # 4: launch
        ("1", "b", 0, 7),      # 5: another thread
    ]
    for batch_rows in (1, 2, 3, 64):
        sums = _child_sums(tmp_path, slices, batch_rows)
        assert sums == {0: 80, 2: 20}, batch_rows
        self_ns = [d - sums.get(i, 0) for i, (_, _, _, d) in enumerate(slices)]
        assert self_ns == [20, 30, 30, 0, 20, 7]


@st.composite
def _nested(draw) -> list[tuple[int, int, str]]:
    """Properly nested slices on one thread: each child inside its parent
    and shorter, siblings apart, durations at least 1: containment is
    unambiguous."""
    out: list[tuple[int, int, str]] = []

    def grow(start: int, dur: int, level: int) -> None:
        out.append((start, dur, f"s{len(out)}"))
        t = start
        for _ in range(draw(st.integers(0, 3)) if level < 4 else 0):
            gap = draw(st.integers(0, 3))
            child = draw(st.integers(1, 8))
            if child >= dur or t + gap + child > start + dur:
                break
            grow(t + gap, child, level + 1)
            t += gap + child

    t = 0
    for _ in range(draw(st.integers(1, 3))):
        grow(t, draw(st.integers(1, 60)), 0)
        t = out[-1][0] + 100
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(nested=_nested(), batch_rows=st.integers(1, 9))
def test_nested_self_times_match_containment(tmp_path, nested, batch_rows):
    slices = [("1", "t", s, d) for s, d, _ in nested]
    sums = _child_sums(tmp_path, slices, batch_rows)
    expected = self_times(nested)
    got = {name: d - sums.get(i, 0) for i, (_, d, name) in enumerate(nested)}
    assert got == expected


_slice = st.tuples(st.sampled_from(["1", "2"]), st.sampled_from(["a", "b"]),
                   st.integers(0, 12), st.integers(0, 8))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(slices=st.lists(_slice, min_size=1, max_size=40), batch_rows=st.integers(1, 9))
def test_any_overlap_follows_the_rule(tmp_path, slices, batch_rows):
    """Overlapping, tied and zero-length slices on a few threads."""
    assert _child_sums(tmp_path, slices, batch_rows) == _by_rule(slices)


def test_times_near_the_int64_limit(tmp_path):
    """A slice whose end would pass 2^63 still contains what starts inside it."""
    big = 2**63 - 100
    slices = [("1", "a", big, 2**62), ("1", "a", big + 10, 5)]
    assert _child_sums(tmp_path, slices, 64) == {0: 5}


def test_in_memory_declines_event_ids_past_the_count(tmp_path):
    """The in-memory arrays are sized by the trace's JSON event count; a
    staged event_id past it (a count that was wrong) sends the trace to
    DuckDB's sort (None here), never to a wrong or failed sum."""
    slices = [("1", "a", 0, 100), ("1", "a", 10, 30), ("1", "a", 50, 20)]
    assert _child_sums(tmp_path, slices, 64) == {0: 50}
    src = tmp_path / "slices.parquet"  # written by _child_sums
    assert _child_sums_in_memory([src], 2) is None
    assert _child_sums_in_memory([src], 3).to_pydict() == {"parent_id": [0], "child_ns": [50]}


def test_slices_listed_out_of_order(tmp_path):
    """A thread's slices far from start order (the C pass's insertion sort
    gives up and merge-sorts): a chain of 300 nested slices listed innermost
    first, and 500 overlapping ones in a shuffled order on a second thread."""
    rng = random.Random(7)
    chain = [("1", "a", i, 1000 - 2 * i) for i in range(300)][::-1]
    loose = [("1", "b", rng.randrange(0, 400), rng.randrange(0, 50)) for _ in range(500)]
    slices = chain + loose
    sums = _child_sums(tmp_path, slices, 64)
    assert sums == _by_rule(slices)
    # the chain: each slice's child is the next one in, 2 ns shorter
    assert all(sums[299 - i] == 1000 - 2 * (i + 1) for i in range(299))


def test_the_c_pass_checks_its_arrays():
    """Rows past the arrays, or arrays of the wrong width, are errors, not
    reads or writes out of bounds."""
    code, ts, dur = np.zeros(3, np.int32), np.zeros(3, np.int64), np.ones(3, np.int64)
    child_ns, has = np.zeros(3, np.int64), np.zeros(3, np.bool_)
    with pytest.raises(ValueError, match="past the arrays"):
        _selftime.child_sums(np.array([0, 3], np.int64), code, ts, dur, child_ns, has)
    with pytest.raises(TypeError, match="code: expected 4-byte integers"):
        _selftime.child_sums(np.array([0], np.int64), ts, ts, dur, child_ns, has)
    with pytest.raises(ValueError, match="one length"):
        _selftime.child_sums(np.array([0], np.int64), code, ts[:2], dur, child_ns, has)
    assert _selftime.child_sums(np.array([2, 0, 1], np.int64), code, ts, dur, child_ns, has) is True
    # three slices at 0 of 1 ns, tied: each the parent of the next by event_id
    assert child_ns.tolist() == [1, 1, 0] and has.tolist() == [True, True, False]


def test_the_child_sums_window_lets_go_of_what_it_passed():
    # 1M parents in batches of 2^16, as finalize reads them, held nowhere else
    n = 1 << 20

    def batches():
        for start in range(0, n, 1 << 16):
            ids = np.arange(start, start + (1 << 16), dtype=np.int64)
            yield pa.record_batch([pa.array(ids * 2), pa.array(ids)], names=["parent_id", "child_ns"])

    before = pa.total_allocated_bytes()
    children = store._Children(batches())
    # one row group whose ids span every parent: the window is all 16 MiB of them
    got = children.take(pa.array([0, 1, 2 * (n - 1)], pa.int64()))
    assert got.to_pylist() == [0, None, n - 1]
    # a lane's last rows: the window it read must not stay for the lanes after it
    assert pa.total_allocated_bytes() - before < 1 << 20


def _stream(slices: list[tuple[int, int, int]], window: int, feed_rows: int = 5,
            max_bytes: int = 1 << 30) -> tuple[dict[int, int] | None, str]:
    """Slices (thread code, ts, dur), event_id = position, fed to the C
    pass's stream in position order: parent -> summed child time, or None
    and why the stream stopped."""
    stream = _selftime.Stream(window, max_bytes)
    sums: dict[int, int] = {}

    def take():
        eids, ns = (np.frombuffer(b, np.int64).tolist() for b in stream.take())
        assert not set(eids) & set(sums)  # each parent given once
        sums.update(zip(eids, ns))

    for at in range(0, len(slices), feed_rows):
        part = slices[at:at + feed_rows]
        ok = stream.feed(np.array([c for c, _, _ in part], np.int32), np.array([t for _, t, _ in part], np.int64),
                         np.array([d for _, _, d in part], np.int64), np.arange(at, at + len(part), dtype=np.int64))
        if not ok:
            return None, stream.why
        take()
    if not stream.finish():
        return None, stream.why
    take()
    return sums, stream.why


def _farthest(slices: list[tuple[int, int, int]]) -> int:
    """How many places a slice comes after its place in its thread's order
    (start, longer first, position), at most."""
    far = 0
    for code in {c for c, _, _ in slices}:
        given = [i for i, s in enumerate(slices) if s[0] == code]
        order = sorted(given, key=lambda i: (slices[i][1], -slices[i][2], i))
        far = max([far] + [given.index(i) - k for k, i in enumerate(order)])
    return far


@settings(max_examples=200, deadline=None)
@given(slices=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 12)), min_size=20, max_size=60),
       window=st.integers(1, 6), feed_rows=st.integers(1, 7), jitter=st.integers(0, 12))
def test_the_stream_follows_the_rule_within_its_window(slices, window, feed_rows, jitter):
    """Slices listed roughly by start (each moved by up to ``jitter``):
    the stream gives the rule's sums whenever no slice comes more than its
    window after its place, and where it stops, it is for that reason."""
    slices = sorted(slices, key=lambda s: s[1] + (hash(s) % (jitter + 1)))
    got, why = _stream(slices, window, feed_rows)
    rule = _by_rule([("p", str(c), t, d) for c, t, d in slices])
    if got is None:
        assert why == "slices too far from their order"
        assert _farthest(slices) > window
    else:
        assert got == rule and why == ""
    if _farthest(slices) <= window:
        assert got is not None


def test_the_stream_stops_where_it_cannot_finish():
    """Round numbers: a slice 5 places after its order, held with a window
    of 4 (the stream sorts its first 8), solved too soon with a window of 2;
    a fourth thread's slices past the bytes the stream may hold (three
    threads of 64 slices held: 64 x 24 bytes each); a sum past 2^63 - 1.
    Once stopped, it stays stopped."""
    late = [(0, t, 1) for t in (10, 20, 30, 40, 50)] + [(0, 5, 1)]
    assert _stream(late, window=4)[0] == {}
    assert _stream(late, window=2) == (None, "slices too far from their order")
    four = [(c, t, 1) for c in range(4) for t in range(10)]
    assert _stream(four, window=1 << 10, max_bytes=3 * 64 * 24)[1] == "more slices held than max_bytes"
    assert _stream(four, window=1 << 10, max_bytes=4 * 64 * 24) == ({}, "")
    big = 2**62
    over = [(0, 0, 2**63 - 1), (0, 1, big), (0, big + 1, big)]
    assert _stream(over, window=4) == (None, "a sum past 2^63 - 1")
    stream = _selftime.Stream(2, 1 << 20)
    one = [np.zeros(1, np.int32)] + [np.zeros(1, np.int64)] * 3
    # 5 and 6 solved when 4 are held; 1 comes with the next 4
    assert stream.feed(np.zeros(6, np.int32), np.array([5, 6, 7, 8, 1, 9], np.int64),
                       np.ones(6, np.int64), np.arange(6, dtype=np.int64)) is False
    assert stream.feed(*one) is False and stream.finish() is False


def test_the_stream_checks_its_arrays():
    stream = _selftime.Stream(4, 1 << 20)
    ids = np.arange(3, dtype=np.int64)
    with pytest.raises(TypeError, match="code: expected 4-byte integers"):
        stream.feed(ids, ids, ids, ids)
    with pytest.raises(ValueError, match="one length"):
        stream.feed(np.zeros(3, np.int32), ids, ids[:2], ids)
    with pytest.raises(ValueError, match="negative thread code"):
        stream.feed(np.full(3, -1, np.int32), ids, ids, ids)
    with pytest.raises(ValueError, match="window must be positive"):
        _selftime.Stream(0, 1)


def test_staged_sum_runs_merge_in_parent_order(tmp_path):
    """300,000 parents given in a shuffled order, a run of 100,000 staged
    at a time (each run two batches as staged): read back, every parent
    once, in order, with its own sum (10 x its id), from the start at
    each call."""
    ids = np.random.default_rng(5).permutation(300_000).astype(np.int64)
    with _sum_run(100_000):
        runs = store._SumRuns(tmp_path)
        for part in np.array_split(ids, 7):
            runs.add(part.tobytes(), (part * 10).tobytes())
        read = runs.reader()
    assert len(list(tmp_path.glob("child_sums.run*.arrow"))) == 3
    for _ in range(2):
        got = pa.Table.from_batches(list(read()), schema=_SUMS)
        assert got.column("parent_id").to_pylist() == list(range(300_000))
        assert got.column("child_ns").to_pylist() == list(range(0, 3_000_000, 10))


def _json_slices(events: list) -> list[tuple[int, dict]]:
    """json.load's slices, with their event index: ph X with a start, a
    duration of 0 or more, a pid and a tid (the oracle's side of the rule)."""
    from oracle import ts_ns

    return [(i, e) for i, e in enumerate(events)
            if isinstance(e, dict) and e.get("ph") == "X" and e.get("ts") is not None and e.get("dur") is not None
            and e.get("pid") is not None and e.get("tid") is not None and ts_ns(e["dur"]) >= 0]


def _c_slices(path, **split) -> list[tuple[list, list[tuple]]]:
    """Each piece's slices as the C reader gives them (PieceResult.slices):
    its thread list, and rows (pid, tid, ts_ns, dur_ns, event_id)."""
    from tracedb.parse.pieces import SplitParser, parse_piece

    out = []
    for piece in SplitParser(path, **split).pieces():
        threads, thread, ts, dur, event_id = parse_piece(piece).slices
        out.append((threads, [(*threads[k], int(t), int(d), int(i)) for k, t, d, i in zip(thread, ts, dur, event_id)]))
    return out


@pytest.mark.parametrize("rel", ["deepseek/train.json", "hta/nccl_parser_config/nccl_data.json.gz"])
@pytest.mark.parametrize(("in_memory_events", "stream_window"), [(5_000_000, 1 << 14), (5_000_000, 1), (0, 1)],
                         ids=["streamed as parsed", "in memory", "DuckDB"])
def test_real_traces_self_times_follow_the_rule(tmp_path, monkeypatch, rel, in_memory_events, stream_window):
    """Traces no one here wrote (DeepSeek's training trace, an HTA test
    trace with GPU streams and NCCL): every slice's self_ns equals its
    duration less its children's by the rule, computed over json.load's
    events (event order breaks ties), whether the stream solves them as the
    trace is parsed, or (a window too small: Kineto writes a slice when it
    ends, after its children) the trace is sorted in memory or by DuckDB."""
    from collections import Counter

    import tracedb
    from conftest import corpus_file, load_json
    from oracle import ts_ns

    path = corpus_file(rel)
    doc = load_json(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    slices, names = [], []
    for _i, e in _json_slices(events):
        slices.append((str(e["pid"]), str(e["tid"]), ts_ns(e["ts"]), ts_ns(e["dur"])))
        names.append(e.get("name"))
    sums = _by_rule(slices)
    expected = Counter((names[i], s[0], s[1], s[3], s[3] - sums.get(i, 0)) for i, s in enumerate(slices))
    monkeypatch.setattr(store, "IN_MEMORY_EVENTS", in_memory_events)
    monkeypatch.setattr(store, "STREAM_WINDOW", stream_window)
    if stream_window > 1:  # the stream must not stop on a real trace's order
        monkeypatch.setattr(store, "_child_sums_in_memory", lambda *a: pytest.fail("the stream stopped"))
        monkeypatch.setattr(store, "_child_pairs", lambda *a: pytest.fail("the stream stopped"))
    db = tracedb.TraceDB(tmp_path / "wh")
    db.ingest([path], run="r")
    got = Counter(db.sql("SELECT name, pid, tid, dur_ns, self_ns FROM events WHERE ph = 'X'").fetchall())
    assert len(slices) > 1000 and sum(1 for i in sums) > 100
    assert got == expected


@pytest.mark.parametrize("rel", ["deepseek/train.json", "hta/nccl_parser_config/nccl_data.json.gz"])
def test_the_c_reader_gives_each_pieces_slices(rel):
    """The slices the stream takes from the C reader (PieceResult.slices),
    not read back from the staged parts: over pieces of 64 KB, json.load's
    slices (ph X with a start, a duration of 0 or more, a pid and a tid),
    each once, with its event index and its thread as written."""
    from conftest import corpus_file, load_json
    from oracle import ts_ns

    path = corpus_file(rel)
    doc = load_json(path)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    expected = sorted((str(e["pid"]), str(e["tid"]), ts_ns(e["ts"]), ts_ns(e["dur"]), i)
                      for i, e in _json_slices(events))
    got, pieces = [], 0
    for threads, rows in _c_slices(path, piece_bytes=64 << 10):
        assert len(set(threads)) == len(threads)
        got += rows
        pieces += 1
    assert pieces > 10 and len(expected) > 1000
    assert sorted(got) == expected


def test_the_c_reader_tells_many_threads_apart(tmp_path):
    """Threads past the C reader's first table (64 slots), interleaved, as
    integers and as strings ("7" and 7 are one thread, as staged): each
    slice keeps its own (pid, tid)."""
    from conftest import write_trace

    events = [{"ph": "X", "name": "op", "pid": i % 3, "tid": str(i % 500) if i % 2 else i % 500,
               "ts": 10 * i, "dur": 5} for i in range(4000)]
    path = write_trace(tmp_path / "t.json", events)
    got = [row for _threads, rows in _c_slices(path) for row in rows]
    assert sorted(got) == sorted((str(i % 3), str(i % 500), 10_000 * i, 5000, i) for i in range(4000))
    assert len({(p, t) for p, t, *_ in got}) == 1500


def _events_batch(rows: list[tuple[int, int, int]]) -> pa.RecordBatch:
    """Staged events rows (event_id, ts_ns, dur_ns): slices of one thread."""
    from tracedb.schema import SCHEMAS

    schema = SCHEMAS["events"]
    n = len(rows)
    given = {"event_id": [r[0] for r in rows], "ts_ns": [r[1] for r in rows], "dur_ns": [r[2] for r in rows],
             "ph": ["X"] * n, "pid": ["1"] * n, "tid": ["1"] * n}
    return pa.record_batch([pa.array(given[f.name], f.type) if f.name in given else pa.nulls(n, f.type)
                            for f in schema], schema=schema)


def test_pieces_feed_the_stream_in_piece_order(tmp_path, monkeypatch):
    """Pieces finish in any order (2, 1, 0 here; piece 1 staged no events):
    the writer feeds the stream piece 0 first. Round numbers: a slice of
    100 in piece 0 holds the three of 10 in piece 2. With a window of 1,
    piece 2 fed first would have its slices solved before piece 0's parent
    came, and the stream would stop."""
    from tracedb.warehouse import Warehouse

    monkeypatch.setattr(store, "STREAM_WINDOW", 1)
    writer = store.TraceWriter(Warehouse(tmp_path / "wh"))
    rows = {0: [(0, 0, 100)], 2: [(5, 10, 10), (6, 30, 10), (7, 50, 10)]}
    try:
        for number in (2, 1, 0):
            staged = [("events", writer.write_part("events", number, [_events_batch(rows[number])], [0]))
                      ] if number in rows else []
            writer.add_piece(number, staged)
        sums = writer._streamed_sums()
        assert sums is not None
        assert pa.Table.from_batches(list(sums()), schema=_SUMS).to_pydict() == {"parent_id": [0], "child_ns": [30]}
    finally:
        writer.discard()
