"""Every command of the pipeline refuses bad input the same way: one message that names the
problem, no traceback, a non-zero exit status, and nothing written or moved. One row a refusal,
command by command (tokenize, precompute, verify, training in one process and in N, evaluate,
report, demo, reproduce): a new refusal is a new row. Each runs in this process (the N-process
row through `tune run`), in a fresh folder, after what ``given`` sets up there:

- ``file:<name>``: a file; ``folder-lock:<name>``: a folder where a lock file belongs;
- ``live:<name>``: another live process holds ``<name>`` as a training run holds its output_dir;
- ``ended:<name>``: a training run into ``<name>`` that has ended;
- ``evals:<bytes>``: a run folder ``run`` whose eval/evals.jsonl holds these bytes;
- ``stages:<n>``: a folder ``demo`` in which an earlier call finished n stages;
- ``base-done``: a folder ``base`` in which the premise regime's base stages are done.

The message names paths by ``{tmp}`` (the folder) and the stores of the ``data`` fixture by
their keys (``{target_tokens}``...). Other tests hold each case's finer points; this one holds
that none of them ends in a traceback or touches what was there.
"""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO, run_script_main

from entrodrop.storage.files import LOCK_NAME
from entrodrop.train.run_lock import hold_run_dir

TOKENIZE = "configs/tiny/qwen3_tokenize.yaml"
PRECOMPUTE = "configs/tiny/qwen3_precompute_entropy.yaml"
SINGLE = "configs/tiny/qwen3_entrodrop_single_device.yaml"
DISTRIBUTED = "configs/tiny/qwen3_entrodrop_distributed.yaml"
EVALUATE = "configs/tiny/qwen3_evaluate.yaml"
STORES = ("corpora.target.store_dir={tmp}/tokens/target", "corpora.target_val.store_dir={tmp}/tokens/target_val",
          "corpora.general.store_dir={tmp}/tokens/general")
DATA = ("data.target_tokens={target_tokens}", "data.target_entropy={target_entropy}",
        "data.general_tokens={general_tokens}", "evaluation.validation.target_tokens={val_tokens}",
        "evaluation.validation.target_entropy={val_entropy}", "evaluation.lm_eval.tasks={{}}")
VALIDATION = DATA[3:5]
LIVE = "PID {pid} on host "

