"""tracedb: a SQL warehouse of PyTorch Profiler (Kineto) / Chrome-trace JSON."""

__version__ = "0.1.0"

from .api import TraceDB, open  # noqa: E402,A004
from .errors import (  # noqa: E402
    IngestError,
    MigrationError,
    QueryError,
    TraceFormatError,
    TracedbError,
    UnknownView,
    ViewError,
    WarehouseError,
)

__all__ = [
    "TraceDB", "open", "TracedbError", "IngestError", "TraceFormatError", "MigrationError",
    "QueryError", "UnknownView", "ViewError", "WarehouseError", "__version__",
]
