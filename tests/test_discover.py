"""run / rank / phase mapping rules (DESIGN.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracedb.discover import discover
from tracedb.errors import IngestError


def _touch(root: Path, *rels: str) -> None:
    for rel in rels:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}")


def _map(paths, **kw) -> dict[str, tuple[str, int, str]]:
    out = {}
    for tf in discover(paths, **kw):
        out[tf.path.name if len(paths) == 1 and Path(paths[0]).is_file() else str(tf.path)] = (tf.run, tf.rank, tf.phase)
    return out


def test_rules_on_a_folder(tmp_path: Path):
    root = tmp_path / "runs"
    _touch(root, "v1/rank0.json", "v1/rank_1.json.gz", "v2/train.json", "v2/node0/rank-3.pt.trace.json",
           "infer/prefill/rank0.json", "infer/decode/x/worker_2.json", "v3/eval/rank3.json",
           "top.json", "v1/notes.txt", "v1/.hidden.json", ".cache/rank0.json")
    got = {str(Path(k).relative_to(root)): v for k, v in _map([root]).items()}
    assert got == {
        "v1/rank0.json": ("v1", 0, "default"),
        "v1/rank_1.json.gz": ("v1", 1, "default"),
        "v2/train.json": ("v2", 0, "train"),
        "v2/node0/rank-3.pt.trace.json": ("v2", 3, "node0"),
        "infer/prefill/rank0.json": ("infer", 0, "prefill"),
        "infer/decode/x/worker_2.json": ("infer", 0, "decode"),
        "v3/eval/rank3.json": ("v3", 3, "eval"),
        "top.json": ("runs", 0, "default"),
    }


def test_phase_word_in_file_name_wins(tmp_path: Path):
    _touch(tmp_path, "runs/v1/prefill/rank2_decode.json")
    [tf] = discover([tmp_path / "runs"])
    assert (tf.run, tf.rank, tf.phase) == ("v1", 2, "decode")


def test_single_file_takes_its_parent_folder(tmp_path: Path):
    _touch(tmp_path, "exp7/rank5.train.json")
    [tf] = discover([tmp_path / "exp7" / "rank5.train.json"])
    assert (tf.run, tf.rank, tf.phase, tf.rank_source) == ("exp7", 5, "train", "file name")


def test_single_file_in_a_phase_folder(tmp_path: Path):
    _touch(tmp_path, "runs/v1/decode/rank2.json")
    [tf] = discover([tmp_path / "runs" / "v1" / "decode" / "rank2.json"])
    assert (tf.run, tf.rank, tf.phase) == ("v1", 2, "decode")


def test_overrides(tmp_path: Path):
    _touch(tmp_path, "runs/v1/rank0.json", "runs/v1/rank1.json")
    got = {(t.run, t.rank, t.phase) for t in discover([tmp_path / "runs"], run="v9", phase="decode")}
    assert got == {("v9", 0, "decode"), ("v9", 1, "decode")}
    [tf] = discover([tmp_path / "runs" / "v1" / "rank1.json"], rank=7)
    assert (tf.rank, tf.rank_source) == (7, "override")
    tf.resolve_rank(3)  # distributedInfo does not beat --rank
    assert tf.rank == 7


def test_rank_override_needs_one_file(tmp_path: Path):
    _touch(tmp_path, "runs/v1/rank0.json", "runs/v1/rank1.json")
    with pytest.raises(IngestError, match="single file"):
        discover([tmp_path / "runs"], rank=1)


def test_missing_path(tmp_path: Path):
    with pytest.raises(IngestError, match="no such file"):
        discover([tmp_path / "nope"])


def test_unsafe_names_are_made_safe(tmp_path: Path):
    _touch(tmp_path, "runs/my run=1/rank0.json")
    [tf] = discover([tmp_path / "runs"])
    assert tf.run == "my_run_1"
