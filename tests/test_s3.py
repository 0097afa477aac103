"""A warehouse in an object store (``-w s3://bucket/prefix``), against a real
S3 API on loopback: moto's server (``ThreadedMotoServer`` on 127.0.0.1 and a
free port). No test reaches any other address. The bucket is inspected with
boto3 (not with tracedb's code); each "machine" is a HOME and a working
folder of its own, as two hosts would have.

Where a test must see the requests, or break one, a small HTTP proxy (also
on loopback) stands between tracedb and moto: it counts the requests and
drops the connection of those a test picks, as a network fault would."""

from __future__ import annotations

import csv
import http.client
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import boto3
import pytest
from moto.server import ThreadedMotoServer

import tracedb
from conftest import ROOT, load_json, write_trace
from oracle import expected_counts, kernel_sums
from synth import write_kineto_like

CUDA = ROOT / "tests" / "fixtures" / "cuda"
SECRET = "s3cr3t-key-never-printed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Proxy:
    """HTTP on loopback in front of moto: records (method, path) of every
    request; ``drop(method, path)`` true closes the connection unanswered;
    ``before(method, path)`` runs before a request goes on to moto."""

    def __init__(self, upstream: int):
        self.requests: list[tuple[str, str]] = []
        self.drop = lambda method, path: False
        self.before = lambda method, path: None
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                path = unquote(self.path)
                owner.requests.append((self.command, path))
                if owner.drop(self.command, path):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                owner.before(self.command, path)
                up = http.client.HTTPConnection("127.0.0.1", upstream, timeout=30)
                up.request(self.command, self.path, body=body, headers=dict(self.headers))
                resp = up.getresponse()
                data = resp.read()
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", resp.getheader("Content-Length") or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                up.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def lists(self) -> list[str]:
        """The listing requests seen (GET of a bucket, with list-type or prefix)."""
        return [p for m, p in self.requests if m == "GET" and ("list-type" in p or "prefix=" in p)]


@pytest.fixture(scope="module")
def s3():
    """moto's S3 on 127.0.0.1, and the environment that points the AWS chain at it."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": "/nonexistent/aws-config", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def _client(endpoint: str | None = None):
    return boto3.client("s3", endpoint_url=endpoint or os.environ["AWS_ENDPOINT_URL"])


_buckets = iter(range(10**6))


@pytest.fixture
def bucket(s3) -> str:
    """A new empty bucket."""
    name = f"traces-{next(_buckets)}-{os.getpid()}"
    _client().create_bucket(Bucket=name)
    return name


def keys(bucket: str, prefix: str = "") -> list[str]:
    pages = _client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def machine(tmp_path: Path, name: str) -> dict[str, str]:
    """The environment of a machine of its own: an empty HOME (its cache)
    and a working folder."""
    home = tmp_path / name / "home"
    home.mkdir(parents=True)
    (tmp_path / name / "work").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    return {**env, "HOME": str(home)}


def cli(env: dict[str, str], cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracedb.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def on_machine(monkeypatch, tmp_path: Path, name: str) -> None:
    """This process as another machine (in-process API calls)."""
    home = tmp_path / name / "home"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture(scope="module")
def team(s3, tmp_path_factory) -> dict:
    """fixtures/cuda ingested into s3://<bucket>/team by `tracedb ingest`
    from one machine, and the same files into a local warehouse."""
    tmp = tmp_path_factory.mktemp("team")
    name = f"team-{os.getpid()}"
    _client().create_bucket(Bucket=name)
    env = machine(tmp, "a")
    url = f"s3://{name}/team"
    done = cli(env, tmp / "a" / "work", "-w", url, "ingest", str(CUDA))
    assert done.returncode == 0, done.stderr
    local = tmp / "local-wh"
    tracedb.open(local).ingest([CUDA], jobs=1)
    return {"url": url, "bucket": name, "tmp": tmp, "local": local, "ingest": done}


def test_layout_in_the_bucket_is_the_local_one(team):
    """The catalog and the Parquet partitions sit under the prefix as in a
    local folder; nothing of the ingest's working files reaches the bucket."""
    local = team["local"]
    want = sorted(p.relative_to(local).as_posix() for p in local.rglob("*.parquet"))
    got = keys(team["bucket"], "team/")
    assert "team/tracedb.duckdb" in got
    assert sorted(k[len("team/"):] for k in got if k.endswith(".parquet")) == want
    assert not [k for k in got if ".staging" in k or k.endswith((".tmp", ".lock"))]
    assert any(k.startswith("team/events/run=v2/rank=0/phase=train/") for k in got)
    assert "Ingested 4 file(s)" in team["ingest"].stderr
    assert not [k for k in got if "/.tracedb/ingests/" in k]  # the ingest's object went with it


