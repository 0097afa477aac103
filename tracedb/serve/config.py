"""What a server listens on and the limits it keeps: :class:`ServeConfig`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracedb.errors import TracedbError

#: The PostgreSQL version reported to clients; psql and drivers pick their
#: catalog queries by it.
PG_VERSION = "15.0"

AUTH_METHODS = ("scram-sha-256", "md5", "password")

#: PostgreSQL's own limit on a start-up packet; also the limit on every message before authentication.
STARTUP_MESSAGE_BYTES = 10_000


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*", re.IGNORECASE)
_UNITS = {"B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


class ServeError(TracedbError):
    """The server cannot start: bad configuration, missing catalog, unsafe address."""


@dataclass(frozen=True)
class ServeConfig:
    """How :class:`~tracedb.serve.Server` listens and what it allows.

    ``port=0`` picks a free port (see :attr:`Server.port`). ``password=None``
    accepts every client without authentication and is only allowed on a
    loopback ``host``. ``auth_method`` is ``"scram-sha-256"``, ``"md5"`` or
    ``"password"`` (cleartext).

    Limits (each refusal is an ErrorResponse with a SQLSTATE):

    - ``max_connections``: authenticated sessions at once; the next is refused
      with 53300 (too_many_connections).
    - ``max_startup_connections``: connections still in start-up or
      authentication; when full, the oldest of them is closed for the new one,
      so silent sockets cannot lock clients out.
    - ``auth_timeout_s``: start-up and authentication must finish within it
      (PostgreSQL's ``authentication_timeout``; at most 60 s).
    - ``idle_timeout_s``: an authenticated session that sends nothing for this
      long is closed (0: never).
    - ``statement_timeout_s``: a statement, and the sending of its rows, must
      finish within it (57014).
    - ``max_rows`` and ``max_result_bytes``: a result with more rows or more
      encoded bytes fails (54000) after what was sent; nothing is truncated.
    - ``max_statement_bytes``: longer statement text is refused (54000).
    - ``memory_limit`` and ``threads``: DuckDB's, for the whole server.
      DuckDB does not count every allocation against its limit (a 300 MB
      ``repeat()`` or a ``list()`` of 1e8 numbers goes past it), so
    - ``limit_process_memory`` also caps the process's data segment
      (``RLIMIT_DATA``) at what it uses when the server starts plus
      ``memory_limit`` plus 512 MiB: an allocation past it fails the
      statement (53200) instead of the machine. It is process-wide and
      irreversible, for a process that only serves (``tracedb serve`` sets it).
    - ``confine``: also forbid the server's threads (and DuckDB's, which they
      start), through Linux Landlock, to write, create or delete any file but
      in the server's private folder. Other threads of the process keep their
      rights; without Landlock in the kernel this is a logged no-op.
    """

    host: str = "127.0.0.1"
    port: int = 5433
    password: str | None = None
    auth_method: str = "scram-sha-256"
    statement_timeout_s: float = 30.0
    max_rows: int = 1_000_000
    max_result_bytes: int = 256 * 1024 * 1024
    max_statement_bytes: int = 1024 * 1024
    max_connections: int = 64
    max_startup_connections: int = 512
    auth_timeout_s: float = 60.0
    idle_timeout_s: float = 3600.0
    memory_limit: str = "1GB"
    threads: int = 2
    confine: bool = True
    limit_process_memory: bool = False

    @property
    def memory_limit_bytes(self) -> int:
        m = _SIZE.fullmatch(self.memory_limit)
        if m is None:
            raise ServeError(f"memory_limit {self.memory_limit!r} is not a size such as 512MB or 2GB")
        return int(float(m.group(1)) * _UNITS[(m.group(2) or "B").upper().replace("IB", "B").rstrip("B") or "B"])

    def check(self) -> None:
        """Raise :class:`ServeError` for a value out of range."""
        if self.auth_method not in AUTH_METHODS:
            raise ServeError(f"unknown auth_method {self.auth_method!r}; expected one of {', '.join(AUTH_METHODS)}")
        if self.password is not None and not self.password:
            raise ServeError("the password must not be empty")
        positive = {"statement_timeout_s": self.statement_timeout_s, "max_rows": self.max_rows,
                    "max_result_bytes": self.max_result_bytes, "max_statement_bytes": self.max_statement_bytes,
                    "max_connections": self.max_connections, "max_startup_connections": self.max_startup_connections,
                    "auth_timeout_s": self.auth_timeout_s, "threads": self.threads}
        for name, value in positive.items():
            if value <= 0:
                raise ServeError(f"{name} must be positive, not {value}")
        if self.auth_timeout_s > 60:
            raise ServeError(f"auth_timeout_s must be at most 60 s, not {self.auth_timeout_s}")
        if self.memory_limit_bytes < 64 * 1024 * 1024:
            raise ServeError(f"memory_limit must be at least 64MB, not {self.memory_limit}")
        if self.idle_timeout_s < 0:
            raise ServeError(f"idle_timeout_s must not be negative, not {self.idle_timeout_s}")
