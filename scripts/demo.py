"""The main job, offline: EntroDrop against plain multi-epoch continual pre-training.

    python scripts/demo.py            (what `make demo` runs; FULL=1 for the longer CPU version)
    DEVICE=cpu python scripts/demo.py (the CPU version on any machine)
    RESUME=1 python scripts/demo.py   (continue: skip the stages a killed demo finished)

Where torch sees a CUDA GPU it runs the GPU version (``GPU_STAGES`` below): a Qwen3-shaped model
of 77M parameters pre-trained for a few minutes on the standard library's and this environment's
packages' code and prose, then continual pre-training on one package's source (torchtune's,
0.6M tokens, never seen in pre-training) in twelve runs: the baseline and EntroDrop
(gamma_max 0.1) with two seeds each, gamma_max 0.2 and 0.4, the table-3 comparisons (targeting
random and high, NEFTune, hidden dropout, weight decay), ``signal: loss`` and ``midpoint: auto``,
four at a time on the one GPU; its report adds tables 3 and 4 with the seed spread next to every
difference.
Everything lands in outputs/demo_gpu. Otherwise (and with DEVICE=cpu) the CPU version runs:

On text that ships with Python, with the tiny Qwen3 of scripts/make_tiny_assets.py:

 1. corpora: pre-training code (standard-library modules) and prose (pydoc topic pages); a
    scarce target domain, the code of the tomllib package, with every
    7th block held out for validation; general English prose, the standard-library docstrings
 2. token stores of all of them (recipes/tokenize_corpus.py)
 3. a brief pre-training of the base model (recipes/entrodrop_single_device.py, no dropout)
 4. the base model's entropy of the target and held-out tokens (recipes/precompute_entropy.py)
 5. the baseline: continual pre-training for many target epochs on the 6:4 mix, evaluated at
    every epoch end by the validation loss by entropy bucket (no lm-eval task: docs/demo.md)
 6. EntroDrop: the same run (same base, data order and steps) with token dropout, its curriculum
    midpoint set where the baseline's validation loss stopped falling, as the paper sets j0
 7. EntroDrop with ``signal: loss``: the same run again, the same midpoint, the gate ranking each
    target token by its own training loss at its last visit (its entropy before the first)
 8. EntroDrop with ``midpoint: auto``: the same run again, with no baseline to read; the curriculum
    stays off until its own validation loss stops improving, and j0 is fixed there
 9. the report (entrodrop/report.py): plots and a table in outputs/demo/report, with the
    loss gate's agreement with the entropy gate and a held-out sample shaded by its entropy, the
    gate's tokens underlined (figure 5c)

Each stage marks itself done in <out>/.stages when it finishes. A demo starts afresh unless
RESUME=1: then the done stages are skipped and the first one not done starts over from what it
had written removed, so a demo that one call cannot hold finishes over several.
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
from functools import partial
from pathlib import Path

from entrodrop.checkpointing import latest_checkpoint
from entrodrop.report import (
    comparison_table,
    propose_midpoint,
    read_run,
    seed_spread,
    write_entropy_sample,
    write_report,
)

REPO = Path(__file__).resolve().parent.parent

OUT = REPO / "outputs" / "demo"
TUNE = str(Path(sys.executable).parent / "tune")
TARGET_PACKAGES = ("tomllib",)
FULL = os.environ.get("FULL", "0") not in ("", "0")
# FULL=1: a longer pre-training and three times the continual pre-training budget (more target epochs).
PRETRAIN_TOKENS = 2_457_600 if FULL else 1_228_800
# Each continual pre-training run: 157 steps of 8 x 256 tokens, about 28 target epochs (FULL=1: 470).
# The four runs (baseline, EntroDrop, signal: loss, midpoint: auto) fit the 10 minutes the three took
# because none scores an lm-eval task (0.9 s an evaluation; configs/demo/cpt_baseline.yaml says why).
CPT_STEPS = 470 if FULL else 157
CPT_TOKENS = CPT_STEPS * 8 * 256


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
                                      [p.strip() for t in pydoc_data.topics.topics.values()
                                       for p in t.split("\n\n") if len(p.strip()) >= 80]),
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


def choose_device(requested: str, cuda_available: bool) -> str:
    """``cpu`` or ``cuda``: ``DEVICE`` when set (``cpu`` forces the CPU version anywhere), else
    ``cuda`` where torch sees a CUDA GPU."""
    if requested not in ("", "cpu", "cuda"):
        raise SystemExit(f"DEVICE={requested!r}: must be cpu or cuda (or unset: cuda where a GPU is)")
    if requested == "cuda" and not cuda_available:
        raise SystemExit("DEVICE=cuda, but torch sees no CUDA GPU here: DEVICE=cpu runs the CPU version")
    return requested or ("cuda" if cuda_available else "cpu")


def run_stages(stages: list, out: Path, resume: bool) -> None:
    """Run ``(title, fn, outputs)`` stages in order, marking each done in ``out/.stages``.

    Without ``resume`` everything under ``out`` goes first: a fresh demo. With it, stages
    marked done (under the same title) are skipped, and a stage that runs removes its
    ``outputs`` first, which a killed attempt may have left half written.
    """
    start = time.perf_counter()
    if out.exists() and not resume:
        shutil.rmtree(out)
    marks = out / ".stages"
    marks.mkdir(parents=True, exist_ok=True)
    for k, (title, fn, outputs) in enumerate(stages, start=1):
        mark = marks / f"{k:02d}.done"
        if mark.exists() and mark.read_text() == title:
            print(f"[{k}/{len(stages)}] {title}: done before, skipped", flush=True)
            continue
        for path in outputs:
            shutil.rmtree(path, ignore_errors=True)
        print(f"[{k}/{len(stages)}] {title} ({time.perf_counter() - start:.0f}s)", flush=True)
        fn()
        mark.write_text(title)
    print(f"done in {time.perf_counter() - start:.0f}s")


def main() -> None:
    import torch

    device = choose_device(os.environ.get("DEVICE", ""), torch.cuda.is_available())
    resume = os.environ.get("RESUME", "0") not in ("", "0")
    if device == "cuda":
        run_stages(gpu_stages(), GPU_OUT, resume)
    else:
        run_stages(cpu_stages(), OUT, resume)


def cpu_stages() -> list:
    """The CPU version's stages: (title, what runs, what it writes)."""
    return [
        ("corpora from Python's own files", build_corpora, [OUT / "corpora"]),
        ("token stores", lambda: tune("recipes/tokenize_corpus.py", "--config", "configs/demo/tokenize.yaml"),
         [OUT / "tokens"]),
        ("pre-train the tiny base model", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", "configs/demo/pretrain.yaml", f"total_tokens={PRETRAIN_TOKENS}"),
         [OUT / "pretrain"]),
        ("entropy of the target tokens under the base", lambda: tune(
            "recipes/precompute_entropy.py", "--config", "configs/demo/precompute_entropy.yaml",
            f"checkpointer.checkpoint_dir={base()}"), [OUT / "entropy" / "target"]),
        ("entropy of the held-out tokens", lambda: tune(
            "recipes/precompute_entropy.py", "--config", "configs/demo/precompute_entropy.yaml",
            f"checkpointer.checkpoint_dir={base()}", "target_tokens=outputs/demo/tokens/target_val",
            "cache_dir=outputs/demo/entropy/target_val"), [OUT / "entropy" / "target_val"]),
        ("baseline: multi-epoch continual pre-training", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", "configs/demo/cpt_baseline.yaml",
            f"checkpointer.checkpoint_dir={base()}", f"total_tokens={CPT_TOKENS}"), [OUT / "baseline"]),
        ("EntroDrop: the same run with entropy-guided token dropout", partial(run_entrodrop, "entrodrop"),
         [OUT / "entrodrop"]),
        ("EntroDrop, signal: loss: the gate ranks each token by its own training loss", partial(
            run_entrodrop, "entrodrop_loss", "token_dropout.signal=loss"), [OUT / "entrodrop_loss"]),
        ("EntroDrop, midpoint: auto: j0 from its own validation loss, no baseline", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", "configs/demo/cpt_entrodrop.yaml",
            f"checkpointer.checkpoint_dir={base()}", f"total_tokens={CPT_TOKENS}", "token_dropout.midpoint=auto",
            "output_dir=outputs/demo/entrodrop_auto"), [OUT / "entrodrop_auto"]),
        ("report", report, [OUT / "report"]),
    ]


