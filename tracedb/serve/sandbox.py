"""Confinement of the DuckDB side: what the server can read and write, and what clients learn of the host.

Three pieces, each on its own enough to stop a class of attack:

- :func:`open_catalog` opens a private, read-only copy of the catalog,
  kept outside the warehouse, and locks DuckDB's configuration with
  ``enable_external_access=false`` and ``allowed_directories`` set to the
  warehouse's data folders: DuckDB reads nothing else, attaches nothing,
  loads no extension, and no setting can change afterwards.
- :class:`Landlock` (Linux 5.13+) takes from the server's threads the right
  to write, create or delete any file outside the private folder. Threads
  inherit it, so DuckDB's workers, started from a confined thread, are
  confined too. Where the kernel lacks Landlock this degrades with a log line.
- :class:`Redactor` replaces the warehouse path, the private folder and the
  home folder in every answer and error, so that the warehouse is ``/`` to a
  client.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import shutil
import threading
from pathlib import Path

import duckdb

from tracedb.serve.config import ServeError
from tracedb.sqltext import sql_literal
from tracedb.warehouse import CATALOG_NAME

log = logging.getLogger(__name__)


def data_directories(warehouse: Path) -> list[str]:
    """The folders of the warehouse that views read (every visible sub-folder), with a trailing separator."""
    out = set()
    for root in {warehouse.absolute(), warehouse.resolve()}:
        for child in root.iterdir():
            if child.is_dir() and not child.name.startswith("."):
                out.add(str(child).rstrip(os.sep) + os.sep)
    return sorted(out)


def private_copy(catalog_path: Path, private_dir: Path, generation: int) -> Path:
    """Copy the catalog file into ``private_dir`` for one generation.

    Each generation gets its own folder (DuckDB caches one database instance
    per path); the file keeps the catalog's name so that the catalog is
    called ``tracedb`` in SQL.
    """
    folder = private_dir / f"g{generation}"
    folder.mkdir()
    copy = folder / CATALOG_NAME
    shutil.copyfile(catalog_path, copy)
    return copy


def open_catalog(catalog_path: Path, readable: list[str], *, temp_dir: Path | None = None,
                 memory_limit: str = "2GB", threads: int = 2, filesystem=None) -> duckdb.DuckDBPyConnection:
    """Open ``catalog_path`` read-only, allowed to read files under ``readable`` only.

    The settings are global to the returned database instance and locked,
    so every ``cursor()`` of it is sandboxed the same way. A warehouse in an
    object store is read through ``filesystem`` (fsspec, registered before
    the lock), its ``readable`` being URL prefixes (``s3://bucket/prefix/events/``).
    """
    try:
        db = duckdb.connect(str(catalog_path), read_only=True, config={"custom_user_agent": "tracedb-serve"})
    except duckdb.Error as e:
        raise ServeError(f"cannot open catalog {catalog_path} read-only: {e}") from e
    try:
        db.execute(f"SET memory_limit = {sql_literal(memory_limit)}")
        db.execute(f"SET threads = {int(threads)}")
        if temp_dir is not None:
            db.execute(f"SET temp_directory = {sql_literal(str(temp_dir))}")
            db.execute("SET max_temp_directory_size = '1GB'")
        db.execute("SET autoinstall_known_extensions = false")
        db.execute("SET autoload_known_extensions = false")
        db.execute("SET allow_community_extensions = false")
        if filesystem is not None:
            db.register_filesystem(filesystem)
        db.execute(f"SET allowed_directories = [{', '.join(sql_literal(d) for d in readable)}]")
        db.execute("SET enable_external_access = false")
        db.execute("SET lock_configuration = true")
    except duckdb.Error as e:
        db.close()
        raise ServeError(f"cannot sandbox catalog {catalog_path}: {e}") from e
    return db


#: Stack of each server thread when the process memory is limited (thread stacks count as data).
THREAD_STACK_BYTES = 1024 * 1024


def limit_process_memory(extra_bytes: int) -> int:
    """Cap the process's data segment (``RLIMIT_DATA``) at its present size plus
    ``extra_bytes``, and make later threads' stacks small; returns the cap.

    Linux counts every private writable mapping, so the cap holds whatever
    allocates: DuckDB, Python or a thread's stack. An allocation past it fails
    (DuckDB raises its out-of-memory error; the statement fails, the server goes on).
    """
    data_kb = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                   if line.startswith("VmData:"))
    cap = data_kb * 1024 + extra_bytes
    _soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    threading.stack_size(THREAD_STACK_BYTES)
    return cap


# ---------------------------------------------------------------------------
# Landlock
# ---------------------------------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1
_CREATE_RULESET_VERSION = 1 << 0
# Every right that changes the file system: writing, truncating, creating, removing, renaming into.
_WRITE_RIGHTS_BY_ABI = {
    1: (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11)
    | (1 << 12),
    2: 1 << 13,  # REFER
    3: 1 << 14,  # TRUNCATE
}


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class Landlock:
    """A Landlock ruleset that allows writing under one folder only.

    :meth:`restrict_thread` applies it to the calling thread (and to every
    thread that thread starts); other threads of the process keep their
    rights. ``available`` is False where the kernel has no Landlock.
    """

    def __init__(self, writable: Path) -> None:
        self._fd = -1
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        abi = self._libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0),
                                 ctypes.c_uint32(_CREATE_RULESET_VERSION))
        if abi < 1:
            log.warning("Landlock is not available (%s): the server's writes are confined by DuckDB's"
                        " settings and the statement gate only", os.strerror(ctypes.get_errno()))
            return
        rights = 0
        for version, bits in _WRITE_RIGHTS_BY_ABI.items():
            if abi >= version:
                rights |= bits
        attr = _RulesetAttr(rights)
        fd = self._libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                                ctypes.c_uint32(0))
        if fd < 0:
            raise ServeError(f"cannot create a Landlock ruleset: {os.strerror(ctypes.get_errno())}")
        folder = os.open(writable, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = _PathBeneathAttr(rights, folder)
            if self._libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                                  ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                os.close(fd)
                raise ServeError(f"cannot add a Landlock rule: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(folder)
        self._fd = fd

    @property
    def available(self) -> bool:
        return self._fd >= 0

    def restrict_thread(self) -> None:
        """Confine the calling thread and its future children (no-op without Landlock)."""
        if self._fd < 0:
            return
        if self._libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if self._libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(self._fd), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# ---------------------------------------------------------------------------
# Redaction
# ---------------------------------------------------------------------------


class Redactor:
    """Replaces host paths in text sent to clients: the warehouse and the
    private folder become ``/``, the home folder ``~``."""

    def __init__(self, warehouse: Path, private_dir: Path) -> None:
        pairs: dict[str, str] = {}
        for root in (warehouse, private_dir):
            for form in {str(root.absolute()), str(root.resolve())}:
                pairs[form.rstrip(os.sep) + os.sep] = "/"
                pairs[form.rstrip(os.sep)] = "/"
        home = os.path.expanduser("~")
        if home not in ("", "/", "~"):
            pairs[home.rstrip(os.sep)] = "~"
        # Longest first: a warehouse under the home folder becomes "/", not "~/wh".
        self._pairs = sorted(pairs.items(), key=lambda kv: -len(kv[0]))
        self._byte_pairs = [(k.encode(), v.encode()) for k, v in self._pairs]

    def text(self, value: str) -> str:
        for old, new in self._pairs:
            if old in value:
                value = value.replace(old, new)
        return value

    def data(self, value: bytes) -> bytes:
        for old, new in self._byte_pairs:
            if old in value:
                value = value.replace(old, new)
        return value
