"""A warehouse in a bucket against a local one, through the CLI as a user
runs it: ingest, `query hotspots`, `runs`, on moto's S3 server on
127.0.0.1 (no other address is reached). Prints wall times (medians of
``--repeat``), their ratio to the local warehouse's, and the requests that
`runs` and `query` make to the store (a counting proxy in between).

Loopback S3 has no network latency: the ratios show tracedb's own overhead
(fetching the catalog, reading Parquet through fsspec), not a real store's.

    python benchmarks/s3_bench.py                    # 8 ranks x 2 MB
    python benchmarks/s3_bench.py --ranks 16 --trace-mb 20
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import boto3  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402
from synth import write_kineto_like  # noqa: E402
from test_s3 import _free_port, _Proxy  # noqa: E402


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--trace-mb", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="s3-bench-"))
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    proxy = _Proxy(port)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": proxy.endpoint,
           "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(work / "home")}
    env.pop("XDG_CACHE_HOME", None)
    boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="bench",
                 aws_secret_access_key="bench", region_name="us-east-1").create_bucket(Bucket="bench")
    for rank in range(args.ranks):
        write_kineto_like(work / "runs" / "v1" / f"rank{rank}.train.json", int(args.trace_mb * 2**20), seed=rank,
                          rank=rank)
    base = [sys.executable, "-m", "tracedb.cli"]
    where = {"local": str(work / "wh"), "s3": "s3://bench/team"}
    print(f"tracedb on S3 (moto, loopback): {args.ranks} traces of {args.trace_mb} MB; medians of {args.repeat}")
    ingest = {k: timed([*base, "-w", w, "ingest", "--jobs", "1", str(work / "runs")], env) for k, w in where.items()}
    print(f"  ingest           local {ingest['local']:6.2f} s   s3 {ingest['s3']:6.2f} s   "
          f"x{ingest['s3'] / ingest['local']:.2f}")
    for name, cmd in (("query hotspots", ["query", "hotspots", "--run", "v1"]), ("runs", ["runs"])):
        times = {k: statistics.median(timed([*base, "-w", w, *cmd], env) for _ in range(args.repeat))
                 for k, w in where.items()}
        proxy.requests.clear()
        timed([*base, "-w", where["s3"], *cmd], env)
        calls = Counter(method for method, _ in proxy.requests)
        print(f"  {name:<16} local {times['local']:6.2f} s   s3 {times['s3']:6.2f} s   "
              f"x{times['s3'] / times['local']:.2f}   requests: {dict(sorted(calls.items()))}")
    proxy.server.shutdown()
    server.stop()


if __name__ == "__main__":
    main()
