"""docs/cli.md is generated from the commands' --help: it must say what they say now."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_cli_reference_is_current():
    result = subprocess.run([sys.executable, "docs/make_cli_reference.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, "docs/cli.md is stale: run python docs/make_cli_reference.py"
