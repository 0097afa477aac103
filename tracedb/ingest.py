"""Ingest: discovered files -> parse -> Parquet -> catalog, one file at a time
(or ``jobs`` at a time in worker processes); small files in groups whose
per-trace summaries are computed at once (summary_groups).

Each file is hashed (its id, fileid.py); a file whose content is already in
the warehouse is skipped (a file with the same path, size and mtime as an ingested one is
skipped without hashing). A large file parsed on worker threads is hashed
on a thread while its parse starts; the parse stops if the hash says skip.
A file that fails is recorded in ``traces`` with its error and never stops
the others. Results are registered in the catalog in groups; a trace
becomes visible exactly when its group commits.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import multiprocessing.util
import os
import pickle
import subprocess
import sys
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import duckdb
import pyarrow as pa

from . import summaries
from .catalog import resource_dir
from .discover import TraceFile
from .errors import TraceFormatError, UploadError, WarehouseError
from .fileid import content_ids, has_legacy
from .parse import NotSplittable, Piece, SplitParser, TraceMeta, TraceParser, parse_piece, source
from .parse.values import as_text
from .store import TraceWriter, cannot_write, memory_available, plain_staging_bytes
from .version import __version__
from .views import load_view_files
from .warehouse import Warehouse

# Traces become visible in commits: after this many, or this many seconds
# (the first answers come while a long ingest goes on)...
COMMIT_EVERY_FILES = 64
COMMIT_EVERY_S = 5.0
# ...but a commit lists every trace's files in the catalog anew, so it costs
# more as the warehouse grows (CPU-s: 0.16 at 125 traces, 0.26 at 1,000,
# 1.63 at 10,000; benchmarks/commits.py). The next waits at least this many
# times as long as the last took, so that commits, which compete with the
# workers for the cores, take at most about 5% of this process's time in a
# warehouse of any size: 1,000 small traces into one of 10,000 took 72.6 s
# (133.7 CPU-s), 56.9 (97.3) so and with LocalStorage.location's join as text.
COMMIT_SPACING = 20
# Every file tries the split fast path (parse/pieces.py); the streaming parser
# takes those it declines. A file ingested alone is parsed on worker threads
# from this size (a .gz counts about 10x its own); a smaller one, a few
# pieces, on this thread. Threads cost nothing to start (worker processes
# took 0.4-0.5 s: a lone 69 MB trace staged in 0.88 s on two of them, 0.40
# on two threads); a 20 MB trace stages as fast on two threads as on this
# one (0.09-0.33 s against 0.13-0.18).
WORKERS_MIN_BYTES = 16 << 20
# An ingest into a new warehouse makes its first commit (the view library,
# about 1 s of a core) while the first traces are read, where a core is often
# idle. Up to this much JSON, on a thread; DuckDB then leaves about 40 MiB
# with the process until it ends (the peak of a 1 GiB trace went from 470
# to 580-610 MiB). Above it, in a process of its own, which takes 0.3 s more
# to start and gives all its memory back as it exits, before the parse ends
# (a 1 GiB trace: 1.1-1.4 s sooner). Traces ingested by --jobs workers: on a
# thread, as this process only waits.
EARLY_COMMIT_THREAD_MAX_BYTES = 256 << 20
# Traces of up to this much JSON are ingested in groups of up to
# SUMMARY_GROUP_TRACES whose summaries are computed at once
# (Summarizer.compute_many): a 10 MB trace's twelve statements are mostly
# planned and started, not run. A group of tiny traces takes more, up to
# SUMMARY_GROUP_MAX_TRACES while their JSON is under SUMMARY_GROUP_BYTES:
# the statements' planning is then nearly all of it (1,000 traces of 20
# events on two workers: 26.9 s against 32.8 in groups of 8).
SUMMARY_GROUP_MAX_BYTES = 32 << 20
SUMMARY_GROUP_TRACES = 8
SUMMARY_GROUP_BYTES = 8 << 20
SUMMARY_GROUP_MAX_TRACES = 64


@dataclass
class FileResult:
    """What happened to one file."""

    path: str
    run: str
    rank: int
    phase: str
    status: str  # "ok", "failed" or "skipped"
    file_id: str | None = None
    error: str | None = None
    event_count: int = 0
    bytes: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    row: dict | None = None  # the traces row to register


@dataclass
class IngestReport:
    results: list[FileResult] = field(default_factory=list)
    seconds: float = 0.0
    # Traces in the warehouse with stale summaries (Catalog.stale_summaries)
    # as the ingest's last commit left it; None where it committed nothing.
    stale_summaries: int | None = None

    def _with(self, status: str) -> list[FileResult]:
        return [r for r in self.results if r.status == status]

    @property
    def ingested(self) -> list[FileResult]:
        return self._with("ok")

    @property
    def skipped(self) -> list[FileResult]:
        return self._with("skipped")

    @property
    def failed(self) -> list[FileResult]:
        return self._with("failed")

    @property
    def event_count(self) -> int:
        return sum(r.event_count for r in self.ingested)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.ingested)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        """One line: what was ingested, how fast, what was skipped or failed."""
        return (f"Ingested {len(self.ingested)} file(s): {self.event_count:,} events, "
                f"{self.bytes / 1e6:,.1f} MB in {self.seconds:.1f} s ({self.mb_per_s:,.1f} MB/s); "
                f"skipped {len(self.skipped)} already ingested; {len(self.failed)} failed.")


def _row(tf: TraceFile, file_id: str, status: str, error: str | None, meta=None,
         files: dict | None = None, seconds: float = 0.0) -> dict:
    row = {
        "file_id": file_id, "run": tf.run, "rank": tf.rank, "phase": tf.phase,
        "status": status, "error": error, "source_path": str(tf.path),
        "source_bytes": tf.size_bytes, "source_mtime_ns": tf.mtime_ns,
        "rank_source": tf.rank_source, "tracedb_version": __version__,
        "ingest_seconds": seconds,
        "ingested_at": datetime.now(timezone.utc),
        "files": json.dumps(files) if files else None,
    }
    if meta is not None:
        shift = meta.base_time_ns or 0
        row.update({
            "form": meta.form,
            "json_event_count": meta.json_event_count,
            "event_count": meta.event_count,
            "flow_count": meta.flow_count,
            "counter_count": meta.counter_count,
            "unmatched_begin_count": meta.unmatched_begin,
            "unmatched_end_count": meta.unmatched_end,
            "ts_min_ns": None if meta.ts_min_ns is None else meta.ts_min_ns + shift,
            "ts_max_ns": None if meta.ts_max_ns is None else meta.ts_max_ns + shift,
            "base_time_ns": meta.base_time_ns,
            "distributed_info": json.dumps(meta.distributed_info) if meta.distributed_info is not None else None,
            "device_properties": json.dumps(meta.device_properties) if meta.device_properties is not None else None,
            "trace_name": meta.trace_name,
            "display_time_unit": meta.display_time_unit,
            "schema_version": as_text(meta.schema_version),
            "metadata": json.dumps(meta.other, default=str),
            "warnings": "; ".join(meta.warnings) or None,
        })
    return row


def _json_bytes(tf: TraceFile) -> int:
    """About how much JSON the file holds (a .gz about 10x its size)."""
    return tf.size_bytes * (10 if tf.path.name.endswith(".gz") else 1)


def _workers_worthy(tf: TraceFile) -> bool:
    """Large enough for parse workers."""
    return _json_bytes(tf) >= WORKERS_MIN_BYTES


def _parse_piece_to_parts(piece: Piece, path: str, writer: TraceWriter):
    """Parse one piece, stage its rows as parts."""
    res = parse_piece(piece, path)
    by_table: dict[str, list] = {}
    for table, batch in res.batches:
        by_table.setdefault(table, []).append(batch)
    parts = [(table, writer.write_part(table, piece.number, batches, res.event_lanes if table == "events" else None))
             for table, batches in by_table.items()]
    res.batches = []
    return res, piece.number, parts


class Stopped(Exception):
    """The parse was stopped: ``stop()`` said the file is not to be ingested."""


def _never() -> bool:
    return False


def _unless_stopped(items: Iterator, stop: Callable[[], bool]) -> Iterator:
    """``items``, raising Stopped before the next one once ``stop()`` is
    true. It keeps no reference to an item it gave: a piece is freed
    as soon as the caller lets go of it."""
    items = iter(items)
    while True:
        if stop():
            raise Stopped
        try:
            yield next(items)
        except StopIteration:
            return


def _parse_split(path: Path, writer: TraceWriter, workers: int, stop: Callable[[], bool]) -> TraceMeta:
    """The split fast path: pieces parsed here (workers=1) or on ``workers``
    threads, each staging its own parts, while this thread cuts the next
    pieces. The C reader and the part writer let go of the GIL, so threads
    parse in parallel, with no process to start and no piece to send (a
    piece the C reader declines is read by Python: in turn with the
    others). Raises NotSplittable, or Stopped when ``stop()`` turns true
    between pieces."""
    sp = SplitParser(path)

    def staged(res, number, parts) -> None:
        sp.add(res)
        writer.add_piece(number, parts, res.slices)

    if workers <= 1:
        # Parts here too: finalize then sorts each piece on its own, not the trace.
        for piece in _unless_stopped(sp.pieces(), stop):
            staged(*_parse_piece_to_parts(piece, str(path), writer))
        sp.finish()
        return sp.meta
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: set = set()

        def collect() -> None:
            nonlocal pending
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                staged(*f.result())

        try:
            for piece in _unless_stopped(sp.pieces(), stop):
                pending.add(pool.submit(_parse_piece_to_parts, piece, str(path), writer))
                del piece
                while len(pending) > workers:
                    collect()
            while pending:
                collect()
        except BaseException:
            for f in pending:
                f.cancel()
            raise
    sp.finish()
    return sp.meta


def stage(path: Path, warehouse: Warehouse, workers: int,
          stop: Callable[[], bool] = _never, plain_bytes: int = 0) -> tuple[TraceMeta, TraceWriter]:
    """Parse a trace into a new writer's staging folder: the split fast path
    (on ``workers`` threads; its first ``plain_bytes`` of rows staged
    uncompressed), or when it declines, the streaming parser.
    Raises Stopped as soon as ``stop()`` is true (it is asked between pieces
    and batches). The caller sets the writer's file_id, then finalizes or
    discards it; on an error it is discarded here."""
    writer = TraceWriter(warehouse, plain_bytes)
    try:
        try:
            return _parse_split(path, writer, workers, stop), writer
        except NotSplittable:
            # The streaming parser is the reference: it takes the file.
            writer.discard()
            writer = TraceWriter(warehouse)
        parser = TraceParser(path)
        for table, batch in _unless_stopped(parser.batches(), stop):
            writer.write(table, batch)
        return parser.meta, writer
    except BaseException:
        writer.discard()
        raise


_Staged = tuple[TraceMeta, TraceWriter] | Exception | None
# Errors a file's content causes: they fail that file only (the library
# calls too, when the file's values break them).
_FILE_ERRORS = (TraceFormatError, duckdb.Error, pa.ArrowException)


def _stage_while_hashing(tf: TraceFile, warehouse: Warehouse, hashed: Future, known_ids: frozenset[str],
                         workers: int, plain_bytes: int) -> _Staged:
    """stage()'s outcome: its result, the error it raised on the file (for
    the caller to raise once the hash is in), or None when the hash says
    the file is known or cannot be read (nothing it staged is kept)."""
    def stop() -> bool:
        return hashed.done() and (hashed.exception() is not None or not known_ids.isdisjoint(hashed.result()))

    if not _workers_worthy(tf):
        workers = 1
    if workers <= 1:
        # Only a parse by workers starts before the hash is in: they take
        # both cores, where the hash alone would leave one idle (a 1 GiB
        # trace: 0.7 s sooner). Elsewhere the hash comes first, as a
        # known file's skip should cost no more than its hash.
        wait([hashed])
    if stop():
        return None
    try:
        staged = stage(tf.path, warehouse, workers, stop, plain_bytes)
    except Stopped:
        return None
    except _FILE_ERRORS as e:
        return e
    wait([hashed])
    if stop():  # the hash came in after the last piece
        staged[1].discard()
        return None
    return staged


def new_summarizer(warehouse: Warehouse, threads: int) -> summaries.Summarizer:
    """The summaries of one ingest (process): the library bound once."""
    return summaries.Summarizer(warehouse, load_view_files(resource_dir("queries")),
                                warehouse.staging_path(f"summaries.{uuid.uuid4().hex[:8]}"), threads=threads)


def ingest_file(warehouse: Warehouse, tf: TraceFile, summarizer: summaries.Summarizer,
                known_ids: frozenset[str] = frozenset(), threads: int = 1, workers: int = 1,
                plain_bytes: int = 0) -> FileResult:
    """Parse, write and publish one file (not yet registered in the catalog).
    A large file is parsed on ``workers`` threads while it is hashed; up to
    ``plain_bytes`` of its rows are staged uncompressed (plain_staging_bytes).
    A file whose content ``known_ids`` holds under its id (or under its
    BLAKE2b id, in a warehouse made before xxh3) is skipped."""
    return ingest_files(warehouse, [tf], summarizer, known_ids, threads, workers, plain_bytes)[0]


def ingest_files(warehouse: Warehouse, tfs: list[TraceFile], summarizer: summaries.Summarizer,
                 known_ids: frozenset[str] = frozenset(), threads: int = 1, workers: int = 1,
                 plain_bytes: int = 0, let_go: bool = False) -> list[FileResult]:
    """``ingest_file`` for each of ``tfs``, one after the other, but for
    their summaries: computed at once for those that reach them
    (``Summarizer.compute_many``; small traces, summary_groups), each alone
    where that fails, so that an error is the trace's own. With ``let_go``,
    each file's pages leave the page cache once it is read (reads_past_cache)."""
    results: list[FileResult] = []
    ready: list[_Finalized] = []
    try:
        for tf in tfs:
            r = _finalized(warehouse, tf, known_ids, threads, workers, plain_bytes, let_go)
            if isinstance(r, _Finalized):
                ready.append(r)
                results.append(r.result)  # filled in once published
            else:
                results.append(r)
        for r, made in zip(ready, _summaries(summarizer, ready), strict=True):
            _publish(warehouse, r, made, summarizer.fingerprint)
    finally:
        for r in ready:
            r.writer.discard()
    return results


@dataclass
class _Finalized:
    """A trace parsed and finalized: its final files wait for their summaries."""

    tf: TraceFile
    result: FileResult
    meta: TraceMeta
    writer: TraceWriter
    seconds: float  # spent on it so far


def _finalized(warehouse: Warehouse, tf: TraceFile, known_ids: frozenset[str], threads: int, workers: int,
               plain_bytes: int, let_go: bool) -> _Finalized | FileResult:
    """A file hashed, parsed and finalized; or its result, where it is
    skipped or has failed."""
    t0 = time.perf_counter()
    result = FileResult(path=str(tf.path), run=tf.run, rank=tf.rank, phase=tf.phase,
                        status="failed", bytes=tf.size_bytes)
    with ThreadPoolExecutor(max_workers=1) as hasher:
        hashed = hasher.submit(content_ids, tf.path, has_legacy(known_ids))
        staged = _stage_while_hashing(tf, warehouse, hashed, known_ids, workers, plain_bytes)
    if let_go:  # hashed and parsed: read for the last time
        source.let_go(tf.path)
    try:
        ids = hashed.result()
    except OSError as e:
        file_id = "unreadable-" + hashlib.blake2b(str(tf.path).encode(), digest_size=8).hexdigest()
        result.file_id = file_id
        result.error = f"{tf.path}: cannot read: {e.strerror or e}"
        result.row = _row(tf, file_id, "failed", result.error)
        return result
    known = [i for i in ids if i in known_ids]
    file_id = result.file_id = known[0] if known else ids[0]
    if known:
        result.status = "skipped"
        return result
    writer: TraceWriter | None = None
    try:
        if isinstance(staged, Exception):
            raise staged
        assert staged is not None  # stop() is true only for a known or unreadable file
        meta, writer = staged
        writer.file_id = file_id
        if meta.distributed_info:
            tf.resolve_rank(meta.distributed_info.get("rank"))
        writer.finalize(meta.base_time_ns or 0, meta.json_event_count, threads=threads)
        finalized = _Finalized(tf, result, meta, writer, time.perf_counter() - t0)
        writer = None  # the caller's now
        return finalized
    except (*_FILE_ERRORS, UploadError) as e:
        return _failed(tf, result, e, time.perf_counter() - t0)
    finally:
        if writer is not None:
            writer.discard()


