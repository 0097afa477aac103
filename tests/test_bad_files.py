"""As a new user would try it: a folder with two good traces and truncated,
corrupt-gzip, empty, not-a-trace and binary files. The good ones are fully in
the warehouse, each bad one is one line on stderr, the exit code is 1; after
fixing a file, the next run ingests just that file."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracedb
from conftest import CORPUS, write_trace
from oracle import expected_counts
from tracedb.cli import main
from tracedb.parse import source

GOOD1 = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 100 * i, "dur": 40}
         for i in range(30)] + [{"ph": "C", "name": "mem", "pid": 1, "ts": 5, "args": {"a": 1}}]
GOOD2 = [{"ph": "B", "name": "step", "pid": 1, "tid": 1, "ts": 0}, {"ph": "E", "pid": 1, "tid": 1, "ts": 50},
         {"ph": "i", "name": "mark", "pid": 1, "tid": 1, "ts": 10}]
# bad file -> what its stderr line says
BAD = {
    "truncated.json": "at byte 700, event 6: truncated JSON: the file ends inside event 6",
    "corrupt.json.gz": "corrupt gzip",
    "empty.json": "at byte 0: empty file",
    "not_a_trace.json.gz": "at byte 0: not a trace: no traceEvents array",
    "binary.json": "at byte 0: not JSON: binary data (byte 0x89)",
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "runs" / "v1"
    write_trace(d / "good1.json", GOOD1)
    (d / "good2.json.gz").write_bytes(gzip.compress(json.dumps(GOOD2).encode()))
    full = json.dumps({"traceEvents": GOOD1}, indent=1).encode()
    (d / "truncated.json").write_bytes(full[:700])
    packed = bytearray(gzip.compress(full * 20))
    packed[len(packed) // 2: len(packed) // 2 + 8] = b"\xde\xad\xbe\xef" * 2
    (d / "corrupt.json.gz").write_bytes(bytes(packed))
    (d / "empty.json").write_bytes(b"")
    et = CORPUS / "hta/execution_trace/benchmark_simple_add_et.json.gz"  # a PyTorch execution trace
    if et.exists():
        shutil.copy(et, d / "not_a_trace.json.gz")
    else:
        (d / "not_a_trace.json.gz").write_bytes(gzip.compress(b'{"schema": "1.0.1", "nodes": []}'))
    (d / "binary.json").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    return d


def _check_outcome(stderr: str, wh: Path, folder: Path) -> None:
    errors = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == len(BAD)
    for name, says in BAD.items():
        (line,) = [e for e in errors if e.startswith(f"Error: {folder / name} ")]
        assert says in line
    assert stderr.splitlines()[-1].endswith("; 5 failed.")
    db = tracedb.open(wh)
    rows = db.sql("SELECT source_path, status, event_count FROM traces ORDER BY source_path").fetchall()
    by_name = {Path(r[0]).name: r[1:] for r in rows}
    assert by_name.pop("good1.json") == ("ok", expected_counts(GOOD1)["events"])
    assert by_name.pop("good2.json.gz") == ("ok", expected_counts(GOOD2)["events"])
    assert by_name == {name: ("failed", None) for name in BAD}
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(30 + 2,)]
    assert db.sql("SELECT count(*) FROM counters").fetchall() == [(1,)]


def test_cli_runner(folder: Path, tmp_path: Path):
    wh = tmp_path / "wh"
    res = CliRunner().invoke(main, ["-w", str(wh), "ingest", str(folder.parent)])
    assert res.exit_code == 1
    assert res.stdout == ""
    _check_outcome(res.stderr, wh, folder)


def test_real_process_then_fix_one_file(folder: Path, tmp_path: Path):
    wh = tmp_path / "wh"
    cmd = [sys.executable, "-m", "tracedb.cli", "-w", str(wh), "ingest", str(folder.parent)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 1
    _check_outcome(res.stderr, wh, folder)

    write_trace(folder / "truncated.json", GOOD2 + GOOD2)  # fixed
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 1  # four files are still bad
    assert "Ingested 1 file(s): 4 events" in res.stderr
    assert "skipped 2 already ingested; 4 failed." in res.stderr
    db = tracedb.open(wh)
    rows = db.sql("SELECT status, count(*) FROM traces GROUP BY status ORDER BY status").fetchall()
    assert rows == [("failed", 4), ("ok", 3)]  # the failed row of the fixed file was replaced
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(30 + 2 + 4,)]


def test_usage_errors_exit_2(tmp_path: Path):
    res = CliRunner().invoke(main, ["-w", str(tmp_path / "wh"), "ingest", str(tmp_path / "nowhere")])
    assert res.exit_code == 2
    res = CliRunner().invoke(main, ["-w", str(tmp_path / "wh"), "check", "--bogus"])
    assert res.exit_code == 2


# -- gzip: ISA-L's igzip where isal is installed, else zlib; the same errors --


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch) -> str:
    if request.param == "zlib":
        monkeypatch.setattr(source, "igzip", None)
    return request.param


def test_gzip_either_inflater_reads_and_fails_alike(inflater: str, tmp_path: Path):
    d = tmp_path / "runs" / "v1"
    d.mkdir(parents=True)
    full = json.dumps({"traceEvents": GOOD1 * 40}, indent=1).encode()
    packed = gzip.compress(full)
    (d / "good.json.gz").write_bytes(packed)
    (d / "truncated.json.gz").write_bytes(packed[: len(packed) // 2])
    bad_block = bytearray(packed)
    bad_block[10] = 0xFF  # the first deflate block's header: type 3, which does not exist
    (d / "bad_block.json.gz").write_bytes(bytes(bad_block))
    bad_crc = bytearray(packed)
    bad_crc[-8] ^= 0xFF  # the trailer's CRC-32 of the data
    (d / "bad_crc.json.gz").write_bytes(bytes(bad_crc))
    with source.open_trace(d / "good.json.gz") as f:
        assert (type(f).__module__.startswith("isal"), f.read()) == (inflater == "isal", full)

    wh = tmp_path / "wh"
    res = CliRunner().invoke(main, ["-w", str(wh), "ingest", str(d.parent)])
    assert res.exit_code == 1
    errors = sorted(line for line in res.stderr.splitlines() if line.startswith("Error:"))
    assert len(errors) == 3
    says = {"bad_block.json.gz": "corrupt gzip: ", "bad_crc.json.gz": "corrupt gzip: ",
            "truncated.json.gz": "truncated gzip: the compressed stream ends early"}
    for line, (name, what) in zip(errors, sorted(says.items())):
        assert line.startswith(f"Error: {d / name} ") and what in line, line
    db = tracedb.open(wh)
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(expected_counts(GOOD1 * 40)["events"],)]