def test_hotspots_from_an_empty_home_with_the_url_alone(team, tmp_path):
    """A third machine (empty HOME, empty folder) queries with the URL: the
    same rows as the local warehouse of the same files, and the kernels'
    calls and totals of plain json."""
    env = machine(tmp_path, "c")
    work = tmp_path / "c" / "work"
    out = cli(env, work, "-w", team["url"], "query", "hotspots", "--run", "v2", "--format", "csv")
    assert out.returncode == 0, out.stderr
    local = cli(env, work, "-w", str(team["local"]), "query", "hotspots", "--run", "v2", "--format", "csv")
    assert out.stdout == local.stdout
    got = {r["name"]: (int(r["calls"]), float(r["total_us"])) for r in rows(out.stdout) if r["kind"] == "kernel"}
    want = kernel_sums(load_json(CUDA / "v2" / "rank0.train.json.gz")["traceEvents"])
    assert {n: c for n, (c, _) in got.items()} == {n: c for n, (c, _) in want.items()}
    for n, (_, total_ns) in want.items():
        assert got[n][1] == pytest.approx(total_ns / 1000, abs=1e-3)
    assert list(work.iterdir()) == []  # nothing written where it ran
    cached = list((tmp_path / "c" / "home" / ".cache" / "tracedb" / "warehouses").glob("*/tracedb.*.duckdb"))
    assert len(cached) == 1


def test_the_marts_equal_the_local_warehouses(team, monkeypatch, tmp_path):
    on_machine(monkeypatch, tmp_path, "d")
    remote, local = tracedb.open(team["url"]), tracedb.open(team["local"])
    for name in ("hotspots", "step_times", "kernel_launches", "gpu_utilization", "overlap", "collectives"):
        got, want = sorted(remote.query(name).fetchall(), key=repr), sorted(local.query(name).fetchall(), key=repr)
        assert got == want and (got or name == "collectives"), name
    counts = remote.sql("SELECT source_path, event_count, flow_count, counter_count FROM traces").fetchall()
    assert len(counts) == 4
    for source, *n in counts:
        want = expected_counts(load_json(Path(source))["traceEvents"])
        assert n == [want["events"], want["flows"], want["counters"]]
    remote.close()
    local.close()


def test_reingest_is_idempotent(team, tmp_path):
    """The same files again, from another machine: all skipped, the bucket unchanged."""
    before = {k: _client().head_object(Bucket=team["bucket"], Key=k)["ETag"] for k in keys(team["bucket"])}
    env = machine(tmp_path, "e")
    again = cli(env, tmp_path / "e" / "work", "-w", team["url"], "ingest", str(CUDA))
    assert again.returncode == 0, again.stderr
    assert "Ingested 0 file(s)" in again.stderr and "skipped 4" in again.stderr
    after = {k: _client().head_object(Bucket=team["bucket"], Key=k)["ETag"] for k in keys(team["bucket"])}
    assert after == before


def test_check_is_clean_and_runs_lists_the_runs(team, tmp_path):
    env = machine(tmp_path, "f")
    work = tmp_path / "f" / "work"
    checked = cli(env, work, "-w", team["url"], "check")
    assert checked.returncode == 0, checked.stderr
    # 4 traces of 2 tables (events, flows) and 7 summaries, less int_comm_ops
    # of the decode and prefill traces (one GPU: no collective, no file)
    assert "Checked 4 trace(s), 34 Parquet file(s): OK." in checked.stdout + checked.stderr
    runs = cli(env, work, "-w", team["url"], "runs", "--format", "csv")
    assert [(r["run"], r["phase"], r["file_count"]) for r in rows(runs.stdout)] == [
        ("v1", "decode", "1"), ("v1", "prefill", "1"), ("v1", "train", "1"), ("v2", "train", "1")]


