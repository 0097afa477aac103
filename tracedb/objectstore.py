"""A warehouse's published files in an object store: ``s3://bucket/prefix``
(S3 and S3-compatible stores through s3fs), or another fsspec URL.

``ObjectStorage`` is the ``Storage`` of warehouse.py for a URL, plus what a
catalog kept in the bucket needs: ``fetch`` (a copy and its version, the
ETag) and ``swap`` (a conditional write: ``If-Match`` the version fetched,
or ``If-None-Match: *`` for the first one), so that of two writers that
fetched the same version only one commits. It knows keys, not the layout.

Credentials and endpoint come from the standard AWS chain (environment,
``~/.aws``, instance roles; ``AWS_ENDPOINT_URL`` for MinIO, R2, Ceph, a local
moto). Every failure to reach the store becomes one ``WarehouseError`` line
naming the URL and the cause, without a secret; an upload that a network
error breaks is tried again, then fails with ``UploadError`` (the caller's
file only).
"""

from __future__ import annotations

import errno
import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from .errors import CommitConflict, UploadError, WarehouseError

UPLOAD_TRIES = 3
# Copies of an object that other writers keep replacing while it is read.
FETCH_TRIES = 5
# Seconds: a wrong endpoint is said at once, not after minutes of retries.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 120


def _cause(e: BaseException) -> str | None:
    """What went wrong, in words, for an error of the store; None when it
    is not about reaching the store (e.g. a missing key)."""
    name = type(e).__name__
    text = str(e).splitlines()[0] if str(e) else name
    if name == "NoCredentialsError" or "Unable to locate credentials" in text:
        return "no credentials (set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE or an instance role)"
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ClientConnectorError", "ConnectionError") or \
            "Could not connect to the endpoint" in text:
        return f"cannot reach the endpoint: {text}"
    if isinstance(e, PermissionError) or "AccessDenied" in text or "Forbidden" in text or \
            "InvalidAccessKeyId" in text or "SignatureDoesNotMatch" in text:
        return f"access denied (403): {text}"
    return None


def _retryable(e: BaseException) -> bool:
    """A network error worth another try (not a refusal, nor a missing bucket)."""
    cause = _cause(e)
    if cause is not None:
        return cause.startswith("cannot reach")
    if isinstance(e, (PermissionError, FileNotFoundError)):
        return False
    if isinstance(e, (OSError, TimeoutError)):
        return True
    try:
        from botocore.exceptions import ConnectionError as BotoConnectionError, HTTPClientError
    except ImportError:
        return False
    return isinstance(e, (BotoConnectionError, HTTPClientError))


def _of_the_store(e: BaseException) -> bool:
    """An error of the store or of reaching it (not one of tracedb's code)."""
    if isinstance(e, (OSError, TimeoutError)):
        return True
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        return False
    return isinstance(e, (BotoCoreError, ClientError))


def _version(info: dict) -> str:
    """An object's version from its details: the ETag (else what changes with it)."""
    return str(info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("size"))


