"""The warehouse: the one owner of its layout, its lock files, its storage and
its registry of traces.

::

    <warehouse>/                      default ./tracedb, or --warehouse / TRACEDB_WAREHOUSE
      tracedb.duckdb                  the catalog (catalog.py)
      .tracedb.duckdb.<pid>.tmp       a catalog writer's private copy
      .tracedb.lock                   held while a catalog copy is swapped in
      .tracedb.ingest.lock            shared by ingests, exclusive for check / remove
      .staging/                       what running ingests write before they publish
      .serve/                         the SQL server's links to catalog snapshots
      comm_patterns.csv               the user's communication kernels (optional)
      events/run=<run>/rank=<rank>/phase=<phase>/<file_id>.parquet
      flows/...  counters/...         (the same partitions)
      summaries/<view>/run=<run>/rank=<rank>/phase=<phase>/<file_id>.parquet
      run_tags/run=<run>/tags.parquet

Every other module asks this one for a path or a name; none builds one.

Two kinds of files, two interfaces. The published files (the Parquet of
traces, summaries and tags: what the catalog lists) are named by *key*, a
'/'-separated path relative to the warehouse, and reached only through a
``Storage``: ``LocalStorage``, a folder, or ``ObjectStorage``
(objectstore.py) for a warehouse named by a URL. The working files (the
catalog, its copies, the lock files, the staging area, the server's links)
are local paths: DuckDB writes its catalog in place, ``flock`` locks a local
file, and an ingest stages on local disk before it publishes.

A warehouse at a URL (``s3://bucket/prefix``) has the same layout in the
bucket, the catalog included (``<prefix>/tracedb.duckdb``, the source of
truth), plus ``.tracedb/ingests/<host>.<pid>.<n>``, an object per running
ingest (``running_ingests``); its working files are in a folder of each machine
(``cache_root``)::

    ~/.cache/tracedb/warehouses/<bucket_prefix>-<hash>/
      tracedb.<version>.duckdb        the bucket's catalog as fetched, by its ETag
      .tracedb.duckdb.<pid>.<n>.fetch a reader's fetch in progress
      .tracedb.duckdb.<pid>.tmp  .tracedb.lock  .tracedb.ingest.lock  .staging/  .serve/

The registry of traces is the catalog's ``traces`` table: ``known`` (what is
ingested), ``register`` (record a group of results in one atomic swap) and
``unregister`` (take traces out of the catalog, then their files off the
storage). ``commit`` is the one way to change it: in a bucket, a swap is a
conditional write, and a writer that another overtook redoes its change.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import random
import re
import shutil
import socket
import threading
import time
import uuid
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Iterator, Protocol, TypeVar

from .errors import CommitConflict, WarehouseError
from .objectstore import ObjectStorage

if TYPE_CHECKING:
    import duckdb

    from .catalog import Catalog

T = TypeVar("T")
# Commits of an object-store warehouse that another writer overtook are
# redone on the catalog it committed, up to this many times.
COMMIT_TRIES = 8

OnWait = Callable[[str], None] | None

DEFAULT_WAREHOUSE = "tracedb"
WAREHOUSE_ENV = "TRACEDB_WAREHOUSE"

# Local working files.
CATALOG_NAME = "tracedb.duckdb"
LOCK_NAME = ".tracedb.lock"
INGEST_LOCK_NAME = ".tracedb.ingest.lock"
STAGING = ".staging"
COMM_PATTERNS_CSV = "comm_patterns.csv"

# Published files: the tables (the schema of each is schema.SCHEMAS[name]),
# the per-trace summaries and the runs' tags.
TABLES = ("events", "flows", "counters")
SUMMARY_DIR = "summaries"
TAGS_DIR = "run_tags"
TAGS_FILE = "tags.parquet"
PARQUET = ".parquet"

# In an object store, where a lock file cannot keep `tracedb check --repair`
# on one machine from an ingest on another: an object per running ingest,
# rewritten every INGEST_HEARTBEAT_S. One not rewritten for INGEST_STALE_S
# is a killed ingest's (debris that --repair removes).
INGESTS_DIR = ".tracedb/ingests"
INGEST_HEARTBEAT_S = 30.0
INGEST_STALE_S = 300.0


def default_root() -> str:
    """The warehouse when none is named: $TRACEDB_WAREHOUSE, else ./tracedb."""
    return os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE


_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_url(name: str | os.PathLike) -> bool:
    """Whether a warehouse name is a URL (s3://bucket/prefix), not a folder."""
    return isinstance(name, str) and bool(_URL.match(name))


# DuckDB reads a published file's run, rank and phase from the Hive
# partitions of its path (views.HIVE_OPTIONS), every folder of it, the
# first of a name winning: a warehouse under /data/run=old/ would give every
# trace the run "old".
_PARTITION_FOLDER = re.compile(r"^(run|rank|phase)=", re.IGNORECASE)


def _check_location(location: str) -> None:
    """Refuse a warehouse whose path has a folder named as a partition."""
    for folder in location.split("/"):
        if _PARTITION_FOLDER.match(folder):
            raise WarehouseError(f"{location}: a warehouse cannot be under a folder named {folder}: DuckDB "
                                 f"would read it as every trace's {folder.split('=')[0].lower()} (a Hive "
                                 "partition); choose a path without run=, rank= or phase= folders")


def cache_root(url: str) -> Path:
    """The local working folder of a warehouse at ``url`` on this machine
    (its catalog's cached copy, locks, staging): under $XDG_CACHE_HOME (else
    ~/.cache)/tracedb, one per URL and endpoint."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracedb" / "warehouses"
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    digest = hashlib.blake2b(f"{url}\n{endpoint}".encode(), digest_size=6).hexdigest()
    return base / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', url.partition('://')[2])[:80]}-{digest}"


def trace_files(files_json: str | None, summaries_json: str | None) -> list[str]:
    """The keys of a traces row's published files (data and summaries), from
    its ``files`` and ``summaries`` columns (JSON: table or view -> key; a
    summary without rows is null, no file)."""
    return [key for listed in (files_json, summaries_json) for key in json.loads(listed or "{}").values()
            if key is not None]


class Storage(Protocol):
    """What the warehouse does to its published files, each named by a key
    (a '/'-separated path relative to the warehouse)."""

    def location(self, key: str) -> str:
        """What a reader (DuckDB, pyarrow) opens: a path or a URL."""

    def exists(self, key: str) -> bool:
        """Whether a file is stored at ``key``."""

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        """The file at ``key``, to read."""

    def put(self, src: Path, key: str) -> None:
        """Publish the local file ``src`` at ``key``, atomically: a reader
        sees the old file or the new one, never part of one. ``src`` goes."""

    def list(self, prefix: str) -> list[str]:
        """The keys of every file under ``prefix`` (a folder), sorted."""

    def remove(self, key: str) -> None:
        """Remove the file at ``key``; none there is no error."""

    def prune(self, prefix: str) -> None:
        """Remove the empty folders under ``prefix`` (object stores have none)."""


class LocalStorage:
    """A warehouse in a local folder."""

    def __init__(self, root: Path):
        self.root = root
        self._prefix = os.path.join(root, "")

    def _path(self, key: str) -> Path:
        return self.root / key

    def location(self, key: str) -> str:
        # Joined as text, not through pathlib (20 us a key: a commit lists
        # every trace's files, at 10,000 traces 1.6 of its 2 CPU-s). Keys
        # are the warehouse's own relative paths (Warehouse.data_key), so
        # both give the same string.
        return self._prefix + key

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        return open(self._path(key), mode)  # noqa: SIM115 - the caller closes it

    def put(self, src: Path, key: str) -> None:
        dst = self._path(key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)

    def list(self, prefix: str) -> list[str]:
        top = self._path(prefix)
        if not top.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in top.rglob("*") if not p.is_dir())

    def remove(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def prune(self, prefix: str) -> None:
        top = self._path(prefix)
        dirs = [d for d in top.rglob("*") if d.is_dir()] if top.is_dir() else []
        for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
            try:
                d.rmdir()
            except OSError:
                pass  # not empty


@contextmanager
def _flock(path: Path, mode: int, on_wait: OnWait, message: str, *, read_only_ok: bool = False,
           when_alone: Callable[[], None] | None = None) -> Iterator[None]:
    """The one lock helper: hold the lock file ``path`` (``fcntl.LOCK_SH`` or
    ``LOCK_EX``) for the block, telling on_wait when it has to wait. First,
    ``when_alone`` runs if no one else holds the file at all. On a read-only
    file system with read_only_ok, nothing is locked: no one can write there.
    flock locks go with the process: a killed one releases them."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        if read_only_ok and e.errno == errno.EROFS:
            yield
            return
        raise WarehouseError(f"{path.parent}: cannot write the warehouse: {e.strerror or e}") from None
    try:
        if when_alone is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                when_alone()
        # (a conversion from exclusive is not atomic: another may come in between)
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait:
                on_wait(message)
            fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


class Warehouse:
    """One warehouse: its layout, locks, storage and registry of traces."""

    def __init__(self, root: str | os.PathLike | None = None, storage: Storage | None = None):
        name = root if root is not None else default_root()
        self.url: str | None = None
        if is_url(name):
            # The published files and the catalog are in the object store;
            # the working files in a local folder of this machine.
            remote = ObjectStorage(str(name))
            self.url = remote.url
            self.root = cache_root(self.url)
            self.storage: Storage = storage if storage is not None else remote
        else:
            self.root = Path(name).expanduser().absolute()
            self.storage = storage if storage is not None else LocalStorage(self.root)
        for location in {str(self), self.root.as_posix()}:  # the published files; what is staged
            _check_location(location)
        self._catalog: Catalog | None = None

    @classmethod
    def of(cls, warehouse: Warehouse | str | os.PathLike) -> Warehouse:
        return warehouse if isinstance(warehouse, Warehouse) else cls(warehouse)

    def __str__(self) -> str:
        return self.url or str(self.root)

    def __repr__(self) -> str:
        return f"Warehouse({str(self)!r})"

    @property
    def remote(self) -> ObjectStorage | None:
        """The object store of a warehouse at a URL (None for a folder)."""
        return self.storage if isinstance(self.storage, ObjectStorage) else None

    def attach(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """Let a DuckDB connection read the published files (an object
        store's through its filesystem); returns it."""
        if self.remote is not None:
            self.remote.register(con)
        return con

    # -- local working files -----------------------------------------------

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_NAME

    def catalog_copy(self) -> Path:
        """This process's private copy of the catalog, while it writes."""
        return self.root / f".{CATALOG_NAME}.{os.getpid()}.tmp"

    def catalog_copies(self) -> list[Path]:
        """Every catalog copy there is (with their DuckDB WAL files)."""
        return sorted(self.root.glob(f".{CATALOG_NAME}.*.tmp*"))

    def cached_catalog(self, version: str) -> Path:
        """An object store's catalog at ``version``, fetched to this machine."""
        return self.root / f"tracedb.{hashlib.blake2b(version.encode(), digest_size=8).hexdigest()}.duckdb"

    def cached_catalogs(self) -> list[Path]:
        return sorted(self.root.glob("tracedb.*.duckdb"))

    def catalog_fetch_copy(self) -> Path:
        """Where a reader fetches an object store's catalog to, before it is
        renamed to its ``cached_catalog``."""
        return self.root / f".{CATALOG_NAME}.{os.getpid()}.{uuid.uuid4().hex[:8]}.fetch"

    def create_local(self) -> None:
        """Make this machine's working folder of an object-store warehouse."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WarehouseError(f"{self.root}: cannot create the working folder of {self}: "
                                 f"{e.strerror or e}") from None

    @property
    def comm_patterns(self) -> Path:
        return self.root / COMM_PATTERNS_CSV

    @property
    def staging(self) -> Path:
        return self.root / STAGING

    def staging_path(self, name: str) -> Path:
        """A file or folder of the staging area (not made here)."""
        return self.staging / name

    def clear_staging(self, older_than_s: float = 0) -> None:
        """Remove staging leftovers of crashed ingests."""
        if not self.staging.exists():
            return
        now = time.time()
        for p in self.staging.iterdir():
            try:
                if now - p.stat().st_mtime >= older_than_s:
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
            except FileNotFoundError:
                pass

    # -- keys of published files ---------------------------------------------

    @staticmethod
    def partition(table: str, run: str, rank: int, phase: str) -> str:
        return f"{table}/run={run}/rank={rank}/phase={phase}"

    def data_key(self, table: str, run: str, rank: int, phase: str, file_id: str) -> str:
        """Where a trace's rows of ``table`` are published."""
        return f"{self.partition(table, run, rank, phase)}/{file_id}{PARQUET}"

    def summary_key(self, view: str, run: str, rank: int, phase: str, file_id: str) -> str:
        """Where a trace's summary of a per-trace view is published."""
        return f"{SUMMARY_DIR}/{self.partition(view, run, rank, phase)}/{file_id}{PARQUET}"

    @staticmethod
    def tags_key(run: str) -> str:
        return f"{TAGS_DIR}/run={run}/{TAGS_FILE}"

    def tags_keys(self) -> list[str]:
        """The tags files of every run."""
        return [k for k in self.storage.list(TAGS_DIR)
                if k.count("/") == 2 and k.split("/")[1].startswith("run=") and k.endswith("/" + TAGS_FILE)]

    def data_keys(self) -> list[str]:
        """Every file under the tables and the summaries."""
        return [k for top in (*TABLES, SUMMARY_DIR) for k in self.storage.list(top)]

    def location(self, key: str) -> str:
        return self.storage.location(key)

    def local_file(self, key: str, folder: Path) -> Path:
        """A published file as a local path: where it is in a folder; from
        an object store, a copy fetched into ``folder``."""
        if self.remote is None:
            return Path(self.location(key))
        dst = folder / key.replace("/", "_")
        if self.remote.fetch(key, dst) is None:
            raise FileNotFoundError(errno.ENOENT, "missing from the bucket", self.location(key))
        return dst

    def published_locations(self) -> list[str]:
        """The folders (URL prefixes in an object store) of every published
        file, each with a trailing '/': all that a reader of the views reads."""
        return [self.location(top) + "/" for top in (*TABLES, SUMMARY_DIR, TAGS_DIR)]

    def prune(self, tops: tuple[str, ...] = (*TABLES, SUMMARY_DIR)) -> None:
        """Remove the partition folders that no file is left in, under the
        tables and summaries (or ``tops``). With no ingest running only
        (``exclusive``): an ingest makes a partition's folder, then publishes
        into it."""
        for top in tops:
            self.storage.prune(top)

    # -- the folder itself ---------------------------------------------------

    def is_warehouse(self) -> bool:
        """Whether the folder holds anything a warehouse has (a bucket: the catalog)."""
        if self.remote is not None:
            return self.remote.exists(CATALOG_NAME)
        marks = (CATALOG_NAME, *TABLES, SUMMARY_DIR, STAGING, LOCK_NAME, INGEST_LOCK_NAME)
        return self.root.is_dir() and any((self.root / m).exists() for m in marks)

    def check_target(self) -> None:
        """Refuse to write into a folder that is not a warehouse, or not a
        folder; a bucket that cannot be reached."""
        if self.remote is not None:
            self.remote.check_access()
            return
        w = self.root
        if w.exists() and not w.is_dir():
            raise WarehouseError(f"{w}: exists and is not a folder")
        layout = {*TABLES, SUMMARY_DIR, STAGING, COMM_PATTERNS_CSV, TAGS_DIR}
        if w.is_dir() and not self.catalog_path.exists() and any(
            # (.tracedb*: locks and catalog copies of an ingest killed before its first swap)
            p.name not in layout and not p.name.startswith(".tracedb") for p in w.iterdir()
        ):
            raise WarehouseError(f"{w}: exists and is not a tracedb warehouse; choose another --warehouse")

    def create(self) -> None:
        """Make the folder (if need be); raise unless it can be written. For
        an object store: this machine's working folder, and the bucket must be there."""
        if self.remote is not None:
            self.remote.check_access()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WarehouseError(f"{self.root}: cannot create the warehouse: {e.strerror or e}") from None
        if not os.access(self.root, os.W_OK):
            raise WarehouseError(f"{self.root}: the warehouse is not writable")

    # -- locks ---------------------------------------------------------------

    def ingesting(self, on_wait: OnWait = None) -> AbstractContextManager[None]:
        """Held (shared) by an ingest for its whole run, so ingests run side by
        side while a check or remove (``exclusive``) waits. First, when no
        other ingest or check runs, clears the staging leftovers of killed
        ingests."""
        lock = _flock(self.root / INGEST_LOCK_NAME, fcntl.LOCK_SH, on_wait,
                      f"waiting for `tracedb check` on {self.root} to finish", when_alone=self.clear_staging)
        return lock if self.remote is None else self._announced(lock)

    @contextmanager
    def _announced(self, lock: AbstractContextManager[None]) -> Iterator[None]:
        """Hold ``lock`` and, for the block, keep an object of this ingest in
        the bucket (``running_ingests``), rewritten on a thread."""
        key = f"{INGESTS_DIR}/{socket.gethostname()}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        body = json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode()
        done = threading.Event()

        def beat() -> None:
            while not done.wait(INGEST_HEARTBEAT_S):
                try:
                    self.storage.write(key, body)
                except WarehouseError:
                    pass  # the store is unreachable for now; the ingest's own calls say so

        with lock:
            self.storage.write(key, body)
            beating = threading.Thread(target=beat, name="tracedb-ingest-heartbeat", daemon=True)
            beating.start()
            try:
                yield
            finally:
                done.set()
                beating.join()
                self.storage.remove(key)

    def running_ingests(self) -> tuple[list[str], list[str]]:
        """In an object store: the keys of the ingests running (on any
        machine), and of those killed (not rewritten for INGEST_STALE_S)."""
        if self.remote is None:
            return [], []
        ages = self.remote.ages(INGESTS_DIR)
        return ([k for k, age in ages.items() if age < INGEST_STALE_S],
                [k for k, age in ages.items() if age >= INGEST_STALE_S])

    def exclusive(self, on_wait: OnWait = None) -> AbstractContextManager[None]:
        """Held by ``tracedb check`` and ``remove``: no ingest runs meanwhile
        (new ones wait), so the files of a running ingest (staged, or
        published and not yet registered) are never taken for leftovers."""
        return _flock(self.root / INGEST_LOCK_NAME, fcntl.LOCK_EX, on_wait,
                      f"waiting for the running ingest into {self.root} to finish", read_only_ok=True)

    def catalog_lock(self, on_wait: OnWait = None) -> AbstractContextManager[None]:
        """Held by a catalog writer while it copies, changes and swaps in the
        catalog: writers queue, readers never wait."""
        return _flock(self.root / LOCK_NAME, fcntl.LOCK_EX, on_wait,
                      f"waiting for another tracedb writer on {self.root} to finish")

    # -- the registry of traces ------------------------------------------------

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            # Imported here: the parser reads TABLES from this module and
            # loads no DuckDB.
            from .catalog import Catalog

            self._catalog = Catalog(self)
        return self._catalog

    def known(self) -> tuple[frozenset[str], dict[tuple[str, int, int], str]]:
        """The ingested file ids, and (source path, bytes, mtime_ns) -> file_id
        of the ingested files."""
        import duckdb

        if not self.catalog.exists():
            return frozenset(), {}
        con = self.catalog.connect_readonly()
        try:
            rows = con.execute(
                "SELECT file_id, source_path, source_bytes, source_mtime_ns FROM traces WHERE status = 'ok'"
            ).fetchall()
        except duckdb.CatalogException:
            return frozenset(), {}
        finally:
            con.close()
        return frozenset(r[0] for r in rows), {(r[1], r[2], r[3]): r[0] for r in rows}

    def find(self, run: str, rank: int | None = None, phase: str | None = None) -> list[str]:
        """The file ids of a run's traces (ingested or failed), narrowed by
        rank and phase."""
        sql = "SELECT file_id FROM traces WHERE run = ?"
        args: list = [run]
        if rank is not None:
            sql += " AND rank = ?"
            args.append(rank)
        if phase is not None:
            sql += " AND phase = ?"
            args.append(phase)
        con = self.catalog.connect_readonly()
        try:
            return [r[0] for r in con.execute(sql, args).fetchall()]
        finally:
            con.close()

    def register(self, rows: list[dict], on_wait: OnWait = None) -> None:
        """Record traces rows (ingested or failed files) in one atomic swap of
        the catalog. When the swap fails (a full disk), the published files
        of the rows go: none stays unregistered."""
        if not rows:
            return
        try:
            self._register(rows, on_wait)
        except WarehouseError:
            registered, _ = self.known()
            for row in rows:
                if row["status"] == "ok" and row["file_id"] not in registered:
                    for key in trace_files(row.get("files"), row.get("summaries")):
                        self.storage.remove(key)
            raise

    def commit(self, change: Callable[[duckdb.DuckDBPyConnection], T], on_wait: OnWait = None) -> T:
        """Run ``change`` on a writable copy of the catalog and swap it in
        (``Catalog.writing``); returns what ``change`` returned. In an object
        store another writer may commit first: the change is then redone on
        the catalog it committed, so ``change`` must be safe to run again."""
        for attempt in range(1, COMMIT_TRIES + 1):
            try:
                with self.catalog.writing(on_wait) as con:
                    return change(con)
            except CommitConflict:
                if attempt == COMMIT_TRIES:
                    raise
                if on_wait and attempt == 1:
                    on_wait(f"another writer committed to {self} meanwhile: committing again")
                time.sleep(random.uniform(0.05, 0.3) * attempt)
        raise AssertionError("unreachable")

    def commit_empty(self, on_wait: OnWait = None) -> None:
        """A commit of no traces: the catalog, its migrations and the views
        (an ingest's first, while it parses). A WarehouseError is left to
        the traces' commit after it, which meets the same and says it."""
        try:
            self.commit(lambda _con: None, on_wait)
        except WarehouseError:
            pass

    def _register(self, rows: list[dict], on_wait: OnWait) -> None:
        def change(con: duckdb.DuckDBPyConnection) -> list[str]:
            redundant: list[str] = []
            cols = [c for (c,) in con.execute(
                "SELECT column_name FROM duckdb_columns() WHERE table_name = 'traces' ORDER BY column_index"
            ).fetchall()]
            # Three statements for all the rows, not three a row (1 ms each:
            # a fifth of what a trace of 20 events cost the ingest).
            kept = {file_id: (files, made) for file_id, files, made in con.execute(
                "SELECT file_id, files, summaries FROM traces WHERE status = 'ok' AND list_contains(?, file_id)",
                [[row["file_id"] for row in rows if row["status"] == "ok"]]).fetchall()}
            new: list[dict] = []
            for row in rows:
                if row["status"] == "ok":
                    if row["file_id"] in kept:  # the same content is registered: a copy of the file, or a concurrent ingest
                        keep = set(trace_files(*kept[row["file_id"]]))
                        redundant += [key for key in trace_files(row.get("files"), row.get("summaries"))
                                      if key not in keep]
                        continue
                    kept[row["file_id"]] = (row.get("files"), row.get("summaries"))
                new.append(row)
            if new:
                # A file that failed before and ingests (or fails) now replaces its old row.
                con.execute("DELETE FROM traces WHERE status = 'failed' AND list_contains(?, source_path)",
                            [[row["source_path"] for row in new]])
                placeholders = ", ".join(f"({', '.join('?' for _ in cols)})" for _ in new)
                con.execute(f"INSERT INTO traces ({', '.join(cols)}) VALUES {placeholders}",
                            [row.get(c) for row in new for c in cols])
            return redundant

        # A copy published under another run/rank/phase than the registered one
        # would be an orphan: it goes once the catalog no longer could list it.
        for key in self.commit(change, on_wait):
            self.storage.remove(key)

    def unregister(self, file_ids: list[str], on_wait: OnWait = None) -> int:
        """Take the traces with these file ids (ingested or failed) out of the
        catalog in one atomic swap (readers stop seeing them at once), then
        their files off the storage; returns how many rows went. A crash in
        between leaves only orphan files, which ``tracedb check --repair``
        removes. The caller holds ``exclusive``."""
        if not file_ids:
            return 0
        def change(con: duckdb.DuckDBPyConnection) -> list[tuple]:
            files = con.execute("SELECT files, summaries FROM traces WHERE list_contains(?, file_id)",
                                [file_ids]).fetchall()
            con.execute("DELETE FROM traces WHERE list_contains(?, file_id)", [file_ids])
            return files

        files = self.commit(change, on_wait)
        for files_json, summaries_json in files:
            for key in trace_files(files_json, summaries_json):
                self.storage.remove(key)
        self.prune()
        return len(files)
