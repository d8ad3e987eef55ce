"""A process that torchrun started ends when its launcher does, whatever signal ended it.

``tune run --nproc_per_node N`` (torchrun) starts each worker in a session of its own. A SIGTERM
to the launcher is passed on to the workers, but a SIGKILL cannot be: the workers would train on
alone, writing checkpoints and evaluations into a run directory that a resumed run then shares.
So each worker asks the kernel for a SIGKILL when its parent, the launcher, ends
(``prctl(PR_SET_PDEATHSIG)``); without prctl (not Linux) a thread watches the parent instead.
``entrodrop.launch.run_recipe_file``, the module torchrun starts (``python -m``) for `tune run
<path>.py`, calls ``end_with_launcher`` as a worker starts, and ``entrodrop.config.cli.parse``
again before a recipe does anything else (a recipe torchrun started some other way). Standard
library only: it runs before the worker imports torch.

A process not started by torchrun is left alone: ``tune run`` of one process runs the recipe in
the launcher itself, and a run started with ``nohup`` outlives its shell on purpose.
"""

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Mapping

# The parent this process had when this module was imported: in a worker, as it starts, before any
# import of torch (``run_recipe_file``). A launcher that ended before this line goes unseen.
PARENT_AT_START = os.getppid()
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def started_by_torchrun(environ: Mapping[str, str]) -> bool:
    """Whether torchrun (torchelastic) started this process: it alone sets TORCHELASTIC_RUN_ID.
    LOCAL_RANK is not enough: a user's own launch script may set it for a process meant to
    outlive its parent."""
    return "TORCHELASTIC_RUN_ID" in environ


def end_with_launcher(environ: Mapping[str, str] = os.environ, parent: int = PARENT_AT_START) -> None:
    """In a process torchrun started: SIGKILL this process when its launcher ``parent`` ends; at
    once if it has already ended.

    The kernel signals when the launcher's thread that started this process ends; torchrun starts
    its workers from its main thread, which ends only with the launcher.
    """
    if not started_by_torchrun(environ):
        return
    if not sys.platform.startswith("linux"):
        threading.Thread(target=watch_parent, args=(parent,), name="watch-launcher", daemon=True).start()
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it ended before the kernel was asked: this process was handed to another
        os.kill(os.getpid(), signal.SIGKILL)


def watch_parent(parent: int, every_s: float = 1.0) -> None:
    """SIGKILL this process once its parent is no longer ``parent`` (it ended, and this process was
    handed to another); looks every ``every_s`` seconds. For a system without prctl."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os.kill(os.getpid(), signal.SIGKILL)
