"""The ingest lock: ``<warehouse>/.tracedb.ingest.lock``.

Every ingest holds it shared for its whole run, so ingests run side by side;
``tracedb check`` holds it exclusively, so it never mistakes the files of a
running ingest (staged, or published and not yet registered) for leftovers,
and never removes them. An ingest that finds itself alone at its start
clears what crashed ingests left in ``.staging``.

(The catalog has its own lock, held only while a catalog copy is swapped
in: see catalog.py.) flock locks go with the process: a killed ingest
releases them.
"""

from __future__ import annotations

import errno
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from .errors import WarehouseError
from .store import clear_staging

INGEST_LOCK_NAME = ".tracedb.ingest.lock"


def _open(warehouse: Path, read_only_ok: bool = False) -> int | None:
    """The lock file's descriptor; None on a read-only file system when
    read_only_ok (no one can write there, so there is nothing to lock)."""
    try:
        warehouse.mkdir(parents=True, exist_ok=True)
        return os.open(warehouse / INGEST_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        if read_only_ok and e.errno == errno.EROFS:
            return None
        raise WarehouseError(f"{warehouse}: cannot write the warehouse: {e.strerror or e}") from None


def _take(fd: int, mode: int, on_wait: Callable[[str], None] | None, message: str) -> None:
    """flock, telling on_wait when it has to wait."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        if on_wait:
            on_wait(message)
        fcntl.flock(fd, mode)


@contextmanager
def ingesting(warehouse: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Held (shared) by an ingest for its whole run. First, when no other
    ingest or check runs, clears the staging leftovers of killed ingests."""
    fd = _open(warehouse)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # other ingests (shared) or a check (exclusive)
        else:
            clear_staging(warehouse)
        # (a conversion to shared is not atomic: a check may come in between)
        _take(fd, fcntl.LOCK_SH, on_wait, f"waiting for `tracedb check` on {warehouse} to finish")
        yield
    finally:
        os.close(fd)


@contextmanager
def exclusive(warehouse: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Held by ``tracedb check``: no ingest runs meanwhile (new ones wait)."""
    fd = _open(warehouse, read_only_ok=True)
    if fd is None:
        yield
        return
    try:
        _take(fd, fcntl.LOCK_EX, on_wait, f"waiting for the running ingest into {warehouse} to finish")
        yield
    finally:
        os.close(fd)