def _failed(tf: TraceFile, result: FileResult, e: Exception, seconds: float) -> FileResult:
    if isinstance(e, TraceFormatError):
        result.error = str(e)
    elif isinstance(e, UploadError):
        result.error = f"{tf.path}: {e}"
    else:
        result.error = f"{tf.path}: cannot ingest: {type(e).__name__}: {str(e).splitlines()[0]}"
    result.status = "failed"
    result.seconds = seconds
    result.row = _row(tf, result.file_id, "failed", result.error, seconds=seconds)
    return result


def _summaries(summarizer: summaries.Summarizer,
               ready: list[_Finalized]) -> list[dict[str, Path | None] | Exception]:
    """The summaries of each trace (view -> file), or what computing them
    raised (_FILE_ERRORS) on that trace alone; each trace's time grows by
    its share."""
    def spec(r: _Finalized) -> summaries.TraceFiles:
        info = r.meta.distributed_info
        return summaries.TraceFiles(r.writer.final, r.writer.dir, r.result.file_id, r.tf.run, r.tf.rank, r.tf.phase,
                                    json.dumps(info) if info is not None else None)

    t0 = time.perf_counter()
    if len(ready) > 1 and len({r.result.file_id for r in ready}) == len(ready):
        try:
            together = summarizer.compute_many([spec(r) for r in ready])
        except Exception:  # noqa: BLE001 - whatever failed the group: each trace alone, below, says whose it is
            pass
        else:
            for r in ready:
                r.seconds += (time.perf_counter() - t0) / len(ready)
            return list(together)
    made: list[dict[str, Path | None] | Exception] = []
    for r in ready:
        t1 = time.perf_counter()
        t = spec(r)
        try:
            made.append(summarizer.compute(t.tables, t.out_dir, file_id=t.file_id, run=t.run, rank=t.rank,
                                           phase=t.phase, distributed_info=t.distributed_info))
        except _FILE_ERRORS as e:
            made.append(e)
        r.seconds += time.perf_counter() - t1
    return made


