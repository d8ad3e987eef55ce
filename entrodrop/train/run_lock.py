"""One live run per output directory: a lock that a run holds from its start to its end.

Two runs writing into one ``output_dir`` (a ``resume=True`` started while the run it resumes
still trains) write two logs, the same checkpoints, and evaluations out of order. So a run
takes ``output_dir/.run.lock`` with ``flock`` before it looks at the directory
(``entrodrop.train.run_dir``), and a second run is refused with one line naming the process
and host that hold it. The kernel releases a ``flock`` when its holder dies, however it died:
a lock file that a killed run left behind is held by no one and is taken over silently, so it
is never stale as a PID file would be. The file holds the holder's PID, host and start time,
for the message only.

The lock is no earlier run (``run_dir.earlier_run`` ignores it), and ``overwrite=True`` moves an
earlier run aside around it (``run_dir.move_aside``), so the run keeps holding it.
"""

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Optional

from entrodrop.errors import OutputDirError

LOCK_NAME = ".run.lock"


def hold_run_dir(output_dir: str, rank: int = 0, distributed: bool = False) -> Optional[IO[str]]:
    """Take ``output_dir``'s lock (creating the directory) for as long as the returned file stays
    open: keep it for the whole run. In an N-process run (``distributed``) rank 0 takes it for
    every rank (the others get None), and every rank raises its error, so none waits at a
    collective for a rank 0 that has stopped.

    Raises:
        OutputDirError: another live run holds the lock; one line with its PID and host.
    """
    held, error = None, None
    if rank == 0:
        try:
            held = _take(Path(output_dir))
        except OutputDirError as refused:
            error = refused
    if distributed:
        # Imported here: a process that takes the lock alone needs no torch (the tests start such processes).
        import torch.distributed as dist

        shared = [error]
        dist.broadcast_object_list(shared, src=0)
        error = shared[0]
    if error is not None:
        raise error
    return held


def _take(output_dir: Path) -> IO[str]:
    """The lock file of ``output_dir``, locked, with this process named in it."""
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / LOCK_NAME
    lock = open(path, "a+")  # created if absent, never emptied before it is held
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = _holder(lock.read())
        lock.close()
        raise OutputDirError(f"output_dir={output_dir} is in use by another run: {holder}, holds {path}. Wait for it "
                             "to end, or stop it, or write elsewhere with another output_dir") from None
    lock.truncate(0)
    lock.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S %Z")}) + "\n")
    lock.flush()
    return lock


def _holder(text: str) -> str:
    """Who holds a lock, from its file: ``PID <pid> on host <host>, started <time>``. A run that
    has just taken it may not have named itself yet."""
    try:
        holder = json.loads(text)
        return f"PID {holder['pid']} on host {holder['host']}, started {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return "a run that is starting (it has not written its PID yet)"