def test_runs_and_views_do_not_list_the_bucket(team, monkeypatch, tmp_path):
    """`runs` and `views` read the catalog object (a HEAD, and a GET when
    this machine has not got its version): no listing of the bucket."""
    proxy = _Proxy(int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1]))
    env = {**machine(tmp_path, "g"), "AWS_ENDPOINT_URL": proxy.endpoint}
    work = tmp_path / "g" / "work"
    for command in (["runs"], ["views"], ["runs"]):
        done = cli(env, work, "-w", team["url"], *command)
        assert done.returncode == 0, done.stderr
    assert proxy.lists() == []
    gets = [p for m, p in proxy.requests if m == "GET"]
    assert all(p.startswith(f"/{team['bucket']}/team/tracedb.duckdb") for p in gets)
    assert gets  # fetched once, then the cached version serves
    proxy.server.shutdown()


def test_a_bad_file_is_named_and_the_rest_lands(bucket, tmp_path):
    runs = tmp_path / "runs"
    write_trace(runs / "v1" / "rank0.train.json",
                [{"name": "k", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1, "cat": "kernel"}])
    bad = runs / "v1" / "rank1.train.json"
    bad.write_text('{"traceEvents": [{"name": "k", "ph": "X", "ts": 1')
    env = machine(tmp_path, "a")
    url = f"s3://{bucket}/wh"
    done = cli(env, tmp_path / "a" / "work", "-w", url, "ingest", str(runs))
    assert done.returncode == 1
    assert str(bad) in done.stderr and "Traceback" not in done.stderr
    out = cli(env, tmp_path / "a" / "work", "-w", url, "sql",
              "SELECT status, count(*) AS n FROM traces GROUP BY status ORDER BY status", "--format", "csv")
    assert rows(out.stdout) == [{"status": "failed", "n": "1"}, {"status": "ok", "n": "1"}]


def test_check_repair_removes_debris_from_the_bucket(bucket, monkeypatch, tmp_path):
    """An object under the partitions that no trace lists (an ingest killed
    between upload and commit): check names it, --repair removes it."""
    on_machine(monkeypatch, tmp_path, "a")
    url = f"s3://{bucket}/wh"
    db = tracedb.open(url)
    assert not db.ingest([CUDA / "v2"], jobs=1).failed
    debris = "wh/events/run=v9/rank=0/phase=train/0123456789abcdef.parquet"
    _client().put_object(Bucket=bucket, Key=debris, Body=b"PAR1 half a file")
    report = db.check()
    assert [(p.kind, p.path) for p in report.problems] == [("orphan_file", f"s3://{bucket}/{debris}")]
    # An ingest running on another machine (its object is fresh): the orphan may be its upload.
    other = "wh/.tracedb/ingests/otherhost.4242.0a0b0c0d"
    _client().put_object(Bucket=bucket, Key=other, Body=b'{"host": "otherhost", "pid": 4242}')
    kept = db.check(repair=True)
    assert not kept.ok and "kept while 1 ingest(s)" in kept.problems[0].detail
    assert debris in keys(bucket)
    _client().delete_object(Bucket=bucket, Key=other)
    repaired = db.check(repair=True)
    assert repaired.ok
    assert debris not in keys(bucket)
    assert db.check().problems == []
    assert db.sql("SELECT count(*) FROM events").fetchall()[0][0] == \
        expected_counts(load_json(CUDA / "v2" / "rank0.train.json.gz")["traceEvents"])["events"]
    db.close()