def _publish(warehouse: Warehouse, r: _Finalized, made: dict[str, Path | None] | Exception,
             fingerprint: str | None) -> None:
    """Publish a finalized trace's files and summaries (``made``), or record
    why it failed; fills in its result."""
    t0 = time.perf_counter()
    tf, result = r.tf, r.result
    try:
        if isinstance(made, Exception):
            raise made
        files = r.writer.publish(tf.run, tf.rank, tf.phase)
        try:
            summary_files = summaries.publish(warehouse, made, tf.run, tf.rank, tf.phase, result.file_id)
        except (OSError, UploadError) as e:
            for key in files.values():
                warehouse.storage.remove(key)
            if isinstance(e, UploadError):
                raise
            raise cannot_write(warehouse, e) from None
    except (*_FILE_ERRORS, UploadError) as e:
        _failed(tf, result, e, r.seconds + time.perf_counter() - t0)
        return
    result.status = "ok"
    result.rank = tf.rank
    result.event_count = r.meta.event_count
    result.warnings = r.meta.warnings
    result.seconds = r.seconds + time.perf_counter() - t0
    result.row = _row(tf, result.file_id, "ok", None, r.meta, files, result.seconds)
    result.row["summaries"] = json.dumps(summary_files)
    result.row["summaries_fingerprint"] = fingerprint


