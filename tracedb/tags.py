"""Run configurations: key=value tags per run (tp=2, dtype=bf16, batch_size=8).

Tags come from ``tracedb ingest --tag k=v`` and from a ``run.json`` (a flat
JSON object, as ``tracedb.torch`` writes it) in a trace's folder or the
folder above it (``root/<run>/run.json`` beside ``root/<run>/<phase>/``).
They are kept in the warehouse as Parquet, one small file per run
(``Warehouse.tags_key``: ``run_tags/run=<run>/tags.parquet``; run, key, value), so they survive a
rebuild of the catalog like the traces do; the catalog's ``run_tags`` view
lists them. A tag given again replaces the run's old value of that key;
removing a whole run removes its tags.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import duckdb

from .discover import RUN_CONFIG
from .errors import IngestError
from .sqltext import sql_literal
from .warehouse import TAGS_DIR

if TYPE_CHECKING:
    from .discover import TraceFile
    from .warehouse import Warehouse

RUN_TAGS_DOC = ("Configuration tags of each run (ingest --tag k=v, or the run.json beside its traces): "
                "one row per run and key.")
COLUMN_DOCS = {"run": "Run the tag belongs to.", "key": "Tag name (tp, dtype, batch_size, ...).",
               "value": "Tag value, as text."}


def tag_value(value: Any) -> str:
    """A configuration value as tag text: strings as they are, booleans as
    true/false, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _read_config(path: Path) -> dict[str, str]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise IngestError(f"{path}: cannot read the run's configuration: {e}") from None
    if not isinstance(doc, dict):
        raise IngestError(f"{path}: a run's configuration is a JSON object of key: value")
    return {str(k): tag_value(v) for k, v in doc.items()}


def run_configs(files: list[TraceFile]) -> dict[str, dict[str, str]]:
    """Tags per run from the run.json files beside ``files`` (in a trace's
    folder or the one above; the nearer one wins on a key)."""
    found: dict[str, dict[str, str]] = {}
    read: dict[Path, dict[str, str]] = {}
    for tf in files:
        for folder in (tf.path.parent.parent, tf.path.parent):
            path = folder / RUN_CONFIG
            if path not in read:
                read[path] = _read_config(path) if path.is_file() else {}
            found.setdefault(tf.run, {}).update(read[path])
    return {run: tags for run, tags in found.items() if tags}


def _write(warehouse: Warehouse, con: duckdb.DuckDBPyConnection, run: str, tags: dict[str, str]) -> None:
    """The run's tags file, merged with the one there, published atomically."""
    key = warehouse.tags_key(run)
    merged: dict[str, str] = {}
    if warehouse.storage.exists(key):
        merged = dict(con.execute("SELECT key, value FROM read_parquet(?)", [warehouse.location(key)]).fetchall())
    merged.update(tags)
    tmp = warehouse.staging_path(f"tags.{os.getpid()}.{uuid.uuid4().hex[:8]}.parquet")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    rows = sorted(merged.items())
    try:
        con.execute(
            "COPY (SELECT ?::VARCHAR AS run, unnest(?::VARCHAR[]) AS key, unnest(?::VARCHAR[]) AS value) "
            f"TO {sql_literal(tmp)} (FORMAT parquet)",
            [run, [k for k, _ in rows], [v for _, v in rows]],
        )
        warehouse.storage.put(tmp, key)
    finally:
        tmp.unlink(missing_ok=True)


def save(warehouse: Warehouse, tags: dict[str, dict[str, str]],
         on_wait: Callable[[str], None] | None = None) -> None:
    """Set tags of runs (run -> key -> value) and commit the catalog, whose
    ``run_tags`` view then lists them. (Under the ingest lock: the tags
    stage their file, and a check or a starting ingest clears the staging
    area only when no ingest holds it.)"""
    def change(con: duckdb.DuckDBPyConnection) -> None:
        for run, kv in sorted(tags.items()):
            if kv:
                _write(warehouse, con, run, kv)

    with warehouse.ingesting(on_wait):
        warehouse.commit(change, on_wait)


def drop(warehouse: Warehouse, run: str, on_wait: Callable[[str], None] | None = None) -> None:
    """Remove a run's tags (``tracedb remove --run``): out of the view in
    one catalog swap (the view is rebuilt from the files there are)."""
    key = warehouse.tags_key(run)
    if not warehouse.storage.exists(key):
        return
    def change(_con: duckdb.DuckDBPyConnection) -> None:  # (tags are written under the same lock)
        warehouse.storage.remove(key)
        warehouse.prune((TAGS_DIR,))

    warehouse.commit(change, on_wait)


def bind(con: duckdb.DuckDBPyConnection, warehouse: Warehouse) -> None:
    """(Re)define the ``run_tags`` view over the tags files there are."""
    files = [warehouse.location(key) for key in warehouse.tags_keys()]
    if files:
        listed = ", ".join(sql_literal(f) for f in files)
        source = f"SELECT run, key, value FROM read_parquet([{listed}], hive_partitioning = false)"
    else:
        source = "SELECT NULL::VARCHAR AS run, NULL::VARCHAR AS key, NULL::VARCHAR AS value WHERE false"
    con.execute(f"CREATE OR REPLACE VIEW run_tags AS {source}")
    con.execute(f"COMMENT ON VIEW run_tags IS {sql_literal(RUN_TAGS_DOC)}")
    for col, doc in COLUMN_DOCS.items():
        con.execute(f"COMMENT ON COLUMN run_tags.{col} IS {sql_literal(doc)}")
