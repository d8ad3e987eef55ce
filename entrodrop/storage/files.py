"""Files a run writes: one live writer per folder, and temporary paths renamed into place.

**Folder locks.** A directory that one process at a time writes holds a ``flock`` on
``<directory>/.run.lock``. A training run holds its output directories with it (``entrodrop.train.run_lock``), and a tokenize
run the store it writes (``entrodrop.data.token_stores``). A second process is refused with one
line naming the process and host that hold the lock. The kernel releases a ``flock`` when its
holder dies, however it died: a lock file that a killed process left behind is held by no one and
is taken over silently, so it is never stale as a PID file would be. The file holds the holder's
PID, host and start time, for the message, and the config key it was taken for; a training run
adds the output directory it belongs to (``entrodrop.train.run_lock``), so that a later run can
tell another run's folder from its own. A store's writer removes it when it ends
(``release_dir_lock``).

**Temporary paths.** Temporary directories and files that are renamed into place once whole
(checkpoints, store shards, store parts) get the modes the user's umask gives every other file a
run writes.

``tempfile.mkdtemp`` and ``mkstemp`` create their path 0700 / 0600 on purpose (a temporary
file in a shared /tmp must stay private), and the rename keeps that mode: a checkpoint or a
store shard built that way would be readable by its owner alone. So the path they make is
given the umask's mode at once. A file that a library writes the same way is given its mode
back by ``as_umask_allows``: safetensors 0.8's ``save_file`` writes a private temporary file
and renames it, so every weight file would be 0600.

Example:
    >>> import tempfile
    >>> parent = Path(tempfile.mkdtemp())
    >>> temp_dir(parent, ".step_3.tmp-").name.startswith(".step_3.tmp-")
    True
"""

import fcntl
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Dict, Mapping, Optional, Tuple

from entrodrop.errors import OutputDirError

LOCK_NAME = ".run.lock"


class DirInUse(OutputDirError):
    """``take_dir_lock``'s refusal: another live process holds the directory (``holder``, in words)."""

    def __init__(self, message: str, holder: str = ""):
        super().__init__(message)
        self.holder = holder


def take_dir_lock(directory: Path, key: str, mark: Optional[Mapping[str, Any]] = None) -> IO[str]:
    """The lock file of ``directory`` (the config's ``key``), locked, with this process, ``key`` and
    ``mark`` written in it.

    Raises:
        DirInUse: another live process holds it.
        OutputDirError: the lock's path is a folder.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    while True:
        try:
            lock = open(path, "a+")  # created if absent, never emptied before it is held
        except IsADirectoryError:
            raise OutputDirError(f"{path} is a folder, where a run keeps its lock file: it is not one this project "
                                 f"made. Move it out of {directory}, or write elsewhere with another {key}") from None
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = _holder(lock.read())
            lock.close()
            raise DirInUse(f"{key}={directory} is in use by another run: {holder}, holds {path}. Wait for it to end, "
                           f"or stop it, or write elsewhere with another {key}", holder) from None
        if path.exists() and os.path.samefile(path, lock.name):
            break
        lock.close()  # its holder removed it as it let go (release_dir_lock): lock the file at the path now
    lock.truncate(0)
    lock.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                           "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "key": key, **(mark or {})}) + "\n")
    lock.flush()
    return lock


def refused_on_every_rank(error: Optional[OutputDirError], distributed: bool) -> None:
    """Raise rank 0's refusal ``error`` (None: none) on every rank of an N-process run
    (``distributed``), so that none waits at a collective for a rank 0 that has stopped."""
    if distributed:
        # Imported here: a process that takes a lock alone needs no torch (the tests start such processes).
        import torch.distributed as dist

        shared = [error]
        dist.broadcast_object_list(shared, src=0)
        error = shared[0]
    if error is not None:
        raise error


def release_dir_lock(lock: IO[str]) -> None:
    """Let go of ``take_dir_lock``'s lock and remove its file, for a directory that should hold
    only what was written into it (a token store)."""
    Path(lock.name).unlink(missing_ok=True)
    lock.close()


def lock_record(path: Path) -> Optional[Dict[str, Any]]:
    """What the lock file ``path`` says (``take_dir_lock``): None where there is none, ``{}`` where
    it says nothing readable (a run that is starting, or a file that is not a lock)."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):  # a directory, unreadable bytes, half a line
        return {}
    return record if isinstance(record, dict) else {}


def live_holder(path: Path) -> Optional[str]:
    """Who holds the lock file ``path`` now (``PID <pid> on host <host>, started <time>``), or None
    where no live process does. Probed with a shared lock, let go at once."""
    try:
        probe = open(path)
    except OSError:  # absent, or not a file
        return None
    with probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder(probe.read())
        fcntl.flock(probe, fcntl.LOCK_UN)
    return None


def _holder(text: str) -> str:
    """Who holds a lock, from its file: ``PID <pid> on host <host>, started <time>``. A run that
    has just taken it may not have named itself yet."""
    try:
        holder = json.loads(text)
        return f"PID {holder['pid']} on host {holder['host']}, started {holder['started']}"
    except (ValueError, KeyError, TypeError):
        return "a run that is starting (it has not written its PID yet)"


def temp_dir(parent: Path, prefix: str) -> Path:
    """``tempfile.mkdtemp`` in ``parent``, mode ``0o777 & ~umask``."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(path, 0o777 & ~_umask())
    return path


def temp_file(parent: Path, prefix: str) -> Tuple[int, Path]:
    """``tempfile.mkstemp`` in ``parent``, mode ``0o666 & ~umask``: ``(descriptor, path)``."""
    fd, path = tempfile.mkstemp(prefix=prefix, dir=parent)
    os.fchmod(fd, 0o666 & ~_umask())
    return fd, Path(path)


def as_umask_allows(path: Path) -> None:
    """Give the file ``path`` the mode that ``open()`` would have given it, ``0o666 & ~umask``."""
    os.chmod(path, 0o666 & ~_umask())


def _umask() -> int:
    """The process's umask. Linux shows it in /proc/self/status; elsewhere ``os.umask`` reads it
    only by setting another, which other threads would create files under meanwhile: a private
    one (0o077), so that such a file is never more open than asked."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask
