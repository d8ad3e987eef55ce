"""Ctrl-C stops a recipe with one line, what the run kept and how to go on, and exit status 130
(entrodrop.config.cli.reported), not a KeyboardInterrupt traceback. What each recipe's line says is
tested with its library (kept_stores, kept_shards, kept_checkpoint); this is the real `tune run`."""

import os
import signal
import subprocess

import pytest
from conftest import REPO, TINY, TUNE

pytestmark = pytest.mark.recipe  # starts tune run in a subprocess


def start_in_foreground(args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen(args)`` with SIGINT at its default in the child, as a terminal starts the
    command a user presses Ctrl-C in. A shell starts a background job (``make test &``, a CI script
    run beside other work) with SIGINT ignored, an ignored signal stays ignored through ``exec``,
    and Python then keeps it so: the child would never see the Ctrl-C sent to it. A signal with a
    handler is reset to its default by ``exec``, so a handler set around the start is enough."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(args, **kwargs)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_DFL if before is None else before)


def test_ctrl_c_in_tokenize_names_the_finished_stores_and_exits_with_130(tiny_assets, tmp_path):
    # general last, ten times over: still being tokenized, for seconds, when Ctrl-C comes
    general = tmp_path / "general.jsonl"
    general.write_text((TINY / "general.jsonl").read_text() * 10)
    stores = tmp_path / "stores"
    args = [TUNE, "run", "recipes/tokenize_corpus.py", "--config", "configs/tiny/qwen3_tokenize.yaml",
            f"corpora.general.path={general}", "samples_per_shard=64",
            *(f"corpora.{c}.store_dir={stores}/{c}" for c in ("target", "target_val", "general"))]
    run = start_in_foreground(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    output = []
    for line in run.stdout:
        output.append(line)
        if "corpora.target_val: token store complete" in line:
            run.send_signal(signal.SIGINT)
            break
    output += run.stdout.readlines()
    assert run.wait(timeout=120) == 130, "".join(output)[-3000:]
    assert "Traceback" not in "".join(output)
    assert output[-1] == (f"interrupted (Ctrl-C): kept the finished token stores {stores}/target (corpora.target), "
                          f"{stores}/target_val (corpora.target_val); run the same command again to write "
                          f"{stores}/general (corpora.general) (it goes on from the blocks already tokenized)\n")
