"""Take traces out of the warehouse: `tracedb remove --run v1`.

Rows leave the catalog in one atomic swap first (readers stop seeing the
traces at once), then their Parquet files are deleted. A crash in between
leaves only orphan files, which no view lists and `tracedb check --repair`
removes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from . import locks
from .catalog import Catalog, trace_files
from .errors import WarehouseError
from .schema import TABLES
from .summaries import SUMMARY_DIR


def unregister(warehouse: Path, file_ids: list[str],
               on_wait: Callable[[str], None] | None = None) -> int:
    """Remove the traces with these file ids (ingested or failed) from the
    catalog, then delete their files; returns how many rows went."""
    if not file_ids:
        return 0
    catalog = Catalog(warehouse)
    with catalog.writing(on_wait) as con:
        files = con.execute("SELECT files, summaries FROM traces WHERE list_contains(?, file_id)",
                            [file_ids]).fetchall()
        con.execute("DELETE FROM traces WHERE list_contains(?, file_id)", [file_ids])
    for files_json, summaries_json in files:
        for rel in trace_files(files_json, summaries_json):
            (warehouse / rel).unlink(missing_ok=True)
    remove_empty_partitions(warehouse)
    return len(files)


def remove_empty_partitions(warehouse: Path) -> None:
    for table in (*TABLES, SUMMARY_DIR):
        root = warehouse / table
        dirs = [d for d in root.rglob("*") if d.is_dir()] if root.is_dir() else []
        for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
            try:
                d.rmdir()
            except OSError:
                pass  # not empty


def remove(warehouse: str | Path, run: str, rank: int | None = None, phase: str | None = None,
           on_wait: Callable[[str], None] | None = None) -> int:
    """Remove every trace of ``run`` (narrowed by rank and phase); returns
    the number of traces removed. No ingest runs meanwhile (new ones wait)."""
    warehouse = Path(warehouse).absolute()
    catalog = Catalog(warehouse)
    con = catalog.connect_readonly()
    try:
        sql = "SELECT file_id FROM traces WHERE run = ?"
        args: list = [run]
        if rank is not None:
            sql += " AND rank = ?"
            args.append(rank)
        if phase is not None:
            sql += " AND phase = ?"
            args.append(phase)
        ids = [r[0] for r in con.execute(sql, args).fetchall()]
    finally:
        con.close()
    try:
        with locks.exclusive(warehouse, on_wait):
            return unregister(warehouse, ids, on_wait)
    except OSError as e:
        raise WarehouseError(f"{warehouse}: cannot remove: {e.strerror or e}") from None
