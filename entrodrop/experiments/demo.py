"""The main job, offline: EntroDrop against plain multi-epoch continual pre-training.

`make demo` runs it (scripts/demo.py, whose docstring lists DEVICE and RESUME).

Where torch sees a CUDA GPU it runs the GPU version (``GPU_STAGES`` below): a Qwen3-shaped model
of 77M parameters pre-trained for a few minutes on the standard library's and this environment's
packages' code and prose, then continual pre-training on one package's source (torchtune's,
0.6M tokens, never seen in pre-training) in twelve runs: the baseline and EntroDrop
(gamma_max 0.1) with two seeds each, gamma_max 0.2 and 0.4, the table-3 comparisons (targeting
random and high, NEFTune, hidden dropout, weight decay), ``signal: loss`` and ``midpoint: auto``,
four at a time on the one GPU; its report adds tables 3 and 4, the seeded settings' differences
paired by seed.
Everything lands in outputs/demo_gpu. Otherwise (and with DEVICE=cpu) the CPU version runs, in
the regime docs/reproduction.md chose from the baseline alone (a base that knows the format of
the target text, so half its tokens are nearly certain, and a held-out half as large as the
training text):

 1. corpora from Python's own files: the decimal module's arithmetic test cases
    (Lib/test/decimaltestdata) of every operation but addition and subtraction, and the standard
    library's top-level modules, to pre-train the base on; the scarce target domain, the first
    addition test cases in blocks, every other block held out; general English prose, the
    standard library's docstrings
 2. token stores of all of them (recipes/tokenize_corpus.py)
 3. a random-weight 0.67M-parameter Qwen3 of the shape configs/demo/pretrain.yaml names
 4. its pre-training into the base model (recipes/entrodrop_single_device.py, no dropout)
 5. the base model's entropy of the target and held-out tokens (recipes/precompute_entropy.py)
 6. continual pre-training on the 6:4 mix for about 60 target epochs, evaluated at every epoch
    end by the validation loss by entropy bucket, two runs at a time with one thread each
    (``CPU_RUNS``): the baseline and ``midpoint: auto`` (which needs no baseline);
    then EntroDrop with its curriculum midpoint where the baseline's validation loss stopped
    falling, as the paper sets j0, and the same run with ``signal: loss``
 7. the report (entrodrop/analysis/report.py, entrodrop/analysis/multi_seed.py): plots and tables in
    outputs/demo/report, each difference from the baseline, whether the baseline is in the
    paper's regime, and a held-out sample shaded by its entropy (figure 5c)

One seed a run, to stay within 10 minutes: ``make reproduce`` (scripts/reproduce.py) runs tables
3 and 4 on the same base with several seeds of each setting, and pairs them by seed, which tells
these differences from noise (docs/reproduction.md).

Each stage marks itself done in <out>/.stages when it finishes. With RESUME=1 the done stages are
skipped and the first one not done starts over from what it had written removed, so a demo that
one call cannot hold finishes over several. Without it, a demo whose folder holds an earlier
call's results stops before anything runs and says so: it never deletes them (``run_stages``).
"""

import ast
import contextlib
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
from typing import Optional

from entrodrop.analysis.multi_seed import regime_table, setting_figures, settings_table, verdict_lines
from entrodrop.analysis.report import propose_midpoint, write_entropy_sample, write_report
from entrodrop.analysis.run_figures import read_run, run_figures
from entrodrop.experiments.run_queue import RUN_ENV, Job, run_jobs
from entrodrop.models.checkpointing import latest_checkpoint
from entrodrop.storage.files import LOCK_NAME, DirInUse, release_dir_lock, take_dir_lock

REPO = Path(__file__).resolve().parents[2]  # the checkout: its configs/, assets/ and outputs/