def test_remove_a_run_takes_its_objects_out_of_the_bucket(bucket, monkeypatch, tmp_path):
    on_machine(monkeypatch, tmp_path, "a")
    url = f"s3://{bucket}/wh"
    db = tracedb.open(url)
    db.ingest([CUDA], jobs=1)
    assert db.remove("v1") == 3
    left = keys(bucket, "wh/")
    assert not [k for k in left if "run=v1" in k]
    assert [k for k in left if k.startswith("wh/events/")] and all("run=v2" in k for k in left if "run=" in k)
    on_machine(monkeypatch, tmp_path, "b")
    assert [r[0] for r in tracedb.open(url).runs().fetchall()] == ["v2"]


@pytest.fixture(scope="module")
def locked_s3():
    """A second moto server that checks credentials (moto's
    INITIAL_NO_AUTH_ACTION_COUNT=0): it knows no access key, so it answers
    every request 403."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "moto server did not start"
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=20)


@pytest.mark.parametrize("case", ["missing bucket", "wrong endpoint", "no credentials", "refused"])
def test_faults_are_one_line_naming_the_url(s3, locked_s3, case, tmp_path):
    env = machine(tmp_path, "a")
    url = "s3://traces-none/team" if case == "missing bucket" else f"s3://team-{os.getpid()}/team"
    if case == "wrong endpoint":
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{_free_port()}"
    if case == "no credentials":
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    if case == "refused":
        env["AWS_ENDPOINT_URL"] = locked_s3
    cause = {"missing bucket": "no such bucket", "wrong endpoint": "cannot reach the endpoint",
             "no credentials": "no credentials", "refused": "access denied (403)"}[case]
    for command in (["query", "hotspots"], ["ingest", str(CUDA / "v2")]):
        done = cli(env, tmp_path / "a" / "work", "-w", url, *command, timeout=120)
        assert done.returncode == 1, (case, command)
        errors = [line for line in done.stderr.splitlines() if line.startswith("Error")]
        assert len(errors) == 1 and url in errors[0] and cause in errors[0], done.stderr
        assert "Traceback" not in done.stderr and SECRET not in done.stderr + done.stdout


def test_an_upload_that_the_network_breaks_fails_that_file_only(bucket, monkeypatch, tmp_path):
    """Every upload of rank 1's objects loses its connection: tried again,
    then that trace fails (named); rank 0 lands whole."""
    proxy = _Proxy(int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1]))
    proxy.drop = lambda method, path: method in ("PUT", "POST") and "rank=1" in path
    on_machine(monkeypatch, tmp_path, "a")
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    runs = tmp_path / "runs"
    event = {"name": "k", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1, "cat": "kernel"}
    write_trace(runs / "v1" / "rank0.train.json", [event])
    write_trace(runs / "v1" / "rank1.train.json", [event, {**event, "ts": 20}])
    db = tracedb.open(f"s3://{bucket}/wh")
    report = db.ingest([runs], jobs=1)
    assert [Path(r.path).name for r in report.ingested] == ["rank0.train.json"]
    [failed] = report.failed
    assert failed.path.endswith("rank1.train.json") and "upload failed after 3 tries" in failed.error
    assert len([p for m, p in proxy.requests if m == "PUT" and "rank=1" in p]) >= 3
    assert not [k for k in keys(bucket) if "rank=1" in k]
    assert db.sql("SELECT rank, count(*) FROM events GROUP BY rank").fetchall() == [(0, 1)]
    db.close()
    proxy.server.shutdown()


def test_a_catalog_replaced_while_it_is_read_is_read_again(bucket, monkeypatch, tmp_path):
    """Machine c commits a new catalog between b's look at the catalog's
    version and b's read of it (as in two ingests at once): moto refuses
    the read of the old version (412), and b reads the new one whole."""
    url = f"s3://{bucket}/team"
    runs = tmp_path / "runs"
    event = {"name": "k", "ph": "X", "ts": 10, "dur": 5, "pid": 1, "tid": 1, "cat": "kernel"}
    write_trace(runs / "v1" / "rank0.train.json", [event])
    write_trace(runs / "v1" / "rank1.train.json", [event, {**event, "ts": 20}])
    done = cli(machine(tmp_path, "a"), tmp_path / "a" / "work", "-w", url, "ingest", str(runs / "v1" / "rank0.train.json"))
    assert done.returncode == 0, done.stderr

    proxy = _Proxy(int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1]))
    catalog = f"/{bucket}/team/tracedb.duckdb"
    env_c = machine(tmp_path, "c")  # straight to moto, not through the proxy
    commits = []

    def other_writer(method: str, path: str) -> None:
        if method == "GET" and path.startswith(catalog) and not commits:
            commits.append(cli(env_c, tmp_path / "c" / "work", "-w", url, "ingest",
                               str(runs / "v1" / "rank1.train.json")))

    proxy.before = other_writer
    on_machine(monkeypatch, tmp_path, "b")
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    db = tracedb.open(url)
    assert db.sql("SELECT rank, event_count FROM traces ORDER BY rank").fetchall() == [(0, 1), (1, 2)]
    db.close()
    proxy.server.shutdown()
    assert commits[0].returncode == 0, commits[0].stderr
    assert len([p for m, p in proxy.requests if m == "GET" and p.startswith(catalog)]) == 2


@pytest.mark.slow
def test_two_machines_ingest_into_one_bucket_at_once(bucket, tmp_path):
    """Two ingests at the same time from two HOMEs and folders: ranks 0-3 on
    one, 4-7 on the other, and rank 0's file on both. Every trace lands once."""
    runs = tmp_path / "runs"
    for rank in range(8):
        write_kineto_like(runs / "v1" / f"rank{rank}.train.json", 200_000, seed=rank, rank=rank)
    url = f"s3://{bucket}/team"
    paths = {"a": [runs / "v1" / f"rank{r}.train.json" for r in range(4)],
             "b": [runs / "v1" / f"rank{r}.train.json" for r in (0, 4, 5, 6, 7)]}
    procs = {m: subprocess.Popen([sys.executable, "-m", "tracedb.cli", "-w", url, "ingest", "--jobs", "1",
                                  *map(str, ps)], env=machine(tmp_path, m), cwd=tmp_path / m / "work",
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for m, ps in paths.items()}
    for m, p in procs.items():
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    env = machine(tmp_path, "c")
    out = cli(env, tmp_path / "c" / "work", "-w", url, "sql",
              "SELECT rank, count(*) AS n FROM traces GROUP BY rank ORDER BY rank", "--format", "csv")
    assert [(r["rank"], r["n"]) for r in rows(out.stdout)] == [(str(r), "1") for r in range(8)]
    out = cli(env, tmp_path / "c" / "work", "-w", url, "sql",
              "SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank", "--format", "csv")
    want = [expected_counts(json.loads((runs / "v1" / f"rank{r}.train.json").read_text())["traceEvents"])["events"]
            for r in range(8)]
    assert [int(r["n"]) for r in rows(out.stdout)] == want
    assert cli(env, tmp_path / "c" / "work", "-w", url, "check").returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("at", [0.2, 0.5, 0.8])
def test_kill_9_leaves_nothing_visible_and_the_rerun_completes(bucket, tmp_path, at):
    runs = tmp_path / "runs"
    for rank in range(6):
        write_kineto_like(runs / "v1" / f"rank{rank}.train.json", 400_000, seed=10 + rank, rank=rank)
    want = {r: expected_counts(json.loads((runs / "v1" / f"rank{r}.train.json").read_text())["traceEvents"])
            for r in range(6)}
    url = f"s3://{bucket}/wh"
    env = machine(tmp_path, "a")
    work = tmp_path / "a" / "work"
    cmd = [sys.executable, "-m", "tracedb.cli", "-w", url, "ingest", "--jobs", "1", str(runs)]
    t0 = time.monotonic()
    full = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - t0
    assert full.returncode == 0, full.stderr
    assert cli(env, work, "-w", url, "remove", "--run", "v1").returncode == 0
    killed = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    time.sleep(took * at)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait()
    reader = machine(tmp_path, "r")
    seen = cli(reader, tmp_path / "r" / "work", "-w", url, "sql",
               "SELECT t.rank, t.event_count, (SELECT count(*) FROM events e WHERE e.file_id = t.file_id) AS n "
               "FROM traces t WHERE status = 'ok' ORDER BY rank", "--format", "csv")
    assert seen.returncode == 0, seen.stderr
    for r in rows(seen.stdout):  # whole traces only (or none yet)
        assert int(r["n"]) == int(r["event_count"]) == want[int(r["rank"])]["events"]
    rerun = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    out = cli(reader, tmp_path / "r" / "work", "-w", url, "sql",
              "SELECT rank, count(*) AS n FROM events GROUP BY rank ORDER BY rank", "--format", "csv")
    assert {int(r["rank"]): int(r["n"]) for r in rows(out.stdout)} == {r: w["events"] for r, w in want.items()}
    checked = cli(reader, tmp_path / "r" / "work", "-w", url, "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _kernel_trace(path: Path, durations: list[int]) -> None:
    write_trace(path, [{"name": "gemm", "ph": "X", "ts": 10 + 100 * i, "dur": d, "pid": 1, "tid": 7,
                        "cat": "kernel"} for i, d in enumerate(durations)])


def test_serve_an_s3_warehouse_and_follow_new_commits(bucket, monkeypatch, tmp_path):
    """`tracedb -w s3://... serve` from an empty HOME: psycopg reads the
    views; the bucket outside the published folders is not readable; a
    commit from another machine is served within the fetch interval."""
    psycopg = pytest.importorskip("psycopg")
    runs = tmp_path / "runs"
    _kernel_trace(runs / "v1" / "rank0.json", [30, 10])
    url = f"s3://{bucket}/wh"
    on_machine(monkeypatch, tmp_path, "a")
    tracedb.open(url).ingest([runs], jobs=1)
    port = _free_port()
    env = {**machine(tmp_path, "server"), "TRACEDB_SERVE_PASSWORD": "pw"}
    proc = subprocess.Popen([sys.executable, "-m", "tracedb.cli", "-w", url, "serve", "--port", str(port)],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path / "server" / "work")
    try:
        line = proc.stderr.readline()
        assert line.startswith(f"Serving {url} on 127.0.0.1:{port} (read-only"), line
        dsn = f"host=127.0.0.1 port={port} dbname=tracedb user=tracedb password=pw"
        with psycopg.connect(dsn) as con:
            assert con.execute("SELECT name, calls, total_us FROM hotspots").fetchall() == [("gemm", 2, 40.0)]
            with pytest.raises(psycopg.Error, match="disabled by configuration"):
                con.execute(f"SELECT * FROM read_parquet('{url}/tracedb.duckdb')")
        _kernel_trace(runs / "v2" / "rank0.json", [50])
        tracedb.open(url).ingest([runs], jobs=1)
        deadline = time.monotonic() + 60
        while True:
            with psycopg.connect(dsn) as con:
                seen = con.execute("SELECT run, count(*) FROM events GROUP BY run ORDER BY run").fetchall()
            if seen == [("v1", 2), ("v2", 1)] or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert seen == [("v1", 2), ("v2", 1)]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_a_lost_summary_is_recomputed_from_the_events_in_the_bucket(bucket, monkeypatch, tmp_path):
    """check --repair (and migrate) recompute a summary from the trace's
    events, fetched from the bucket; the per-trace views read it again."""
    on_machine(monkeypatch, tmp_path, "a")
    url = f"s3://{bucket}/wh"
    db = tracedb.open(url)
    db.ingest([CUDA / "v2"], jobs=1)
    before = sorted(db.query("step_times").fetchall(), key=repr)
    db.close()
    [lost] = [k for k in keys(bucket, "wh/summaries/") if "/int_step_sums/" in k]
    _client().delete_object(Bucket=bucket, Key=lost)
    on_machine(monkeypatch, tmp_path, "b")
    db = tracedb.open(url)
    assert [p.kind for p in db.check().problems] == ["missing_summary"]
    assert db.check(repair=True).ok
    assert lost in keys(bucket)
    assert db.check().problems == []
    assert sorted(db.query("step_times").fetchall(), key=repr) == before
    assert db.stale_summaries() == 0
    db.close()
