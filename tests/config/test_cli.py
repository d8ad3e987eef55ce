"""The recipes' command line (entrodrop.config.cli): `key={}` empties a mapping, and an error a user can
fix prints its message alone, once, from rank 0; any other error keeps its traceback. Ctrl-C prints one
line, what the recipe kept, and exits with status 130."""

import errno
import io
import signal

import pytest
from omegaconf import OmegaConf
from tqdm import tqdm

from entrodrop.config import cli
from entrodrop.errors import ConfigError
from entrodrop.launch import tune_run as launch_hook

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
    monkeypatch.delenv(launch_hook.DEBUG_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit) as exit:
        fail(ConfigError("invalid config (1 problem):\n  seed=-1 must be >= 0"))
    assert exit.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("invalid config (1 problem):\n  seed=-1 must be >= 0\n") and "Traceback" not in err
    monkeypatch.setenv(launch_hook.DEBUG_ENV, "1")  # the debug switch: the exception itself, with its traceback
    with pytest.raises(ConfigError):
        fail(ConfigError("x"))
    with pytest.raises(KeyError):  # a bug is never turned into a message
        fail(KeyError("x"))


def test_a_rank_other_than_0_waits_to_be_stopped_and_prints_only_if_it_is_not(capsys, monkeypatch):
    monkeypatch.delenv(launch_hook.DEBUG_ENV, raising=False)
    monkeypatch.setenv("RANK", "1")
    waited = []
    monkeypatch.setattr(launch_hook.time, "sleep", waited.append)
    with pytest.raises(SystemExit):
        fail(ConfigError("only rank 1 saw this"))
    assert waited == [launch_hook.RANK_ZERO_GRACE_S]
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


def test_two_processes_print_the_error_once_and_the_launcher_repeats_it_last(tiny_assets, tune_run, tmp_path):
    result = tune_run("recipes/entrodrop_distributed.py", "--config", "configs/tiny/qwen3_entrodrop_distributed.yaml",
                      f"output_dir={tmp_path}", "data.seq_len=4096", nproc=2)
    assert result.returncode == 1
    # Rank 0 prints it, and torchrun's launcher (entrodrop.launch.tune_run) prints it again in place of
    # its traceback of the failed processes, so the message is the last thing on the screen.
    assert result.stderr.count("data.seq_len=4096 is longer than the model's max_seq_len=2048") == 2
    assert "Traceback" not in result.stderr and "ChildFailedError" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.rsplit("rank 0 failed: invalid EntroDrop config (", 1)[1].splitlines()
    assert "data.seq_len=4096 is longer than the model's max_seq_len=2048" in "\n".join(last)
    assert last[-1] == f"(exit status 1; {launch_hook.DEBUG_ENV}=1 shows the traceback)"


def test_tasks_emptied_on_the_command_line_leave_no_task(tiny_assets, tune_run, tmp_path):
    """With no task and no validation set an evaluation has nothing to do: the tasks were emptied."""
    result = tune_run("recipes/evaluate.py", "--config", "configs/tiny/qwen3_evaluate.yaml", f"output_dir={tmp_path}",
                      "evaluation.lm_eval.tasks={}", "evaluation.validation.target_tokens=null")
    assert result.returncode == 1
    assert "evaluation.lm_eval.tasks are empty: nothing to evaluate" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("text, says", [
    ("", "the config is empty (it holds no key): give a recipe's config, e.g. one under configs/"),
    ("# only a comment\n", "the config is empty (it holds no key): give a recipe's config, e.g. one under configs/"),
    ("- seed: 0\n- device: cpu\n", "the config is a list, not a mapping of keys to values (key: value lines, as in "
                                   "the files under configs/)"),
    ("1: a\nseed: 0\n", "the key 1 is not a name (keys are names, such as seed)"),
    ("config: a.yaml\nseed: 0\n", "a key named config is --config's own name: remove it"),
])
def test_a_config_file_that_holds_no_mapping_of_names_is_one_message(tmp_path, monkeypatch, text, says):
    """torchtune's parser raised TypeError (a list, a number as key) or AssertionError (a key config); an empty
    file reached the recipe as a config without keys, where a rule read a missing section."""
    from torchtune.config._parse import TuneRecipeArgumentParser

    (tmp_path / "bad.yaml").write_text(text)
    monkeypatch.setattr("sys.argv", ["recipe", "--config", str(tmp_path / "bad.yaml"), "seed=1"])
    with pytest.raises(ConfigError) as e:
        cli.read_config(TuneRecipeArgumentParser())
    assert str(e.value) == f"--config {tmp_path / 'bad.yaml'}: {says}"