class ObjectStorage:
    """The published files of a warehouse at ``url`` (protocol://bucket/prefix)."""

    def __init__(self, url: str):
        self.url = url.rstrip("/")
        self.protocol, _, rest = self.url.partition("://")
        self.base = rest.strip("/")
        self.bucket = self.base.split("/", 1)[0]
        if not self.bucket:
            raise WarehouseError(f"{url}: no bucket in the warehouse URL (expected {self.protocol}://bucket/prefix)")
        self._fs = None

    def __getstate__(self) -> dict:  # to --jobs workers: they make their own filesystem
        return {**self.__dict__, "_fs": None}

    @property
    def fs(self):
        if self._fs is None:
            import fsspec

            options = {}
            if self.protocol in ("s3", "s3a"):
                options = {"config_kwargs": {"connect_timeout": CONNECT_TIMEOUT_S, "read_timeout": READ_TIMEOUT_S,
                                             "retries": {"max_attempts": 2, "mode": "standard"}}}
            try:
                # Its own instance: made from the environment (endpoint, credentials) as it is now.
                self._fs = fsspec.filesystem(self.protocol, skip_instance_cache=True, **options)
            except (ImportError, ValueError) as e:
                raise WarehouseError(f"{self.url}: {self.protocol}:// needs its filesystem library "
                                     f"(pip install 'tracedb[s3]' for s3://): {e}") from None
        return self._fs

    @contextmanager
    def _faults(self, what: str = "") -> Iterator[None]:
        """Errors of the store as one line naming the URL and the cause."""
        try:
            yield
        except (WarehouseError, FileNotFoundError):
            raise
        except Exception as e:  # noqa: BLE001 - the store's libraries raise many kinds
            cause = _cause(e)
            if cause is None and not _of_the_store(e):
                raise
            raise WarehouseError(f"{self.url}{what}: {cause or str(e).splitlines()[0]}") from None

    def _path(self, key: str) -> str:
        return f"{self.base}/{key}"

    def location(self, key: str) -> str:
        return f"{self.protocol}://{self._path(key)}"

    def check_access(self) -> None:
        """Raise one clear line unless the bucket exists and can be listed."""
        with self._faults():
            try:
                self.fs.ls(self.bucket, detail=False, refresh=True)
            except FileNotFoundError:
                raise WarehouseError(f"{self.url}: no such bucket: {self.bucket}") from None
            except OSError as e:
                raise WarehouseError(f"{self.url}: {_cause(e) or str(e).splitlines()[0]}") from None

    def exists(self, key: str) -> bool:
        return self.etag(key) is not None

    def etag(self, key: str) -> str | None:
        """The version of the object at ``key``; None if there is none."""
        with self._faults():
            try:
                info = self.fs.info(self._path(key), refresh=True)
            except FileNotFoundError:
                return None
        return None if info.get("type") == "directory" else _version(info)

    def open(self, key: str, mode: str = "rb") -> IO[bytes]:
        with self._faults():
            return self.fs.open(self._path(key), mode)

    def fetch(self, key: str, dst: Path) -> str | None:
        """Copy the object at ``key`` to ``dst``; returns its version (None,
        and nothing written, when there is none). s3fs reads every range of
        an object If-Match the ETag it opened: the copy is of one version.
        Another writer that replaces the object while it is read makes that
        read fail (EBUSY, s3fs's FileExpired); the copy starts over from the
        new version, up to FETCH_TRIES times."""
        path = self._path(key)
        for attempt in range(1, FETCH_TRIES + 1):
            if attempt > 1:
                time.sleep(random.uniform(0.05, 0.3) * attempt)
            with self._faults():
                self.fs.invalidate_cache(path)  # open() takes the ETag from the cache: it must be the current one
                try:
                    src = self.fs.open(path, "rb")
                except FileNotFoundError:
                    return None
                try:
                    with src, open(dst, "wb") as out:
                        details = getattr(src, "details", None) or self.fs.info(path)
                        while chunk := src.read(8 << 20):
                            out.write(chunk)
                    return _version(details)
                except OSError as e:
                    if e.errno != errno.EBUSY:
                        raise
        raise WarehouseError(f"{self.location(key)}: other writers replaced it while it was read, "
                             f"{FETCH_TRIES} times; run the command again")

    @property
    def _s3(self) -> bool:
        return self.protocol in ("s3", "s3a")

    def put(self, src: Path, key: str) -> None:
        """Upload ``src`` (multipart, in chunks: bounded memory), trying
        again after a network error; ``src`` goes. An object store has no
        half-written object: a reader sees the old one or the new one."""
        for attempt in range(1, UPLOAD_TRIES + 1):
            try:
                self.fs.put_file(str(src), self._path(key))
                break
            except Exception as e:  # noqa: BLE001 - see _retryable
                if attempt == UPLOAD_TRIES or not _retryable(e):
                    why = _cause(e) or str(e).splitlines()[0]
                    raise UploadError(f"{self.location(key)}: upload failed after {attempt} tries: {why}") from None
                time.sleep(random.uniform(0.2, 0.5) * 2**attempt)
        src.unlink(missing_ok=True)

    def swap(self, src: Path, key: str, version: str | None) -> str:
        """Write ``src`` at ``key`` if the object there is still ``version``
        (None: if there is none); returns the new version. Raises
        CommitConflict when another writer got there first."""
        if not self._s3:
            raise WarehouseError(f"{self.url}: a catalog in {self.protocol}:// needs conditional writes, "
                                 "which tracedb does on s3:// only")
        from fsspec.asyn import sync

        condition = {"IfMatch": version} if version is not None else {"IfNoneMatch": "*"}
        bucket, _, path = self._path(key).partition("/")
        with self._faults(" (committing the catalog)"):
            try:
                out = sync(self.fs.loop, self.fs._call_s3, "put_object", Bucket=bucket, Key=path,
                           Body=src.read_bytes(), **condition)
            except OSError as e:
                # s3fs says 412 Precondition Failed as FileExistsError (If-None-Match) or EINVAL (If-Match)
                if isinstance(e, FileExistsError) or (e.errno == errno.EINVAL and "pre-condition" in str(e)):
                    raise CommitConflict(f"{self.url}: another writer committed meanwhile; "
                                         "run the command again") from None
                raise
        self.fs.invalidate_cache(self._path(key))
        return str(out["ETag"])

    def list(self, prefix: str) -> list[str]:
        with self._faults():
            try:
                found = self.fs.find(self._path(prefix), withdirs=False)
            except FileNotFoundError:
                return []
        skip = len(self.base) + 1
        return sorted(p[skip:] for p in found)

    def write(self, key: str, data: bytes) -> None:
        """A small object, written whole."""
        with self._faults():
            self.fs.pipe_file(self._path(key), data)

    def ages(self, prefix: str) -> dict[str, float]:
        """key -> seconds since it was written, of every object under ``prefix``."""
        with self._faults():
            try:
                found = self.fs.find(self._path(prefix), withdirs=False, detail=True)
            except FileNotFoundError:
                return {}
        now = time.time()
        skip = len(self.base) + 1
        return {path[skip:]: now - info["LastModified"].timestamp() for path, info in found.items()
                if "LastModified" in info}

    def remove(self, key: str) -> None:
        with self._faults():
            try:
                self.fs.rm_file(self._path(key))
            except FileNotFoundError:
                pass

    def prune(self, prefix: str) -> None:
        """Object stores have no empty folders."""

    def register(self, con) -> None:
        """Let a DuckDB connection read ``location``s: through this
        filesystem, with no extension to download (DuckDB's httpfs would be
        fetched from the network on first use)."""
        con.execute("SET autoinstall_known_extensions = false")
        con.execute("SET autoload_known_extensions = false")
        con.register_filesystem(self.fs)
