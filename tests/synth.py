"""Synthetic Kineto-like traces of a given size, written fast (text, not
json.dumps of dicts), for the crash and concurrency tests and
benchmarks/kill_ingest.py. Pretty-printed like Kineto: one event per block."""

from __future__ import annotations

import json
import random
from pathlib import Path


def write_kineto_like(path: Path, target_bytes: int, seed: int, rank: int = 0) -> Path:
    """A trace of about target_bytes: CPU ops launching kernels (with ac2g
    flows), B/E steps, counters and metadata; content differs by seed."""
    rnd = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [f"aten::op_{seed}_{i}" for i in range(40)]
    kernels = [f"void kernel_{seed}_{i}<float, 4>(float*, int)" for i in range(30)]
    parts = ['{\n  "schemaVersion": 1,\n  "distributedInfo": {"backend": "nccl", "rank": %d, "world_size": 8},\n'
             '  "traceEvents": [\n' % rank]
    parts.append('  {\n    "name": "process_name", "ph": "M", "ts": 0, "pid": 1, "tid": 0,\n'
                 '    "args": {"name": "python"}\n  }')
    size = sum(map(len, parts))
    ts = 1_000_000
    i = 0
    while size < target_bytes:
        i += 1
        ts += rnd.randint(5, 50)
        dur = rnd.randint(1, 400)
        block = []
        block.append(
            '  {\n    "ph": "X", "cat": "cpu_op", "name": "%s", "pid": 1, "tid": 7,\n'
            '    "ts": %d.%03d, "dur": %d.%03d,\n    "args": {"External id": %d, "Sequence number": %d}\n  }'
            % (rnd.choice(names), ts, rnd.randint(0, 999), dur, rnd.randint(0, 999), i, i))
        block.append(
            '  {\n    "ph": "X", "cat": "kernel", "name": "%s", "pid": 0, "tid": 7,\n'
            '    "ts": %d, "dur": %d,\n    "args": {"correlation": %d, "device": 0, "stream": 7,'
            ' "grid": [%d, 1, 1], "block": [128, 1, 1]}\n  }'
            % (rnd.choice(kernels), ts + 30, rnd.randint(1, 900), i, rnd.randint(1, 512)))
        block.append('  {\n    "ph": "s", "id": %d, "pid": 1, "tid": 7, "ts": %d, "cat": "ac2g", "name": "ac2g"\n  }'
                     % (i, ts))
        block.append('  {\n    "ph": "f", "id": %d, "pid": 0, "tid": 7, "ts": %d, "cat": "ac2g", "name": "ac2g",'
                     ' "bp": "e"\n  }' % (i, ts + 30))
        if i % 50 == 0:
            block.append('  {\n    "ph": "C", "name": "memory", "pid": 1, "ts": %d,\n'
                         '    "args": {"allocated": %d, "reserved": %d}\n  }' % (ts, i, 2 * i))
            block.append('  {\n    "ph": "B", "name": "ProfilerStep#%d", "pid": 1, "tid": 8, "ts": %d\n  }' % (i, ts))
            block.append('  {\n    "ph": "E", "pid": 1, "tid": 8, "ts": %d\n  }' % (ts + 10))
        text = ",\n" + ",\n".join(block)
        parts.append(text)
        size += len(text)
    parts.append('\n  ],\n  "traceName": %s,\n  "baseTimeNanoseconds": 1700000000000000000\n}\n'
                 % json.dumps(str(path)))
    path.write_text("".join(parts))
    return path