OUT = REPO / "outputs" / "demo"
CONFIGS = "configs/demo"
TUNE = str(Path(sys.executable).parent / "tune")
STDLIB = Path(sysconfig.get_paths()["stdlib"])
# The decimal module's test cases (IBM's General Decimal Arithmetic testcases), shipped with
# CPython's test suite; Debian and Ubuntu put it in the package libpython3.X-testsuite.
DECIMAL_TESTS = STDLIB / "test" / "decimaltestdata"
# The target: the first blocks of addition test cases, every other one held out (2 x 22 blocks,
# 5.0k tokens to train on and 4.7k held out); the base never sees these operations.
TARGET_FILE, TARGET_BLOCKS, HELD_OUT_EVERY = "add.decTest", 44, 2
TARGET_OPERATIONS = ("add", "subtract")
BLOCK_CHARS = 360  # a block fits a 256-token row of the tiny tokenizer
CPU_PARALLEL = 2  # continual pre-training runs at once, one thread each
# The runs, in groups of CPU_PARALLEL: (name, config, overrides); "{midpoint}" is the baseline's
# proposal, so a group with one comes after the baseline's.
CPU_RUNS = [
    ("baseline", "cpt_baseline", []),
    ("entrodrop_auto", "cpt_entrodrop", ["token_dropout.midpoint=auto"]),
    ("entrodrop", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}"]),
    ("entrodrop_loss", "cpt_entrodrop", ["token_dropout.midpoint={midpoint}", "token_dropout.signal=loss"]),
]
# The report's settings: label -> its runs (one a seed). One seed each: a second seed of the
# baseline and of EntroDrop would take the demo past 10 minutes; `make reproduce` runs three.
CPU_SETTINGS = {"baseline": ["baseline"], "EntroDrop": ["entrodrop"], "EntroDrop, signal: loss": ["entrodrop_loss"],
                "EntroDrop, midpoint: auto": ["entrodrop_auto"]}


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


def decimal_blocks(text: str, limit: int = BLOCK_CHARS, without: tuple = ()) -> list:
    """A ``.decTest`` file as blocks of consecutive test cases and directives, comments and the
    cases of the operations ``without`` dropped: its blank-line groups, packed whole into blocks of
    at most ``limit`` characters where they fit (a longer group is cut between lines).

    >>> decimal_blocks("-- add\\nprecision: 9\\n\\naddx001 add 1 1 -> 2\\naddx002 add 2 1 -> 3\\n", limit=30)
    ['precision: 9', 'addx001 add 1 1 -> 2', 'addx002 add 2 1 -> 3']
    >>> decimal_blocks("rnd1 add 1 1 -> 2\\nrnd2 multiply 2 1 -> 2", without=("add",))
    ['rnd2 multiply 2 1 -> 2']
    """
    groups = [[line.rstrip() for line in group.splitlines()
               if line.strip() and not line.startswith("--") and line.split()[1:2] not in ([op] for op in without)]
              for group in text.split("\n\n")]
    out, block = [], []
    for group in filter(None, groups):
        if block and len("\n\n".join(["\n".join(block), *group])) > limit:
            out.append("\n".join(block).strip())
            block = []
        for line in group:
            if block and len("\n".join([*block, line])) > limit:
                out.append("\n".join(block).strip())
                block = []
            block.append(line)
        block.append("")
    return [b for b in out + ["\n".join(block).strip()] if b]


def operation(test_file: Path) -> str:
    """The operation a ``.decTest`` file tests: ``dqAdd.decTest`` and ``add.decTest`` test ``add``."""
    name = test_file.stem
    return (name[2:] if name[:2] in ("dd", "dq", "ds") and name[2:3].isupper() else name).lower()


def write_jsonl(path: Path, texts: list) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")
    return sum(map(len, texts))


