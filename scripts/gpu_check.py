"""One check of the CUDA paths for a GPU machine that is lent for minutes: the GPU test suite, then
the quick benchmarks, each stage under its own time cap. Prints and writes a Markdown summary
(summary.md), a JSON file of every figure and every pass/fail (summary.json) and the stages'
output (logs.tar.gz): three files, as a device call brings back at most eight.

    make gpu-check                                   # sets the machine up offline, then runs this
    python scripts/gpu_check.py [--out DIR] [--stages kernels,bench_gpu] [--cap-scale 1.5]

Stages, in order, with their caps (seconds; 500 in all, so the check with its set-up fits 9
minutes; the caps are what one H200 needed, with a margin: docs/performance.md, "Measured by
the GPU check"):

    kernels     pytest -m gpu -n 0 tests/test_gpu_kernels.py, each test's time as it ends      90
    recipes     pytest -m gpu -n 0 tests/recipes/test_gpu_recipes.py (tune run on the GPU)     300
    generate    benchmarks/bench_generate.py --device cuda --quick: batches 32 and 128         110

and, only when named in ``--stages`` (with them the check would pass 9 minutes):

    bench_gpu   benchmarks/bench_gpu.py --quick: precompute, training off/static/loss         180
    loss        benchmarks/bench_loss.py --device cuda at 8,192 tokens                          75

A stage that fails or runs past its cap is a row that says so (its process group is ended),
and the next stage still runs. Each stage's output goes to ``<stage>.out`` and ``<stage>.err``
(packed into logs.tar.gz after each stage) as it runs, and the benchmarks print each table row
when it is measured, so a stage cut off by its cap keeps the rows it finished. The output directory is
``--out``, else ``$OUT`` (what a device call brings back), else ``outputs/gpu_check/<time>``.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, List, Optional

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


@dataclass
class Stage:
    """A command run from the repository root for at most ``cap_s`` seconds. ``parse`` turns its
    stdout into figures for the JSON file (default: every Markdown table it printed); the
    ``*.log`` files it leaves in ``logs`` are copied into the output directory, however it ended."""

    name: str
    command: List[str]
    cap_s: float
    what: str
    parse: Optional[Callable[[str], dict]] = None
    logs: Optional[Path] = None


def markdown_tables(text: str) -> dict:
    """Every Markdown table in ``text``, as lists of rows keyed by the header's cells.

    >>> markdown_tables("x\\n| a | b |\\n|---|---|\\n| 1 | 2 |\\n\\n| c |\\n|---|\\n| 3 |")
    {'tables': [[{'a': '1', 'b': '2'}], [{'c': '3'}]]}
    """
    tables, header = [], None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if header is None:
            header = cells
            tables.append([])
        elif not all(set(cell) <= set("-: ") for cell in cells):
            tables[-1].append(dict(zip(header, cells)))
    return {"tables": tables}


UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def line_seconds(tail: str):
    """The time pytest's ``console_output_style=times`` prints at the end of a ``-v`` line
    (``200.9ms``, ``1.234s``, ``2m 5s``), in seconds; None when the line has none.

    >>> line_seconds("   200.9ms"), line_seconds(" 1.234s"), line_seconds(" 2m 5s"), line_seconds(" [ 50%]")
    (0.2009, 1.234, 125.0, None)
    """
    minutes = re.search(r"(\d+)m (\d+)s\s*$", tail)
    if minutes:
        return 60.0 * int(minutes.group(1)) + int(minutes.group(2))
    plain = re.search(r"([\d.]+)(us|ms|s)\s*$", tail)
    return round(float(plain.group(1)) * UNITS[plain.group(2)], 6) if plain else None


def pytest_results(text: str) -> dict:
    """Each test's outcome and seconds from ``pytest -v -o console_output_style=times`` (printed
    as each test ends, so a run cut off keeps those that finished), else from ``--durations=0``
    (printed only when the run ends).

    >>> log = "tests/a.py::t[x] PASSED  [ 50%]\\ntests/a.py::u FAILED  [100%]\\n1.50s call     tests/a.py::t[x]"
    >>> pytest_results(log)["tests"]  # doctest: +NORMALIZE_WHITESPACE
    [{'test': 'tests/a.py::t[x]', 'outcome': 'passed', 'seconds': 1.5},
     {'test': 'tests/a.py::u', 'outcome': 'failed', 'seconds': None}]
    >>> pytest_results("tests/a.py::t PASSED     12.500s")["tests"]
    [{'test': 'tests/a.py::t', 'outcome': 'passed', 'seconds': 12.5}]
    """
    seconds = {}
    for s, phase, test in re.findall(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)", text, re.M):
        seconds[test] = seconds.get(test, 0.0) + float(s)
    tests = []
    for test, outcome, tail in re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b(.*)$", text, re.M):
        # -v names a test from the working directory, --durations from the root directory
        same = [s for name, s in seconds.items() if test == name or test.endswith("/" + name)]
        tests.append({"test": test, "outcome": outcome.lower(),
                      "seconds": same[0] if same else line_seconds(tail)})
    return {"tests": tests}


def default_stages(work: Path) -> List[Stage]:
    """The check's stages; ``work`` holds what bench_gpu.py builds (a 1.2 GB checkpoint, token
    stores), apart from the output directory, which a device call brings back whole."""
    pytest = [PYTHON, "-m", "pytest", "-m", "gpu", "-n", "0", "-v", "--durations=0",
              "-o", "console_output_style=times", "-p", "no:cacheprovider"]
    return [
        Stage("kernels", pytest + ["tests/test_gpu_kernels.py"], 90,
              "the GPU kernel tests (tests/test_gpu_kernels.py)", parse=pytest_results),
        Stage("recipes", pytest + ["tests/recipes/test_gpu_recipes.py"], 300,
              "the GPU recipe tests (tests/recipes/test_gpu_recipes.py)", parse=pytest_results),
        Stage("generate", [PYTHON, "benchmarks/bench_generate.py", "--device", "cuda", "--quick"], 110,
              "greedy generation through the lm-eval adapter, Qwen3-0.6B shape, batches 32 and 128"),
    ]


# Run only when named in --stages: measured (docs/performance.md), and with them the check would
# pass the 9 minutes a device call leaves it.
def optional_stages(work: Path) -> List[Stage]:
    return [Stage("bench_gpu", [PYTHON, "benchmarks/bench_gpu.py", "--quick", "--out", str(work / "bench_gpu")], 180,
                  "Qwen3-0.6B: precompute, then training with EntroDrop off, static, and signal: loss",
                  logs=work / "bench_gpu"),
            Stage("loss", [PYTHON, "benchmarks/bench_loss.py", "--device", "cuda", "--tokens", "8192",
                           "--chunk-sizes", "1024", "--repeats", "2"], 75,
                  "the training loss at 8,192 tokens x 151,936: unfused, chunked, fused, liger")]


def run_stage(stage: Stage, logs: Path, cap_scale: float) -> dict:
    """Run ``stage`` under its cap, its output into ``logs``; its status (pass, fail or timeout),
    seconds and figures."""
    cap = stage.cap_s * cap_scale
    stdout, stderr = logs / f"{stage.name}.out", logs / f"{stage.name}.err"
    print(f"[gpu-check] {stage.name}: {stage.what} (cap {cap:.0f} s)", flush=True)
    start = time.perf_counter()
    with stdout.open("w") as o, stderr.open("w") as e:
        # A session of its own: on a timeout the whole group goes (tune run's children too).
        process = subprocess.Popen(stage.command, cwd=REPO, stdout=o, stderr=e, start_new_session=True)
        try:
            returncode = process.wait(timeout=cap)
        except subprocess.TimeoutExpired:
            returncode = None
            end_group(process)
    seconds = time.perf_counter() - start
    if stage.logs is not None and stage.logs.is_dir():
        (logs / f"{stage.name}_logs").mkdir(exist_ok=True)
        for log in stage.logs.glob("*.log"):
            shutil.copy(log, logs / f"{stage.name}_logs" / log.name)
    text = stdout.read_text(errors="replace")
    figures = (stage.parse or markdown_tables)(text)
    if returncode is None:
        status, note = "timeout", f"stopped at its cap of {cap:.0f} s"
    elif returncode == 0:
        status, note = "pass", ""
    else:
        # The error's last line: stderr's, else stdout's (pytest's summary line)
        lines = [line for line in stderr.read_text(errors="replace").splitlines() if line.strip()]
        lines = lines or [line for line in text.splitlines() if line.strip()]
        status, note = "fail", f"exit status {returncode}" + (f": {lines[-1].strip()[:200]}" if lines else "")
    if stage.parse is pytest_results or figures.get("tests"):
        counts = {}
        for test in figures.get("tests", []):
            counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
        note = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) + (f"; {note}" if note else "")
    return {"stage": stage.name, "what": stage.what, "command": " ".join(stage.command), "cap_s": cap,
            "seconds": round(seconds, 1), "status": status, "returncode": returncode, "note": note,
            "stdout": stdout.name, "stderr": stderr.name, **figures}


def end_group(process: subprocess.Popen) -> None:
    """End the process group of ``process`` (started with a session of its own): TERM, then KILL."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def device_line() -> str:
    try:
        import torch

        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA GPU"
        return f"{name}; torch {torch.__version__} (CUDA {torch.version.cuda}); Python {sys.version.split()[0]}"
    except Exception as error:  # the summary still gets written
        return f"unknown ({type(error).__name__}: {error})"


