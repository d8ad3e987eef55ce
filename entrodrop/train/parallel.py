"""FSDP2 for the distributed recipe, in one place: the method never knows how many ranks there are.

The distributed recipe builds the model on the meta device (no memory, no initialization),
wraps the layers to checkpoint or compile as the single-device recipe does, and ``shard`` then
shards it and fills it from the full state dict, as torchtune's own distributed recipes do.
The single-device recipe refuses to be one of N processes (``check_single_process``), and the
distributed recipe to be started without torchrun (``check_launched``).
"""

import os
import socket
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torchtune import training
from torchtune.modules import TransformerSelfAttentionLayer

from entrodrop.errors import ConfigError, OutputDirError


def check_single_process(recipe: str) -> None:
    """Refuse to run the one-process recipe ``recipe`` as one of the N processes torchrun starts
    (``tune run --nproc_per_node N``): each would train the whole run alone, into one output_dir.

    Raises:
        ConfigError: one line naming the distributed recipe's command.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        raise ConfigError(f"{recipe} runs in one process, but torchrun started {world_size} (--nproc_per_node "
                          f"{world_size}): run `tune run --nproc_per_node {world_size} recipes/entrodrop_distributed.py "
                          "--config <your config>` with a distributed config, or leave out --nproc_per_node")


def check_launched(recipe: str) -> None:
    """Refuse to run the N-process recipe ``recipe`` outside torchrun (``tune run`` without
    ``--nproc_per_node``), which names each process's rank in the environment; without it
    ``init_process_group`` fails on ``RANK`` in a traceback.

    Raises:
        ConfigError: one line with the command that starts it, and the one-process recipe.
    """
    if "RANK" not in os.environ:
        raise ConfigError(f"{recipe} runs as torchrun's processes, but it was started alone (no RANK in the "
                          f"environment): run `tune run --nproc_per_node N {recipe} --config <your config>` (N "
                          "processes, 1 included), or recipes/entrodrop_single_device.py for one process")


def shard(model: torch.nn.Module, state_dict: Dict[str, torch.Tensor], device: torch.device,
          dtype: torch.dtype) -> None:
    """Shard ``model`` (built on the meta device) with FSDP2 over the default process group, one
    unit per decoder layer and one for the root, and load the full ``state_dict`` into the shards.

    Args:
        model (torch.nn.Module): a torchtune ``TransformerDecoder`` on the meta device.
        state_dict (Dict[str, torch.Tensor]): the full (unsharded) weights, the same on every rank.
        device (torch.device): where this rank's shards live.
        dtype (torch.dtype): the default dtype the model was built with (for the rope buffers).
    """
    training.shard_model(model, [lambda name, module: isinstance(module, TransformerSelfAttentionLayer)],
                         cpu_offload=False)
    # The root's parameters (embedding, final norm, output projection) stay gathered from the
    # forward to the backward, as torch does for a root unless told otherwise: a fused loss
    # reads the output weight after the model returns.
    model.set_reshard_after_forward(False, recurse=False)
    # The rope caches are buffers, not in the state dict: a meta-device model has none until they
    # are computed again on the real device.
    with training.set_default_dtype(dtype), device:
        for module in model.modules():
            if hasattr(module, "rope_init"):
                module.rope_init()
    training.load_from_full_model_state_dict(model, state_dict, device, strict=True)


# The file rank 0 writes into each folder of the run for the other ranks to find (``every_node_sees``).
SHARED_MARK = ".written-by-rank-0"


def sharing_problems(seen: Sequence[Mapping[str, Any]], folders: Sequence[Tuple[str, Path]]) -> List[str]:
    """One line for each folder some rank does not see as rank 0 does, and each store some rank
    reads other data from than rank 0. ``seen``: each rank's ``{"rank", "host", "folders": {key:
    whether it found rank 0's mark}, "stores": {key: {"identity": ...}}}``, by rank.

    Example:
        >>> seen = [{"rank": 0, "host": "a", "folders": {"output_dir": True}, "stores": {}},
        ...         {"rank": 1, "host": "b", "folders": {"output_dir": False}, "stores": {}}]
        >>> sharing_problems(seen, [("output_dir", Path("/scratch/run"))])[0].split(" what")[0]
        'output_dir=/scratch/run is not one folder on every node: rank 1 (host b) does not see'
    """
    first, problems = seen[0], []
    for key, folder in folders:
        blind = [f"rank {s['rank']} (host {s['host']})" for s in seen if not s["folders"].get(key)]
        if blind:
            problems.append(f"{key}={folder} is not one folder on every node: {', '.join(blind)} does not see what "
                            f"rank 0 (host {first['host']}) writes there. Rank 0 writes the checkpoints and every rank "
                            "reads them to resume: give a folder on a file system every node mounts at that path")
    for key, store in first["stores"].items():
        other = [f"rank {s['rank']} (host {s['host']})" for s in seen[1:]
                 if s["stores"][key]["identity"] != store["identity"]]
        if other:
            problems.append(f"{key} is other data on {', '.join(other)} than on rank 0 (host {first['host']}): every "
                            "rank must read the same store; give one on a file system every node mounts, or the same "
                            "copy on each")
    return problems


def every_node_sees(folders: Sequence[Tuple[str, Path]], stores: Mapping[str, Mapping[str, Any]]) -> None:
    """Refuse a run whose nodes do not share its folders and stores: rank 0 marks each folder it
    holds (``SHARED_MARK``), every rank looks for the mark and sends what it found with its stores'
    identities (``all_gather_object``), and every rank raises the same error. The marks are removed.

    Raises:
        OutputDirError: a folder or a store that some node does not share (``sharing_problems``).
    """
    rank = dist.get_rank()
    mark = f"{socket.gethostname()} {os.getpid()} {time.time_ns()}" if rank == 0 else None
    marks = [mark]
    dist.broadcast_object_list(marks, src=0)
    if rank == 0:
        for _, folder in folders:
            (Path(folder) / SHARED_MARK).write_text(marks[0])
    dist.barrier()
    found = {key: _read(Path(folder) / SHARED_MARK) == marks[0] for key, folder in folders}
    seen: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(seen, {"rank": rank, "host": socket.gethostname(), "folders": found,
                                  "stores": {k: {"identity": v["identity"]} for k, v in stores.items()}})
    if rank == 0:
        for _, folder in folders:
            (Path(folder) / SHARED_MARK).unlink(missing_ok=True)
    problems = sharing_problems(seen, folders)
    if problems:
        raise OutputDirError("\n".join(problems))


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text()
    except OSError:
        return None
