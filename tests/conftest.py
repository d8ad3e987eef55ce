"""Shared fixtures: the repository root, the tiny offline assets, the real `tune` CLI, and the
device of the GPU tests.

Three tiers, by marker: unit tests (the rest: seconds each, no `tune run`; ``make test-fast``),
``recipe`` tests (they start the real `tune run`, torchrun, a script or two processes; every
test that uses the ``tune_run`` fixture is one), and ``gpu`` tests. ``make test`` runs all three.

Tests marked ``gpu`` check the CUDA paths (``make test-gpu`` runs them alone); without a CUDA GPU
they are skipped. ``GPU_TESTS_ON_CPU=1`` runs them on the CPU instead, with the checks that only
CUDA has (liger-kernel, flex attention, peak memory, nccl) skipped: a check of the tests
themselves for a machine without a GPU, never of a GPU.
"""

import importlib.util
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "assets" / "tiny"
TUNE = str(Path(sys.executable).parent / "tune")
GPU_TESTS_ON_CPU = os.environ.get("GPU_TESTS_ON_CPU") == "1"


# Every torchrun the tests start (tune run --nproc_per_node N, in a recipe header or a script)
# meets on a free port, not the default 29500: test files run side by side (pytest-xdist).
os.environ["PET_STANDALONE"] = "1"


def descendants(pid: int) -> list:
    """The processes ``pid`` started, and the ones they started, read off each process's parent in /proc."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # it ended while /proc was read
            continue
    found, generation = [], [pid]
    while generation:
        generation = [child for child, parent in parents.items() if parent in generation]
        found += generation
    return sorted(found)


def running(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (it ended, and its new parent has not reaped it yet) does not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tune_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.recipe)
    if torch.cuda.is_available() or GPU_TESTS_ON_CPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: run `make test-gpu` on a machine with one")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def gpu() -> torch.device:
    """The device of the ``gpu`` tests: the first CUDA device (or the CPU, with GPU_TESTS_ON_CPU=1)."""
    return torch.device("cpu") if GPU_TESTS_ON_CPU else torch.device("cuda", 0)


def cuda_only(device: torch.device, what: str) -> None:
    """Skip the rest of a ``gpu`` test that runs on the CPU (GPU_TESTS_ON_CPU=1): ``what`` needs CUDA."""
    if device.type != "cuda":
        pytest.skip(f"{what} needs CUDA (GPU_TESTS_ON_CPU=1 runs the rest of the GPU tests on the CPU)")


def _load_script(name: str, folder: str = "scripts"):
    """Import ``<folder>/<name>.py`` as a module: a script, or a benchmark with ``folder="benchmarks"``
    (neither folder is a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def make_tiny_assets():
    """The module scripts/make_tiny_assets.py (its hyper-parameters and builders)."""
    return _load_script("make_tiny_assets")


@pytest.fixture(scope="session")
def tiny_assets(make_tiny_assets) -> Path:
    """``assets/tiny``, built by scripts/make_tiny_assets.py if `make` has not built it."""
    if not (TINY / ".built").exists():
        make_tiny_assets.main(TINY)
        (TINY / ".built").touch()
    return TINY


@pytest.fixture(scope="session")
def shipped_tasks(tmp_path_factory):
    """lm-eval's ``TaskManager`` over its tasks and ``entrodrop/tasks``, as a run's index holds them.

    Indexing lm-eval's ~14,000 YAMLs costs each process that does it 10 s or more, so the first test
    worker to ask builds it and leaves a pickle in the run's temporary folder, and the others read
    that, in turn under a file lock. Nothing the tests call changes the index (lm-eval builds each
    task from a copy of its config), so one copy serves a whole worker. Tests that add their own task
    YAMLs index them beside ``entrodrop/tasks`` alone (``include_defaults=False``), in under a second.
    """
    from filelock import FileLock
    from lm_eval.tasks import TaskManager

    if "PYTEST_XDIST_WORKER" not in os.environ:  # one process: nothing to share, and no folder of this run alone
        return TaskManager(include_path=str(REPO / "entrodrop" / "tasks"))
    shared = tmp_path_factory.getbasetemp().parent / "shipped_tasks.pickle"  # the workers' common folder
    with FileLock(f"{shared}.lock"):
        if shared.exists():
            return pickle.loads(shared.read_bytes())
        manager = TaskManager(include_path=str(REPO / "entrodrop" / "tasks"))
        partial = shared.with_suffix(f".{os.getpid()}")  # a worker killed while writing leaves no half pickle
        partial.write_bytes(pickle.dumps(manager))
        os.replace(partial, shared)
    return manager


@pytest.fixture(scope="session")
def tune_run() -> Callable[..., subprocess.CompletedProcess]:
    """Run the real ``tune run [--nproc_per_node N] <args>`` from the repository root."""

    def run(*args: str, nproc: int = 1, timeout: float = 600) -> subprocess.CompletedProcess:
        launcher = ["--nproc_per_node", str(nproc)] if nproc > 1 else []
        # Caches (lm-eval's task index, datasets') go under outputs/, not the user's ~/.cache.
        env = {**os.environ, "OMP_NUM_THREADS": "1", "XDG_CACHE_HOME": str(REPO / "outputs" / "test_cache")}
        return subprocess.run([TUNE, "run", *launcher, *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def data(tiny_assets, tune_run, tmp_path_factory):
    """Token stores and entropy caches of the tiny corpora, as `make demo` builds them: the
    overrides that point a tiny training config at them."""
    root = tmp_path_factory.mktemp("data")
    result = tune_run("recipes/tokenize_corpus.py", "--config", "configs/tiny/qwen3_tokenize.yaml",
                      f"corpora.target.store_dir={root}/target", f"corpora.general.store_dir={root}/general",
                      f"corpora.target_val.store_dir={root}/target_val")
    assert result.returncode == 0, result.stderr[-3000:]
    for corpus, cache in [("target", "entropy"), ("target_val", "entropy_val")]:
        result = tune_run("recipes/precompute_entropy.py", "--config", "configs/tiny/qwen3_precompute_entropy.yaml",
                          f"target_tokens={root}/{corpus}", f"cache_dir={root}/{cache}")
        assert result.returncode == 0, result.stderr[-3000:]
    return [f"data.target_tokens={root}/target", f"data.target_entropy={root}/entropy",
            f"data.general_tokens={root}/general", f"evaluation.validation.target_tokens={root}/target_val",
            f"evaluation.validation.target_entropy={root}/entropy_val"]
