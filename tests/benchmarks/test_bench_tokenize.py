"""benchmarks/bench_tokenize.py's quick mode, its pipeline at a tiny size: it builds its sharegpt corpus and first
tenth, tokenizes them streamed through `tune run` with one process and two, and prints every
row of its table. The 1 GB figures come from running the script itself."""

import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.recipe  # starts tune run / torchrun / a script in a subprocess


def test_the_tokenize_benchmark_runs_its_whole_pipeline(tiny_assets, tmp_path):
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_tokenize.py"), "--quick",  # 0.002 GB
                             "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")]
            for line in result.stdout.splitlines() if line.startswith("| 0.0")]
    assert [(round(float(gb), 4), nproc) for gb, nproc, *_ in rows] == [(0.0002, "1"), (0.002, "1"), (0.002, "2")], \
        result.stdout  # the first tenth, then the whole corpus with one process and with two
    for _, _, tokens, seconds, tokens_per_s, peak_mib in rows:
        assert int(tokens.replace(",", "")) > 0 and float(tokens_per_s.replace(",", "")) > 0
        assert float(seconds) > 0 and float(peak_mib.replace(",", "")) > 100  # a Python process with torch, at least
    assert rows[1][2] == rows[2][2]  # one process or two: the same store
    assert int(rows[0][2].replace(",", "")) < int(rows[1][2].replace(",", ""))
    assert (tmp_path / "corpus-0.002GB.jsonl").stat().st_size >= 2_000_000
