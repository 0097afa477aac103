"""Take traces out of the warehouse: `tracedb remove --run v1`.

Rows leave the catalog in one atomic swap first (readers stop seeing the
traces at once), then their Parquet files are deleted
(``Warehouse.unregister``). A crash in between leaves only orphan files,
which no view lists and `tracedb check --repair` removes.
"""

from __future__ import annotations

import os
from typing import Callable

from .errors import WarehouseError
from .warehouse import Warehouse


def remove(warehouse: Warehouse | str | os.PathLike, run: str, rank: int | None = None, phase: str | None = None,
           on_wait: Callable[[str], None] | None = None) -> int:
    """Remove every trace of ``run`` (narrowed by rank and phase); returns
    the number of traces removed. No ingest runs meanwhile (new ones wait)."""
    wh = Warehouse.of(warehouse)
    ids = wh.find(run, rank, phase)
    try:
        with wh.exclusive(on_wait):
            return wh.unregister(ids, on_wait)
    except OSError as e:
        raise WarehouseError(f"{wh}: cannot remove: {e.strerror or e}") from None