ROWS = [
    # command, given, arguments, what the message says
    ("tokenize", "", ["--config", TOKENIZE, *STORES, "corpora.target.path={tmp}/missing.jsonl"],
     "corpora that cannot be read, nothing written:\n  "),
    ("tokenize", "live:tokens/target", ["--config", TOKENIZE, *STORES],
     "target.store_dir={tmp}/tokens/target is in use by another run: " + LIVE),
    ("precompute", "", ["--config", PRECOMPUTE, "target_tokens={target_tokens}", "cache_dir={tmp}/cache",
                        "pack_len=0"], "pack_len=0 must be a positive integer"),
    ("precompute", "live:cache", ["--config", PRECOMPUTE, "target_tokens={target_tokens}", "cache_dir={tmp}/cache"],
     "cache_dir={tmp}/cache is in use by another run: " + LIVE),
    ("verify", "", ["--config", PRECOMPUTE, "target_tokens={target_tokens}", "cache_dir={target_tokens}"],
     "{target_tokens} holds the token store that recipes/tokenize_corpus.py writes; give the entropy cache that "
     "recipes/precompute_entropy.py wrote"),
    ("train", "file:a_file", ["--config", SINGLE, *DATA, "output_dir={tmp}/a_file"],
     "output_dir={tmp}/a_file: {tmp}/a_file is a file, not a directory"),
    ("train", "live:run", ["--config", SINGLE, *DATA, "output_dir={tmp}/run", "resume=True"],
     "output_dir={tmp}/run is in use by another run: " + LIVE),
    ("train", "ended:A", ["--config", SINGLE, *DATA, "output_dir={tmp}/B", "checkpointer.output_dir={tmp}/A/checkpoints",
                          "overwrite=True"],
     "checkpointer.output_dir={tmp}/A/checkpoints is inside {tmp}/A, which belongs to another run "
     "(output_dir={tmp}/A, ended)"),
    ("train", "live:A", ["--config", SINGLE, *DATA, "output_dir={tmp}/B", "metric_logger.log_dir={tmp}/A/logs",
                         "overwrite=True"],
     "metric_logger.log_dir={tmp}/A/logs is inside {tmp}/A, which belongs to another run (output_dir={tmp}/A, "
     "training now: " + LIVE),
    ("train", "folder-lock:run", ["--config", SINGLE, *DATA, "output_dir={tmp}/run"],
     "{tmp}/run/.run.lock is a folder, where a run keeps its lock file"),
    ("train N", "", ["--config", DISTRIBUTED, *DATA, "output_dir={tmp}/run"],
     "recipes/entrodrop_distributed.py runs as torchrun's processes, but it was started alone"),
    ("train N", "live:run", ["--nproc_per_node", "2", "--config", DISTRIBUTED, *DATA, "output_dir={tmp}/run"],
     "output_dir={tmp}/run is in use by another run: " + LIVE),
    ("evaluate", "file:a_file", ["--config", EVALUATE, *VALIDATION, "checkpoints={tmp}/a_file"],
     "checkpoints={tmp}/a_file is a file: give a run's checkpoint directory"),
    ("evaluate", "", ["--config", EVALUATE, *VALIDATION, "checkpoints={tmp}/nowhere"],
     "checkpoints={tmp}/nowhere does not exist"),
    ("report", "", ["{tmp}/nowhere", "--out", "{tmp}/report"], "run directory {tmp}/nowhere does not exist"),
    ("report", "evals:\xff\n", ["{tmp}/run", "--out", "{tmp}/report"],
     "{tmp}/run/eval/evals.jsonl, line 1 cannot be read ('utf-8' codec can't decode byte 0xff"),
    ("report", "file:a_file", ["{tmp}/nowhere", "--out", "{tmp}/a_file"], "--out {tmp}/a_file is a file"),
    ("demo", "stages:2", [], "make demo stopped before anything ran: {tmp}/demo holds an earlier call's results "
                             "(2 finished stages, 0 finished runs)"),
    ("demo", "live:demo", ["--resume"], "make demo stopped before anything ran: another call writes into {tmp}/demo "
                                        "now (" + LIVE),
    ("reproduce", "live:base", ["--regime", "premise", "--resume"],
     "make reproduce REGIME=premise stopped before anything ran: another call writes into {tmp}/base now (" + LIVE),
    ("reproduce", "base-done", ["--regime", "premise", "--seeds", "2"],
     "SEEDS=2 make reproduce REGIME=premise stopped before anything ran: {tmp}/premise holds an earlier call's "
     "results (0 finished stages, 1 finished run)"),
]

RECIPES = {"tokenize": "tokenize_corpus", "precompute": "precompute_entropy", "verify": "verify_entropy_cache",
           "train": "entrodrop_single_device", "train N": "entrodrop_distributed", "evaluate": "evaluate"}

