"""Queries of one warehouse through two (or more) checkouts of tracedb.

    git worktree add /tmp/before <commit>     # and build its C readers:
    (cd /tmp/before && python setup.py build_ext --inplace)
    python benchmarks/abq.py WAREHOUSE /tmp/before . --rounds 5 \\
        --query "hotspots --run v1" --query "hotspots --run v1 --rank 3"

The catalog's views are made by the tracedb that writes the catalog, so each
checkout queries a copy of WAREHOUSE of its own: the Parquet files hard links
of WAREHOUSE's, the catalog made by that checkout's `tracedb migrate`. Each
round runs every query once from each checkout, in a shuffled order, each a
new `tracedb query` process (`--format csv`); prints each run as it ends
(stderr) and the median seconds of each query and checkout (stdout). The
checkouts must print the same rows (floats to 9 significant digits, as the
order of a sum moves their last bits), or it says which differ.

`--make RUNSxRANKS` first makes WAREHOUSE when it does not exist: RUNS runs
(v1, v2, ...) of RANKS rank files of one tile of the bench's source trace
each (9.8 MB, 26,973 events), ingested by the first checkout. `--make 2x1000`
writes 19.7 GB of JSON (about 12 minutes here) and ingests it (3 minutes),
into a warehouse of 1.2 GB; the JSON goes when the warehouse is made.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import checkout_cmd, run_measured
from workloads import DEFAULT_SOURCE, Source, write_tiled

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"


def env_of(checkout: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(checkout).resolve())}


def make(wh: Path, shape: str, checkout: str, workdir: str) -> None:
    runs, ranks = (int(n) for n in shape.lower().split("x"))
    src = Source.load(CORPUS / DEFAULT_SOURCE)
    root = Path(tempfile.mkdtemp(prefix="tracedb-abq-", dir=workdir))
    try:
        for r in range(runs):
            for i in range(ranks):  # tile_offset: each run's events (and content hashes) its own
                write_tiled(src, root / f"v{r + 1}" / f"rank-{i}.json", 1, rank=i, tile_offset=r)
        subprocess.run(checkout_cmd(wh, "ingest", str(root)), env=env_of(checkout), check=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def copy_for(wh: Path, checkout: str, folder: Path) -> Path:
    """WAREHOUSE's files hard-linked into ``folder``, its catalog made again
    by ``checkout``."""
    shutil.copytree(wh, folder, copy_function=os.link)
    subprocess.run(checkout_cmd(folder, "migrate"), env=env_of(checkout), check=True,
                   stdout=subprocess.DEVNULL)
    return folder


def rows_of(text: str) -> list[tuple]:
    def norm(v: str):
        try:
            return float(f"{float(v):.9g}")
        except ValueError:
            return v
    return [tuple(norm(v) for v in row) for row in csv.reader(io.StringIO(text))]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("warehouse", type=Path)
    ap.add_argument("checkouts", nargs="+", help="checkout folders")
    ap.add_argument("--query", action="append", required=True,
                    help='a query, as after "tracedb query" (repeat the option for more)')
    ap.add_argument("--rounds", type=int, default=5, help="runs of each query from each checkout (default 5)")
    ap.add_argument("--make", metavar="RUNSxRANKS", help="make WAREHOUSE first when it does not exist")
    ap.add_argument("--workdir", help="where the copies (hard links: on WAREHOUSE's file system) and --make's "
                                      "JSON go (default: beside WAREHOUSE)")
    args = ap.parse_args(argv)
    workdir = args.workdir or str(args.warehouse.resolve().parent)
    if args.make and not args.warehouse.exists():
        make(args.warehouse, args.make, args.checkouts[0], workdir)
    work = Path(tempfile.mkdtemp(prefix="tracedb-abq-", dir=workdir))
    try:
        copies = {c: copy_for(args.warehouse, c, work / f"wh{i}") for i, c in enumerate(args.checkouts)}
        seconds: dict[tuple[str, str], list[float]] = {(q, c): [] for q in args.query for c in args.checkouts}
        answers: dict[tuple[str, str], list[tuple]] = {}
        for _ in range(args.rounds):
            for q in args.query:
                for c in random.sample(args.checkouts, len(args.checkouts)):
                    cmd = checkout_cmd(copies[c], "query", *shlex.split(q), "--format", "csv")
                    r = run_measured(cmd, env=env_of(c))
                    seconds[q, c].append(r["seconds"])
                    answers[q, c] = rows_of(r["stdout"])
                    print(f"{q} | {c}: {r['seconds']:.2f} s", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"| query | {' | '.join(args.checkouts)} | rows |")
    print(f"|---|{'---:|' * len(args.checkouts)}---:|")
    for q in args.query:
        medians = [f"{statistics.median(seconds[q, c]):.2f}" for c in args.checkouts]
        first = answers[q, args.checkouts[0]]
        same = all(answers[q, c] == first for c in args.checkouts)
        print(f"| {q} | {' | '.join(medians)} | {max(0, len(first) - 1)}{'' if same else ' (the rows differ)'} |")


if __name__ == "__main__":
    main()
