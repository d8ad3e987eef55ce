"""entrodrop/train/run_lock.py: one live run per output directory. A second run is refused with
one line naming the holder; a lock that a killed run left is taken over."""

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import REPO
from omegaconf import OmegaConf

from entrodrop.errors import OutputDirError
from entrodrop.train.run_lock import LOCK_NAME, hold_run_dir, hold_run_dirs

HOLDER = """
import sys, time
from entrodrop.train.run_lock import hold_run_dir
lock = hold_run_dir(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_live_run_dir_is_refused_naming_its_holder_and_a_killed_holders_lock_is_taken_over(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(OutputDirError) as refused:
            hold_run_dir(str(out))
        message = str(refused.value)
        assert "\n" not in message
        assert message.startswith(f"output_dir={out} is in use by another run: PID {holder.pid} on host "
                                  f"{socket.gethostname()}, started ")
        assert message.endswith(f"holds {out / LOCK_NAME}. Wait for it to end, or stop it, or write elsewhere "
                                "with another output_dir"), message
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.communicate()
    with hold_run_dir(str(out)):  # its holder was killed: taken over, naming this process now
        assert (out / LOCK_NAME).read_text().startswith(f'{{"pid": {os.getpid()}, ')


def test_the_lock_of_a_new_output_dir_creates_it(tmp_path):
    with hold_run_dir(str(tmp_path / "new" / "run")):
        assert (tmp_path / "new" / "run" / LOCK_NAME).is_file()


def test_a_run_that_holds_the_lock_but_has_not_named_itself_yet_is_still_refused(tmp_path):
    with open(tmp_path / LOCK_NAME, "w") as starting:
        fcntl.flock(starting, fcntl.LOCK_EX)
        with pytest.raises(OutputDirError, match=r"in use by another run: a run that is starting \(it has not written"):
            hold_run_dir(str(tmp_path))


def _hold_on_two_ranks(rank: int, init_file: str, held: str, free: str, out_dir: str) -> None:
    """One of two gloo processes: what each rank gets from a directory another run holds, and a free one."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        hold_run_dir(held, rank, distributed=True)
        refused = None
    except OutputDirError as e:
        refused = str(e)
    lock = hold_run_dir(free, rank, distributed=True)
    (Path(out_dir) / f"{rank}.json").write_text(json.dumps({"refused": refused, "holds": lock is not None}))
    dist.barrier()  # no rank tears gloo down while another still works in it
    dist.destroy_process_group()
    os._exit(0)  # as tests/train/test_parallel.py's ranks leave, without the interpreter's teardown


@pytest.mark.recipe  # two processes (gloo)
def test_rank_0_holds_the_lock_for_every_rank_and_every_rank_is_refused_with_its_message(tmp_path):
    with hold_run_dir(str(tmp_path / "held")):
        mp.spawn(_hold_on_two_ranks, args=(str(tmp_path / "init"), str(tmp_path / "held"), str(tmp_path / "free"),
                                           str(tmp_path)), nprocs=2)
    got = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    assert got[0]["refused"].startswith(f"output_dir={tmp_path / 'held'} is in use by another run: PID {os.getpid()} ")
    assert got[1]["refused"] == got[0]["refused"]
    assert [g["holds"] for g in got] == [True, False]


def test_a_checkpoint_or_log_dir_outside_output_dir_is_locked_too_and_one_inside_it_is_not(tmp_path):
    cfg = OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml")
    cfg.output_dir, cfg.checkpointer.output_dir = str(tmp_path / "first"), str(tmp_path / "shared_checkpoints")
    cfg.metric_logger.log_dir = str(tmp_path / "shared_logs")
    with hold_run_dirs(cfg):
        assert sorted(p.name for p in tmp_path.iterdir()) == ["first", "shared_checkpoints", "shared_logs"]
        second = cfg.copy()
        second.output_dir = str(tmp_path / "second")
        with pytest.raises(OutputDirError) as refused:
            hold_run_dirs(second)
        assert str(refused.value) == (
            f"checkpointer.output_dir={tmp_path / 'shared_checkpoints'} belongs to another run (output_dir="
            f"{tmp_path / 'first'}, training now: PID {os.getpid()} on host {socket.gethostname()}, started "
            f"{json.loads((tmp_path / 'first' / LOCK_NAME).read_text())['started']}). Nothing was moved or written: "
            "give this run an output_dir, checkpointer.output_dir and metric_logger.log_dir outside that run's folders")
        second.checkpointer.output_dir = str(tmp_path / "second" / "checkpoints")
        with pytest.raises(OutputDirError, match=r"^metric_logger.log_dir=\S+shared_logs belongs to another run"):
            hold_run_dirs(second)
        # A refused run holds nothing: the lock of its own output_dir, taken first, was released.
        second.metric_logger.log_dir = str(tmp_path / "second" / "logs")
        with hold_run_dirs(second):  # its checkpoints and logs inside its output_dir: one lock
            assert sorted(p.name for p in (tmp_path / "second").iterdir()) == [LOCK_NAME]
    with hold_run_dirs(second), hold_run_dirs(cfg):  # the first run ended: every lock was released
        pass


def test_a_lock_path_that_is_a_folder_is_one_line_and_nothing_in_it_is_touched(tmp_path):
    (tmp_path / LOCK_NAME).mkdir()
    (tmp_path / LOCK_NAME / "kept").write_text("x")
    with pytest.raises(OutputDirError) as refused:
        hold_run_dir(str(tmp_path))
    assert str(refused.value) == (f"{tmp_path / LOCK_NAME} is a folder, where a run keeps its lock file: it is not one "
                                  f"this project made. Move it out of {tmp_path}, or write elsewhere with another "
                                  "output_dir")
    assert (tmp_path / LOCK_NAME / "kept").read_text() == "x"
