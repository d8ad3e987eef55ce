"""What this environment changes in a `tune run` as it starts (entrodrop.launch.tune_run): a recipe
given by any path is run as the file it names (run_recipe_file), and Ctrl-C ends the launcher with
status 130 and no traceback; in any other Python start it changes nothing."""

import json
import runpy
import signal
import subprocess
import sys
import sysconfig

import pytest
from conftest import REPO
from torch.distributed.elastic.multiprocessing.api import SignalException

from entrodrop.launch import run_recipe_file, tune_run

TUNE = "/venv/bin/tune"


@pytest.mark.parametrize("path", ["/tmp/x/my_recipe.py", "../x/my_recipe.py", "./recipes/smoke.py", "recipes/smoke.py",
                                  "my_recipes/run.py"])
def test_a_recipe_given_by_its_path_goes_to_the_runner(path):
    argv = [TUNE, "run", "--nproc_per_node", "2", path, "--config", "c.yaml", "seed=1"]
    assert tune_run.redirected(argv) == [TUNE, "run", "--nproc_per_node", "2", tune_run.RUNNER, path,
                                             "--config", "c.yaml", "seed=1"]


@pytest.mark.parametrize("argv", [
    [TUNE, "run", "full_finetune_single_device", "--config", "/abs/c.py"],  # one of torchtune's own
    [TUNE, "ls"],
    ["/venv/bin/python", "run", "/tmp/x.py"],
    ["-c"],
])
def test_any_other_command_line_is_left_as_it_is(argv):
    assert tune_run.redirected(argv) == argv


def test_the_runner_runs_the_file_as_main_with_its_arguments(tmp_path, monkeypatch, capsys):
    script = tmp_path / "my_recipe.py"
    script.write_text("import sys\nif __name__ == '__main__':\n    print(__file__, sys.argv)\n")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    run_recipe_file.main(["entrodrop.launch.run_recipe_file", str(script), "--config", "c.yaml"])
    assert capsys.readouterr().out == f"{script} {[str(script), '--config', 'c.yaml']}\n"