@pytest.fixture
def sigint_handler_restored():
    """``reported`` ignores a second Ctrl-C while it reports the first: give pytest its handler back."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)


def interrupt(how_to_go_on):
    with cli.reported(how_to_go_on):
        raise KeyboardInterrupt


def test_ctrl_c_prints_one_line_of_what_was_kept_and_exits_with_130(capsys, monkeypatch, sigint_handler_restored):
    monkeypatch.delenv(launch_hook.DEBUG_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit) as exit:
        interrupt(lambda: "the last checkpoint written is out/step_4")
    assert exit.value.code == 130  # what a shell reports for a command stopped by Ctrl-C
    assert capsys.readouterr().err == "interrupted (Ctrl-C): the last checkpoint written is out/step_4\n"
    # torchrun passes its own SIGINT on to each process: it must not interrupt the report
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    for says_nothing in (lambda: None, lambda: {}["cache_dir"]):  # Ctrl-C before the config was checked
        with pytest.raises(SystemExit):
            interrupt(says_nothing)
        assert capsys.readouterr().err == "interrupted (Ctrl-C)\n"
    bar_output = io.StringIO()
    bar = tqdm(total=10, file=bar_output)
    bar.update(2)
    with pytest.raises(SystemExit):  # a bar left open would draw itself again below the line, at exit
        interrupt(lambda: "kept")
    assert bar_output.getvalue().endswith("it/s]\n")  # closed: its last state, then a newline
    assert capsys.readouterr().err == "interrupted (Ctrl-C): kept\n"
    monkeypatch.setenv("RANK", "1")  # rank 0 alone says it
    with pytest.raises(SystemExit) as exit:
        interrupt(lambda: "kept")
    assert exit.value.code == 130 and capsys.readouterr().err == ""
    monkeypatch.setenv(launch_hook.DEBUG_ENV, "1")  # the debug switch: the traceback
    with pytest.raises(KeyboardInterrupt):
        interrupt(lambda: "kept")


def test_a_recipe_says_from_its_config_what_ctrl_c_kept(tmp_path, monkeypatch, capsys, sigint_handler_restored):
    monkeypatch.delenv(launch_hook.DEBUG_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    (tmp_path / "c.yaml").write_text("cache_dir: out/entropy\n")
    monkeypatch.setattr("sys.argv", ["recipe", "--config", str(tmp_path / "c.yaml")])

    @cli.parse(how_to_go_on=lambda cfg: f"the shards in {cfg.cache_dir} are kept")
    def recipe_main(cfg):
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exit:
        recipe_main()
    assert exit.value.code == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C): the shards in out/entropy are kept\n"


def test_a_full_disk_anywhere_is_one_line_naming_the_path_and_how_to_go_on(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(launch_hook.DEBUG_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    for error, where in [(OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp_path / "a" / "b.json")),
                          f"disk quota exceeded writing {tmp_path / 'a' / 'b.json'} ("),
                         (OSError(errno.ENOSPC, "No space left on device"),  # a write() names no path
                          "no space left on device (the path being written is not known): "),
                         (OSError("5985 requested and 4064 written"),  # numpy's short write: no errno
                          "no space left on device, or the disk quota exceeded (the path being written")]:
        with pytest.raises(SystemExit) as exit, cli.reported(lambda: "the shards written are kept; run the same "
                                                                     "command again to compute the others"):
            raise error
        err = capsys.readouterr().err
        assert exit.value.code == 1 and "Traceback" not in err and len(err.splitlines()) == 2
        assert err.startswith(where), err
        assert err.splitlines()[0].endswith("free some space; the shards written are kept; run the same command "
                                            "again to compute the others")
    with pytest.raises(SystemExit), cli.reported():  # a recipe that says nothing of what it kept
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path))
    assert capsys.readouterr().err.splitlines()[0].endswith("free there now): free some space; then run the same "
                                                            "command again")
    with pytest.raises(PermissionError):  # any other OSError keeps its traceback
        with cli.reported():
            raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path))
