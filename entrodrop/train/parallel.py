"""FSDP2 for the distributed recipe, in one place: the method never knows how many ranks there are.

The distributed recipe builds the model on the meta device (no memory, no initialization),
wraps the layers to checkpoint or compile as the single-device recipe does, and ``shard`` then
shards it and fills it from the full state dict, as torchtune's own distributed recipes do.
The single-device recipe refuses to be one of N processes (``check_single_process``), and the
distributed recipe to be started without torchrun (``check_launched``).
"""

import os
from typing import Dict

import torch
from torchtune import training
from torchtune.modules import TransformerSelfAttentionLayer

from entrodrop.errors import ConfigError


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
