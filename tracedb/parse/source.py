"""The one opener of trace files: the bytes of a file, decompressed when it
is gzip (by its magic bytes, not its name)."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

BOM = b"\xef\xbb\xbf"


def open_trace(path: str | Path) -> io.BufferedIOBase:
    """A binary stream of the trace's JSON: ``gzip.GzipFile`` when the file
    is gzip, the plain file otherwise. Raises OSError when it cannot be opened."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def is_gzip(stream: io.BufferedIOBase) -> bool:
    """Whether ``stream`` (from open_trace) decompresses."""
    return isinstance(stream, gzip.GzipFile)


def first_byte(path: str | Path) -> bytes:
    """The first byte of the JSON past a BOM and whitespace (b"" if none)."""
    with open_trace(path) as f:
        head = f.read(4096)
        if head.startswith(BOM):
            head = head[3:]
        while head:
            stripped = head.lstrip()
            if stripped:
                return stripped[:1]
            head = f.read(4096)
    return b""
