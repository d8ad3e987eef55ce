"""The main job, offline: EntroDrop against plain multi-epoch continual pre-training.

    python scripts/demo.py            (what `make demo` runs; FULL=1 for the longer version)

On text that ships with Python, with the tiny Qwen3 of scripts/make_tiny_assets.py:

 1. corpora: pre-training code (standard-library modules) and prose (pydoc topic pages); a
    scarce target domain, the code of the tomllib package, with every
    7th block held out for validation; general English prose, the standard-library docstrings
 2. token stores of all of them (recipes/tokenize_corpus.py)
 3. a brief pre-training of the base model (recipes/entrodrop_single_device.py, no dropout)
 4. the base model's entropy of the target and held-out tokens (recipes/precompute_entropy.py)
 5. the baseline: continual pre-training for many target epochs on the 6:4 mix, evaluated at
    every epoch end (validation loss by entropy bucket, HumanEval log-likelihood)
 6. EntroDrop: the same run (same base, data order and steps) with token dropout, its curriculum
    midpoint set where the baseline's validation loss stopped falling, as the paper sets j0
 7. EntroDrop with ``midpoint: auto``: the same run again, with no baseline to read; the curriculum
    stays off until its own validation loss stops improving, and j0 is fixed there
 8. the report (entrodrop/report.py): plots and a table in outputs/demo/report
"""

import ast
import json
import os
import pydoc_data.topics
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from entrodrop.checkpointing import latest_checkpoint
from entrodrop.report import propose_midpoint, read_run, write_report

REPO = Path(__file__).resolve().parent.parent

OUT = REPO / "outputs" / "demo"
TUNE = str(Path(sys.executable).parent / "tune")
TARGET_PACKAGES = ("tomllib",)
FULL = os.environ.get("FULL", "0") not in ("", "0")
# FULL=1: a longer pre-training and three times the continual pre-training budget (more target epochs).
PRETRAIN_TOKENS = 2_457_600 if FULL else 1_228_800
# Each continual pre-training run: 157 steps of 8 x 256 tokens, about 28 target epochs. The three
# runs (baseline, EntroDrop, midpoint: auto) take the 470 steps the two runs took before the third.
CPT_TOKENS = 962_560 if FULL else 321_536


def blocks(text: str, limit: int = 3000) -> list:
    """Top-level blocks of a Python file (split at two blank lines), at most ``limit`` chars."""
    return [b.strip()[:limit] for b in text.split("\n\n\n") if len(b.strip()) >= 100]


def docstrings(source: str) -> list:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    nodes = (n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)))
    return [d for d in (ast.get_docstring(n) for n in nodes) if d and len(d) >= 80]


def write_jsonl(path: Path, texts: list) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    return sum(map(len, texts))


def build_corpora() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    read = lambda p: p.read_text(encoding="utf-8", errors="replace")  # noqa: E731
    target_files = sorted(f for pkg in TARGET_PACKAGES for f in (stdlib / pkg).rglob("*.py") if "test" not in f.parts)
    target_blocks = [b for f in target_files for b in blocks(read(f))]
    modules = sorted(stdlib.glob("*.py"))
    others = sorted(f for f in stdlib.rglob("*.py") if "test" not in str(f.relative_to(stdlib)) and
                    f.relative_to(stdlib).parts[0] not in TARGET_PACKAGES and "site-packages" not in f.parts)
    sizes = {
        "pretrain_code": write_jsonl(OUT / "corpora" / "pretrain_code.jsonl", [b for f in modules for b in blocks(read(f))]),
        "pretrain_prose": write_jsonl(OUT / "corpora" / "pretrain_prose.jsonl",
                                      [p.strip() for t in pydoc_data.topics.topics.values() for p in t.split("\n\n") if len(p.strip()) >= 80]),
        "target": write_jsonl(OUT / "corpora" / "target.jsonl", [b for i, b in enumerate(target_blocks) if i % 7]),
        "target_val": write_jsonl(OUT / "corpora" / "target_val.jsonl", [b for i, b in enumerate(target_blocks) if not i % 7]),
        "general": write_jsonl(OUT / "corpora" / "general.jsonl", [d for f in others for d in docstrings(read(f))]),
    }
    print("    " + ", ".join(f"{name}: {chars / 1e6:.2f}M chars" for name, chars in sizes.items()))