_worker_summarizer: summaries.Summarizer | None = None


def _ingest_in_worker(warehouse: Warehouse, tfs: list[TraceFile], known_ids: frozenset[str],
                      plain_bytes: int, let_go: bool) -> list[FileResult]:
    """``ingest_files`` in a ``--jobs`` worker process, with one summarizer
    for the traces it ingests, closed (its spill folder removed) as the
    process exits."""
    global _worker_summarizer
    if _worker_summarizer is None:
        _worker_summarizer = new_summarizer(warehouse, threads=1)
        multiprocessing.util.Finalize(None, _worker_summarizer.close, exitpriority=10)
    return ingest_files(warehouse, tfs, _worker_summarizer, known_ids, plain_bytes=plain_bytes, let_go=let_go)


def summary_groups(files: list[TraceFile], jobs: int) -> list[list[TraceFile]]:
    """The files, in their order, as the groups ``ingest_files`` takes: a
    trace of more than SUMMARY_GROUP_MAX_BYTES of JSON alone, the smaller
    ones together, up to SUMMARY_GROUP_TRACES a group (more, up to
    SUMMARY_GROUP_MAX_TRACES, while the group's JSON is under
    SUMMARY_GROUP_BYTES) and no more than gives each of ``jobs`` workers a
    group."""
    small = sum(1 for tf in files if _json_bytes(tf) <= SUMMARY_GROUP_MAX_BYTES)
    most = max(1, min(SUMMARY_GROUP_MAX_TRACES, -(-small // max(1, jobs))))
    size = min(SUMMARY_GROUP_TRACES, most)
    groups: list[list[TraceFile]] = []
    group: list[TraceFile] = []
    group_bytes = 0
    for tf in files:
        if _json_bytes(tf) > SUMMARY_GROUP_MAX_BYTES:
            groups.append([tf])
            continue
        group.append(tf)
        group_bytes += _json_bytes(tf)
        if len(group) == most or (len(group) >= size and group_bytes >= SUMMARY_GROUP_BYTES):
            groups.append(group)
            group, group_bytes = [], 0
    if group:
        groups.append(group)
    return groups


def run_ingest(warehouse: Warehouse | str | os.PathLike, files: list[TraceFile], jobs: int = 1,
               on_result: Callable[[FileResult], None] | None = None,
               on_wait: Callable[[str], None] | None = None) -> IngestReport:
    """Ingest ``files`` into the warehouse; returns what happened to each."""
    t0 = time.perf_counter()
    wh = Warehouse.of(warehouse)
    wh.create()
    # Shared with other ingests, exclusive against `tracedb check`; when no
    # other ingest runs, what killed ones left in staging goes first.
    with wh.ingesting(on_wait):
        return _ingest_files(wh, files, jobs, on_result, on_wait, t0)


def _ingest_files(warehouse: Warehouse, files: list[TraceFile], jobs: int,
                  on_result: Callable[[FileResult], None] | None,
                  on_wait: Callable[[str], None] | None, t0: float) -> IngestReport:
    known_ids, known_paths = warehouse.known()
    report = IngestReport()
    pending: list[TraceFile] = []
    for tf in files:
        if (str(tf.path), tf.size_bytes, tf.mtime_ns) in known_paths:
            r = FileResult(path=str(tf.path), run=tf.run, rank=tf.rank, phase=tf.phase,
                           status="skipped", file_id=known_paths[(str(tf.path), tf.size_bytes, tf.mtime_ns)],
                           bytes=tf.size_bytes)
            report.results.append(r)
            if on_result:
                on_result(r)
        else:
            pending.append(tf)

    with ThreadPoolExecutor(max_workers=1) as thread:
        # A new warehouse's first commit applies the view library: made
        # empty while the first traces are read (EARLY_COMMIT_THREAD_MAX_BYTES),
        # so that the commits of traces need not.
        first = _early_commit(warehouse, pending, jobs, thread, on_wait)
        _ingest_pending(warehouse, pending, jobs, known_ids, report, first, on_result, on_wait)
    report.seconds = time.perf_counter() - t0
    return report


def _early_commit(warehouse: Warehouse, pending: list[TraceFile], jobs: int, thread: ThreadPoolExecutor,
                  on_wait: Callable[[str], None] | None) -> Future | None:
    """A new warehouse's first commit, started on ``thread`` (itself or in a
    process it waits for; EARLY_COMMIT_THREAD_MAX_BYTES says which); None
    where the catalog exists or there is nothing to ingest."""
    if not pending or warehouse.catalog.exists():
        return None
    in_workers = jobs > 1 and len(pending) > 1
    if in_workers or sum(map(_json_bytes, pending)) <= EARLY_COMMIT_THREAD_MAX_BYTES:
        return thread.submit(warehouse.commit_empty, on_wait)
    return thread.submit(_empty_commit_in_process, warehouse)


# What the process of _empty_commit_in_process runs: the warehouse comes
# pickled on its stdin (from this process: trusted). A plain subprocess, not
# multiprocessing's spawn, whose resource tracker would stay for the whole
# ingest (12 MiB); with -P, so that a folder named tracedb in the current
# directory is not what it imports. It imports what the warehouse needs, not
# the parse and the writer (tracedb.ingest): 18 MiB less beside the parse.
_FIRST_COMMIT = "import pickle, sys; pickle.load(sys.stdin.buffer).commit_empty()"


def _empty_commit_in_process(warehouse: Warehouse) -> None:
    """``Warehouse.commit_empty`` in a process of its own. It says nothing of a wait
    for another writer's lock: the traces' commit waits after it, and says."""
    done = subprocess.run([sys.executable, "-P", "-c", _FIRST_COMMIT], input=pickle.dumps(warehouse), check=False)
    if done.returncode != 0:  # it raised what a thread would have raised (on its stderr)
        raise WarehouseError(f"{warehouse}: the first commit's process failed (exit code {done.returncode})")


def reads_past_cache(files: list[TraceFile], available: int | None) -> bool:
    """Whether an ingest of ``files`` reads more than half the memory
    ``available`` (store.memory_available): then each file's pages are let
    go from the page cache once it is read (parse.source.let_go). Kept, they
    would fill it, and the kernel would take memory back from it for every
    new page of the next files, the pieces and the final files: the bench's
    128 rank files (24.2 GB on a 23.5 GiB machine) went in in 81-84 s and
    153-158 CPU-s, against 84-112 s and 160-201 CPU-s with their pages kept
    (`benchmarks/ab.py`, 5 rounds). A file read again soon (an ingest of
    one trace, or of a few) keeps them."""
    return available is not None and sum(tf.size_bytes for tf in files) > available // 2


def commit_due(traces: int, since_s: float, last_cost_s: float) -> bool:
    """Whether ``traces`` uncommitted traces are committed now, ``since_s``
    seconds after the last commit ended, which took ``last_cost_s``."""
    return (traces > 0 and (traces >= COMMIT_EVERY_FILES or since_s >= COMMIT_EVERY_S)
            and since_s >= COMMIT_SPACING * last_cost_s)


def _ingest_pending(warehouse: Warehouse, pending: list[TraceFile], jobs: int,
                    known_ids: frozenset[str], report: IngestReport, first: Future | None,
                    on_result: Callable[[FileResult], None] | None,
                    on_wait: Callable[[str], None] | None) -> None:
    uncommitted: list[FileResult] = []
    last_commit = time.monotonic()
    last_cost = 0.0

    def commit() -> float:
        """Commit the uncommitted; returns how long it took (the new
        warehouse's first commit, waited for here, not counted)."""
        if first is not None:
            first.result()
        t0 = time.monotonic()
        warehouse.register([r.row for r in uncommitted], on_wait)
        report.stale_summaries = warehouse.catalog.committed_stale
        uncommitted.clear()
        return time.monotonic() - t0

    def done(r: FileResult) -> None:
        nonlocal last_commit, last_cost
        report.results.append(r)
        if r.row is not None:
            uncommitted.append(r)
        if on_result:
            on_result(r)
        if commit_due(len(uncommitted), time.monotonic() - last_commit, last_cost):
            last_cost = commit()
            last_commit = time.monotonic()

    # One trace's pieces are staged at a time in each process: each has its
    # share of what the kernel keeps in memory unwritten.
    plain_bytes = plain_staging_bytes()
    let_go = reads_past_cache(pending, memory_available())
    try:
        if jobs <= 1 or len(pending) <= 1:
            threads = max(1, os.cpu_count() or 1) if len(pending) == 1 else 1
            workers = jobs if len(pending) == 1 else 1
            with new_summarizer(warehouse, threads) as summarizer:
                for group in summary_groups(pending, 1):
                    for r in ingest_files(warehouse, group, summarizer, known_ids, threads, workers, plain_bytes,
                                          let_go):
                        done(r)
        else:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
                # The largest first: a large trace last would be left to
                # one core at the end, the others idle.
                largest_first = sorted(pending, key=_json_bytes, reverse=True)
                futures = {pool.submit(_ingest_in_worker, warehouse, group, known_ids, plain_bytes // jobs, let_go)
                           for group in summary_groups(largest_first, jobs)}
                while futures:
                    finished, futures = wait(futures, return_when=FIRST_COMPLETED)
                    for f in finished:
                        for r in f.result():
                            done(r)
    finally:
        if uncommitted:
            commit()
