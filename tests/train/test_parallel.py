"""FSDP2 sharding (entrodrop.train.parallel.shard) in two real gloo processes on the CPU: the
sharded model computes what the whole model computes, and gathers back to its weights."""

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import REPO
from omegaconf import OmegaConf
from torchtune import config, training

TINY = REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml"

pytestmark = pytest.mark.recipe  # two processes (gloo): the distributed tier, beside the recipe tests


def tiny_model(device: str):
    with training.set_default_dtype(torch.float32), torch.device(device):
        return config.instantiate(OmegaConf.load(TINY).model)


def _shard_on_rank(rank: int, init_file: str, out_dir: str) -> None:
    from entrodrop.train.parallel import shard

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    torch.manual_seed(0)
    whole = tiny_model("cpu")  # the same weights on both ranks
    model = tiny_model("meta")
    shard(model, whole.state_dict(), torch.device("cpu"), torch.float32)
    tokens = torch.arange(2 * 16).view(2, 16) % 97
    logits = model(tokens)
    gathered = training.gather_cpu_state_dict(model, rank == 0, device=torch.device("cpu"))
    if rank == 0:
        result = {"max_logit_diff": float((logits - whole(tokens)).abs().max()),
                  "keys": sorted(gathered) == sorted(whole.state_dict()),
                  "weights_equal": all(torch.equal(gathered[k], v) for k, v in whole.state_dict().items()),
                  "sharded": type(model.layers[0]).__name__, "rope_finite": bool(torch.isfinite(logits).all())}
        (Path(out_dir) / "result.json").write_text(json.dumps(result))
    dist.barrier()  # no rank tears gloo down while another still works in it
    dist.destroy_process_group()
    # Leave without the interpreter's teardown: everything is written and the group destroyed, and
    # a rank that then tears down gloo's and FSDP's objects can abort ('terminate called without an
    # active exception'), failing a test whose results are all in.
    os._exit(0)


@pytest.mark.recipe
def test_a_sharded_model_computes_and_gathers_what_the_whole_model_does(tmp_path):
    mp.spawn(_shard_on_rank, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["sharded"].startswith("FSDP")  # each decoder layer is its own FSDP2 unit
    assert result["keys"] and result["weights_equal"] and result["rope_finite"]
    assert result["max_logit_diff"] < 1e-5, result


def test_the_single_device_recipe_as_one_of_n_processes_says_to_run_the_distributed_recipe(monkeypatch):
    # Under `tune run --nproc_per_node 2`, rank 0 trained the whole run and rank 1 found its output_dir in use.
    from entrodrop.errors import ConfigError
    from recipes.entrodrop_single_device import EntroDropRecipeSingleDevice

    cfg = OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_single_device.yaml")
    monkeypatch.setenv("WORLD_SIZE", "2")  # as torchrun sets it in each process it starts
    with pytest.raises(ConfigError) as error:
        EntroDropRecipeSingleDevice(cfg)
    assert str(error.value) == (
        "recipes/entrodrop_single_device.py runs in one process, but torchrun started 2 (--nproc_per_node 2): run "
        "`tune run --nproc_per_node 2 recipes/entrodrop_distributed.py --config <your config>` with a distributed "
        "config, or leave out --nproc_per_node")


def test_the_distributed_recipe_started_without_torchrun_says_how_to_start_it(monkeypatch):
    # `tune run recipes/entrodrop_distributed.py ...` without --nproc_per_node: RANK was "expected, but not set".
    from entrodrop.errors import ConfigError
    from recipes.entrodrop_distributed import EntroDropRecipeDistributed

    cfg = OmegaConf.load(REPO / "configs/tiny/qwen3_entrodrop_distributed.yaml")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(ConfigError) as error:
        EntroDropRecipeDistributed(cfg)
    assert str(error.value) == (
        "recipes/entrodrop_distributed.py runs as torchrun's processes, but it was started alone (no RANK in the "
        "environment): run `tune run --nproc_per_node N recipes/entrodrop_distributed.py --config <your config>` (N "
        "processes, 1 included), or recipes/entrodrop_single_device.py for one process")
