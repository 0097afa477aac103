"""tracedb: a SQL warehouse of PyTorch Profiler (Kineto) / Chrome-trace JSON."""

from .api import TraceDB, open  # noqa: A004
from .errors import (
    IngestError,
    MigrationError,
    QueryError,
    TraceFormatError,
    TracedbError,
    UnknownView,
    ViewError,
    WarehouseError,
)
from .version import __version__

__all__ = [
    "TraceDB", "open", "TracedbError", "IngestError", "TraceFormatError", "MigrationError",
    "QueryError", "UnknownView", "ViewError", "WarehouseError", "__version__",
]
