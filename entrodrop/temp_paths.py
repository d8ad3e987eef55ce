"""Temporary directories and files that are renamed into place once whole (checkpoints, store
shards, store parts), with the modes the user's umask gives every other file a run writes.

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

import os
import tempfile
from pathlib import Path
from typing import Tuple


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
