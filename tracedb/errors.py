"""Typed errors. The library raises these; the CLI turns them into one line."""

from __future__ import annotations


class TracedbError(Exception):
    """Base class of every error tracedb raises on purpose."""


class TraceFormatError(TracedbError):
    """A trace file that cannot be read as Chrome-trace JSON.

    `position` says where: a byte offset ("byte 1234") or an event index
    ("event 17"); `reason` says why.
    """

    def __init__(self, path: str, reason: str, position: str | None = None):
        self.path = str(path)
        self.reason = reason
        self.position = position
        where = f" at {position}" if position else ""
        super().__init__(f"{self.path}{where}: {reason}")


class IngestError(TracedbError):
    """Ingest could not run at all (not one file: the whole job)."""


class WarehouseError(TracedbError):
    """The warehouse is missing, not writable, or not a tracedb warehouse."""


class MigrationError(TracedbError):
    """The catalog's schema does not match the migrations this code ships."""


class ViewError(TracedbError):
    """A view file in queries/ is malformed (bad header, cycle, SQL error)."""


class UnknownView(TracedbError):
    """`query NAME` named a view that does not exist."""

    def __init__(self, name: str, known: list[str]):
        self.name = name
        self.known = known
        super().__init__(
            f"unknown view {name!r}; known views: {', '.join(known) or '(none)'}"
        )


class QueryError(TracedbError):
    """A query was asked with parameters it does not take, or failed."""


class CommitConflict(WarehouseError):
    """Another writer committed the catalog of an object-store warehouse
    since this one fetched it: fetch again and redo the change."""


class UploadError(WarehouseError):
    """A file could not be uploaded to the object store (after retries):
    the trace it belongs to fails, the others go on."""
