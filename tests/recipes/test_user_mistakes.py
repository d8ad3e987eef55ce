"""The mistakes a user makes before a run starts: each prints one message and nothing else, no traceback
(``ENTRODROP_DEBUG=1`` shows it), before anything loads or is written: an output directory that
is a file or cannot be written, a config that is not YAML, a command-line value that is not, a
missing optional package, a copied recipe without ``__init__.py``; and an entropy cache of
another model is refused at training start-up as recipes/verify_entropy_cache.py refuses it.
(An empty or unreadable ``datasets`` file: tests/data/test_sources.py.)"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import REPO, TUNE
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file

from entrodrop.config import cli, schemas
from entrodrop.data import store_identity
from entrodrop.data.entropy_cache import check_cache_model
from entrodrop.data.sample_store import SampleStore
from entrodrop.data.training_stores import open_training_stores, training_data
from entrodrop.errors import CacheMismatchError, ConfigError, OutputDirError
from entrodrop.launch import tune_run as launch_hook
from entrodrop.train.run_lock import LOCK_NAME, hold_run_dir

TRAIN = ["recipes/entrodrop_single_device.py", "--config", "configs/tiny/qwen3_entrodrop_single_device.yaml"]
NO_TASKS = "evaluation.lm_eval.tasks={}"  # fails sooner: no lm-eval index to build


def only_the_message(result: subprocess.CompletedProcess) -> str:
    """The run failed with its message alone: exit status 1, no traceback, and nothing before
    the message but log lines of the library that ran (torchtune's INFO lines)."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if not line.startswith("INFO:")]
    assert lines[-1] == f"(exit status 1; {launch_hook.DEBUG_ENV}=1 shows the traceback)", lines
    return "\n".join(lines[:-1])


# ---------------------------------------------------------------------------- the output directory


def writable_problems(output_dir: str) -> list:
    cfg = yaml.safe_load((REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml").read_text())
    cfg = OmegaConf.create({**cfg, "output_dir": output_dir})
    return schemas._output_dirs(cfg)


def test_an_output_dir_that_is_a_file_or_cannot_be_written_is_a_config_problem(tmp_path):
    (tmp_path / "a_file").write_text("x")
    assert writable_problems(str(tmp_path / "a_file")) == [
        f"output_dir={tmp_path / 'a_file'}: {tmp_path / 'a_file'} is a file, not a directory: choose another output_dir"]
    assert writable_problems(str(tmp_path / "a_file" / "run")) == [
        f"output_dir={tmp_path / 'a_file' / 'run'}: {tmp_path / 'a_file'} is a file, not a directory: choose another "
        "output_dir"]
    # /proc/sys takes no new file, even from root: a directory this process cannot write.
    (problem,) = writable_problems("/proc/sys/entrodrop_run")
    assert problem.startswith("output_dir=/proc/sys/entrodrop_run: /proc/sys cannot be written (")
    assert writable_problems(str(tmp_path / "new" / "run")) == []
    assert not (tmp_path / "new").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.parametrize("where", ["a file", "a folder this process cannot write"])
def test_training_into_an_output_dir_it_cannot_use_is_refused_before_the_model_loads(data, tune_run, tmp_path, where):
    (tmp_path / "a_file").write_text("x")
    output_dir = tmp_path / "a_file" if where == "a file" else Path("/proc/sys/entrodrop_run")
    message = only_the_message(tune_run(*TRAIN, *data, f"output_dir={output_dir}", NO_TASKS))
    assert message.startswith("invalid EntroDrop config (1 problem):\n  output_dir=")
    assert "is a file, not a directory" in message if where == "a file" else "cannot be written" in message


def test_a_run_into_an_output_dir_another_live_run_holds_is_refused_in_one_line(data, tune_run, tmp_path):
    # As a resume=True started while the run it resumes still trains: refused before it looks for a checkpoint.
    with hold_run_dir(str(tmp_path)):
        held = (tmp_path / LOCK_NAME).read_text()
        message = only_the_message(tune_run(*TRAIN, *data, f"output_dir={tmp_path}", "resume=True", NO_TASKS))
    holder = json.loads(held)
    message = message.splitlines()[-1]  # one line, after torchtune's report of the seed it set
    assert message == (f"output_dir={tmp_path} is in use by another run: PID {os.getpid()} on host {holder['host']}, "
                       f"started {holder['started']}, holds {tmp_path / LOCK_NAME}. Wait for it to end, or stop it, "
                       "or write elsewhere with another output_dir")
    assert sorted(tmp_path.iterdir()) == [tmp_path / LOCK_NAME] and (tmp_path / LOCK_NAME).read_text() == held


def test_a_run_into_a_checkpoint_dir_another_live_run_holds_is_refused_before_it_looks_at_it(data, tmp_path):
    # Two runs with two output_dir and one checkpointer.output_dir would save into each other's step_<N>.
    from recipes.entrodrop_single_device import EntroDropRecipeSingleDevice

    cfg = OmegaConf.merge(OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml"),
                          OmegaConf.from_dotlist([*data, NO_TASKS]))
    cfg.output_dir, cfg.checkpointer.output_dir = str(tmp_path / "second"), str(tmp_path / "checkpoints")
    with hold_run_dir(str(tmp_path / "first"), others={"checkpointer.output_dir": cfg.checkpointer.output_dir}):
        recipe = EntroDropRecipeSingleDevice(cfg)
        with pytest.raises(OutputDirError, match=re.escape(
                f"checkpointer.output_dir={tmp_path / 'checkpoints'} belongs to another run (output_dir="
                f"{tmp_path / 'first'}, training now: PID {os.getpid()} ")):
            recipe.setup(cfg)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [LOCK_NAME]


def test_overwrite_into_a_live_runs_checkpoint_folder_is_one_line_and_moves_nothing(data, tune_run, tmp_path):
    # The audit's case: checkpointer.output_dir inside another run's output_dir, which trains now (this
    # process holds it), and overwrite=True, which moved that run's checkpoints aside before.
    (tmp_path / "A" / "checkpoints" / "step_10").mkdir(parents=True)
    (tmp_path / "A" / "checkpoints" / "step_10" / "model.safetensors").write_text("A's weights")
    with hold_run_dir(str(tmp_path / "A")):
        message = only_the_message(tune_run(*TRAIN, *data, f"output_dir={tmp_path / 'B'}", NO_TASKS, "overwrite=True",
                                            f"checkpointer.output_dir={tmp_path / 'A' / 'checkpoints'}"))
    assert message.splitlines()[-1].startswith(
        f"checkpointer.output_dir={tmp_path / 'A' / 'checkpoints'} is inside {tmp_path / 'A'}, which belongs to "
        f"another run (output_dir={tmp_path / 'A'}, training now: PID {os.getpid()} on host ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A"]
    assert (tmp_path / "A" / "checkpoints" / "step_10" / "model.safetensors").read_text() == "A's weights"


# ---------------------------------------------------------------------------- YAML


@pytest.mark.parametrize("text, says", [
    ("seed: 0\nseed: 1\n", "line 2, column 1: found duplicate key seed (while constructing a mapping at line 1, column 1)"),
    ("model:\n\tnum_layers: 2\n", "line 2, column 1: found character that cannot start any token"),
    ("seed: [0, 1\ndevice: cpu\n", "line 2, column 7: did not find expected ',' or ']'"),
])
def test_a_config_that_is_not_yaml_names_its_file_line_and_column(tune_run, tmp_path, text, says):
    (tmp_path / "bad.yaml").write_text(text)
    message = only_the_message(tune_run("recipes/smoke.py", "--config", str(tmp_path / "bad.yaml")))
    assert message.startswith(f"--config {tmp_path / 'bad.yaml'} is not valid YAML: ") and says in message, message
    assert ("YAML indents with spaces, never a tab" in message) == ("\t" in text)


def test_a_command_line_value_with_yaml_syntax_says_how_to_quote_it(tune_run, tmp_path):
    message = only_the_message(tune_run(*TRAIN, f"output_dir={tmp_path}", "token_dropout.midpoint={2"))
    assert message.startswith("the command-line value 'token_dropout.midpoint={2' is not valid YAML (")
    assert "quote a text that holds YAML syntax (token_dropout.midpoint='\"{2\"')" in message
    assert sorted(tmp_path.iterdir()) == []


def test_read_config_errors_are_config_errors(tmp_path, monkeypatch):
    """The same, in process: what ``cli.parse`` turns into the messages above."""
    from torchtune.config._parse import TuneRecipeArgumentParser

    (tmp_path / "ok.yaml").write_text("a: 1\n")
    (tmp_path / "control.yaml").write_text("a: \"\x01\"\n")  # PyYAML's ReaderError: no line and column, a file name
    for argv, says in [(["--config", str(tmp_path / "none.yaml")], f"--config {tmp_path / 'none.yaml'}: no such file"),
                       (["--config", str(tmp_path)], f"--config {tmp_path} is a directory: name a YAML config file in it"),
                       (["--config", str(tmp_path / "control.yaml")],
                        f"--config {tmp_path / 'control.yaml'} is not valid YAML: unacceptable character #x0001"),
                       (["--config", str(tmp_path / "ok.yaml"), "a=[1"], "the command-line value 'a=[1' is not valid"),
                       (["--config", str(tmp_path / "ok.yaml"), "a"], "must be in the form of key=value")]:
        monkeypatch.setattr("sys.argv", ["recipe", *argv])
        with pytest.raises(ConfigError, match=re.escape(says)):
            cli.read_config(TuneRecipeArgumentParser())


# ---------------------------------------------------------------------------- packages and recipes


@pytest.mark.skipif(importlib.util.find_spec("liger_kernel") is not None, reason="liger-kernel is installed")
def test_loss_impl_liger_without_liger_kernel_is_a_start_up_config_error(data, tune_run, tmp_path):
    message = only_the_message(tune_run(*TRAIN, *data, f"output_dir={tmp_path}", NO_TASKS, "loss.impl=liger"))
    assert message == ("invalid EntroDrop config (1 problem):\n  loss.impl=liger needs liger-kernel (with triton and a "
                       "CUDA GPU), which is not installed: pip install -e '.[gpu]', or use impl: torch")


@pytest.mark.recipe
def test_a_recipe_path_with_no_file_is_one_message(tiny_assets, tmp_path):
    """A `recipes/` folder without the file named: torchtune alone would run its own `recipes` package."""
    user = tmp_path / "my_project"
    (user / "recipes").mkdir(parents=True)
    for name in ("configs", "assets"):
        (user / name).symlink_to(REPO / name)
    result = subprocess.run([TUNE, "run", "recipes/my_run.py", "--config", "configs/tiny/qwen3_smoke.yaml",
                             "output_dir=out"], cwd=user, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    message = only_the_message(result)
    assert message.startswith(f"tune run recipes/my_run.py: there is no file {user / 'recipes' / 'my_run.py'} ")
    assert len(message.splitlines()) == 1 and not (user / "out").exists()


# ---------------------------------------------------------------------------- the cache's model


def scaled_checkpoint(tiny_assets, out: Path) -> Path:
    """The tiny checkpoint with one layer's weights scaled by 1.5: another model, the same shapes."""
    shutil.copytree(tiny_assets / "qwen3", out)
    (weights,) = out.glob("*.safetensors")
    state = load_file(weights)
    key = next(k for k in state if "layers.0." in k and k.endswith("weight"))
    state[key] = state[key] * 1.5
    save_file(state, weights, metadata={"format": "pt"})
    return out


def test_an_entropy_cache_of_another_model_is_refused_at_training_start_up(data, tiny_assets, tune_run, tmp_path):
    overrides = dict(arg.split("=", 1) for arg in data)
    other = scaled_checkpoint(tiny_assets, tmp_path / "other")
    cache = SampleStore(overrides["data.target_entropy"], "entropy")
    check_cache_model(str(tiny_assets / "qwen3"), cache, None)  # its own model: fine
    with pytest.raises(CacheMismatchError) as error:
        check_cache_model(str(other), cache)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and message.count("fingerprint ") == 2
    assert "re-run recipes/precompute_entropy.py" in message

    # recipes/verify_entropy_cache.py refuses it too (it compares the same fingerprint) ...
    verify = tune_run("recipes/verify_entropy_cache.py", "--config", "configs/tiny/qwen3_precompute_entropy.yaml",
                      f"target_tokens={overrides['data.target_tokens']}",
                      f"cache_dir={overrides['data.target_entropy']}", f"checkpointer.checkpoint_dir={other}")
    assert verify.returncode == 1 and "model: cache has" in verify.stderr, verify.stderr[-2000:]
    # ... and training refuses to start, before its first step, with that one line.
    result = tune_run(*TRAIN, *data, f"output_dir={tmp_path / 'run'}", NO_TASKS, f"checkpointer.checkpoint_dir={other}")
    said = only_the_message(result)
    assert said.splitlines()[-1].startswith(f"the entropy cache {overrides['data.target_entropy']} was computed by "
                                            "another model (fingerprint ")
    assert f"than checkpointer.checkpoint_dir={other} (fingerprint " in said
    assert not list((tmp_path / "run").glob("checkpoints/step_*"))


# ---------------------------------------------------------------------------- the stores a run reads


def setup_data(data: list, tmp_path: Path, *overrides: str):
    """What the training recipes do with their stores at set-up (``open_training_stores``, then
    ``training_data`` in ``_setup_data``), in this process, on the tiny config with ``data`` and
    ``overrides``; the stores opened."""
    cfg = OmegaConf.merge(OmegaConf.load(REPO / TRAIN[2]),
                          OmegaConf.from_dotlist([*data, f"output_dir={tmp_path / 'run'}", NO_TASKS, *overrides]))
    opened = open_training_stores(cfg)
    training_data(opened, cfg, seed=0)
    return opened


def test_training_refuses_a_store_of_another_tokenizer_one_store_given_twice_and_a_cache_of_no_entropies(
        data, tmp_path):
    overrides = dict(arg.split("=", 1) for arg in data)
    assert set(setup_data(data, tmp_path).identities) == {
        "data.target_tokens", "data.general_tokens", "evaluation.validation.target_tokens", "data.target_entropy",
        "evaluation.validation.target_entropy"}
    # The target store as the general replay, or as the validation store.
    with pytest.raises(ConfigError, match=r"^data.general_tokens and data.target_tokens are the same token store"):
        setup_data(data, tmp_path, f"data.general_tokens={overrides['data.target_tokens']}")
    with pytest.raises(ConfigError, match=r"^evaluation.validation.target_tokens and data.target_tokens are the same"):
        setup_data(data, tmp_path, f"evaluation.validation.target_tokens={overrides['data.target_tokens']}")

    # A validation store whose manifest says another tokenizer made it.
    other = tmp_path / "target_val_other_tokenizer"
    shutil.copytree(overrides["evaluation.validation.target_tokens"], other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["key"]["vocabulary"] = "0123456789abcdef"
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CacheMismatchError) as error:
        setup_data(data, tmp_path, f"evaluation.validation.target_tokens={other}")
    assert str(error.value).startswith(f"evaluation.validation.target_tokens={other} was tokenized with another "
                                       "tokenizer (vocabulary fingerprint 0123456789abcdef) than this run's tokenizer (")

    # An entropy shard overwritten with +inf at its size: verify and training both refuse it.
    cache = tmp_path / "entropy"
    shutil.copytree(overrides["data.target_entropy"], cache)
    shard = cache / "shard-00000" / "entropy.npy"
    values = np.load(shard)
    shard.write_bytes(shard.read_bytes()[: -values.nbytes] + np.full_like(values, np.inf).tobytes())
    with pytest.raises(CacheMismatchError) as error:
        setup_data(data, tmp_path, f"data.target_entropy={cache}")
    said = str(error.value).splitlines()
    assert said[0] == f"the entropy cache {cache} holds values that are not entropies:"
    assert said[1].startswith(f"  {shard}: {values.size} of {values.size} values are not entropies over 2112 tokens "
                              "(finite, 0 to ln 2112 = 7.655); the first is inf at sample 0, token 0")
    assert said[2].startswith(f"Fix: delete {shard.parent} and re-run recipes/precompute_entropy.py")
    from recipes.verify_entropy_cache import recipe_main

    verify = OmegaConf.merge(OmegaConf.load(REPO / "configs/tiny/qwen3_precompute_entropy.yaml"), OmegaConf.from_dotlist(
        [f"target_tokens={overrides['data.target_tokens']}", f"cache_dir={cache}"]))
    with pytest.raises(CacheMismatchError) as error:
        recipe_main.__wrapped__(verify)
    assert said[1].strip() in str(error.value) and f"Fix: delete {shard.parent} and re-run" in str(error.value)


def test_training_start_up_opens_each_store_once_fresh_and_resumed(data, tmp_path, monkeypatch):
    # The stream, the validation, the loss signal, the cache checks and the resume check all read
    # the stores the recipe opened at set-up: each is opened once (with signal: loss, which reads
    # the target cache too), and no store is read back by its path for its identity.
    from recipes.entrodrop_single_device import EntroDropRecipeSingleDevice

    opened, identities_read = [], []
    original = SampleStore.__init__

    def counted(self, store_dir, kind):
        opened.append(str(Path(store_dir).resolve()))
        original(self, store_dir, kind)

    monkeypatch.setattr(SampleStore, "__init__", counted)
    monkeypatch.setattr(store_identity, "store_identity", lambda path: identities_read.append(path))
    cfg = OmegaConf.merge(OmegaConf.load(REPO / TRAIN[2]), OmegaConf.from_dotlist(
        [*data, f"output_dir={tmp_path / 'run'}", NO_TASKS, "token_dropout.signal=loss"]))
    stores = {str(Path(arg.split("=", 1)[1]).resolve()) for arg in data if "_tokens=" in arg or "_entropy=" in arg}
    for resume in (False, True):
        cfg.resume = resume
        opened.clear()
        recipe = EntroDropRecipeSingleDevice(cfg)
        assert recipe.setup(cfg)
        if not resume:
            recipe.save_checkpoint(0.0)
        recipe.cleanup()
        assert len(stores) == 5 and sorted(opened) == sorted(stores), (resume, opened)
    assert identities_read == []