def base(out: Path = OUT) -> str:
    """The pre-trained base model: the last checkpoint of the pre-training stage."""
    return str(latest_checkpoint(out / "pretrain" / "checkpoints"))


# ---------------------------------------------------------------------------- the GPU version

GPU_OUT = REPO / "outputs" / "demo_gpu"
GPU_CONFIGS = "configs/demo_gpu"
GPU_TARGET_PACKAGE = "torchtune"  # its source: 0.6M tokens of the tiny tokenizer, in every installation
GPU_CODE_CHARS, GPU_PROSE_CHARS = 60_000_000, 20_000_000  # pre-training text, at most
GPU_PRETRAIN_TOKENS = 33_554_432  # 1,024 steps of 32 x 1,024 tokens
GPU_CPT_TOKENS = 14_680_064  # 448 steps: about 16 target epochs of 0.53M tokens at 6:4
GPU_PARALLEL = 4  # continual pre-training runs sharing the GPU at once (a 77M model leaves it idle)
SPREAD_SEEDS = ("baseline", "baseline_seed1"), ("entrodrop", "entrodrop_seed1")
# The runs after the baseline: (name, config, overrides); "{midpoint}" is the baseline's proposal.
GPU_RUNS = [
    ("baseline_seed1", "cpt_baseline", ["seed=1"]),
    ("entrodrop", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}"]),
    ("entrodrop_seed1", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "seed=1"]),
    ("gamma_max_0.2", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.gamma_max=0.2"]),
    ("gamma_max_0.4", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.gamma_max=0.4"]),
    ("targeting_random", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.targeting=random"]),
    ("targeting_high", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.targeting=high"]),
    ("neftune", "cpt_baseline", ["neftune_alpha=5.0"]),
    ("hidden_dropout", "cpt_baseline", ["hidden_dropout=0.1"]),
    ("weight_decay", "cpt_baseline", ["optimizer.weight_decay=0.1"]),
    ("entrodrop_loss", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.signal=loss"]),
    ("entrodrop_auto", "cpt_entrodrop", ["token_dropout.midpoint=auto"]),
]


def build_gpu_corpora() -> None:
    """The GPU version's text, from this environment's files in sorted order (deterministic for
    it): the target is ``GPU_TARGET_PACKAGE``'s source, every 7th block held out; pre-training
    code is the standard library's and the other installed packages' modules, pre-training prose
    pydoc's topics and their docstrings, which also serve as the general replay data."""
    import importlib.util

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(importlib.util.find_spec(GPU_TARGET_PACKAGE).origin).parent.parent
    read = lambda p: p.read_text(encoding="utf-8", errors="replace")  # noqa: E731
    target_files = sorted(f for f in (site / GPU_TARGET_PACKAGE).rglob("*.py") if "test" not in f.parts)
    target_blocks = [b for f in target_files for b in blocks(read(f))]
    code_files = sorted(f for f in stdlib.rglob("*.py") if "site-packages" not in f.parts and "test" not in f.parts)
    code_files += sorted(f for f in site.rglob("*.py") if f.relative_to(site).parts[0] != GPU_TARGET_PACKAGE
                         and "test" not in f.parts and "tests" not in f.parts)
    code, prose = [], [p.strip() for t in pydoc_data.topics.topics.values() for p in t.split("\n\n") if len(p.strip()) >= 80]
    code_chars, prose_chars = 0, sum(map(len, prose))
    for f in code_files:
        if code_chars >= GPU_CODE_CHARS and prose_chars >= GPU_PROSE_CHARS:
            break
        source = read(f)
        if code_chars < GPU_CODE_CHARS:
            code += blocks(source)
            code_chars += len(source)
        if prose_chars < GPU_PROSE_CHARS:
            found = docstrings(source)
            prose += found
            prose_chars += sum(map(len, found))
    corpora = GPU_OUT / "corpora"
    sizes = {
        "pretrain_code": write_jsonl(corpora / "pretrain_code.jsonl", code),
        "pretrain_prose": write_jsonl(corpora / "pretrain_prose.jsonl", prose),
        "target": write_jsonl(corpora / "target.jsonl", [b for i, b in enumerate(target_blocks) if i % 7]),
        "target_val": write_jsonl(corpora / "target_val.jsonl", [b for i, b in enumerate(target_blocks) if not i % 7]),
    }
    print("    " + ", ".join(f"{name}: {chars / 1e6:.2f}M chars" for name, chars in sizes.items()))


def init_gpu_base() -> None:
    """The random-weight base model, of the shape configs/demo_gpu/pretrain.yaml names."""
    import torch
    from omegaconf import OmegaConf

    from entrodrop.checkpointing import write_random_checkpoint

    cfg = OmegaConf.load(REPO / GPU_CONFIGS / "pretrain.yaml")
    args = {k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "_component_"}
    write_random_checkpoint(REPO / cfg.checkpointer.checkpoint_dir, "QWEN3", args, REPO / "assets/tiny/tokenizer",
                            device="cuda", dtype=torch.float32, seed=2)


def run_parallel(commands: list, at_once: int) -> None:
    """``tune run`` each ``(name, args)``, ``at_once`` at a time; stop the demo if any fails."""
    logs = GPU_OUT / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(commands), at_once):
        group = commands[start : start + at_once]
        procs = [(name, subprocess.Popen([TUNE, "run", *args], cwd=REPO, stdout=subprocess.DEVNULL,
                                         stderr=(logs / f"{name}.log").open("w")))
                 for name, args in group]
        print("    " + ", ".join(name for name, _ in group), flush=True)
        failed = [name for name, proc in procs if proc.wait()]
        if failed:
            raise SystemExit(f"demo stopped: {failed} failed; see {logs}/<name>.log")


def gpu_runs(runs: list) -> None:
    """``runs`` (of ``GPU_RUNS``) side by side on the GPU, each at the baseline's compute and data
    order."""
    midpoint, line = choose_midpoint(read_run(GPU_OUT / "baseline"))
    print(f"    {line}")
    commands = [(name, ["recipes/entrodrop_single_device.py", "--config", f"{GPU_CONFIGS}/{config}.yaml",
                        f"checkpointer.checkpoint_dir={base(GPU_OUT)}", f"total_tokens={GPU_CPT_TOKENS}",
                        f"output_dir=outputs/demo_gpu/{name}", *(o.format(midpoint=midpoint) for o in overrides)])
                for name, config, overrides in runs]
    run_parallel(commands, len(commands))


def gpu_report() -> None:
    names = ["baseline"] + [name for name, _, _ in GPU_RUNS]
    runs = {name: read_run(GPU_OUT / name) for name in names}
    out = GPU_OUT / "report"
    written = write_report([runs[n] for n in ("baseline", "entrodrop", "entrodrop_loss", "entrodrop_auto")], out,
                           target_group="target", baseline="baseline")
    spread = seed_spread(runs, SPREAD_SEEDS, "target")
    table_4 = comparison_table(runs, [("baseline (gamma_max 0)", "baseline"), ("gamma_max 0.1", "entrodrop"),
                                      ("gamma_max 0.2", "gamma_max_0.2"), ("gamma_max 0.4", "gamma_max_0.4")],
                               "target", "baseline", spread)
    table_3 = comparison_table(runs, [("baseline", "baseline"), ("EntroDrop (gamma_max 0.1)", "entrodrop"),
                                      ("random targeting", "targeting_random"), ("high-entropy targeting", "targeting_high"),
                                      ("NEFTune (alpha 5)", "neftune"), ("hidden dropout 0.1", "hidden_dropout"),
                                      ("weight decay 0.1", "weight_decay"), ("EntroDrop, signal: loss", "entrodrop_loss"),
                                      ("EntroDrop, midpoint: auto", "entrodrop_auto")],
                               "target", "baseline", spread)
    tables = "\n".join(["Table 4: gamma_max", "", *table_4, "", "Table 3: methods", "", *table_3]) + "\n"
    (out / "tables.md").write_text(tables)
    write_entropy_sample(str(REPO / GPU_CONFIGS / "cpt_entrodrop.yaml"), 3, out)
    print(Path(written["files"][-1]).read_text() + "\n" + tables)
    print(f"report: {out}")


def gpu_stages() -> list:
    """The GPU version's stages: (title, what runs, what it writes)."""
    def precompute(corpus: str):
        return lambda: tune("recipes/precompute_entropy.py", "--config", f"{GPU_CONFIGS}/precompute_entropy.yaml",
                            f"checkpointer.checkpoint_dir={base(GPU_OUT)}",
                            f"target_tokens=outputs/demo_gpu/tokens/{corpus}", f"cache_dir=outputs/demo_gpu/entropy/{corpus}")

    return [
        ("corpora: the standard library and this environment's packages", build_gpu_corpora, [GPU_OUT / "corpora"]),
        ("token stores", lambda: tune("recipes/tokenize_corpus.py", "--config", f"{GPU_CONFIGS}/tokenize.yaml"),
         [GPU_OUT / "tokens"]),
        ("the random-weight 77M base model", init_gpu_base, [GPU_OUT / "init"]),
        ("pre-train it on general code and prose", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", f"{GPU_CONFIGS}/pretrain.yaml",
            f"total_tokens={GPU_PRETRAIN_TOKENS}"), [GPU_OUT / "pretrain"]),
        ("entropy of the target tokens under the base", precompute("target"), [GPU_OUT / "entropy" / "target"]),
        ("entropy of the held-out tokens", precompute("target_val"), [GPU_OUT / "entropy" / "target_val"]),
        ("baseline (seed 0): multi-epoch continual pre-training", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", f"{GPU_CONFIGS}/cpt_baseline.yaml",
            f"checkpointer.checkpoint_dir={base(GPU_OUT)}", f"total_tokens={GPU_CPT_TOKENS}"), [GPU_OUT / "baseline"]),
        # GPU_PARALLEL runs a stage, so a call that ends mid-way loses one group at most.
        *[(f"runs at the same compute: {', '.join(name for name, _, _ in group)}", partial(gpu_runs, group),
           [GPU_OUT / name for name, _, _ in group])
          for group in (GPU_RUNS[k : k + GPU_PARALLEL] for k in range(0, len(GPU_RUNS), GPU_PARALLEL))],
        ("report: tables 3 and 4, figures 1b, 1c and 5c", gpu_report, [GPU_OUT / "report"]),
    ]


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


def run_entrodrop(name: str, *overrides: str) -> None:
    """An EntroDrop run into outputs/demo/``name`` at the baseline's compute, its midpoint the one
    the baseline proposes (recomputed from the baseline's evaluations, so every such run, resumed
    or not, gets the same)."""
    epochs, line = choose_midpoint(read_run(OUT / "baseline"))
    print(f"    {line}")
    tune("recipes/entrodrop_single_device.py", "--config", "configs/demo/cpt_entrodrop.yaml",
         f"checkpointer.checkpoint_dir={base()}", f"output_dir=outputs/demo/{name}",
         f"total_tokens={CPT_TOKENS}", f"token_dropout.midpoint={epochs}", *overrides)


# The CPU version's continual pre-training runs, in the report's order (its colours, its table rows).
CPT_RUNS = ("baseline", "entrodrop", "entrodrop_loss", "entrodrop_auto")


def report() -> None:
    runs = [read_run(OUT / name) for name in CPT_RUNS]
    # No target group: the CPU runs score no lm-eval task, so the validation loss picks each best epoch.
    written = write_report(runs, OUT / "report", baseline="baseline")
    written["files"].insert(-1, str(write_entropy_sample(str(REPO / "configs/demo/cpt_entrodrop.yaml"), 3, OUT / "report")))
    print()
    print(Path(written["files"][-1]).read_text())
    for run in runs:
        for e in run["evals"]:
            loss = e["val_loss"]
            # signal: loss runs only: the share of the entropy gate's tokens the loss gate takes too
            agreement = f"  gate agreement {e['signal']['gate_agreement']:.3f}" if "signal" in e else ""
            print(f"    {run['name']:>14} epoch {e['target_epoch']:5.2f}: val loss all {loss['all']:.4f} "
                  f"low {loss['low']:.4f} high {loss['high']:.4f}{agreement}")
    print(f"\nreport: {OUT / 'report'} ({', '.join(Path(f).name for f in written['files'])})")


if __name__ == "__main__":
    main()