HOLD = """
import sys, time
from entrodrop.train.run_lock import hold_run_dir
lock = hold_run_dir(sys.argv[1])
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def given(tmp_path):
    """Sets up what a row's ``given`` names in ``tmp_path``; the PID of a live holder, or None."""
    holders = []

    def setup(what: str):
        kind, _, name = what.partition(":")
        if kind == "file":
            (tmp_path / name).write_text("x")
        elif kind == "folder-lock":
            (tmp_path / name / LOCK_NAME).mkdir(parents=True)
        elif kind == "live":
            holders.append(subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / name)], cwd=REPO,
                                            stdout=subprocess.PIPE, text=True))
            assert holders[-1].stdout.readline() == "held\n"
            return holders[-1].pid
        elif kind == "ended":
            with hold_run_dir(str(tmp_path / name)):
                (tmp_path / name / "checkpoints" / "step_4").mkdir(parents=True)
        elif kind == "evals":
            (tmp_path / "run" / "eval").mkdir(parents=True)
            (tmp_path / "run" / "eval" / "evals.jsonl").write_bytes(name.encode("latin-1"))
        elif kind == "stages":
            (tmp_path / "demo" / ".stages").mkdir(parents=True)
            for k in range(1, int(name) + 1):
                (tmp_path / "demo" / ".stages" / f"{k:02d}.done").write_text(f"stage {k}")
        elif kind == "base-done":
            from entrodrop.experiments import reproduce

            (tmp_path / "base" / ".stages").mkdir(parents=True)
            for k, (title, _, _) in enumerate(reproduce.REGIMES["premise"].base_stages(), start=1):
                (tmp_path / "base" / ".stages" / f"{k:02d}.done").write_text(title)
            (tmp_path / "premise" / ".runs").mkdir(parents=True)
            (tmp_path / "premise" / ".runs" / "baseline_seed0.done").write_text("")
        return None

    yield setup
    for holder in holders:
        holder.kill()
        holder.communicate()


def run_command(command: str, args: list, tmp_path: Path, monkeypatch, capsys, tune_run) -> tuple:
    """``command`` with ``args`` in this process (``train N`` with ``--nproc_per_node`` through
    `tune run`): (exit status, what it printed on stderr)."""
    if command == "train N" and args[0] == "--nproc_per_node":
        result = tune_run(f"recipes/{RECIPES[command]}.py", *args[2:], nproc=int(args[1]))
        return result.returncode, result.stderr
    if command not in RECIPES:  # scripts/<command>.py, its folders in tmp_path
        from entrodrop.experiments import demo, reproduce

        monkeypatch.setattr(demo, "OUT", tmp_path / "demo")
        monkeypatch.setitem(reproduce.REGIMES, "premise", replace(
            reproduce.REGIMES["premise"], out=tmp_path / "premise", base_out=tmp_path / "base"))
        for make_variable in ("DEVICE", "RESUME", "SEEDS", "REGIME"):  # the scripts' defaults: none here
            monkeypatch.delenv(make_variable, raising=False)
        device = [] if command == "report" else ["--device", "cpu"]
        status, _, err = run_script_main(command, [*args, *device], monkeypatch, capsys)
        # A message given to SystemExit is printed by Python as it exits; in this process, the test does it.
        return (1, err + status) if isinstance(status, str) else (status, err)
    monkeypatch.delenv("RANK", raising=False)
    try:
        monkeypatch.setattr(sys, "argv", [RECIPES[command], *args])
        __import__(f"recipes.{RECIPES[command]}", fromlist=["recipe_main"]).recipe_main()
        status = 0
    except SystemExit as stopped:
        status = stopped.code
        if isinstance(status, str):  # the message itself: Python prints it, exit status 1
            print(status, file=sys.stderr)
            status = 1
    return status, capsys.readouterr().err


def files_of(root: Path) -> dict:
    return {p: p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("command, given_, args, says", ROWS,
                         ids=[f"{row[0]}: {row[3][:48]}" for row in ROWS])
def test_each_refusal_is_one_message_with_no_traceback_and_nothing_written(
        command, given_, args, says, given, data, tune_run, tmp_path, monkeypatch, capsys):
    pid = given(given_) if given_ else None
    stores = dict(arg.split("=", 1) for arg in data)
    names = {"target_tokens": stores["data.target_tokens"], "target_entropy": stores["data.target_entropy"],
             "general_tokens": stores["data.general_tokens"],
             "val_tokens": stores["evaluation.validation.target_tokens"],
             "val_entropy": stores["evaluation.validation.target_entropy"]}
    before = files_of(tmp_path)
    status, err = run_command(command, [a.format(tmp=tmp_path, **names) for a in args], tmp_path, monkeypatch,
                              capsys, tune_run)
    assert status not in (0, None) and "Traceback" not in err, err[-3000:]
    assert says.format(tmp=tmp_path, pid=pid, **names) in err, err[-3000:]
    assert files_of(tmp_path) == before
