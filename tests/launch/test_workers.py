"""entrodrop/launch/workers.py: a process that torchrun started ends when its launcher does, whatever
signal ended the launcher; one started otherwise is left alone."""

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO, running

# A launcher as torchrun is one: it starts a worker in a session of its own (so no signal to the
# launcher's group reaches it), then waits for it. The worker prints its PID once it has asked to
# end with its launcher.
LAUNCHER = """
import subprocess, sys
subprocess.Popen([sys.executable, *sys.argv[1:]], start_new_session=True).wait()
"""
WORKER = """
import os, time
from entrodrop.launch.workers import end_with_launcher
end_with_launcher()
print(os.getpid(), flush=True)
time.sleep(60)
"""


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not running(pid)


# The same, asked by the module torchrun starts for `tune run <path>.py` before it runs the recipe.
RECIPE = """
import os, time
print(os.getpid(), flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("torchrun, by_runner", [(True, False), (False, False), (True, True)],
                         ids=["torchrun", "not-torchrun", "torchrun-by-tune-run"])
def test_a_worker_torchrun_started_ends_when_its_launcher_is_sigkilled(torchrun, by_runner, tmp_path):
    (tmp_path / "recipe.py").write_text(RECIPE)
    worker_argv = ["-m", "entrodrop.launch.run_recipe_file", str(tmp_path / "recipe.py")] if by_runner else ["-c", WORKER]
    env = {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_RUN_ID"}
    env.update({"TORCHELASTIC_RUN_ID": "test"} if torchrun else {})
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, *worker_argv], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = int(launcher.stdout.readline() or 0)
        assert worker, launcher.stderr.read() if launcher.poll() is not None else "the worker printed no PID"
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait()
        if torchrun:
            assert gone_within(worker, 10), "the worker outlived its launcher"
        else:  # not torchrun's: a process that outlives the shell that started it (nohup) goes on
            time.sleep(0.5)
            assert running(worker)
    finally:
        for pid in (launcher.pid, worker):
            if pid and running(pid):
                os.kill(pid, signal.SIGKILL)
        launcher.communicate()


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_worker_whose_launcher_ended_before_it_asked_ends_at_once():
    # The parent it had at start (here: one that is not its parent now) has gone before prctl.
    result = run_python("import os\nfrom entrodrop.launch.workers import end_with_launcher\n"
                        "end_with_launcher({'TORCHELASTIC_RUN_ID': 'test'}, parent=os.getppid() + 1)\n"
                        "print('went on')")
    assert result.returncode == -signal.SIGKILL and "went on" not in result.stdout, result.stderr


def test_without_prctl_a_thread_watching_the_parent_ends_the_process():
    result = run_python("import os, time\nfrom entrodrop.launch.workers import watch_parent\n"
                        "watch_parent(os.getppid() + 1, every_s=0.01)\nprint('went on')")
    assert result.returncode == -signal.SIGKILL and "went on" not in result.stdout, result.stderr
