"""The device a config names, checked before anything runs on it.

torchtune's ``utils.get_device("cuda")`` asks torch which accelerator it supports, and on a CPU
build of torch (what ``make install`` gives) the answer is the CPU: a paper config (``device:
cuda``) then trained on the CPU for days and exited 0. ``get_device`` here refuses instead, in
one line that says what torch sees (its version, the CUDA it was built for, whether a GPU is
visible) and the fix; so does a GPU index, or a process of a multi-process run, with no GPU to
use, and a process group backend this torch lacks.
"""

import os
from typing import Dict, Optional

import torch
from torchtune import utils

from entrodrop.errors import DeviceError

_CPU_INSTEAD = "or run on the CPU with device=cpu"


def torch_sees() -> str:
    """What this torch can use, for an error message.

    Example:
        >>> torch_sees().startswith(f"torch {torch.__version__}")
        True
    """
    build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build (torch.version.cuda is None)"
    available = torch.cuda.is_available()
    seen = f", {torch.cuda.device_count()} GPU(s) visible" if available else ""
    return f"torch {torch.__version__}, {build}, torch.cuda.is_available() is {available}{seen}"


def device_problem(name: str, local_rank: int = 0, local_world_size: int = 1) -> str:
    """Why the device ``name`` cannot be used by the process of local rank ``local_rank`` of
    ``local_world_size`` on this machine; empty when it can. CUDA and the CPU are the devices the
    recipes run on; any other (``mps``, ``meta``, ...) is refused by its name.

    Example:
        >>> device_problem("cpu"), device_problem("gpu")[:33]
        ('', 'device=gpu is not a torch device:')
    """
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as error:
        return f"device={name} is not a torch device: {error}; use cuda, cuda:<index> or cpu"
    if device.type == "cpu":
        return ""
    if device.type != "cuda":
        # The recipes' dtypes, kernels, memory and process groups are those of CUDA and the CPU; the
        # meta device holds shapes and no values, so a run on it fails once the model is built.
        return f"device={name}: EntroDrop runs on cuda, cuda:<index> or cpu, not on {device.type}: use one of those"
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            fix = "install a CUDA build of torch (pytorch.org's selector gives the command for your driver)"
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            fix = ("make a GPU visible (" + (f"CUDA_VISIBLE_DEVICES={visible!r} is set; " if visible is not None else "")
                   + f"nvidia-smi should list one, with a driver new enough for CUDA {torch.version.cuda})")
        return f"device={name}, but this torch cannot use a CUDA GPU: {torch_sees()}. To fix: {fix}, {_CPU_INSTEAD}"
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        return (f"device={name}, but torch sees {count} CUDA GPU(s), cuda:0 to cuda:{count - 1} "
                f"({torch_sees()}): name one of those, {_CPU_INSTEAD}")
    if device.index is None and local_rank >= count:
        return (f"device={name} with {local_world_size} processes on this machine (--nproc_per_node "
                f"{local_world_size}), but torch sees {count} CUDA GPU(s): process {local_rank} would have none. "
                f"Run at most {count} process{'es' * (count > 1)} a machine, {_CPU_INSTEAD}")
    return ""


def get_device(name: str) -> torch.device:
    """torchtune's ``get_device(name)`` (under torchrun, ``cuda`` is ``cuda:<LOCAL_RANK>``, made
    current), after ``device_problem`` found nothing; else a ``DeviceError``."""
    problem = device_problem(name, int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    if problem:
        raise DeviceError(problem)
    return utils.get_device(name)


def process_group_backend(device: torch.device) -> str:
    """The ``torch.distributed`` backend for ``device``: NCCL for CUDA tensors (gloo for the CPU
    ones a run also sends), gloo on the CPU; a ``DeviceError`` when this torch lacks it."""
    import torch.distributed as dist

    if device.type == "cuda":
        if not dist.is_nccl_available():
            raise DeviceError(f"device={device} in a multi-process run needs the NCCL backend, which this torch lacks "
                              f"(torch.distributed.is_nccl_available() is False; {torch_sees()}): install a CUDA "
                              f"build of torch with NCCL, {_CPU_INSTEAD} (gloo)")
        return "cuda:nccl,cpu:gloo"
    if not dist.is_gloo_available():
        raise DeviceError(f"device={device} in a multi-process run needs the gloo backend, which this torch lacks "
                          f"(torch.distributed.is_gloo_available() is False; {torch_sees()})")
    return "gloo"


def rng_state(device: torch.device) -> Dict[str, Optional[torch.Tensor]]:
    """The global generators a training step draws from, for a checkpoint: the CPU's and, on
    CUDA, the device's. Hidden dropout on a GPU draws from the CUDA generator (and so does a
    compiled graph's dropout, whose seeds come from it), so a resumed run that restored the
    CPU's alone would drop other units than the run it continues."""
    return {"cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_rng_state(state: Optional[Dict[str, Optional[torch.Tensor]]], device: torch.device) -> None:
    """Restore what ``rng_state`` saved; None restores nothing. A CUDA state is restored on a CUDA
    device only: a run saved on one kind of device and resumed on another cannot repeat its draws anyway."""
    if state is None:
        return
    if isinstance(state, torch.Tensor):  # a checkpoint from before the CUDA state was saved: the CPU's alone
        state = {"cpu": state, "cuda": None}
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and state["cuda"] is not None:
        torch.cuda.set_rng_state(state["cuda"], device)
