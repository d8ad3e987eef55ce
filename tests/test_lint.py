"""The code passes the linter configured in pyproject.toml (`make lint`)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO


def test_the_code_passes_ruff():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    result = subprocess.run([ruff, "check", "--output-format", "concise", "."], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