def build_corpora(out: Path = OUT, cut=decimal_blocks, target_blocks: int = TARGET_BLOCKS) -> None:
    """The CPU version's corpora into ``out``/corpora: the test cases cut into blocks by ``cut``
    (``decimal_blocks``, or the premise regime's ``entrodrop.experiments.premise.doctest_blocks``),
    the first ``target_blocks`` of the target file the target and its held-out half; the code and the
    docstrings as they are."""
    if not (DECIMAL_TESTS / TARGET_FILE).is_file():
        raise SystemExit(f"demo stopped: {DECIMAL_TESTS / TARGET_FILE} does not exist. The CPU demo's text is the "
                         "decimal module's test cases, part of CPython's test suite, which this Python was installed "
                         "without (on Debian and Ubuntu: apt install libpython3.X-testsuite for python3.X)")
    read = lambda p: p.read_text(encoding="utf-8", errors="replace")  # noqa: E731
    # every other operation's files, without the few addition and subtraction cases some of them
    # hold; not randoms and randomBound32, which mix every operation with long random operands
    others = [f for f in sorted(DECIMAL_TESTS.glob("*.decTest"))
              if operation(f) not in TARGET_OPERATIONS and not operation(f).startswith("random")]
    target = cut(read(DECIMAL_TESTS / TARGET_FILE))[:target_blocks]
    modules = sorted(STDLIB.glob("*.py"))
    documented = sorted(f for f in STDLIB.rglob("*.py") if "test" not in str(f.relative_to(STDLIB))
                        and "site-packages" not in f.parts)
    corpora = out / "corpora"
    sizes = {
        "pretrain_decimal": write_jsonl(corpora / "pretrain_decimal.jsonl",
                                        [b for f in others for b in cut(read(f), without=TARGET_OPERATIONS)]),
        "pretrain_code": write_jsonl(corpora / "pretrain_code.jsonl", [b for f in modules for b in blocks(read(f))]),
        "target": write_jsonl(corpora / "target.jsonl", [b for i, b in enumerate(target) if i % HELD_OUT_EVERY]),
        "target_val": write_jsonl(corpora / "target_val.jsonl", [b for i, b in enumerate(target) if not i % HELD_OUT_EVERY]),
        "general": write_jsonl(corpora / "general.jsonl", [d for f in documented for d in docstrings(read(f))]),
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


def earlier_call(out: Path) -> Optional[str]:
    """What an earlier call left in ``out``, in words (its finished stages and runs); None where
    ``out`` is absent or empty."""
    if not out.is_dir() or all(p.name == LOCK_NAME for p in out.iterdir()):
        return None
    counts = [(len(list((out / folder).glob("*.done"))), what) for folder, what in ((".stages", "stage"), (".runs", "run"))]
    return ", ".join(f"{n} finished {what}{'s' * (n != 1)}" for n, what in counts)


def run_stages(stages: list, out: Path, resume: bool, command: str = "make demo") -> None:
    """Run ``(title, fn, outputs)`` stages in order, marking each done in ``out/.stages``.

    With ``resume``, stages marked done (under the same title) are skipped, and a stage that runs
    removes its ``outputs`` first, which a killed attempt may have left half written. Without it,
    ``out`` must be absent or empty: an earlier call's results there stop ``command`` before
    anything runs, in one line that offers both ways on (nothing is deleted). One call at a time
    writes ``out``: a second, resumed or not, stops before anything runs, naming the first.
    """
    try:
        lock = take_dir_lock(out, command)
    except DirInUse as held:
        raise SystemExit(f"{command} stopped before anything ran: another call writes into {out} now "
                         f"({held.holder}); wait for it to end, or stop it") from None
    try:
        _run_stages(stages, out, resume, command)
    finally:
        release_dir_lock(lock)


def _run_stages(stages: list, out: Path, resume: bool, command: str) -> None:
    """``run_stages``, once it holds ``out``."""
    start = time.perf_counter()
    left = None if resume else earlier_call(out)
    if left:
        raise SystemExit(f"{command} stopped before anything ran: {out} holds an earlier call's results ({left}), "
                         f"which it never deletes. RESUME=1 {command} continues them; to start afresh, move or "
                         f"delete {out} first")
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


def main(device: str = "", resume: bool = False) -> None:
    """The demo on ``device`` (``cpu``, ``cuda``; empty: where torch sees a GPU, the GPU version);
    ``resume`` continues the stages a stopped call finished. scripts/demo.py passes Make's
    ``DEVICE`` and ``RESUME``."""
    import torch

    device = choose_device(device, torch.cuda.is_available())
    with continue_hint("make demo"):
        if device == "cuda":
            run_stages(gpu_stages(), GPU_OUT, resume)
        else:
            run_stages(cpu_stages(), OUT, resume)


@contextlib.contextmanager
def continue_hint(command: str):
    """Ctrl-C in ``command`` ends in one line that says how to continue, not a traceback."""
    try:
        yield
    except KeyboardInterrupt:
        raise SystemExit(f"{command} interrupted: RESUME=1 {command} continues from the stages and runs it "
                         "finished (those in flight start over)") from None


def data_and_base_stages(*extra: str, out: Path = OUT, configs: str = CONFIGS, corpora=build_corpora) -> list:
    """The CPU version's first stages, which ``make reproduce`` shares: corpora (``corpora``), token
    stores and the base model with its entropies, into ``out`` by the configs in ``configs``. Each is
    (title, what runs, what it writes); ``extra`` overrides go to the pre-training and the entropy
    precompute (``device=cuda`` on a GPU)."""
    where = out.relative_to(REPO) if out.is_relative_to(REPO) else out

    def precompute(corpus: str):
        return lambda: tune("recipes/precompute_entropy.py", "--config", f"{configs}/precompute_entropy.yaml",
                            f"checkpointer.checkpoint_dir={base(out)}", f"target_tokens={where}/tokens/{corpus}",
                            f"cache_dir={where}/entropy/{corpus}", *extra)

    return [
        ("corpora from Python's own files: decimal arithmetic test cases, code, docstrings", corpora,
         [out / "corpora"]),
        ("token stores", lambda: tune("recipes/tokenize_corpus.py", "--config", f"{configs}/tokenize.yaml"),
         [out / "tokens"]),
        ("the random-weight 0.67M base model", partial(init_base, configs, "cpu"), [out / "init"]),
        ("pre-train it on the other operations' test cases", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", f"{configs}/pretrain.yaml", *extra), [out / "pretrain"]),
        ("entropy of the target tokens under the base", precompute("target"), [out / "entropy" / "target"]),
        ("entropy of the held-out tokens", precompute("target_val"), [out / "entropy" / "target_val"]),
    ]


def groups(runs: list, size: int) -> list:
    """``runs`` in consecutive groups of ``size``."""
    return [runs[k : k + size] for k in range(0, len(runs), size)]


def run_stage(out: Path, configs: str, runs: list, *extra: str, threads: int = 0, base_out: Path = None,
              baseline: str = "baseline"):
    """A stage of ``runs`` side by side (``run_group``): its title, what runs, what it writes."""
    return (f"runs at the same compute: {', '.join(name for name, _, _ in runs)}",
            partial(run_group, out, configs, runs, *extra, threads=threads, base_out=base_out, baseline=baseline),
            [out / name for name, _, _ in runs])


def cpu_stages() -> list:
    """The CPU version's stages: (title, what runs, what it writes)."""
    return [*data_and_base_stages(),
            *[run_stage(OUT, CONFIGS, group, threads=1) for group in groups(CPU_RUNS, CPU_PARALLEL)],
            ("report", report, [OUT / "report"])]


def base(out: Path = OUT) -> str:
    """The pre-trained base model: the last checkpoint of the pre-training stage."""
    return str(latest_checkpoint(out / "pretrain" / "checkpoints"))


def init_base(configs: str, device: str) -> None:
    """The random-weight base model, of the shape ``configs``/pretrain.yaml names, into the
    checkpoint directory it reads."""
    import torch
    from omegaconf import OmegaConf

    from entrodrop.models.checkpointing import write_random_checkpoint

    cfg = OmegaConf.load(REPO / configs / "pretrain.yaml")
    args = {k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "_component_"}
    write_random_checkpoint(REPO / cfg.checkpointer.checkpoint_dir, "QWEN3", args, REPO / "assets/tiny/tokenizer",
                            device=device, dtype=torch.float32, seed=2)


def run_group(out: Path, configs: str, runs: list, *extra: str, threads: int = 0, base_out: Path = None,
              baseline: str = "baseline") -> None:
    """``runs`` (``(name, config, overrides)``) side by side (``entrodrop.experiments.run_queue``), from
    the base model in ``base_out`` (default ``out``), into ``out/<name>``, each at the baseline's
    compute and data order (``extra`` overrides go to every run; ``threads``: each run's CPU threads,
    0 for torch's default); "{midpoint}" in an override is the proposal of the run
    ``out/<baseline>``. Then each run's best and last validation loss."""
    midpoint = None
    if any("{midpoint}" in o for _, _, overrides in runs for o in overrides):
        midpoint, line = choose_midpoint(read_run(out / baseline))
        print(f"    {line}")
    jobs = [Job(name, partial(run_command, configs, config, out / name, base(base_out or out),
                              [*extra, *(o.format(midpoint=midpoint) for o in overrides)]), [out / name])
            for name, config, overrides in runs]
    done = out / ".runs"
    for name, _, _ in runs:  # this stage runs them afresh (run_stages removed what they wrote)
        (done / f"{name}.done").unlink(missing_ok=True)
    run_jobs(jobs, len(jobs), out / "logs", done, run_env(threads), REPO, on_done=lambda job: print_figures(out, job.name))


def run_command(configs: str, config: str, out: Path, checkpoint: str, overrides: list) -> list:
    """The `tune run` of one continual pre-training run from the base model in ``checkpoint``, into ``out``."""
    return [TUNE, "run", "recipes/entrodrop_single_device.py", "--config", f"{configs}/{config}.yaml",
            f"checkpointer.checkpoint_dir={checkpoint}",
            f"output_dir={out.relative_to(REPO) if out.is_relative_to(REPO) else out}", *overrides]


def run_env(threads: int = 0) -> dict:
    """The environment of the runs: this one's, ``RUN_ENV``, and ``threads`` CPU threads a run (0:
    torch's default)."""
    return {**os.environ, **RUN_ENV, **({"OMP_NUM_THREADS": str(threads)} if threads else {})}


def print_figures(out: Path, name: str) -> None:
    f = run_figures(read_run(out / name))
    print(f"    {name}: best epoch {f['best_epoch']:.2f} (val loss {f['min_val_loss']:.4f}); at epoch "
          f"{f['last_epoch']:.2f} {f['end_all']:.4f} (low-entropy {f['end_low']:.4f}, high {f['end_high']:.4f})",
          flush=True)


# ---------------------------------------------------------------------------- the GPU version

GPU_OUT = REPO / "outputs" / "demo_gpu"
GPU_CONFIGS = "configs/demo_gpu"
GPU_TARGET_PACKAGE = "torchtune"  # its source: 0.6M tokens of the tiny tokenizer, in every installation
GPU_CODE_CHARS, GPU_PROSE_CHARS = 60_000_000, 20_000_000  # pre-training text, at most
GPU_PRETRAIN_TOKENS = 33_554_432  # 1,024 steps of 32 x 1,024 tokens
GPU_CPT_TOKENS = 14_680_064  # 448 steps: about 16 target epochs of 0.53M tokens at 6:4
GPU_PARALLEL = 4  # continual pre-training runs sharing the GPU at once (a 77M model leaves it idle)
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


# Tables 3 and 4 of the GPU report: label -> the runs of that setting (one a seed).
GPU_TABLE_4 = {"baseline (gamma_max 0)": ["baseline", "baseline_seed1"], "gamma_max 0.1": ["entrodrop", "entrodrop_seed1"],
               "gamma_max 0.2": ["gamma_max_0.2"], "gamma_max 0.4": ["gamma_max_0.4"]}
GPU_TABLE_3 = {"baseline": ["baseline", "baseline_seed1"], "EntroDrop (gamma_max 0.1)": ["entrodrop", "entrodrop_seed1"],
               "random targeting": ["targeting_random"], "high-entropy targeting": ["targeting_high"],
               "NEFTune (alpha 5)": ["neftune"], "hidden dropout 0.1": ["hidden_dropout"],
               "weight decay 0.1": ["weight_decay"], "EntroDrop, signal: loss": ["entrodrop_loss"],
               "EntroDrop, midpoint: auto": ["entrodrop_auto"]}


def gpu_report() -> None:
    names = ["baseline"] + [name for name, _, _ in GPU_RUNS]
    runs = {name: read_run(GPU_OUT / name) for name in names}
    out = GPU_OUT / "report"
    written = write_report([runs[n] for n in ("baseline", "entrodrop", "entrodrop_loss", "entrodrop_auto")], out,
                           target_group="target", baseline="baseline")
    tables = seed_tables(runs, {"Table 4: gamma_max": GPU_TABLE_4, "Table 3: methods": GPU_TABLE_3}, "target")
    (out / "tables.md").write_text(tables)
    write_entropy_sample(str(REPO / GPU_CONFIGS / "cpt_entrodrop.yaml"), 3, out)
    print(Path(written["files"][-1]).read_text() + "\n" + tables)
    print(f"report: {out}")


def seed_tables(runs: dict, tables: dict, target_group=None) -> str:
    """Markdown: each table (title -> {label: run names}) of ``entrodrop.analysis.multi_seed.settings_table``, the
    first label its baseline, every difference from it paired by seed with its 95% interval; then
    whether each baseline run shows the paper's regime (``entrodrop.analysis.multi_seed.regime_check``)."""
    lines = []
    for title, table in tables.items():
        settings = {label: [runs[n] for n in names] for label, names in table.items()}
        lines += [title, "", *settings_table(settings, next(iter(table)), target_group), ""]
    seeds = max(len(names) for table in tables.values() for names in table.values())
    lines += ["Each difference is paired by seed (setting minus baseline at the same seed, the same data order), "
              "its mean with a 95% t-interval over the seeds both have" + (
                  "." if seeds > 1 else ": one seed a setting has no interval, so no difference here is judged "
                  "against noise.") + " The brackets beside a mean are its seeds' range.", ""]
    first = next(iter(tables.values()))
    baselines = first[next(iter(first))]  # the first table's first setting
    lines += ["The paper's regime, from the baseline alone (entrodrop.analysis.multi_seed.regime_check):", "",
              *regime_table({n: run_figures(runs[n]) for n in baselines})]
    return "\n".join(lines) + "\n"


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
        ("the random-weight 77M base model", partial(init_base, GPU_CONFIGS, "cuda"), [GPU_OUT / "init"]),
        ("pre-train it on general code and prose", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", f"{GPU_CONFIGS}/pretrain.yaml",
            f"total_tokens={GPU_PRETRAIN_TOKENS}"), [GPU_OUT / "pretrain"]),
        ("entropy of the target tokens under the base", precompute("target"), [GPU_OUT / "entropy" / "target"]),
        ("entropy of the held-out tokens", precompute("target_val"), [GPU_OUT / "entropy" / "target_val"]),
        ("baseline (seed 0): multi-epoch continual pre-training", lambda: tune(
            "recipes/entrodrop_single_device.py", "--config", f"{GPU_CONFIGS}/cpt_baseline.yaml",
            f"checkpointer.checkpoint_dir={base(GPU_OUT)}", f"total_tokens={GPU_CPT_TOKENS}"), [GPU_OUT / "baseline"]),
        # GPU_PARALLEL runs a stage, so a call that ends mid-way loses one group at most.
        *[run_stage(GPU_OUT, GPU_CONFIGS, group, f"total_tokens={GPU_CPT_TOKENS}")
          for group in groups(GPU_RUNS, GPU_PARALLEL)],
        ("report: tables 3 and 4, figures 1b, 1c and 5c", gpu_report, [GPU_OUT / "report"]),
    ]


