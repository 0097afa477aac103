"""Generated files must say what their sources say now: docs/cli.md (the
commands' --help) and queries/not_on_spark.json (what the Spark generator refuses)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current():
    result = subprocess.run([sys.executable, "docs/make_cli_reference.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, "docs/cli.md is stale: run python docs/make_cli_reference.py"


def test_not_on_spark_list_is_current():
    pytest.importorskip("sqlglot")
    from tracedb.spark.dialect import write_not_on_spark
    assert write_not_on_spark(check=True), (
        "queries/not_on_spark.json is stale: run "
        "python -c 'from tracedb.spark.dialect import write_not_on_spark; write_not_on_spark()'")
