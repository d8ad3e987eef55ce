"""The recipes' command line (entrodrop.config.cli): `key={}` empties a mapping, and an error a user can
fix prints its message alone, once, from rank 0; any other error keeps its traceback."""

import pytest
from omegaconf import OmegaConf

from entrodrop.config import cli
from entrodrop.errors import ConfigError

TRAIN = ["recipes/entrodrop_single_device.py", "--config", "configs/tiny/qwen3_entrodrop_single_device.yaml"]


def test_an_empty_mapping_on_the_command_line_replaces_the_yamls():
    """OmegaConf merges `tasks={}` into the YAML's tasks and keeps them all."""
    yaml = OmegaConf.create({"lm_eval": {"tasks": {"code": ["humaneval"]}, "limit": 4}})
    merged = OmegaConf.merge(yaml, OmegaConf.from_dotlist(["lm_eval.tasks={}"]))
    assert merged.lm_eval.tasks == {"code": ["humaneval"]}  # what torchtune's parse gives
    assert cli.emptied(merged, ["lm_eval.tasks={}", "lm_eval.limit=4"]).lm_eval.tasks == {}
    assert merged.lm_eval.limit == 4


def fail(error: Exception):
    with cli.reported():
        raise error


def test_an_error_a_user_can_fix_prints_its_message_alone(capsys, monkeypatch):
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit) as exit:
        fail(ConfigError("invalid config (1 problem):\n  seed=-1 must be >= 0"))
    assert exit.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("invalid config (1 problem):\n  seed=-1 must be >= 0\n") and "Traceback" not in err
    monkeypatch.setenv(cli.DEBUG_ENV, "1")  # the debug switch: the exception itself, with its traceback
    with pytest.raises(ConfigError):
        fail(ConfigError("x"))
    with pytest.raises(KeyError):  # a bug is never turned into a message
        fail(KeyError("x"))


def test_a_rank_other_than_0_waits_to_be_stopped_and_prints_only_if_it_is_not(capsys, monkeypatch):
    monkeypatch.delenv(cli.DEBUG_ENV, raising=False)
    monkeypatch.setenv("RANK", "1")
    waited = []
    monkeypatch.setattr(cli.time, "sleep", waited.append)
    with pytest.raises(SystemExit):
        fail(ConfigError("only rank 1 saw this"))
    assert waited == [cli.RANK_ZERO_GRACE_S]
    assert capsys.readouterr().err.startswith("[rank 1] only rank 1 saw this\n")


def test_tune_run_prints_a_config_error_without_a_traceback(tiny_assets, tune_run, tmp_path):
    result = tune_run(*TRAIN, f"output_dir={tmp_path}", "data.seq_len=4096", f"tokenizer.merges_file={tmp_path}/m.txt",
                      "+seed=1")
    assert result.returncode == 1
    assert result.stderr.startswith("invalid EntroDrop config"), result.stderr[:2000]
    assert "Traceback" not in result.stderr
    for message in ("data.seq_len=4096 is longer than the model's max_seq_len=2048",
                    f"tokenizer.merges_file={tmp_path}/m.txt does not exist", "unknown key: +seed (drop the +"):
        assert message in result.stderr, message
    assert sorted(tmp_path.iterdir()) == []


def test_two_processes_print_the_error_once(tiny_assets, tune_run, tmp_path):
    result = tune_run("recipes/entrodrop_distributed.py", "--config", "configs/tiny/qwen3_entrodrop_distributed.yaml",
                      f"output_dir={tmp_path}", "data.seq_len=4096", nproc=2)
    assert result.returncode != 0
    assert result.stderr.count("data.seq_len=4096 is longer than the model's max_seq_len=2048") == 1
    # torchrun's report of the failed processes follows (the launcher's frames); no frame of the recipe's
    frames = [line for line in result.stderr.splitlines() if line.strip().startswith('File "')]
    assert all("site-packages/torch" in f or "bin/tune" in f for f in frames), frames


def test_tasks_emptied_on_the_command_line_leave_no_task(tiny_assets, tune_run, tmp_path):
    """With no task and no validation set an evaluation has nothing to do: the tasks were emptied."""
    result = tune_run("recipes/evaluate.py", "--config", "configs/tiny/qwen3_evaluate.yaml", f"output_dir={tmp_path}",
                      "evaluation.lm_eval.tasks={}", "evaluation.validation.target_tokens=null")
    assert result.returncode == 1
    assert "evaluation.lm_eval.tasks are empty: nothing to evaluate" in result.stderr, result.stderr[-2000:]
