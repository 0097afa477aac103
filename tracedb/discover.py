"""Discover trace files and map each to run / rank / phase.

The rules (DESIGN.md, "run / rank / phase"):

- run: the first folder under the folder given on the command line; files
  directly inside that folder take the folder's own name; a file given by
  itself takes its parent folder's name (its grandparent's when the parent
  is a phase word: ``v1/train/rank0.json`` -> run v1, phase train).
- rank: ``distributedInfo.rank`` when the trace has it (the parser reads it,
  see ``TraceFile.resolve_rank``), else a number in the file name (``rank-3``,
  ``rank3``, ``rank_3``), else 0.
- phase: a known word (``KNOWN_PHASES``) in the file name, else in a folder
  between the run and the file, else the first folder between run and file,
  else ``default``.

``--run``, ``--rank`` and ``--phase`` override each rule.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import IngestError

TRACE_SUFFIXES = (".json", ".json.gz")

KNOWN_PHASES = (
    "train",
    "prefill",
    "decode",
    "eval",
    "inference",
    "warmup",
    "validation",
    "generate",
)

_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_WORD_RE = re.compile(r"[A-Za-z]+")
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._+-]")


@dataclass
class TraceFile:
    """One trace file and where it goes in the warehouse."""

    path: Path
    run: str
    rank: int
    phase: str
    size_bytes: int
    mtime_ns: int
    # Which rule decided the rank: "override", "file name" or "default"; the
    # parser may replace it with "distributedInfo" (see resolve_rank).
    rank_source: str = "default"

    def resolve_rank(self, distributed_rank: object) -> None:
        """Apply ``distributedInfo.rank`` unless ``--rank`` was given."""
        if self.rank_source == "override":
            return
        try:
            rank = int(distributed_rank)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return
        if rank >= 0:
            self.rank = rank
            self.rank_source = "distributedInfo"


RUN_CONFIG = "run.json"  # a run's configuration (tracedb.tags), not a trace


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.startswith(".") and name != RUN_CONFIG


def safe_partition_value(value: str) -> str:
    """A run or phase name safe as a Hive partition value (and a folder)."""
    cleaned = _UNSAFE_RE.sub("_", value.strip()) or "default"
    return cleaned.lstrip(".") or "default"


def rank_from_name(name: str) -> int | None:
    m = _RANK_RE.search(name)
    return int(m.group(1)) if m else None


def phase_from_parts(file_name: str, middle: list[str]) -> str:
    """Phase from the file name, then the folders between run and file."""
    for part in [file_name, *reversed(middle)]:
        words = {w.lower() for w in _WORD_RE.findall(part)}
        for phase in KNOWN_PHASES:
            if phase in words:
                return phase
    if middle:
        return middle[0]
    return "default"


def _make(path: Path, run: str, middle: list[str], run_override: str | None,
          rank_override: int | None, phase_override: str | None) -> TraceFile:
    st = path.stat()
    if rank_override is not None:
        rank, rank_source = rank_override, "override"
    else:
        from_name = rank_from_name(path.name)
        rank, rank_source = (from_name, "file name") if from_name is not None else (0, "default")
    phase = phase_override or phase_from_parts(path.name, middle)
    return TraceFile(
        path=path,
        run=safe_partition_value(run_override or run),
        rank=rank,
        phase=safe_partition_value(phase),
        size_bytes=st.st_size,
        mtime_ns=st.st_mtime_ns,
        rank_source=rank_source,
    )


def discover(paths: list[str | os.PathLike], run: str | None = None,
             rank: int | None = None, phase: str | None = None) -> list[TraceFile]:
    """Find trace files under ``paths`` (files or folders), sorted by path."""
    found: dict[Path, TraceFile] = {}
    for raw in paths:
        root = Path(raw).expanduser().absolute()
        if root.is_file():
            # A file given by itself: its folder is the run, unless that folder
            # is a phase (runs/v1/train/rank0.json -> run v1, phase train).
            if root.parent.name.lower() in KNOWN_PHASES:
                found[root] = _make(root, root.parent.parent.name, [root.parent.name], run, rank, phase)
            else:
                found[root] = _make(root, root.parent.name, [], run, rank, phase)
        elif root.is_dir():
            for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in sorted(filenames):
                    if not is_trace_name(name):
                        continue
                    path = Path(dirpath) / name
                    parts = path.relative_to(root).parts
                    if len(parts) == 1:
                        file_run, middle = root.name, []
                    else:
                        file_run, middle = parts[0], list(parts[1:-1])
                    found[path] = _make(path, file_run, middle, run, rank, phase)
        else:
            raise IngestError(f"{raw}: no such file or folder")
    if rank is not None and len(found) > 1:
        raise IngestError(
            f"--rank applies to a single file, but {len(found)} files were found"
        )
    return [found[p] for p in sorted(found)]
