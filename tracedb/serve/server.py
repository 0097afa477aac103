"""The server: listening, admitting connections, the catalog generations, cancelling.

:class:`Server` shares one sandboxed DuckDB database instance (a private
read-only copy of the catalog, see :mod:`tracedb.serve.sandbox`) among
sessions, each with its own cursor and thread. A new catalog file (an ingest
swaps one in) is copied and opened for the sessions that start after it.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import shutil
import socket
import socketserver
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

import duckdb

from tracedb.serve import wire
from tracedb.serve.config import ServeConfig, ServeError
from tracedb.serve.pgcompat import COMPAT_MACROS
from tracedb.serve.sandbox import (
    Landlock, Redactor, data_directories, limit_process_memory, open_catalog, private_copy)
from tracedb.serve.session import Session
from tracedb.views import set_search_path

log = logging.getLogger(__name__)

_T = TypeVar("_T")


@dataclass(frozen=True)
class RemoteCatalog:
    """A warehouse in an object store, as the server reads it: ``fetch``
    returns the local copy of the catalog's current version (asked every
    ``every_s``), ``filesystem`` (fsspec) reads the bucket, and only the
    URL prefixes ``readable`` may be read."""

    fetch: Callable[[], Path]
    filesystem: Any
    readable: list[str]
    every_s: float = 5.0


def _is_loopback(host: str) -> bool:
    if host in ("", "*"):
        return False
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as e:
        raise ServeError(f"cannot resolve host {host!r}: {e}") from e
    return all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


class AuthThrottle:
    """Slows password guessing, as PostgreSQL's ``auth_delay`` does, per client address.

    Password checks from one address take turns: each waits until the
    address's next slot, and each failure moves that slot later by
    ``0.1 s + 0.01 s x failures so far`` (at most 2 s), however many
    connections the guesses come on. An address's failures are forgotten
    after 10 minutes without one.
    """

    FORGET_S = 600.0
    MAX_ADDRESSES = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state: OrderedDict[str, tuple[int, float, float]] = OrderedDict()  # failures, next slot, last

    @staticmethod
    def delay_s(failures: int) -> float:
        return min(0.1 + 0.01 * failures, 2.0)

    def wait_turn(self, address: str, deadline: float) -> None:
        """Sleep until ``address`` may try a password; ConnectionAbortedError if
        that is past ``deadline`` (the connection's authentication timeout)."""
        with self._lock:
            _failures, slot, _last = self._state.get(address, (0, 0.0, 0.0))
        if slot > deadline:
            time.sleep(max(0.0, deadline - time.monotonic()))
            raise ConnectionAbortedError("authentication timeout while waiting for a turn")
        wait = slot - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def failed(self, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            failures, slot, last = self._state.pop(address, (0, 0.0, 0.0))
            if now - last > self.FORGET_S:
                failures = 0
            failures += 1
            self._state[address] = (failures, max(slot, now) + self.delay_s(failures), now)
            while len(self._state) > self.MAX_ADDRESSES:
                self._state.popitem(last=False)


class _TCPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("error while serving %s", client_address)  # the library never prints


class Server:
    """A threaded PostgreSQL-protocol server over one catalog (see :mod:`tracedb.serve`).

    Raises :class:`ServeError` for an unsafe or impossible configuration;
    errors of clients and queries never escape.
    """

    def __init__(self, catalog_path: Path, warehouse: Path, config: ServeConfig = ServeConfig(), *,
                 remote: RemoteCatalog | None = None) -> None:
        self.catalog_path = Path(catalog_path).absolute()
        self.warehouse = Path(warehouse).absolute()
        self.config = config
        self.remote = remote
        if not self.catalog_path.is_file():
            raise ServeError(f"catalog {self.catalog_path} does not exist")
        if not self.warehouse.is_dir():
            raise ServeError(f"warehouse {self.warehouse} is not a directory")
        config.check()
        if config.password is None and not _is_loopback(config.host):
            raise ServeError(
                f"refusing to listen on non-loopback address {config.host!r} without a password"
            )
        self.scram = (
            wire.ScramVerifier(config.password)
            if config.password is not None and config.auth_method == "scram-sha-256"
            else None
        )
        self.throttle = AuthThrottle()
        self.private_dir: Path | None = None
        self.redactor = Redactor(self.warehouse, self.warehouse)  # the private folder joins at start()
        self.landlock: Landlock | None = None
        self._db: duckdb.DuckDBPyConnection | None = None
        self._generation: tuple[int, int] = (0, 0)
        self._generations = 0
        self._tcp: _TCPServer | None = None
        self._thread: threading.Thread | None = None
        self._reaper: threading.Thread | None = None
        self._serving = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._stop_lock = threading.Lock()
        self._sessions: dict[int, Session] = {}
        self._pending: OrderedDict[Session, None] = OrderedDict()  # in start-up or authentication
        self._next_pid = 1

    @property
    def port(self) -> int:
        """The port listened on (useful with ``ServeConfig(port=0)``); 0 before binding."""
        return self._tcp.server_address[1] if self._tcp is not None else 0

    def _confined(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` in a new thread under the Landlock ruleset: DuckDB threads it starts inherit it."""
        out: list[Any] = []

        def target() -> None:
            try:
                if self.landlock is not None:
                    self.landlock.restrict_thread()
                out.append((True, fn()))
            except BaseException as e:  # handed to the caller below
                out.append((False, e))

        thread = threading.Thread(target=target, name="tracedb-serve-open")
        thread.start()
        thread.join()
        ok, value = out[0]
        if not ok:
            raise value
        return value

    def _bind(self) -> None:
        if self._tcp is not None:
            return
        self.private_dir = Path(tempfile.mkdtemp(prefix="tracedb-serve-"))
        self.redactor = Redactor(self.warehouse, self.private_dir)
        try:
            (self.private_dir / "tmp").mkdir()
            if self.config.confine:
                self.landlock = Landlock(self.private_dir)
            self._db = self._confined(self._open_generation)
            self._confined(lambda: self.new_cursor().close())  # the compat macros must be valid in this DuckDB
            if self.config.limit_process_memory:
                cap = limit_process_memory(self.config.memory_limit_bytes + 512 * 1024 * 1024)
                log.info("process data segment capped at %d MiB", cap // 2**20)
        except duckdb.Error as e:
            self._close_private()
            raise ServeError(f"cannot prepare PostgreSQL compatibility macros: {e}") from e
        except BaseException:
            self._close_private()
            raise
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                if server.landlock is not None:
                    server.landlock.restrict_thread()
                try:
                    self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    return  # already gone
                session = Session(server, self.request, str(self.client_address[0]))
                server.admit(session)
                session.run()

        host = self.config.host
        try:
            family = socket.getaddrinfo(host or None, self.config.port, proto=socket.IPPROTO_TCP)[0][0]
        except socket.gaierror as e:
            self._close_private()
            raise ServeError(f"cannot resolve host {host!r}: {e}") from e
        tcp_class = type("_TCPServer", (_TCPServer,), {"address_family": family})
        try:
            self._tcp = tcp_class((host, self.config.port), Handler)
        except OSError as e:
            self._close_private()
            raise ServeError(f"cannot listen on {host}:{self.config.port}: {e}") from e
        self._stopping.clear()
        self._reaper = threading.Thread(target=self._reap, name="tracedb-serve-reaper", daemon=True)
        self._reaper.start()
        if self.remote is not None:
            # Not confined: it writes the fetched catalog to this machine's cache.
            threading.Thread(target=self._follow_remote, name="tracedb-serve-fetch", daemon=True).start()

    def _close_private(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self.landlock is not None:
            self.landlock.close()
            self.landlock = None
        if self.private_dir is not None:
            shutil.rmtree(self.private_dir, ignore_errors=True)
            self.private_dir = None

    def start(self) -> None:
        """Bind and serve in a background thread; returns once the port is listening."""
        self._bind()
        assert self._tcp is not None
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="tracedb-serve", daemon=True)
            self._thread.start()

    def serve_forever(self) -> None:
        """Bind (if :meth:`start` did not) and serve in the calling thread.

        Returns after :meth:`stop` (from another thread); a KeyboardInterrupt
        propagates. Either way the server is stopped on the way out.
        """
        try:
            if self._thread is not None:
                self._thread.join()
            else:
                self._bind()
                self._serve()
        finally:
            self.stop()

    def _serve(self) -> None:
        assert self._tcp is not None
        self._serving.set()
        try:
            self._tcp.serve_forever(poll_interval=0.2)
        finally:
            self._serving.clear()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop accepting, end every session, and close the catalog. Idempotent."""
        with self._stop_lock:
            self._stopping.set()
            tcp, self._tcp = self._tcp, None
            if tcp is not None:
                if self._serving.is_set():
                    tcp.shutdown()
                tcp.server_close()
            with self._lock:
                sessions = list(self._sessions.values()) + list(self._pending)
            for session in sessions:
                session.close()
            deadline = time.monotonic() + timeout_s
            while (self._sessions or self._pending) and time.monotonic() < deadline:  # each closes its cursor
                time.sleep(0.01)
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
            self._thread = None
            self._close_private()

    def __enter__(self) -> "Server":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connections ------------------------------------------------------

    def admit(self, session: Session) -> None:
        """Count a new connection as pending; when too many are, close the oldest."""
        with self._lock:
            self._pending[session] = None
            evicted = []
            while len(self._pending) > self.config.max_startup_connections:
                evicted.append(self._pending.popitem(last=False)[0])
        for old in evicted:
            old.close()

    def _follow_remote(self) -> None:
        """Fetch an object store's catalog when the bucket holds a newer
        version: the next session opens it as a new generation."""
        assert self.remote is not None
        while not self._stopping.wait(self.remote.every_s):
            try:
                self.catalog_path = self.remote.fetch()
            except Exception as e:  # noqa: BLE001 - the store is unreachable for now: serve what we have
                log.warning("cannot fetch the catalog: %s", e)

    def _reap(self) -> None:
        """Close connections whose start-up and authentication outlast ``auth_timeout_s``."""
        while not self._stopping.wait(0.25):
            limit = time.monotonic() - self.config.auth_timeout_s
            with self._lock:
                late = [s for s in self._pending if s.started < limit]
                for s in late:
                    del self._pending[s]
            for s in late:
                s.close()

    def register(self, session: Session) -> int:
        """An authenticated session's process id, or 0 when ``max_connections`` are already in."""
        with self._lock:
            self._pending.pop(session, None)
            if len(self._sessions) >= self.config.max_connections:
                return 0
            pid = self._next_pid
            self._next_pid += 1
            self._sessions[pid] = session
        return pid

    def unregister(self, session: Session) -> None:
        with self._lock:
            self._pending.pop(session, None)
            if self._sessions.get(session.process_id) is session:
                del self._sessions[session.process_id]

    def cancel(self, process_id: int, secret_key: int) -> None:
        with self._lock:
            session = self._sessions.get(process_id)
        if session is not None and secrets.compare_digest(
            session.secret_key.to_bytes(4, "big"), (secret_key & 0xFFFFFFFF).to_bytes(4, "big")
        ):
            session.cancel("user request")

    # -- the catalog --------------------------------------------------------

    def _open_generation(self) -> duckdb.DuckDBPyConnection:
        """Open a private copy of the catalog file as it is now (in a confined thread).

        An ingest swaps in a new catalog file with ``os.replace``; an open
        instance keeps reading the old one. The copy is unlinked once open
        (the open file keeps it alive), so generations do not pile up.
        """
        assert self.private_dir is not None
        st = os.stat(self.catalog_path)
        self._generations += 1
        copy = private_copy(self.catalog_path, self.private_dir, self._generations)
        try:
            readable = self.remote.readable if self.remote is not None else data_directories(self.warehouse)
            db = open_catalog(copy, readable, temp_dir=self.private_dir / "tmp",
                              memory_limit=self.config.memory_limit, threads=self.config.threads,
                              filesystem=self.remote.filesystem if self.remote is not None else None)
        finally:
            copy.unlink(missing_ok=True)
        self._generation = (st.st_ino, st.st_mtime_ns)
        return db

    def _current_db(self) -> duckdb.DuckDBPyConnection:
        """The newest catalog generation; sessions already open keep theirs
        (their cursors hold the old instance until they end)."""
        if self._db is None:
            raise ConnectionAbortedError("the server is stopping")
        try:
            st = os.stat(self.catalog_path)
        except FileNotFoundError:
            return self._db
        if (st.st_ino, st.st_mtime_ns) != self._generation:
            with self._lock:
                if (st.st_ino, st.st_mtime_ns) != self._generation:
                    self._db = self._open_generation()
        return self._db

    def new_cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor of the shared, sandboxed database, with the compat macros, that finds the
        library's views unqualified in every schema (the search path is a cursor's own)."""
        cursor = self._current_db().cursor()
        set_search_path(cursor)
        for name, definition in COMPAT_MACROS.items():
            cursor.execute(f"CREATE OR REPLACE TEMP MACRO {name}{definition}")
        return cursor
