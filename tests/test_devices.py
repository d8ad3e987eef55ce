"""A device torch cannot use stops the run at start-up in one line: what torch sees, and the fix."""

import pytest
import torch

from entrodrop import devices
from entrodrop.errors import DeviceError


@pytest.fixture
def cpu_build(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_cuda_on_a_cpu_build_of_torch_is_refused_with_what_torch_sees_and_the_fix(cpu_build):
    # torchtune's get_device("cuda") gives the CPU here: a paper config trained on the CPU and exited 0
    with pytest.raises(DeviceError) as error:
        devices.get_device("cuda")
    message = str(error.value)
    assert "\n" not in message and message.startswith("device=cuda, but this torch cannot use a CUDA GPU")
    for fact in (f"torch {torch.__version__}", "a CPU-only build (torch.version.cuda is None)",
                 "torch.cuda.is_available() is False", "install a CUDA build of torch", "device=cpu"):
        assert fact in message, fact
    assert devices.get_device("cpu") == torch.device("cpu")


def test_a_cuda_build_that_sees_no_gpu_says_to_make_one_visible(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    problem = devices.device_problem("cuda:0")
    assert "built for CUDA 13.0" in problem and "CUDA_VISIBLE_DEVICES=''" in problem and "device=cpu" in problem


def test_a_gpu_index_or_a_process_beyond_the_gpus_there_are_is_refused(two_gpus):
    assert devices.device_problem("cuda:1") == ""
    beyond = devices.device_problem("cuda:3")
    assert beyond.startswith("device=cuda:3, but torch sees 2 CUDA GPU(s), cuda:0 to cuda:1")
    assert beyond.endswith("name one of those, or run on the CPU with device=cpu")
    assert devices.device_problem("cuda", local_rank=1, local_world_size=2) == ""
    assert "with 4 processes on this machine (--nproc_per_node 4), but torch sees 2 CUDA GPU(s): process 2 would " \
           "have none" in devices.device_problem("cuda", local_rank=2, local_world_size=4)
    assert devices.device_problem("gpu").startswith("device=gpu is not a torch device")


def test_the_process_group_backend_needs_nccl_for_cuda(monkeypatch):
    assert devices.process_group_backend(torch.device("cpu")) == "gloo"
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: False)
    with pytest.raises(DeviceError, match="needs the NCCL backend, which this torch lacks"):
        devices.process_group_backend(torch.device("cuda:0"))
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)
    assert devices.process_group_backend(torch.device("cuda:0")) == "cuda:nccl,cpu:gloo"


@pytest.mark.parametrize("name", ["mps", "meta", "xpu:0"])
def test_a_device_the_recipes_do_not_run_on_is_refused_by_its_name_before_anything_loads(name):
    with pytest.raises(DeviceError) as error:
        devices.get_device(name)
    kind = name.split(":")[0]
    assert str(error.value) == f"device={name}: EntroDrop runs on cuda, cuda:<index> or cpu, not on {kind}: use one of those"


def test_the_saved_rng_state_repeats_the_draws_and_an_older_checkpoints_cpu_state_still_loads():
    cpu = torch.device("cpu")
    torch.manual_seed(5)
    saved, old_format = devices.rng_state(cpu), torch.get_rng_state()
    assert saved["cuda"] is None  # a CUDA run saves the device's generator too (tests/recipes/test_gpu_recipes.py)
    first = torch.rand(4)
    for state in (saved, old_format):
        torch.manual_seed(6)
        devices.set_rng_state(state, cpu)
        assert torch.equal(torch.rand(4), first)