def test_the_runner_names_a_file_that_is_not_there(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(tune_run.DEBUG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        run_recipe_file.main(["entrodrop.launch.run_recipe_file", "../x/my_recipe.py", "--config", "c.yaml"])
    assert exit.value.code == 1
    assert capsys.readouterr().err.startswith(
        f"tune run ../x/my_recipe.py: there is no file {tmp_path.parent / 'x' / 'my_recipe.py'} (a relative path is "
        f"taken from the directory tune run starts in, {tmp_path}): check the path\n")


def test_ctrl_c_ends_the_launcher_with_130_and_no_traceback(capsys, monkeypatch):
    monkeypatch.delenv(tune_run.DEBUG_ENV, raising=False)
    exits, passed_on = [], []
    hook = tune_run.quiet_interrupt(lambda kind, error, tb: passed_on.append(kind), exit=exits.append)
    # torchrun's launcher: it has passed Ctrl-C on to the workers, whose rank 0 says what was kept
    hook(SignalException, SignalException("Process 1 got signal: 2", sigval=signal.SIGINT), None)
    assert exits == [130] and capsys.readouterr().err == ""
    monkeypatch.delenv("RANK", raising=False)
    hook(KeyboardInterrupt, KeyboardInterrupt(), None)  # before the recipe started: nothing written
    assert exits == [130, 130] and capsys.readouterr().err == "interrupted (Ctrl-C)\n"
    monkeypatch.setenv("RANK", "1")  # a worker of torchrun's, in its imports: rank 0 alone says it
    hook(KeyboardInterrupt, KeyboardInterrupt(), None)
    assert exits == [130] * 3 and capsys.readouterr().err == ""
    hook(SignalException, SignalException("Process 1 got signal: 15", sigval=signal.SIGTERM), None)
    hook(ValueError, ValueError("a bug"), None)
    assert passed_on == [SignalException, ValueError] and exits == [130] * 3
    monkeypatch.setenv(tune_run.DEBUG_ENV, "1")  # the debug switch: the traceback
    hook(KeyboardInterrupt, KeyboardInterrupt(), None)
    assert passed_on[-1] is KeyboardInterrupt and exits == [130] * 3


def test_only_a_tune_run_is_changed(monkeypatch):
    before = sys.excepthook
    monkeypatch.setattr(sys, "excepthook", before)
    for argv in (["python", "run", "/tmp/x.py"], ["-m", "--config", "c.yaml"]):  # the latter: a worker
        tune_run.started(argv)
        assert argv[1:] in (["run", "/tmp/x.py"], ["--config", "c.yaml"]) and sys.excepthook is before
    argv = [TUNE, "run", "/tmp/x.py", "--config", "c.yaml"]
    tune_run.started(argv)
    assert argv == [TUNE, "run", tune_run.RUNNER, "/tmp/x.py", "--config", "c.yaml"]
    assert sys.excepthook is not before
    hook = sys.excepthook
    tune_run.started(argv)  # again, as Python 3.11 runs a virtual environment's .pth files twice
    assert argv == [TUNE, "run", tune_run.RUNNER, "/tmp/x.py", "--config", "c.yaml"] and sys.excepthook is hook


def test_a_python_start_outside_tune_run_gets_nothing_on_sys_path_and_imports_nothing(tmp_path):
    """Even in a directory that holds a `recipes` package and `entrodrop`, as a checkout does."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "__init__.py").write_text("")
    (tmp_path / "entrodrop").symlink_to(REPO / "entrodrop")
    code = "import json, sys; print(json.dumps([sys.path, sorted(sys.modules)]))"
    started = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    path, modules = json.loads(started.stdout)
    assert str(tmp_path) not in path and str(REPO) not in path, path
    # Nothing of ours, and not runpy (what the start-up line imports in a `tune run`).
    ours = ("entrodrop", "recipes", "runpy", "torch")
    assert not [name for name in modules if name.startswith(ours)], modules
    # A program whose first argument is `run`, as a `tune run`'s is, is no `tune run` either.
    (tmp_path / "run.py").write_text(code)
    started = subprocess.run([sys.executable, "run.py", "run", "x.py"], cwd=tmp_path, capture_output=True, text=True,
                             check=True)
    assert not [name for name in json.loads(started.stdout)[1] if name.startswith(ours)]


def test_a_workers_error_ends_an_n_process_run_as_its_last_line_in_place_of_torchruns_traceback(tmp_path, monkeypatch,
                                                                                             capsys):
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure


    monkeypatch.delenv(tune_run.DEBUG_ENV, raising=False)
    message = "output_dir=/x is in use by another run: PID 7 on host h, started t"
    # The worker (rank 1 of 2) prints its message and writes it into the error file torchrun gave it.
    monkeypatch.setenv(tune_run.ERROR_FILE_ENV, str(tmp_path / "rank1.json"))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(tune_run, "RANK_ZERO_GRACE_S", 0.0)
    with pytest.raises(SystemExit):
        tune_run.exit_reported(message)
    assert capsys.readouterr().err.startswith(f"[rank 1] {message}\n")
    failed = ChildFailedError("recipes/x.py", {
        0: ProcessFailure(local_rank=0, pid=10, exitcode=-15, error_file=str(tmp_path / "rank0.json")),  # stopped
        1: ProcessFailure(local_rank=1, pid=11, exitcode=1, error_file=str(tmp_path / "rank1.json"))})
    exits, passed_on = [], []
    hook = tune_run.quiet_child_failure(lambda kind, error, tb: passed_on.append(kind), exit=exits.append)
    hook(ChildFailedError, failed, None)
    assert capsys.readouterr().err == f"rank 1 failed: {message}\n(exit status 1; {tune_run.DEBUG_ENV}=1 shows the traceback)\n"
    assert exits == [1] and passed_on == []
    # A worker that failed by a bug or a signal wrote no message of its own: torchrun's report stays.
    bug = ChildFailedError("recipes/x.py", {0: ProcessFailure(local_rank=0, pid=10, exitcode=1,
                                                               error_file=str(tmp_path / "none.json"))})
    hook(ChildFailedError, bug, None)
    assert passed_on == [ChildFailedError] and exits == [1]
    monkeypatch.setenv(tune_run.DEBUG_ENV, "1")  # the traceback, when asked for
    hook(ChildFailedError, failed, None)
    assert passed_on == [ChildFailedError] * 2


def test_the_install_script_writes_one_line_and_removes_the_line_an_older_make_wrote(tmp_path, monkeypatch):
    script = runpy.run_path(str(REPO / "scripts" / "install_tune_run_hook.py"))
    (tmp_path / script["OLD_PTH"]).write_text("import sys; sys.path.insert(0, '/old/checkout')\n")
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"purelib": str(tmp_path)})
    script["main"]()
    assert sorted(path.name for path in tmp_path.iterdir()) == [script["PTH_NAME"]]
    (line,) = (tmp_path / script["PTH_NAME"]).read_text().splitlines()
    assert line.startswith("import sys; sys.argv[1:2] == ['run'] and ") and "sys.path" not in line
