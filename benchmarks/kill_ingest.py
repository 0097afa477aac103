"""The issue's crash check at full size: six 35 MB traces; an uninterrupted
`tracedb ingest` is timed, then fresh ingests are killed (SIGKILL, with their
workers) at 20%, 50% and 80% of that time; after each kill the warehouse
shows whole traces only, and ingesting again leaves exactly six complete
traces (counts from plain json, no duplicate rows, `check` clean).

    python benchmarks/kill_ingest.py [--mb 35] [--jobs 2] [--out benchmarks/out/kill]

tests/test_crash.py runs the same with 3 MB traces.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from synth import write_kineto_like  # noqa: E402
from test_crash import (  # noqa: E402
    assert_exactly,
    assert_only_whole_traces,
    expected_for,
    ingest_cmd,
    kill_at,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=35)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out/kill"))
    args = ap.parse_args()
    out = args.out.absolute()
    shutil.rmtree(out, ignore_errors=True)
    root = out / "runs"
    for i in range(6):
        write_kineto_like(root / "v1" / f"rank{i}.json", args.mb << 20, seed=i, rank=i)
    expected = expected_for(root)
    print(f"six traces of {args.mb} MB: {sum(c['events'] for c in expected.values()):,} events")

    t0 = time.monotonic()
    subprocess.run(ingest_cmd(out / "wh-full", root, jobs=args.jobs), check=True, capture_output=True)
    full = time.monotonic() - t0
    assert_exactly(out / "wh-full", expected)
    print(f"uninterrupted ingest: {full:.1f} s")

    for fraction in (0.2, 0.5, 0.8):
        wh = out / f"wh-{int(fraction * 100)}"
        finished = kill_at(ingest_cmd(wh, root, jobs=args.jobs), fraction * full)
        assert finished is None, "the ingest finished before the kill"
        visible = assert_only_whole_traces(wh)
        t0 = time.monotonic()
        res = subprocess.run(ingest_cmd(wh, root, jobs=args.jobs), capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert_exactly(wh, expected)
        print(f"killed at {fraction:.0%} ({fraction * full:.1f} s): {visible} trace(s) visible, whole; "
              f"ingest again: {time.monotonic() - t0:.1f} s -> exactly 6 complete traces")
    print("OK")


if __name__ == "__main__":
    main()