def write_summary(out: Path, results: List[dict], started: str, device: str, seconds: float) -> str:
    """summary.json (everything) and summary.md (the stage table, then each stage's tables)."""
    (out / "summary.json").write_text(json.dumps({"started": started, "device": device, "seconds": round(seconds, 1),
                                                  "passed": all(r["status"] == "pass" for r in results),
                                                  "stages": results}, indent=2))
    lines = [f"# GPU check, {started}", "", f"Device: {device}. Wall time {seconds:.0f} s.", "",
             "| stage | status | seconds | cap | note |", "|---|---|---|---|---|"]
    lines += [f"| {r['stage']} | {r['status']} | {r['seconds']:.0f} | {r['cap_s']:.0f} | {r['note']} |"
              for r in results]
    for r in results:
        lines += ["", f"## {r['stage']}: {r['what']}", "", f"`{r['command']}`", ""]
        if r.get("tests"):
            lines += ["| test | outcome | seconds |", "|---|---|---|"]
            lines += [f"| {t['test']} | {t['outcome']} | " + ("-" if t["seconds"] is None else f"{t['seconds']:.1f}")
                      + " |" for t in r["tests"]]
        for table in r.get("tables", []):
            if table:
                lines += ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
                lines += ["| " + " | ".join(row.values()) + " |" for row in table] + [""]
        if not r.get("tests") and not any(r.get("tables", [])):
            lines += [f"No figures; see {r['stdout']} and {r['stderr']} in {LOGS}."]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


