"""How many pieces of real traces the C reader declines, and why.

Cuts every trace of the corpus (../shared/corpus) and the CUDA fixtures
(tests/fixtures/cuda) into pieces as ingest does, and asks the C reader
(tracedb/parse/_fastparse.c) for each: a declined piece goes to the
reference reader, several times slower. Files that cannot be cut at all
(not one event per block, no event array) are read whole by the reference
and listed apart.

    python benchmarks/declines.py                  # pieces of 4 MiB, as ingest
    python benchmarks/declines.py --piece-kib 64   # smaller pieces: more of them
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This checkout's tracedb, not an installed one (an editable install's may be
# another checkout's): a worktree's copy of this script measures the worktree.
sys.path.insert(0, str(ROOT))

from tracedb.parse import pieces  # noqa: E402
from tracedb.parse.pieces import NotSplittable, SplitParser, decline_reason  # noqa: E402

SOURCES = (ROOT.parent / "shared" / "corpus", ROOT / "tests" / "fixtures" / "cuda")


def traces() -> list[Path]:
    return sorted(p for root in SOURCES for p in root.rglob("*")
                  if p.is_file() and p.name.endswith((".json", ".json.gz")))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--piece-kib", type=int, default=pieces.PIECE_BYTES >> 10, help="piece size (KiB)")
    args = ap.parse_args(argv)
    if pieces._fastparse is None:
        raise SystemExit("the C reader is not built (pip install -e .)")
    why: Counter[str] = Counter()
    where: dict[str, str] = {}
    whole: Counter[str] = Counter()
    n_pieces = n_declined = n_files = 0
    for path in traces():
        n_files += 1
        rel = path.relative_to(ROOT.parent) if path.is_relative_to(ROOT.parent) else path
        try:
            for piece in SplitParser(path, piece_bytes=args.piece_kib << 10).pieces():
                n_pieces += 1
                reason = decline_reason(piece)
                if reason is not None:
                    n_declined += 1
                    why[reason] += 1
                    where.setdefault(reason, str(rel))
        except NotSplittable as e:
            whole[str(e)] += 1
            where.setdefault(str(e), str(rel))
    print(f"{n_files} traces, {n_pieces} pieces of {args.piece_kib} KiB: "
          f"{n_declined} declined by the C reader ({100 * n_declined / max(n_pieces, 1):.1f}%)")
    for reason, n in why.most_common():
        print(f"  {n:6}  {reason}  (e.g. {where[reason]})")
    print(f"{sum(whole.values())} traces read whole by the reference (not cut into pieces):")
    for reason, n in whole.most_common():
        print(f"  {n:6}  {reason}  (e.g. {where[reason]})")


if __name__ == "__main__":
    main()