# The midpoint when the baseline shows no turn-up of its validation loss (too short a run).
FALLBACK_MIDPOINT_EPOCHS = 4.0


def choose_midpoint(baseline: dict) -> tuple:
    """The report's proposal (entrodrop.analysis.report.propose_midpoint) for the EntroDrop run, or the
    fixed fallback when it proposes nothing; with the line that says which."""
    midpoint = propose_midpoint(baseline)
    if midpoint["midpoint_epochs"] is not None:
        return midpoint["midpoint_epochs"], f"midpoint from the report: {midpoint['note']}"
    return FALLBACK_MIDPOINT_EPOCHS, (f"midpoint: FALLBACK to epoch {FALLBACK_MIDPOINT_EPOCHS:.2f}, not a proposal, "
                                      f"because {midpoint['note']}")


def report() -> None:
    runs = {name: read_run(OUT / name) for name, _, _ in CPU_RUNS}
    out = OUT / "report"
    # No target group: the CPU runs score no lm-eval task, so the validation loss picks each best epoch.
    written = write_report([runs[n] for n in ("baseline", "entrodrop", "entrodrop_loss", "entrodrop_auto")], out,
                           baseline="baseline")
    written["files"].insert(-1, str(write_entropy_sample(str(REPO / CONFIGS / "cpt_entrodrop.yaml"), 3, out)))
    tables = seed_tables(runs, {"EntroDrop against the baseline": CPU_SETTINGS})
    figures = setting_figures({label: [runs[n] for n in names] for label, names in CPU_SETTINGS.items()})
    summary = "\n".join(verdict_lines(figures, "EntroDrop", "baseline")
                        + ["One seed each: `make reproduce` trains several of every setting and pairs them by seed, "
                           "which tells these differences from noise (docs/reproduction.md)."]) + "\n"
    (out / "tables.md").write_text(tables + "\n" + summary)
    print()
    print(Path(written["files"][-1]).read_text())
    print(tables)
    print(summary)
    print(f"report: {out} ({', '.join(Path(f).name for f in written['files'])}, tables.md)")


if __name__ == "__main__":
    main()