# What the output directory holds: summary.md, summary.json and the stages' logs packed in one
# file, three files in all, since a device call brings back at most eight: with every log beside
# it, summary.md could be among those left out.
LOGS = "logs.tar.gz"


def pack_logs(logs: Path, out: Path) -> None:
    """``logs`` (every stage's output so far) into ``out/logs.tar.gz``, rewritten whole."""
    with tarfile.open(out / f"{LOGS}.part", "w:gz") as tar:
        tar.add(logs, arcname="logs")
    os.replace(out / f"{LOGS}.part", out / LOGS)


def run_check(stages: List[Stage], out: Path, cap_scale: float = 1.0, logs: Optional[Path] = None) -> List[dict]:
    """Every stage in order, whatever the ones before did, its output into ``logs`` (default: a
    temporary directory); the summary and ``logs.tar.gz`` in ``out`` rewritten after each."""
    out.mkdir(parents=True, exist_ok=True)
    logs = logs or Path(tempfile.mkdtemp(prefix="gpu_check_logs_"))
    logs.mkdir(parents=True, exist_ok=True)
    started, start, device = datetime.now().isoformat(timespec="seconds"), time.perf_counter(), device_line()
    results = []
    for stage in stages:
        results.append(run_stage(stage, logs, cap_scale))
        write_summary(out, results, started, device, time.perf_counter() - start)
        pack_logs(logs, out)
        print(f"[gpu-check] {stage.name}: {results[-1]['status']} in {results[-1]['seconds']:.0f} s "
              f"{results[-1]['note']}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="output directory (default: $OUT if set, else outputs/gpu_check/<time>)")
    parser.add_argument("--stages", default=None, help="comma-separated subset of the stages, in their order")
    parser.add_argument("--cap-scale", type=float, default=1.0, help="multiply every stage's cap (a slower GPU)")
    args = parser.parse_args()
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else
                       REPO / "outputs" / "gpu_check" / datetime.now().strftime("%Y%m%d-%H%M%S"))
    work = Path(tempfile.gettempdir()) / "entrodrop_gpu_check"
    stages = default_stages(work)
    if args.stages:
        stages += optional_stages(work)
        known = {s.name for s in stages}
        wanted = args.stages.split(",")
        if set(wanted) - known:
            parser.error(f"--stages: unknown {sorted(set(wanted) - known)}; choose from {[s.name for s in stages]}")
        stages = [s for s in stages if s.name in wanted]
    results = run_check(stages, out.resolve(), args.cap_scale)
    print("\n" + (out.resolve() / "summary.md").read_text())
    print(f"[gpu-check] written: {out.resolve() / 'summary.md'}, summary.json and {LOGS} (each stage's output)")
    sys.exit(0 if all(r["status"] == "pass" for r in results) else 1)


if __name__ == "__main__":
    main()