def tune(*args: str) -> None:
    """Run `tune run ...`, showing its log lines; stop the demo if it fails."""
    proc = subprocess.run([TUNE, "run", *args], cwd=REPO, text=True, capture_output=True)
    for line in proc.stderr.splitlines() + proc.stdout.splitlines():
        if any(k in line for k in ("budget:", "evaluation at step", "entropy cache complete", "token store complete",
                                   "midpoint: auto")):
            print("    " + line.split(" - ")[-1][:220])
    if proc.returncode:
        print(proc.stderr[-4000:], file=sys.stderr)
        raise SystemExit(f"demo stopped: tune run {' '.join(args[:3])} failed")


def main() -> None:
    start = time.perf_counter()
    stages = [
        ("corpora from Python's own files", build_corpora),
        ("token stores", lambda: tune("recipes/tokenize_corpus.py", "--config", "configs/demo/tokenize.yaml")),
        ("pre-train the tiny base model", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", "configs/demo/pretrain.yaml", f"total_tokens={PRETRAIN_TOKENS}")),
    ]
    stages += [
        ("entropy of the target tokens under the base", lambda: tune(
            "recipes/precompute_entropy.py", "--config", "configs/demo/precompute_entropy.yaml",
            f"checkpointer.checkpoint_dir={base()}")),
        ("entropy of the held-out tokens", lambda: tune(
            "recipes/precompute_entropy.py", "--config", "configs/demo/precompute_entropy.yaml",
            f"checkpointer.checkpoint_dir={base()}", "target_tokens=outputs/demo/tokens/target_val",
            "cache_dir=outputs/demo/entropy/target_val")),
        ("baseline: multi-epoch continual pre-training", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", "configs/demo/cpt_baseline.yaml",
            f"checkpointer.checkpoint_dir={base()}", f"total_tokens={CPT_TOKENS}")),
        ("EntroDrop: the same run with entropy-guided token dropout", run_entrodrop),
        ("EntroDrop, midpoint: auto: j0 from its own validation loss, no baseline", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", "configs/demo/cpt_entrodrop.yaml",
            f"checkpointer.checkpoint_dir={base()}", f"total_tokens={CPT_TOKENS}", "token_dropout.midpoint=auto",
            "output_dir=outputs/demo/entrodrop_auto")),
        ("report", report),
    ]
    if OUT.exists():
        shutil.rmtree(OUT)  # a fresh demo each time
    for k, (title, stage) in enumerate(stages, start=1):
        print(f"[{k}/{len(stages)}] {title} ({time.perf_counter() - start:.0f}s)", flush=True)
        stage()
    print(f"done in {time.perf_counter() - start:.0f}s")


def base() -> str:
    """The pre-trained base model: the last checkpoint of stage 3."""
    return str(latest_checkpoint(OUT / "pretrain" / "checkpoints"))


# The midpoint when the baseline shows no turn-up of its validation loss (too short a run).
FALLBACK_MIDPOINT_EPOCHS = 4.0


def choose_midpoint(baseline: dict) -> tuple:
    """The report's proposal (entrodrop.report.propose_midpoint) for the EntroDrop run, or the
    fixed fallback when it proposes nothing; with the line that says which."""
    midpoint = propose_midpoint(baseline)
    if midpoint["midpoint_epochs"] is not None:
        return midpoint["midpoint_epochs"], f"midpoint from the report: {midpoint['note']}"
    return FALLBACK_MIDPOINT_EPOCHS, (f"midpoint: FALLBACK to epoch {FALLBACK_MIDPOINT_EPOCHS:.2f}, not a proposal, "
                                      f"because {midpoint['note']}")


def run_entrodrop() -> None:
    epochs, line = choose_midpoint(read_run(OUT / "baseline"))
    print(f"    {line}")
    tune("recipes/entrodrop_single_device.py", "--config", "configs/demo/cpt_entrodrop.yaml",
         f"checkpointer.checkpoint_dir={base()}",
         f"total_tokens={CPT_TOKENS}", f"token_dropout.midpoint={epochs}")


def report() -> None:
    runs = [read_run(OUT / name) for name in ("baseline", "entrodrop", "entrodrop_auto")]
    written = write_report(runs, OUT / "report", target_group="code", baseline="baseline")
    print()
    print(Path(written["files"][-1]).read_text())
    for run in runs:
        for e in run["evals"]:
            loss = e["val_loss"]
            print(f"    {run['name']:>14} epoch {e['target_epoch']:5.2f}: val loss all {loss['all']:.4f} "
                  f"low {loss['low']:.4f} high {loss['high']:.4f}  code {e['groups']['code']:.4f}")
    print(f"\nreport: {OUT / 'report'} ({', '.join(Path(f).name for f in written['files'])})")


if __name__ == "__main__":
    main()
