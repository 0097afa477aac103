"""A trace file's id: the hash of its bytes as stored, the algorithm named in it.

    xxh3-9f86d081884c7d659a2feaa0c55ad015    xxh3-128 (about 0.1 s a GiB)
    9f86d081884c7d659a2feaa0c55ad015         BLAKE2b-128, unprefixed: the ids of
                                             warehouses made before xxh3 (0.8 s a GiB)

A warehouse keeps the ids it was given. Where it holds BLAKE2b ids, ingest
hashes each file both ways in one read (``content_ids(path, legacy=True)``),
so content ingested under the old id is still recognised and skipped, not
ingested again under the new one.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

import xxhash

PREFIX = "xxh3-"
_LEGACY_RE = re.compile(r"[0-9a-f]{32}")
_CHUNK = 1 << 20


def content_ids(path: Path, legacy: bool = False) -> tuple[str, ...]:
    """The file's id; with ``legacy``, then its BLAKE2b-128 id as well."""
    h = xxhash.xxh3_128()
    old = hashlib.blake2b(digest_size=16) if legacy else None
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            if old is not None:
                old.update(chunk)
    ids = (PREFIX + h.hexdigest(),)
    return ids if old is None else (*ids, old.hexdigest())


def has_legacy(file_ids: Iterable[str]) -> bool:
    """Whether any of ``file_ids`` is a BLAKE2b id (made before xxh3)."""
    return any(_LEGACY_RE.fullmatch(i) for i in file_ids)
